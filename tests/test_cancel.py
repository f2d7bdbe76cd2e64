"""A cancel (Ctrl-C, SIGTERM -> errors.Terminated) stops the run: handlers that report any failure of a step
as that step's result re-raise it, and a child process doing the step does not outlive it."""

import os
import subprocess
import sys

import pytest

from edgeport.errors import Terminated


def test_a_cancelled_tpu_compile_kills_its_child(tmp_path, monkeypatch):
    from edgeport.targets.tpu import aot_process

    started, real_popen = [], subprocess.Popen

    def popen(_command, **kwargs):  # a compile that would run for a minute
        started.append(real_popen([sys.executable, "-c", "import time; time.sleep(60)"], **kwargs))
        return started[-1]

    def sleep(_seconds):
        raise Terminated(15)

    monkeypatch.setattr(aot_process.subprocess, "Popen", popen)
    monkeypatch.setattr(aot_process.time, "sleep", sleep)
    with pytest.raises(Terminated):
        aot_process._run_child(tmp_path, {"items": []}, [tmp_path / "row0.json"], timeout=60)
    assert started and started[0].poll() is not None, "the compile child outlived the cancelled run"


@pytest.mark.parametrize("cancel", [KeyboardInterrupt, lambda: Terminated(15)])
def test_a_cancelled_row_worker_does_not_report_the_cancel_as_the_rows_error(monkeypatch, cancel):
    import multiprocessing

    from edgeport.pipeline import jobs, workers

    def run_job(_spec, _progress):
        raise cancel()

    monkeypatch.setattr(jobs, "run_job", run_job)
    parent, child = multiprocessing.Pipe()
    with pytest.raises((KeyboardInterrupt, Terminated)):
        workers._child({"target": "onnx", "variant": "fp32"}, child, False, dict(os.environ))
    with pytest.raises(EOFError):  # the worker closed its end without sending a result
        parent.recv()


def test_a_cancelled_tpu_device_worker_is_not_an_engine_failure(monkeypatch):
    from edgeport.targets.tpu import device

    def check(_engine):
        raise KeyboardInterrupt

    monkeypatch.setattr(device, "_device_check", check)
    monkeypatch.setattr(device, "_die", lambda message: pytest.fail(f"reported as a failure: {message}"))
    with pytest.raises(KeyboardInterrupt):
        device.worker_main(["jax", "artifact", "feed.npz", "result.npz"])


def test_a_failure_in_a_row_worker_is_still_reported(monkeypatch):
    import multiprocessing

    from edgeport.pipeline import jobs, workers

    def run_job(_spec, _progress):
        raise RuntimeError("converter failed")

    monkeypatch.setattr(jobs, "run_job", run_job)
    parent, child = multiprocessing.Pipe()
    workers._child({"target": "onnx", "variant": "fp32"}, child, False, dict(os.environ))
    assert parent.recv() == ("error", "RuntimeError: converter failed")
