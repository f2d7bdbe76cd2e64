"""A stuck row never costs the others: a row past its time or memory limit is stopped and fails alone (naming
the step it was in and what it had used) while the others publish; a run stopped by SIGTERM publishes what
had finished, marked incomplete; every row's size covers all its files; a variant a target does not offer
is a row that says so."""

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO, read_report, run_cli

from edgeport.errors import Terminated, UsageError

MODELS = REPO / "tests" / "models.py"
ROWS = ("convert", f"{MODELS}:mlp", "-t", "onnx", "-q", "int8", "-q", "dynamic-int8", "--no-latency",
        "--samples", "2", "--no-cache")


def _rows(out) -> dict:
    return {r["variant"]: r for r in read_report(out)["targets"]}


def test_rows_past_their_time_or_memory_limit_fail_alone_and_the_others_publish(tmp_path):
    # one row sleeps (a converter that never returns), one allocates without end (a lowering that explodes)
    env = {**os.environ, "EDGEPORT_TEST_STALL": "onnx/int8=sleep,onnx/dynamic-int8=grow"}
    result = run_cli(*ROWS, "--row-timeout", "40s", "--row-memory", "1.5G", "--out", tmp_path / "out", env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    rows = _rows(tmp_path / "out")
    assert rows["fp32"]["status"] == "ok" and (tmp_path / "out" / rows["fp32"]["artifact"]).is_file()
    assert rows["fp32"]["peak_memory_bytes"] > 0
    slow, big = rows["int8"], rows["dynamic-int8"]
    assert slow["status"] == big["status"] == "failed" and slow["artifact"] is None is big["artifact"]
    assert slow["limit"]["kind"] == "time" and slow["limit"]["stage"] == "test stall", slow
    assert slow["limit"]["seconds_used"] >= 40 and "past its time limit of 40.0s" in slow["error"]
    assert "during 'test stall'" in slow["error"] and "--row-timeout" in slow["error"]
    assert big["limit"]["kind"] == "memory" and big["limit"]["peak_memory_bytes"] > 1.5 * 2**30, big
    assert "past its memory limit of 1.5 GiB" in big["error"] and "during 'test stall'" in big["error"]
    # the CI log has one verdict line per finished row, as it finished
    assert "onnx fp32: ok (cosine_min" in result.stdout
    assert "onnx int8: failed — stopped: past its time limit" in result.stdout
    assert not list((tmp_path / "out" / "onnx").glob("*int8*.onnx")), "a stopped row's half-written files stay out"


def _wait_for(process, text: str, seconds: float) -> str:
    seen, deadline = "", time.monotonic() + seconds
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        seen += line
        if text in line:
            return seen
    raise AssertionError(f"{text!r} never appeared:\n{seen}")


def test_a_run_stopped_by_sigterm_publishes_the_finished_rows_marked_incomplete(tmp_path):
    env = {**os.environ, "EDGEPORT_TEST_STALL": "onnx/int8=sleep", "PYTHONPATH": str(REPO)}
    out = tmp_path / "out"
    process = subprocess.Popen([sys.executable, "-m", "edgeport", *map(str, ROWS), "--out", str(out)], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        log = _wait_for(process, "onnx int8: test stall", 300)
        process.send_signal(signal.SIGTERM)
        rest, errors = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 143, log + rest + errors
    report = read_report(out)
    assert report["incomplete"] is True and report["passed"] is False
    assert report["stopped"]["signal"] == "SIGTERM" and report["stopped"]["exit_code"] == 143
    rows = {r["variant"]: r for r in report["targets"]}
    assert set(rows) == {"fp32", "int8", "dynamic-int8"}
    assert rows["fp32"]["status"] == "ok" and (out / rows["fp32"]["artifact"]).is_file()
    assert rows["int8"]["cancelled"] is True and rows["int8"]["status"] == "failed"
    assert "stopped by SIGTERM" in rows["int8"]["error"] and "'test stall'" in rows["int8"]["error"]
    assert rows["dynamic-int8"]["cancelled"] is True
    assert "onnx fp32: ok" in log and "INCOMPLETE: stopped by SIGTERM" in rest
    assert not [p for p in tmp_path.iterdir() if ".staging-" in p.name], "the staging directory was published"
    assert "INCOMPLETE" in (out / "report.md").read_text()


def test_in_process_rows_stopped_by_sigterm_publish_what_finished(tmp_path, monkeypatch):
    """With both limits off the rows run in this process; a SIGTERM in the second row keeps the first."""
    from edgeport import api
    from edgeport.pipeline import row

    real, calls = row.build_row, []

    def build_row(*args, **kwargs):
        calls.append(args[1])
        if len(calls) == 2:
            (args[3] / "onnx").mkdir(exist_ok=True)
            (args[3] / "onnx" / "half_written.onnx").write_bytes(b"partial")
            raise Terminated(signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(row, "build_row", build_row)
    opts = api.convert_options(model=f"{MODELS}:mlp", targets=["onnx"], quantize=["int8"], out=tmp_path / "out",
                               latency=False, samples=2, cache=False, jobs=1, row_timeout="none", row_memory="none")
    result = api.convert(opts)
    assert result.exit_code == 143 and result.report["incomplete"] is True
    rows = {r["variant"]: r for r in read_report(tmp_path / "out")["targets"]}
    assert rows["fp32"]["status"] == "ok" and rows["int8"]["cancelled"] is True
    assert not (tmp_path / "out" / "onnx" / "half_written.onnx").exists()


def test_size_counts_every_file_of_the_artifact(tmp_path):
    from edgeport.core.files import digested
    from edgeport.targets.base import Converted

    (tmp_path / "tpu").mkdir()
    main, weights = tmp_path / "tpu" / "model.jax_export", tmp_path / "tpu" / "weights.safetensors"
    main.write_bytes(b"x" * 100)
    weights.write_bytes(b"w" * 5000)
    files, size, sha = digested(Converted(main, files=[weights]), tmp_path)
    assert size == 5100 and [f["path"] for f in files] == ["tpu/model.jax_export", "tpu/weights.safetensors"]
    assert sha == files[0]["sha256"], "the digest stays the main file's own"


def test_a_baseline_written_before_sizes_counted_every_file_is_compared_by_its_files():
    from edgeport.validate.baseline import files_bytes

    old = {"artifact": "a", "size_bytes": 100, "files": [{"path": "a", "size_bytes": 100}, {"path": "b", "size_bytes": 5000}]}
    assert files_bytes(old) == 5100 and files_bytes({"size_bytes": 7}) is None
    assert files_bytes({**old, "size_bytes": 5100}) is None and files_bytes({**old, "size_bytes": 50}) is None


def test_a_variant_a_target_does_not_offer_is_a_skipped_row(tmp_path):
    from edgeport.pipeline.options import convert_options
    from edgeport.pipeline.plan import plan

    the_plan = plan(convert_options(model=f"{MODELS}:mlp", targets=["onnx", "tpu"], quantize=["int8"],
                                    out=tmp_path / "out"))
    assert [(t.name, v) for t, v in the_plan.rows] == [("onnx", "fp32"), ("onnx", "int8"), ("tpu", "fp32")]
    [(target, variant, why)] = the_plan.not_offered
    assert (target.name, variant) == ("tpu", "int8") and why.startswith("tpu does not offer int8")
    from edgeport.pipeline.run import skipped_rows

    [row] = skipped_rows(the_plan)
    assert row["status"] == "skipped" and row["required"] is False and "does not offer int8" in row["error"]


def test_default_limits_come_from_the_preflight_estimate_and_flags_override_them():
    from edgeport.pipeline.limits import MIN_MEMORY, requested, row_limits
    from edgeport.targets.registry import get_target

    onnx = get_target("onnx")
    assert not requested(None, None, {}).any_active(), "a library caller's rows stay in its process"
    small = row_limits(requested("auto", "auto", {}), onnx, "fp32", 4_000_000)
    assert small["memory"] == MIN_MEMORY and small["seconds"] >= 20 * 60 and small["where"] == "default"
    big = row_limits(requested("auto", "auto", {}), onnx, "fp32", 8_000_000_000)
    assert big["memory"] > 2 * 8e9 * onnx.measured.memory_factor and big["seconds"] > small["seconds"]
    flags = row_limits(requested("90s", "3G", {"limits": {"row_timeout": "1h"}}), onnx, "fp32", 4_000_000)
    assert (flags["seconds"], flags["memory"], flags["where"]) == (90, 3 * 2**30, "flag")
    config = row_limits(requested("auto", None, {"limits": {"row_timeout": "2m", "row_memory": "none"}}), onnx,
                        "fp32", 4_000_000)
    assert (config["seconds"], config["memory"]) == (120, None)
    assert not requested("none", "off", {}).any_active()


@pytest.mark.parametrize("flags", [("soon", None), (None, "lots"), ("-5", None)])
def test_a_bad_limit_is_bad_input(flags):
    from edgeport.pipeline.limits import requested

    with pytest.raises(UsageError):
        requested(*flags, {})
    with pytest.raises(UsageError):
        requested(None, None, {"limits": {"row_timout": "5m"}})


def test_validate_stopped_by_sigterm_keeps_the_rows_it_judged(tmp_path, monkeypatch):
    from conftest import convert_in_process

    from edgeport import api
    from edgeport.pipeline import validate as validate_module

    out = tmp_path / "out"
    assert convert_in_process(f"{MODELS}:mlp", out, ["onnx"], quantize=["int8"], latency=False, samples=2).exit_code == 0
    real, calls = validate_module.rejudge, []

    def rejudge(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise Terminated(signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(validate_module, "rejudge", rejudge)
    result = api.validate(out, api.JudgeOptions(latency=False, samples=2))
    assert result.exit_code == 143
    report = read_report(out)
    assert report["incomplete"] is True and report["stopped"]["finished_rows"] == 1
    rows = {r["variant"]: r for r in report["targets"]}
    assert rows["fp32"]["status"] == "ok" and rows["int8"]["cancelled"] is True and rows["int8"]["parity"] is None


def test_a_stopped_fleet_publishes_models_with_finished_rows_and_drops_the_rest(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from edgeport.fleet import run as fleet_run

    published = []
    monkeypatch.setattr(fleet_run, "finish_model", lambda run, meta, marks: published.append((run, marks)) or {"ok": 1})
    spec = lambda variant: {"target": "onnx", "variant": variant}  # noqa: E731
    plan = SimpleNamespace(rows=[("onnx", "fp32"), ("onnx", "int8")])
    half = fleet_run.ModelRun(SimpleNamespace(name="a", plan=plan), tmp_path / ".a.staging", meta={"ok": True},
                              specs=[spec("fp32"), spec("int8")], results={0: {"target": "onnx", "status": "ok"}})
    none = fleet_run.ModelRun(SimpleNamespace(name="b", plan=plan), tmp_path / ".b.staging", meta=None)
    none.staging.mkdir()
    block = fleet_run.stop_models([half, none], Terminated(signal.SIGTERM), 12.0)
    assert block["signal"] == "SIGTERM" and block["exit_code"] == 143
    [(run, marks)] = published
    assert run is half and marks["incomplete"] and marks["stopped"]["finished_rows"] == 1
    assert half.results[1]["cancelled"] and "stopped by SIGTERM" in half.results[1]["stopped"]
    assert not none.staging.exists() and "before any of its rows finished" in none.error


def test_the_preflight_estimate_counts_a_row_worker_beside_the_driver():
    from edgeport.core import memory
    from edgeport.targets.registry import get_target

    rows, weights = [(get_target("onnx"), "fp32")], 10**9
    alone, isolated = memory.estimate(weights, rows), memory.estimate(weights, rows, workers=True)
    assert isolated.memory == alone.memory + weights + memory.BASE_BYTES and "row worker" in isolated.by


def test_a_row_in_this_process_past_its_time_limit_is_interrupted_even_through_except_exception():
    """bounded(): the block is interrupted with RowStopped (a BaseException: a converter's `except Exception`
    cannot swallow it), naming the step; a block that ends in time is untouched and leaves no handler armed."""
    from edgeport.pipeline.limits import RowStopped, bounded

    start = time.monotonic()
    with pytest.raises(RowStopped) as stopped:
        with bounded({"seconds": 1.0, "memory": None, "where": "flag"}, lambda: "onnx fp32: lowering"):
            try:
                time.sleep(60)
            except Exception:   # what a library's broad handler would do
                time.sleep(60)
    assert time.monotonic() - start < 10
    assert "past its time limit of 1.0s" in str(stopped.value) and "during 'lowering'" in str(stopped.value)
    assert stopped.value.limit["kind"] == "time" and stopped.value.limit["stage"] == "lowering"
    with bounded({"seconds": 30.0, "memory": None}, lambda: None):
        value = sum(range(1000))
    os.kill(os.getpid(), signal.SIGUSR2)   # a late interrupt after its block ended is ignored
    time.sleep(0.1)
    assert value == 499500


@pytest.mark.slow
def test_text_generation_rows_past_a_limit_fail_alone_in_the_driver(tmp_path):
    """Text generation's rows run in the driver process (they share the programs and the reference): a
    row that grows past --row-memory is stopped there, fails naming the step and what it used, leaves no
    half-written files, and the other row is judged and published."""
    import tiny_lm

    model = tiny_lm.save(tiny_lm.build("llama"), tmp_path / "llama")
    env = {**os.environ, "EDGEPORT_TEST_STALL": "onnx/dynamic-int8=grow"}
    result = run_cli("convert", f"hf:{model}", "-t", "onnx", "-q", "dynamic-int8", "--prefill-len", "8", "--cache-len",
                     "32", "--gen-tokens", "4", "--no-latency", "--no-cache", "--row-memory", "1G", "--out",
                     tmp_path / "out", env=env, timeout=600)
    assert result.returncode == 1, result.stdout + result.stderr
    rows = _rows(tmp_path / "out")
    assert rows["fp32"]["status"] == "ok" and rows["fp32"]["generation"]["token_agreement"] == 1.0
    stopped = rows["dynamic-int8"]
    assert stopped["status"] == "failed" and "past its memory limit of 1.0 GiB" in stopped["error"]
    assert "during 'test stall'" in stopped["error"] and stopped["limit"]["peak_memory_bytes"] > 1 << 30
    assert "onnx dynamic-int8: failed — stopped: past its memory limit" in result.stdout
    assert not list((tmp_path / "out" / "onnx").glob("*dynamic*int8*.onnx*"))
