"""`edgeport validate DIR`: judge existing artifacts again (no conversion) against exported.pt2's module()."""

import json

import numpy as np
import pytest

from conftest import REPO, convert_in_process, read_report, run_cli

MODELS = REPO / "tests" / "models.py"


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    out = tmp_path_factory.mktemp("converted") / "out"
    result = convert_in_process(f"{MODELS}:two_io", out, ["onnx", "litert"], latency=False)
    assert result.exit_code == 0, [r.get("error") for r in result.report["targets"]]
    return out


def test_validate_clean_dir_with_new_data_and_latency(fresh, tmp_path):
    rng = np.random.default_rng(3)
    np.savez(tmp_path / "real.npz", x=rng.standard_normal((4, 1, 8)).astype(np.float32),
             y=rng.standard_normal((4, 1, 4)).astype(np.float32))
    result = run_cli("validate", fresh, "--data", tmp_path / "real.npz", "--samples", "2", "--junit", "junit.xml")
    assert result.returncode == 0, result.stdout + result.stderr
    report = read_report(fresh)
    assert report["validated"]["samples"] == 6
    for row in report["targets"]:
        assert row["status"] == "ok" and row["parity"]["sample_origin"] == {"real": 4, "random": 1, "example": 1}
        assert row["latency_ms"]["p50"] > 0
    assert report["reference"]["latency_ms"]["p50"] > 0
    assert (fresh / "junit.xml").is_file() and "4 real (npz" in (fresh / "report.md").read_text()


def test_notes_about_the_last_measurement_go_when_validate_measures_again(fresh):
    """A fleet row's 'latency measured while other fleet tasks shared the machine' (the note itself sends the
    user to validate on a quiet machine) and a reused verdict's note are about the last judging, not this one."""
    from edgeport.fleet.run import LATENCY_NOTE
    from edgeport.pipeline.reuse import REUSED_NOTE

    report = read_report(fresh)
    for row in report["targets"]:
        row["notes"] = [*row["notes"], REUSED_NOTE, LATENCY_NOTE, "a note about the conversion"]
        row["verdict"] = "cached"
    (fresh / "report.json").write_text(json.dumps(report))
    assert run_cli("validate", fresh, "--samples", "2").returncode == 0
    for row in read_report(fresh)["targets"]:
        assert "verdict" not in row and REUSED_NOTE not in row["notes"] and LATENCY_NOTE not in row["notes"], row
        assert "a note about the conversion" in row["notes"] and row["latency_ms"]["p50"] > 0


def test_truncated_artifact_fails_that_target_only(fresh):
    onnx = fresh / "onnx" / "model.onnx"
    onnx.write_bytes(onnx.read_bytes()[: onnx.stat().st_size // 2])
    result = run_cli("validate", fresh, "--no-latency")
    assert result.returncode == 1
    rows = {r["target"]: r for r in read_report(fresh)["targets"]}
    assert rows["litert"]["status"] == "ok"
    assert rows["onnx"]["status"] == "failed" and rows["onnx"]["error"].startswith("artifact changed since conversion:")
    assert "not loaded" in rows["onnx"]["error"]  # its sha256 differs: no runtime's loader ever reads it
    assert "onnx fp32" in (fresh / "report.md").read_text()


def test_tampered_weights_detected(fresh):
    perturb_largest_initializer(fresh / "onnx" / "model.onnx")
    result = run_cli("validate", fresh, "--no-latency")
    assert result.returncode == 1
    row = read_report(fresh)["targets"][0]
    assert row["status"] == "failed" and row["error"].startswith("artifact changed since conversion: sha256")
    assert row.get("parity") is None and "not loaded" in row["error"]  # never handed to the runtime


def test_missing_artifact_and_missing_program(fresh):
    (fresh / "litert" / "model_fp32.tflite").unlink()
    result = run_cli("validate", fresh, "--no-latency")
    assert result.returncode == 1
    rows = {r["target"]: r for r in read_report(fresh)["targets"]}
    assert rows["onnx"]["status"] == "ok" and rows["litert"]["error"] == "artifact missing: litert/model_fp32.tflite"
    (fresh / "exported.pt2").unlink()
    before = (fresh / "report.json").read_text()
    result = run_cli("validate", fresh)
    assert result.returncode == 2 and "no exported.pt2" in result.stderr and "Traceback" not in result.stderr
    assert (fresh / "report.json").read_text() == before


def test_validate_in_process_uses_program_module(fresh):
    from edgeport import api

    result = api.validate(fresh, api.JudgeOptions(latency=False, samples=3))
    assert result.exit_code == 0
    names = json.loads((fresh / "manifest.json").read_text())["inputs"]
    assert [i["name"] for i in names] == ["x", "y"]
    assert all(r["parity"]["samples"] == 3 and r["parity"]["max_rel_err"] < 1e-5 for r in result.report["targets"])


def perturb_largest_initializer(path):
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    init = max(model.graph.initializer, key=lambda t: np.prod(t.dims))
    weights = numpy_helper.to_array(init).copy()
    weights += np.random.default_rng(0).normal(0, 0.5, weights.shape).astype(weights.dtype)
    init.CopyFrom(numpy_helper.from_array(weights, init.name))
    onnx.save(model, str(path))


def test_validate_takes_decompositions_as_convert_does(tmp_path):
    """A DIR converted with --decompositions holds a program calling the user's custom op: validate reads
    it back only when told the same file (exit 2 naming the namespace without it), then judges the rows."""
    decomps = tmp_path / "my_decomps.py"
    decomps.write_text(f"import sys\nsys.path.insert(0, {str(REPO / 'tests')!r})\n"
                       "import models  # registers edgeport_tests::np_square, which the program calls\n"
                       "DECOMPOSITIONS = {'edgeport_tests::np_square': lambda x: x * x}\n")
    out = tmp_path / "out"
    result = run_cli("convert", f"{MODELS}:opaque_op", "-t", "onnx", "--out", out, "--no-latency", "--samples", "2",
                     "--decompositions", decomps)
    assert result.returncode == 0, result.stdout + result.stderr
    refused = run_cli("validate", out, "--no-latency", "--samples", "2")
    # the op is unknown to this process (its file registers it) or its namespace unnamed: bad input either way
    assert refused.returncode == 2 and "exported.pt2" in refused.stderr and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    validated = run_cli("validate", out, "--no-latency", "--samples", "3", "--decompositions", decomps)
    assert validated.returncode == 0, validated.stdout + validated.stderr
    report = read_report(out)
    assert report["validated"]["samples"] == 3 and report["targets"][0]["status"] == "ok"
    assert report["targets"][0]["parity"]["samples"] == 3
    bad = tmp_path / "bad.py"
    bad.write_text("X = 1\n")
    wrong = run_cli("validate", out, "--no-latency", "--decompositions", bad)
    assert wrong.returncode == 2 and "DECOMPOSITIONS" in wrong.stderr and "Traceback" not in wrong.stderr
