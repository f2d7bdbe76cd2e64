"""Speed of the artifacts as edgeport reports it: ops LiteRT leaves outside XNNPACK, and --threads auto."""

import os

import pytest

from conftest import REPO, convert_in_process, read_report, run_cli

MODELS = REPO / "tests" / "models.py"


@pytest.fixture(scope="module")
def cumsum_auto(tmp_path_factory):
    """One convert of a model with an op XNNPACK does not take, on two targets, with --threads auto."""
    out = tmp_path_factory.mktemp("perf") / "out"
    result = convert_in_process(f"{MODELS}:cumsum", out, ["litert", "onnx"], threads="auto")
    assert result.exit_code == 0, [r.get("error") for r in result.report["targets"]]
    return out, read_report(out)


def test_litert_row_names_ops_not_delegated(cumsum_auto):
    _, report = cumsum_auto
    litert = next(r for r in report["targets"] if r["target"] == "litert")
    assert litert["not_delegated"] == {"CUMSUM": 1}  # the FULLY_CONNECTED before it went to XNNPACK
    assert litert["ops"]["CUMSUM"] == 1 and litert["ops"]["FULLY_CONNECTED"] == 1


def test_fully_delegated_model_has_nothing_to_report(tmp_path):
    out = tmp_path / "out"
    result = run_cli("convert", f"{MODELS}:two_io", "-t", "litert", "--out", out, "--samples", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    row = read_report(out)["targets"][0]
    assert row["not_delegated"] == {} and "runner_choice" not in row
    assert not any("not delegated" in n for n in row["notes"])


def test_slow_note_names_the_undelegated_ops(cumsum_auto):
    from edgeport.pipeline.row import slower_than_eager
    from edgeport.targets.litert.runtime import load

    out, report = cumsum_auto
    litert = next(r for r in report["targets"] if r["target"] == "litert")
    runner = load(out / litert["artifact"])
    details = runner.details()
    slow = slower_than_eager(runner, details, {"p50": 3.0}, {"p50": 1.0})
    assert len(slow) == 1 and "CUMSUM x1" in slow[0] and "3.0x PyTorch eager" in slow[0]
    assert slower_than_eager(runner, details, {"p50": 0.5}, {"p50": 1.0}) == []
    assert slower_than_eager(runner, {"not_delegated": {}}, {"p50": 3.0}, {"p50": 1.0}) == []


@pytest.mark.parametrize("target,runners", [("litert", {"interpreter", "compiled_model"}), ("onnx", {"onnxruntime"})])
def test_threads_auto_sweeps_and_uses_the_pick(cumsum_auto, target, runners):
    from edgeport.targets.base import thread_counts

    _, report = cumsum_auto
    row = next(r for r in report["targets"] if r["target"] == target)
    choice = row["runner_choice"]
    cores = os.cpu_count()
    expected = {f"{name}/{n}" for name in runners for n in thread_counts(cores)}
    assert set(choice["sweep"]) == expected
    timed = {label: v["p50"] for label, v in choice["sweep"].items() if "p50" in v}
    assert timed[f"{choice['runner']}/{choice['threads']}"] == min(timed.values())  # ties: rounded to 0.1 µs
    assert row["latency_ms"]["threads"] == choice["threads"] and row["parity"]["passed"]
    assert report["reference"]["latency_ms"]["threads"] == cores


def test_every_litert_runner_passes_parity(cumsum_auto):
    """Whatever auto picks must give the Interpreter's answers: run both runners on the same artifact."""
    import numpy as np

    from edgeport.targets.registry import get_target

    out, report = cumsum_auto
    row = next(r for r in report["targets"] if r["target"] == "litert")
    target = get_target("litert")
    x = [np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)]
    results = [target.load_config(out / row["artifact"], c).run(x)[0] for c in target.runner_configs(2)]
    assert len(results) == 4 and all(np.allclose(r, results[0], atol=1e-6) for r in results)


def test_validate_with_threads_auto(cumsum_auto, tmp_path):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(cumsum_auto[0], out)
    result = run_cli("validate", out, "--threads", "auto", "--samples", "2", "--no-latency")
    assert result.returncode == 0, result.stdout + result.stderr
    rows = read_report(out)["targets"]
    assert all(r["runner_choice"]["threads"] >= 1 for r in rows)


def test_targets_without_a_thread_knob_have_nothing_to_pick():
    from edgeport.targets.registry import get_target

    assert [c.label for c in get_target("tpu").runner_configs(4)] == ["xla_cpu/4"]
    assert len(get_target("onnx").runner_configs(4)) == 4


def test_thread_counts_stay_few_on_big_machines():
    from edgeport.targets.base import thread_counts

    assert thread_counts(1) == [1] and thread_counts(2) == [1, 2] and thread_counts(6) == [1, 2, 3, 4, 6]
    assert thread_counts(64) == [1, 2, 3, 4, 8, 16, 32, 64]


@pytest.mark.parametrize("value", ["0", "many", "-2"])
def test_bad_threads_is_exit_2(tmp_path, value):
    result = run_cli("convert", f"{MODELS}:mlp", "--threads", value, "--out", tmp_path / "out")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "--threads" in result.stderr
    assert not (tmp_path / "out").exists()
