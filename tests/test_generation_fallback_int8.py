"""``--fallback int8`` on ONNX int4-block32 text generation (issue 37): the same precision search as ``--fallback
float``, the kept groups stored as int8 blocks (MatMulNBits bits=8, float compute) instead of fp32, so keeping
them costs about a quarter of float's bytes. Same tiny GGUF and budget as tests/test_generation_fallback.py (full
int4 misses it, the lm_head kept float meets it)."""

import numpy as np
import pytest

from conftest import read_report, run_cli
from test_generation_fallback import BUDGET, convert_searched


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    root = tmp_path_factory.mktemp("genfallback_int8")
    result, out = convert_searched(root, "onnx", "int8", BUDGET)
    return result, out, read_report(out), root


def row_of(report):
    return next(r for r in report["targets"] if r["variant"] == "int4-block32")


def test_kept_groups_are_int8_nodes_and_the_row_says_so(searched):
    """The rebuilt row passes; its quantization block says int8 for each kept group; in every graph those groups'
    MatMuls are MatMulNBits with bits=8 and the others bits=4."""
    import onnx

    from edgeport.targets.onnx.gen_fallback import graph_groups

    result, out, report, _root = searched
    assert result.returncode == 0, result.stderr
    row = row_of(report)
    q = row["quantization"]
    assert row["status"] == "ok" and q["before"]["kld_mean"] > BUDGET >= row["quality"]["kld_mean"]
    assert q["keep"] == "int8" and "bits=8" in q["kept_scheme"]
    kept = [layer["name"] for layer in q["float_layers"]]
    assert kept and all(layer["precision"] == "int8" and layer["why"].startswith("--fallback int8")
                        for layer in q["float_layers"])
    assert any(f"--fallback int8 kept {len(kept)} of 5 weight groups at int8" in note for note in row["notes"])
    assert f"| {len(kept)} at int8 |" in (out / "report.md").read_text()
    folder = out / row["artifact"]
    for path in sorted((out / "onnx" / "generate_fp32").glob("*.onnx")):
        groups = graph_groups(path)
        nodes = {n.name: n for n in onnx.load(str(folder / path.name), load_external_data=False).graph.node}
        for group, members in groups.items():
            bits = 8 if group in kept else 4
            assert all(any(a.name == "bits" and a.i == bits for a in nodes[f"{name}_Q{bits}"].attribute)
                       for name, _w, _t in members), (path.name, group)


def test_int8_keep_costs_less_than_float_keep(searched):
    """The same groups kept float (the --fallback float artifact, built by the same function) are larger: int8
    costs a quarter of their fp32 bytes, plus the int4 row's own."""
    from edgeport.targets.onnx.generate import quantize_graphs

    _result, out, report, root = searched
    row = row_of(report)
    kept = [layer["name"] for layer in row["quantization"]["float_layers"]]
    fp32 = out / "onnx" / "generate_fp32"
    names = sorted(p.stem for p in fp32.glob("*.onnx"))
    from edgeport.targets.onnx.gen_fallback import graph_groups

    keep = {n: [m for g in kept for m, _w, _t in graph_groups(fp32 / f"{n}.onnx").get(g, [])] for n in names}
    (root / "float").mkdir()
    quantize_graphs(fp32, root / "float", names, "int4-block32", keep, "float")
    float_size = sum(p.stat().st_size for p in (root / "float").iterdir())
    before = row["quantization"]["before"]["size_bytes"]
    assert before < row["size_bytes"] < float_size
    assert row["size_bytes"] - before < (float_size - before) / 2


def test_simulated_int8_groups_match_the_rebuilt_artifact(searched):
    """The search's simulation of the winner (int4 and int8 weights dequantized into the fp32 graphs) measured
    what the rebuilt artifact measured."""
    _result, _out, report, _root = searched
    q = row_of(report)["quantization"]
    sim = [s for s in q["search"] if s["measured"] == "simulation" and s["float_layers"] == len(q["float_layers"])]
    real = q["search"][-1]
    assert real["measured"] == "artifact" and real["passed"]
    assert sim and np.isclose(sim[-1]["kld_mean"], real["kld_mean"], rtol=1e-3, atol=1e-9)
    assert sim[-1]["top1_agreement"] == real["top1_agreement"]


def test_fallback_int8_is_text_generation_only(tmp_path):
    """Forward models have no int8 keep: exit 2, one line, nothing written."""
    import textwrap

    model = tmp_path / "m.py"
    model.write_text(textwrap.dedent("""
        import torch
        def build():
            return torch.nn.Sequential(torch.nn.Linear(8, 8)), (torch.randn(1, 8),)
    """))
    result = run_cli("convert", f"{model}:build", "-t", "onnx", "-q", "int8", "--fallback", "int8",
                     "--out", tmp_path / "out")
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip()
    assert "\n" not in line and "--fallback int8" in line and "text generation" in line, line
    assert not (tmp_path / "out").exists()
