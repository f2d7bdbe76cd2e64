"""LiteRT target end to end: real litert-torch conversion, real ai-edge-litert runtime, real parity."""

import json

import pytest

from conftest import REPO, convert_in_process, read_report, run_cli

MODELS = REPO / "tests" / "models.py"


@pytest.mark.parametrize("name,inputs,outputs", [
    ("cnn", [[1, 3, 16, 16]], [[1, 5]]),
    ("mlp", [[2, 20]], [[2, 4]]),
    ("transformer", [[1, 8, 32]], [[1, 8, 32]]),
    ("two_io", [[1, 8], [1, 4]], [[1, 1], [1, 6]]),
])
def test_fp32_converts_with_parity(tmp_path, name, inputs, outputs):
    out = tmp_path / "out"  # in process: what is judged is what the conversion wrote (the flags: tests below)
    assert convert_in_process(f"{MODELS}:{name}", out, ["litert"]).exit_code == 0, read_report(out)["targets"]
    report = read_report(out)
    row = report["targets"][0]
    assert report["passed"] and row["status"] == "ok" and row["variant"] == "fp32"
    assert row["parity"]["samples"] == 8 and row["parity"]["max_rel_err"] < 1e-4
    assert row["latency_ms"]["p50"] > 0 and report["reference"]["latency_ms"]["p50"] > 0
    assert row["ops"] and sum(row["ops"].values()) > 0
    assert (out / row["artifact"]).stat().st_size == row["size_bytes"]
    assert (out / "exported.pt2").is_file() and (out / "report.md").is_file()
    manifest = json.loads((out / "manifest.json").read_text())
    assert [i["shape"] for i in manifest["inputs"]] == inputs
    assert [o["shape"] for o in manifest["outputs"]] == outputs
    artifact = manifest["artifacts"][0]
    assert artifact["path"] == row["artifact"] and len(artifact["outputs"]) == len(outputs)
    assert "| litert | fp32 | ok |" in (out / "report.md").read_text()


# every LiteRT variant on one model in `make test`; the attention and two-input models in `make test-slow`
@pytest.mark.parametrize("name", ["cnn", pytest.param("transformer", marks=pytest.mark.slow),
                                  pytest.param("two_io", marks=pytest.mark.slow)])
def test_quantized_variants_within_budgets(tmp_path, name):
    out = tmp_path / "out"
    variants = ["fp16", "dynamic-int8", "weight-int8", "int8"]
    result = convert_in_process(f"{MODELS}:{name}", out, ["litert"], quantize=variants, latency=False)
    assert result.exit_code == 0, [r.get("error") for r in result.report["targets"]]
    report = read_report(out)
    rows = {r["variant"]: r for r in report["targets"]}
    assert set(rows) == {"fp32", "fp16", "dynamic-int8", "weight-int8", "int8"}
    assert all(r["status"] == "ok" for r in rows.values()), [r["error"] for r in rows.values()]
    if name != "two_io":  # two 8x6 layers: flatbuffer overhead outweighs the weights
        assert rows["fp16"]["size_bytes"] < rows["fp32"]["size_bytes"]
        assert rows["dynamic-int8"]["size_bytes"] < rows["fp16"]["size_bytes"]
    assert "cosine_min" in rows["int8"]["parity"]["budget"] and "max_rel_err" not in rows["int8"]["parity"]["budget"]
    assert any("random samples" in n for n in rows["int8"]["notes"])
    int8 = [a for a in json.loads((out / "manifest.json").read_text())["artifacts"] if a["variant"] == "int8"][0]
    assert int8["inputs"][0]["dtype"] in ("int8", "float32")
    if int8["inputs"][0]["dtype"] == "int8":
        assert int8["inputs"][0]["quantization"]["scale"] > 0


def test_nhwc_inputs_are_channel_last(tmp_path):
    out = tmp_path / "out"
    result = run_cli("convert", f"{MODELS}:cnn", "--nhwc", "--out", out, "--no-latency")
    assert result.returncode == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["artifacts"][0]["inputs"][0]["shape"] == [1, 16, 16, 3]
    assert read_report(out)["targets"][0]["parity"]["passed"]


def test_bare_module_with_input_flag_and_threads(tmp_path):
    out = tmp_path / "out"
    result = run_cli("convert", f"{MODELS}:bare_mlp", "--input", "x:3x20:float32", "--threads", "2", "--samples", "3",
                     "--out", out)   # the default target (LiteRT) runs its interpreter on 2 threads
    assert result.returncode == 0, result.stderr
    report = read_report(out)
    assert report["targets"][0]["latency_ms"]["threads"] == 2 and report["targets"][0]["parity"]["samples"] == 3
    assert json.loads((out / "manifest.json").read_text())["inputs"][0] == {"name": "x", "shape": [3, 20], "dtype": "float32"}


def test_package_module_spec(tmp_path):
    """A package.module:callable spec resolves from the working directory (source loading; any target)."""
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "models.py").write_text((MODELS).read_text())
    result = run_cli("convert", "mypkg.models:mlp", "-t", "onnx", "--out", tmp_path / "out", "--no-latency",
                     "--samples", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert read_report(tmp_path / "out")["passed"]


def test_pt2_source_roundtrip(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"   # the first run only writes exported.pt2: any target
    assert run_cli("convert", f"{MODELS}:two_io", "-t", "onnx", "--out", first, "--no-latency", "--samples", "1").returncode == 0
    result = run_cli("convert", first / "exported.pt2", "-q", "fp16", "--out", second, "--no-latency")
    assert result.returncode == 0, result.stderr
    report = read_report(second)
    assert [r["status"] for r in report["targets"]] == ["ok", "ok"]
    assert report["targets"][0]["parity"]["max_abs_err"] < 1e-5


def test_force_replaces_output(tmp_path):
    from edgeport.pipeline.marker import write_marker

    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old")
    write_marker(out)  # --force replaces only edgeport's own output: what its marker lists (any target)
    assert run_cli("convert", f"{MODELS}:mlp", "-t", "onnx", "--out", out, "--force", "--no-latency",
                   "--samples", "1").returncode == 0
    assert not (out / "old.txt").exists() and (out / "report.json").is_file()


def test_budget_flag_can_fail_parity(tmp_path):
    out = tmp_path / "out"
    result = run_cli("convert", f"{MODELS}:cnn", "-q", "dynamic-int8", "--budget", "dynamic-int8.cosine_min=0.9999999",
                     "--out", out, "--no-latency", "--no-localize", "--junit", "junit.xml")
    assert result.returncode == 1
    report = read_report(out)
    rows = {r["variant"]: r for r in report["targets"]}
    assert rows["fp32"]["status"] == "ok" and rows["dynamic-int8"]["status"] == "failed"
    assert "parity: output_0 sample" in rows["dynamic-int8"]["error"] and "cosine" in rows["dynamic-int8"]["error"]
    assert 'failures="1"' in (out / "junit.xml").read_text()


def test_config_file_budgets(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.edgeport.budgets."litert.fp32"]\nmax_abs_err = 0.0\n')
    out = tmp_path / "out"
    result = run_cli("convert", f"{MODELS}:transformer", "--out", out, "--no-latency", "--no-localize", cwd=tmp_path)
    row = read_report(out)["targets"][0]
    assert row["parity"]["budget"]["max_abs_err"] == 0.0
    assert result.returncode == (0 if row["parity"]["max_abs_err"] == 0.0 else 1)
    assert result.returncode == 1, "a transformer never matches eager bit-exactly; a zero budget must fail"
