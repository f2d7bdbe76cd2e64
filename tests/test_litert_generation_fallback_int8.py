"""``--fallback int8`` on LiteRT int4-block32 text generation (issue 37): the same search as ``--fallback float``,
the kept groups scoped to ai-edge-quantizer's weight-only int8 (channelwise int8 weights) instead of ``NO_QUANTIZE``,
so keeping them costs about a quarter of float's bytes. Same tiny GGUF and budget as
tests/test_litert_generation_fallback.py (full int4 misses it; keeping groups meets it)."""

import numpy as np
import pytest

from conftest import read_report, run_cli
from test_generation_fallback import convert_searched
from test_litert_generation_fallback import BUDGET

INT4, INT8, FLOAT32 = 17, 9, 0   # TensorType


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    root = tmp_path_factory.mktemp("litefallback_int8")
    result, out = convert_searched(root, "litert", "int8", BUDGET)
    report = read_report(out)
    return result, out, report, next(r for r in report["targets"] if r["variant"] == "int4-block32"), root


def weight_types(path, fp32_path) -> dict[str, set[int]]:
    """{group: the TensorTypes of the weights its ops read in ``path``}, the groups read from the fp32 .tflite.
    Ops are matched by their output tensors' names (a weight-only scope would insert DEQUANTIZE ops: indices
    are not stable); a weight behind a DEQUANTIZE counts as the DEQUANTIZE's input."""
    from ai_edge_litert.tools import flatbuffer_utils

    from edgeport.targets.litert.gen_fallback import merged, weighted_ops

    fp32, final = flatbuffer_utils.read_model(str(fp32_path)), flatbuffer_utils.read_model(str(path))
    types: dict[str, set[int]] = {}
    for s, index, _kind, _buffer, group in merged(weighted_ops(fp32)):
        old, graph = fp32.subgraphs[s], final.subgraphs[s]
        outputs = [old.tensors[t].name for t in old.operators[index].outputs]
        op = next(o for o in graph.operators if [graph.tensors[t].name for t in o.outputs] == outputs)
        weight = op.inputs[1]
        producer = next((o for o in graph.operators if weight in list(o.outputs)), None)
        weight = producer.inputs[0] if producer is not None else weight
        types.setdefault(group, set()).add(int(graph.tensors[weight].type))
    return types


def test_kept_groups_are_int8_in_the_rebuilt_tflite(searched):
    """The row passes after the search; report.json says int8 for each kept group (and how); in every signature
    of the shipped .tflite the kept groups read int8 weights, every other group int4, none float."""
    result, out, _report, row, _root = searched
    assert result.returncode == 0, result.stderr
    q = row["quantization"]
    assert row["status"] == "ok" and q["before"]["kld_mean"] > BUDGET >= row["quality"]["kld_mean"]
    assert q["keep"] == "int8" and "int8" in q["kept_scheme"] and q["measured"] == "artifact"
    kept = {layer["name"] for layer in q["float_layers"]}
    assert kept and all(layer["precision"] == "int8" and layer["why"].startswith("--fallback int8")
                        for layer in q["float_layers"])
    assert any(f"--fallback int8 kept {len(kept)} of 6 weight groups at int8" in note for note in row["notes"])
    assert "kept at int8" in row["lowering_reason"]
    assert f"| {len(kept)} at int8 |" in (out / "report.md").read_text()
    types = weight_types(out / row["artifact"], out / "litert" / "generate_fp32.tflite")
    assert len(types) == q["layers"] and kept < set(types)
    assert all(types[g] == {INT8} for g in kept), types
    assert all(types[g] == {INT4} for g in set(types) - kept), types
    assert sum((out / f["path"]).stat().st_size for f in row["files"]) == row["size_bytes"]


def test_int8_keep_costs_less_than_float_keep(searched):
    """The same groups kept float (the --fallback float rebuild, by the same quantizer call) are larger: int8
    costs about a quarter of their fp32 bytes beyond the int4 row's own."""
    from edgeport.targets.litert.generate import _prepare_fallback

    _result, out, _report, row, root = searched
    kept = [layer["name"] for layer in row["quantization"]["float_layers"]]
    probe = root / "float" / "litert"
    probe.mkdir(parents=True)
    (probe / "generate_fp32.tflite").symlink_to(out / "litert" / "generate_fp32.tflite")
    quantizer = _prepare_fallback(probe / "generate_int4-block32.tflite", "int4-block32", 1)
    try:
        float_size = quantizer.build(kept).artifact.stat().st_size
    finally:
        quantizer.close()
    before = row["quantization"]["before"]["size_bytes"]
    assert before < row["size_bytes"] < float_size
    assert row["size_bytes"] - before < (float_size - before) / 2


def test_candidate_is_the_artifact_it_predicts(searched):
    """The candidate that passed was quantized by the same call that built the shipped file: same distributions."""
    *_, row, _root = searched
    q = row["quantization"]
    candidate, real = q["search"][-2], q["search"][-1]
    assert candidate["float_layers"] == real["float_layers"] == len(q["float_layers"]) and candidate["passed"]
    assert candidate["measured"] == real["measured"] == "artifact" and real["passed"]
    for key in ("kld_mean", "kld_p99", "top1_agreement"):
        assert np.isclose(candidate[key], real[key], rtol=1e-6, atol=0), (key, candidate, real)


@pytest.mark.parametrize("variant", ["dynamic-int8", "weight-int8"])
def test_fallback_int8_needs_an_int4_variant(tmp_path, variant):
    """LiteRT's int8 rows have no int8 keep (int8 is no step up from int8): exit 2, one line naming where it
    exists, nothing written."""
    import tiny_gguf

    model = tiny_gguf.write(tmp_path / "tiny.gguf")
    result = run_cli("convert", model, "-t", "litert", "-q", variant, "--fallback", "int8",
                     "--out", tmp_path / "out")
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip()
    assert "\n" not in line and "--fallback int8" in line and "litert int4-block32" in line, line
    assert not (tmp_path / "out").exists()


def test_keeps_are_declared_per_variant():
    """The registry says which variants keep at int8 (LiteRT: int4-block32 only; ONNX: its one variant); a
    variant with no search keeps nothing."""
    from edgeport.targets.litert.generate import GENERATIVE as LITERT
    from edgeport.targets.onnx.generate import FALLBACK as ONNX

    assert LITERT.can_keep_float("int4-block32", "int8") and LITERT.can_keep_float("int4-block32")
    assert LITERT.can_keep_float("dynamic-int8") and not LITERT.can_keep_float("dynamic-int8", "int8")
    assert not LITERT.can_keep_float("weight-int8", "int8") and not LITERT.can_keep_float("fp32")
    assert ONNX.keeps_for("int4-block32") == ("float", "int8") and ONNX.keeps_for("dynamic-int8") == ()
