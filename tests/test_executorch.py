"""ExecuTorch target end to end: ``.pte`` lowered to XNNPACK, run by ``executorch.runtime``, judged like every
target; what XNNPACK left on the portable kernels reported on the row and listed by ``check`` beforehand; int8
through PT2E with layers kept float; text generation from one multi-method ``.pte``.

The contract suite (test_target_contract.py) covers what every target must do; this file covers what only
this target has. Conversions take seconds each (ExecuTorch's import alone is ~10 s): one module fixture
converts the forward model once, one the tiny Llama once.
"""

import json

import numpy as np
import pytest

import tiny_lm
from conftest import REPO, read_report, run_cli, write_model_file

MODELS = REPO / "tests" / "models.py"


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """tests/models.py:cumsum (a Linear XNNPACK takes, then a cumsum it does not), fp32 and int8."""
    out = tmp_path_factory.mktemp("executorch") / "out"
    result = run_cli("convert", f"{MODELS}:cumsum", "-t", "executorch", "-q", "int8", "--samples", "4", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    return out, {r["variant"]: r for r in read_report(out)["targets"]}, result


def test_rows_report_what_xnnpack_delegated_and_what_it_left(converted):
    out, rows, _ = converted
    fp32, int8 = rows["fp32"], rows["int8"]
    assert fp32["status"] == int8["status"] == "ok" and fp32["parity"]["max_rel_err"] < 1e-5
    assert int8["parity"]["cosine_min"] > 0.99 and int8["parity"]["max_abs_err"] > 0, "int8 is really quantized"
    for row in (fp32, int8):
        block = row["delegation"]
        assert block["portable_ops"] == {"aten.cumsum.default": 1} and block["partitions"] == 1, block
        assert 0 < block["node_share"] < 1 and block["nodes"] == block["nodes_delegated"] + 1
        # the Linear's 2*2*8*8 FLOPs are delegated, the cumsum's 2*8 elements are not
        assert (block["flops"], block["flops_delegated"]) == (256 + 16, 256) and block["flops_share"] == round(256 / 272, 4)
    assert fp32["artifact"] == "executorch/model_fp32.pte" and (out / int8["artifact"]).is_file()
    md, html = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert "ExecuTorch delegation" in md and "aten.cumsum.default x1" in md and "executorch-delegation" in html


def test_manifest_names_the_pte_io_and_the_terminal_stays_clean(converted):
    out, rows, result = converted
    manifest = json.loads((out / "manifest.json").read_text())
    artifact = next(a for a in manifest["artifacts"] if a["variant"] == "fp32")
    assert artifact["path"] == "executorch/model_fp32.pte"
    assert [(i["name"], i["shape"], i["dtype"]) for i in artifact["inputs"]] == [("x", [2, 8], "float32")]
    assert [o["shape"] for o in artifact["outputs"]] == [[2, 8]]
    noise = ("cpuinfo", "threadpool.cpp", "ExperimentalWarning", "Warning")
    assert not any(n in result.stdout + result.stderr for n in noise), result.stdout + result.stderr
    assert "cpuinfo" in "".join(p.read_text() for p in (out / "executorch").glob("*.log")), "captured, not lost"


def test_the_runner_honours_threads(converted):
    from executorch.extension.pybindings import portable_lib

    from edgeport.targets.executorch.runtime import ExecuTorchRunner

    out, rows, _ = converted
    path = out / rows["fp32"]["artifact"]
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    two, one = ExecuTorchRunner(path, 2), ExecuTorchRunner(path, 1)
    a = two.run([x])
    assert portable_lib._threadpool_get_thread_count() == 2
    b = one.run([x.copy()])
    assert portable_lib._threadpool_get_thread_count() == 1
    np.testing.assert_array_equal(a[0], b[0])
    assert np.allclose(np.diff(a[0], axis=1), a[0][:, 1:] - a[0][:, :-1]) and a[0].shape == (2, 8)


def test_check_lists_the_ops_left_on_portable_kernels_without_failing():
    result = run_cli("check", f"{MODELS}:cumsum", "-t", "executorch")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "executorch: aten.cumsum.default x1: slower path" in result.stdout and "portable kernels" in result.stdout
    assert result.stdout.strip().endswith("executorch: ok")
    clean = run_cli("check", f"{MODELS}:mlp", "-t", "executorch")
    assert clean.returncode == 0 and "slower path" not in clean.stdout, clean.stdout


def test_a_damaged_pte_fails_its_row_with_the_runtime_reason(tmp_path):
    from edgeport.targets.executorch.runtime import ExecuTorchRunner

    path = tmp_path / "bad.pte"
    path.write_bytes(b"\0" * 64)
    with pytest.raises(Exception) as caught:
        ExecuTorchRunner(path, 1)
    assert ExecuTorchRunner.describe_error(caught.value).startswith("artifact does not run in its runtime:")


CRASHING_BYTES = (0x344, b"\xff\xff")   # found by flipping byte pairs of this fixture's fp32 .pte: SIGABRT in the loader


def test_validate_fails_a_pte_crafted_to_crash_its_loader_and_judges_the_others(converted, tmp_path):
    """A stranger's DIR: two bytes of the fp32 .pte changed so that ExecuTorch's loader aborts (std::terminate),
    and the recorded sha256 updated to match. validate loads it first in a contained child: that row fails
    saying so, the int8 row is judged, edgeport exits 1 with a report instead of dying of SIGABRT."""
    import hashlib
    import shutil
    import subprocess
    import sys

    out = tmp_path / "dir"
    shutil.copytree(converted[0], out)
    pte = out / "executorch" / "model_fp32.pte"
    data = bytearray(pte.read_bytes())
    old = hashlib.sha256(data).hexdigest()
    offset, value = CRASHING_BYTES
    data[offset:offset + len(value)] = value
    pte.write_bytes(data)
    load = "from executorch.runtime import Runtime; p = Runtime.get().load_program(%r); p.load_method('forward')" % str(pte)
    probe = subprocess.run([sys.executable, "-c", load], capture_output=True)
    assert probe.returncode < 0, "the changed .pte no longer crashes ExecuTorch's loader: find new CRASHING_BYTES"
    new = hashlib.sha256(data).hexdigest()
    for name in ("manifest.json", "report.json"):
        (out / name).write_text((out / name).read_text().replace(old, new))
    result = run_cli("validate", out, "--samples", "2", "--no-latency")
    assert result.returncode == 1, result.stdout + result.stderr
    rows = {r["variant"]: r for r in read_report(out)["targets"]}
    assert rows["fp32"]["status"] == "failed" and "crashed executorch's runtime (SIGABRT)" in rows["fp32"]["error"]
    assert rows["int8"]["status"] == "ok" and rows["int8"]["parity"]["passed"]


OUTLIER_PAIR = {"boost", "fc2"}


@pytest.mark.slow  # minutes on 2 cores: make test-slow
def test_fallback_float_keeps_the_layers_int8_breaks_float(tmp_path):
    """test_fallback.py's outlier model (four channels x1000 between `boost` and `fc2`): full int8 fails; the
    search keeps the pair float, the rebuilt .pte passes, and XNNPACK runs those two layers in fp32."""
    from test_fallback import OUTLIER

    path = write_model_file(tmp_path, OUTLIER)
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=np.random.default_rng(1).standard_normal((32, 1, 64)).astype(np.float32))
    result = run_cli("convert", f"{path}:build", "-t", "executorch", "-q", "int8", "--calibration-data", calib,
                     "--no-latency", "--samples", "4", "--fallback", "float", "--out", tmp_path / "out")
    assert result.returncode == 0, result.stdout + result.stderr
    row = next(r for r in read_report(tmp_path / "out")["targets"] if r["variant"] == "int8")
    record = row["quantization"]
    names = {layer["name"] for layer in record["float_layers"]}
    assert row["status"] == "ok" and "fc2" in names and names <= OUTLIER_PAIR, record
    assert record["scheme"].startswith("static int8 (PT2E, XNNPACK") and record["layers"] == 6
    assert not record["search"][0]["passed"] and record["search"][-1]["passed"]
    assert record["search"][-1]["measured"] == "artifact" and record["measured"] == "simulation"


def test_quantized_program_keeps_the_named_layers_float():
    """Unit: the float_layers filter reaches the quantizer (no dequantize feeds the kept layer's weight)."""
    import torch

    from edgeport.core.program import signature_of
    from edgeport.targets.base import ConvertJob
    from edgeport.targets.executorch.quantize import quantized_program

    import models

    module, args = models.mlp()
    program = torch.export.export(module, args)
    job = ConvertJob(program, args, signature_of(program), "int8", None, float_layers=("linear_1",))
    quantized, _ = quantized_program(job)
    linears = {n.name: n for n in quantized.graph.nodes if "linear" in str(n.target)}
    fed = {name: "dequantize" in str(node.args[1].target) if hasattr(node.args[1], "target") else False
           for name, node in linears.items()}
    assert sorted(fed.values()) == [False, True, True], fed
    assert any("random samples" in n for n in job.notes)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    root = tmp_path_factory.mktemp("executorch-gen")
    model_dir = tiny_lm.save(tiny_lm.build("llama"), root / "llama", tokenizer=True)
    out = root / "dist"
    result = run_cli("convert", f"hf:{model_dir}", "-t", "executorch", "--prefill-len", "4", "--prefill-len", "8",
                     "--cache-len", "24", "--gen-tokens", "5", "--samples", "3", "--out", out, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    return model_dir, out, read_report(out)


@pytest.mark.slow  # minutes on 2 cores: make test-slow
def test_one_pte_with_prefill_and_decode_methods_generates_the_reference_tokens(llama):
    _, out, report = llama
    row = next(r for r in report["targets"] if r["target"] == "executorch")
    g = row["generation"]
    assert row["status"] == "ok" and row["artifact"] == "executorch/generate_fp32.pte", row.get("error")
    assert g["tokens_matched"] == g["tokens_total"] == 3 * 5 and g["first_divergence"] is None
    assert g["logits_max_rel_err"] < 1e-4 and g["decode_ms_per_token"] > 0
    assert row["methods"] == ["prefill_4", "prefill_8", "decode"] and row["delegation"]["partitions"] >= 3
    assert row["kv_cache"].startswith("explicit input/output state")
    from edgeport.targets.executorch.runtime import ExecuTorchSignatureRunner

    runner = ExecuTorchSignatureRunner(out / row["artifact"], 1)
    assert runner.signatures() == ["prefill_4", "prefill_8", "decode"]
    io = runner.io()["decode"]
    assert [o["role"] for o in io["outputs"]][:2] == ["logits", "cache_k_0"] and io["inputs"][0]["name"] == "input_ids"
    # decode updates its cache inputs in place inside the .pte: the caller's arrays must come back untouched
    feeds = {i["name"]: np.zeros(i["shape"], i["dtype"]) for i in io["inputs"]}
    feeds["attention_mask"] = np.ones_like(feeds["attention_mask"]) if "attention_mask" in feeds else None
    feeds = {k: v for k, v in feeds.items() if v is not None}
    before = {k: v.copy() for k, v in feeds.items()}
    outputs = runner.run("decode", feeds)
    assert set(outputs) == {o["name"] for o in io["outputs"]} and outputs["logits"].shape == (1, 1, tiny_lm.VOCAB)
    assert all(np.array_equal(feeds[k], before[k]) for k in feeds) and outputs["cache_len_0"] == 1


@pytest.mark.slow  # minutes on 2 cores: make test-slow
def test_generate_and_validate_run_the_pte(llama):
    _, out, _ = llama
    sample = json.loads((out / "manifest.json").read_text())["generation"]["parity_sample"]["prompts"][0]
    ids = ",".join(map(str, sample["prompt_ids"]))
    result = run_cli("generate", out, "-t", "executorch", "--prompt-ids", ids, "--max-new", "5", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == "", "the runtime's C++ log lines stay off the terminal"
    got = json.loads(result.stdout.strip().splitlines()[-1])
    expected = sample["tokens"][: sample["tokens"].index(2) + 1] if 2 in sample["tokens"] else sample["tokens"]
    assert got["tokens"] == expected and got["variant"] == "fp32"
    again = run_cli("validate", out, "--samples", "2")
    assert again.returncode == 0, again.stdout + again.stderr


@pytest.mark.slow  # minutes on 2 cores: make test-slow
def test_dynamic_int8_lowers_a_model_that_normalizes_q_and_k_per_head(tmp_path):
    """Qwen3 (and Gemma 3) RMS-normalize q and k per head: one XNNPACK partitioner over dynamically quantized
    and float ops once failed there ("Invalid partition, found dependency cycles", before the attention and
    cache-write rewrites; a cycle is now lowered again the split way). It lowers with one partitioner, as
    few partitions as int4-block32 (16 here; 46 the split way)."""
    model_dir = tiny_lm.save(tiny_lm.build("qwen3"), tmp_path / "qwen3", tokenizer=True)
    out = tmp_path / "dist"
    result = run_cli("convert", f"hf:{model_dir}", "-t", "executorch", "-q", "dynamic-int8", "--prefill-len", "4",
                     "--cache-len", "16", "--gen-tokens", "3", "--samples", "2", "--no-latency", "--out", out, timeout=900)
    assert result.returncode in (0, 1), result.stdout + result.stderr   # 1: a budget, not a crash
    row = next(r for r in read_report(out)["targets"] if r["variant"] == "dynamic-int8")
    assert row["artifact"] == "executorch/generate_dynamic-int8.pte", row.get("error")
    assert row["delegation"]["flops_share"] > 0.9 and row["generation"]["tokens_total"] == 2 * 3
    assert row["delegation"]["partitions"] <= 16, row["delegation"]   # split: 46
