"""ONNX target end to end: torch.onnx (dynamo) from the one ExportedProgram, real onnxruntime, real parity."""

import json

import numpy as np
import pytest

from conftest import REPO, read_report, run_cli, validate_report

MODELS = REPO / "tests" / "models.py"


def _convert(tmp_path, model, **kwargs):
    from edgeport import api

    opts = api.convert_options(model=model, out=tmp_path / "out", targets=["onnx"], latency=False, **kwargs)
    result = api.convert(opts)
    validate_report(result.report)
    return result


@pytest.mark.parametrize("name,outputs", [
    ("cnn", [[1, 5]]), ("mlp", [[2, 4]]), ("transformer", [[1, 8, 32]]), ("two_io", [[1, 1], [1, 6]]),
])
def test_fp32_parity_on_tiny_models(tmp_path, name, outputs):
    result = _convert(tmp_path, f"{MODELS}:{name}")
    row = result.report["targets"][0]
    assert result.exit_code == 0 and row["status"] == "ok", row["error"]
    assert row["target"] == "onnx" and row["artifact"] == "onnx/model.onnx"
    assert row["parity"]["samples"] == 8 and row["parity"]["max_rel_err"] < 1e-5
    assert row["opset"] >= 18 and sum(row["ops"].values()) > 0
    assert (result.out / row["artifact"]).stat().st_size == row["size_bytes"]
    artifact = json.loads((result.out / "manifest.json").read_text())["artifacts"][0]
    assert [o["shape"] for o in artifact["outputs"]] == outputs


def test_attention_with_a_learned_mask_converts(tmp_path):
    """The shared program was captured under no_grad; torch.onnx re-runs it (type promotion) with the
    program's parameters, and with grad on, SDPA picks another kernel and a recorded view fails
    ("Cannot view a tensor with shape ... and strides ..."). The ONNX step runs in the capture's mode."""
    result = _convert(tmp_path, f"{MODELS}:biased_attention", samples=2)
    row = result.report["targets"][0]
    assert result.exit_code == 0 and row["status"] == "ok", row["error"]
    assert row["parity"]["max_rel_err"] < 1e-4 and row["rewrites"] == []


def test_quantized_variants_calibrated_on_real_data(tmp_path):
    data = tmp_path / "calib.npz"
    np.savez(data, x=np.random.default_rng(1).standard_normal((6, 1, 3, 16, 16)).astype(np.float32))
    result = _convert(tmp_path, f"{MODELS}:cnn", quantize=["dynamic-int8", "int8"], calibration_data=str(data))
    rows = {r["variant"]: r for r in result.report["targets"]}
    assert result.exit_code == 0, [r["error"] for r in rows.values()]
    assert set(rows) == {"fp32", "dynamic-int8", "int8"}
    assert rows["dynamic-int8"]["ops"].get("ConvInteger", 0) + rows["dynamic-int8"]["ops"].get("MatMulInteger", 0) > 0
    assert rows["int8"]["ops"].get("QuantizeLinear", 0) > 0
    assert not any("random samples" in n for n in rows["int8"]["notes"]), "real calibration data was given"
    for variant in ("dynamic-int8", "int8"):
        parity = rows[variant]["parity"]
        assert 0 < parity["max_abs_err"] and parity["cosine_min"] > 0.98
        assert "max_rel_err" not in parity["budget"]


def test_int4_block32_is_matmulnbits_smaller_and_judged(tmp_path):
    """onnxruntime's block-wise int4 quantizer on the fp32 model: the MLP's Gemms become MatMulNBits (+ Add
    of the bias), the artifact is smaller, and the row is judged on the int4 budget like LiteRT's."""
    result = _convert(tmp_path, f"{MODELS}:mlp", quantize=["int4-block32"], samples=4)
    rows = {r["variant"]: r for r in result.report["targets"]}
    assert result.exit_code == 0, [r["error"] for r in rows.values()]
    row = rows["int4-block32"]
    assert row["status"] == "ok" and row["artifact"] == "onnx/model_int4-block32.onnx"
    assert row["ops"].get("MatMulNBits") == 3 and "Gemm" not in row["ops"]
    assert row["size_bytes"] < rows["fp32"]["size_bytes"]
    assert row["int4"]["block_size"] == 32 and row["int4"]["symmetric"] and "int8_kernels" not in row
    parity = row["parity"]
    assert parity["passed"] and parity["cosine_min"] > 0.95 and parity["snr_db_min"] > 10
    assert parity["budget"]["cosine_min"] == 0.95
    assert row["quantization"]["weight_share"] == 1.0


def test_dynamic_batch_dim_kept_and_runs_other_batch(tmp_path):
    import torch

    from edgeport.targets.onnx.runtime import load
    from models import mlp

    module, example = mlp()
    batch = torch.export.Dim("batch", min=1, max=64)
    torch.export.save(torch.export.export(module, example, dynamic_shapes=({0: batch},)), tmp_path / "dyn.pt2")
    result = _convert(tmp_path, str(tmp_path / "dyn.pt2"))
    row = result.report["targets"][0]
    assert row["status"] == "ok" and row["dynamic_inputs"]["x"], row
    runner = load(result.out / row["artifact"], threads=1)
    assert runner.io()["inputs"][0]["shape"][0] == -1
    x = np.random.default_rng(0).standard_normal((5, 20)).astype(np.float32)
    with torch.no_grad():
        expected = module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(runner.run([x])[0], expected, rtol=1e-5, atol=1e-5)


def test_onnx_and_litert_in_one_cli_run(tmp_path):
    out = tmp_path / "out"
    result = run_cli("convert", f"{MODELS}:mlp", "-t", "litert", "-t", "onnx", "--threads", "2", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    report = read_report(out)
    assert [(r["target"], r["status"]) for r in report["targets"]] == [("litert", "ok"), ("onnx", "ok")]
    onnx_row = report["targets"][1]
    assert onnx_row["latency_ms"]["threads"] == 2 and onnx_row["latency_ms"]["p50"] > 0
    md = (out / "report.md").read_text()
    assert "| onnx | fp32 | ok |" in md and "| litert | fp32 | ok |" in md


def _shared_export_with_grad(job):
    """The ONNX step as it was before capture_mode: the no_grad program converted with grad enabled (a
    real torch.onnx failure on an attention with a learned mask)."""
    import torch

    with torch.enable_grad():
        return torch.onnx.export(job.program, tuple(job.example_inputs), dynamo=True, verbose=False)


def test_own_capture_when_the_shared_program_does_not_convert(tmp_path, monkeypatch):
    from edgeport.targets.onnx import target as onnx_target

    monkeypatch.setattr(onnx_target, "_export_shared", _shared_export_with_grad)
    result = _convert(tmp_path, f"{MODELS}:biased_attention", samples=2, quantize=["dynamic-int8"])
    rows = {r["variant"]: r for r in result.report["targets"]}
    assert result.exit_code == 0, [r["error"] for r in rows.values()]
    for row in rows.values():  # the quantized variant is built on the fallback's model.onnx: it says so too
        assert row["status"] == "ok" and row["rewrites"] == ["own_capture"], row
        assert [i["name"] for i in row["io"]["inputs"]] == ["x"]  # the shared program's names
    assert rows["fp32"]["parity"]["max_abs_err"] < 1e-5 and rows["fp32"]["parity"]["samples"] == 2
    assert any("did not convert" in n and "Cannot view a tensor" in n for n in rows["fp32"]["notes"])
    assert any("captured from the module" in n for n in rows["dynamic-int8"]["notes"])


def test_own_capture_keeps_the_flat_input_order(tmp_path, monkeypatch):
    """Keyword inputs given out of order, a None argument, a dict output: the fallback captures the same
    positional adapter, so inputs, outputs and their order are the shared program's."""
    from edgeport.targets.onnx import target as onnx_target

    def refuse(job):
        raise RuntimeError("the shared program is refused")

    monkeypatch.setattr(onnx_target, "_export_shared", refuse)
    result = _convert(tmp_path, f"{MODELS}:dict_io", samples=2)
    row = result.report["targets"][0]
    assert result.exit_code == 0 and row["rewrites"] == ["own_capture"], row["error"]
    assert [i["shape"] for i in row["io"]["inputs"]] == [[2, 8], [2, 3]]  # zeta, alpha: forward's order
    assert len(row["parity"]["outputs"]) == 2 and row["parity"]["passed"]
    manifest = json.loads((result.out / "manifest.json").read_text())
    assert [i["name"] for i in manifest["inputs"]] == ["zeta", "alpha"]


def test_failure_of_both_captures_keeps_cause_and_model_line(tmp_path, monkeypatch):
    """Capture and conversion both with grad on (as a plain torch.onnx.export of an eval model is): the
    shared program and the own capture fail alike; the row keeps the root cause and the model's line."""
    import torch

    from edgeport.core import program as program_module

    monkeypatch.setattr(program_module, "capture_mode", torch.enable_grad)
    result = _convert(tmp_path, f"{MODELS}:biased_attention", samples=2)
    row = result.report["targets"][0]
    assert result.exit_code == 1 and row["status"] == "failed" and row["rewrites"] == []
    assert "caused by ValueError: Cannot view a tensor with shape" in row["error"]
    assert "models.py:" in row["error"] and "out.transpose(1, 2).reshape(b, s, 16)" in row["error"]
    assert not any(s in row["error"] for s in ("\x1b", "Next steps", "Create an issue"))
    assert any("own capture of the module failed too" in n for n in row["notes"])


def test_dynamic_batch_on_a_keyword_input_model(tmp_path):
    """--dynamic batch through the FlatIO adapter (forward(*tensors)): torch.export wants one
    dynamic_shapes entry for the varargs; a tuple per input was 'inputs has 1 elements, but
    dynamic_shapes has 2 elements' for every dict/keyword/hf: model."""
    result = _convert(tmp_path, f"{MODELS}:dict_io", samples=2, dynamic=["batch"])
    row = result.report["targets"][0]
    assert result.exit_code == 0 and row["status"] == "ok", row["error"]
    assert [i["shape"][0] for i in row["io"]["inputs"]] == [-1, -1] and len(row["dynamic_inputs"]) == 2


def test_an_export_leaves_no_weight_of_the_program_alive(tmp_path):
    """onnxscript's rewrite rules (module-level objects that torch.onnx's optimizer runs) kept the graph they
    last matched, and that graph's initializers wrap the program's own parameters: the last exported graph
    kept one copy of the weights alive after the program, the ONNXProgram and the row were gone (text
    generation: through every judge, past release_programs)."""
    import gc
    import weakref

    import torch

    from edgeport.targets.onnx.exporter import onnx_export

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).eval()
    program = torch.export.export(model, (torch.randn(2, 8),))
    weights = [weakref.ref(t) for t in program.state_dict.values()]
    assert len(weights) == 4
    onnx_export(program, (torch.randn(2, 8),), dynamo=True, verbose=False).save(str(tmp_path / "m.onnx"))
    assert (tmp_path / "m.onnx").stat().st_size > 0
    del model, program
    gc.collect()
    assert [w() for w in weights if w() is not None] == []
