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


def test_dynamic_batch_dim_kept_and_runs_other_batch(tmp_path):
    import torch

    from edgeport.runtimes.onnxruntime import load
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
