"""The bundle judge runs the bundle's runtime in a child process: a native crash there (LiteRT-LM's Rust panic
that aborts, exit 134) fails the bundle's row with how the runtime died, and the run (this process) goes on."""

import os
from types import SimpleNamespace

import crashing_bundle
from edgeport.pipeline.tasks.text_generation.bundle import judge
from edgeport.pipeline.tasks.text_generation.layout import Layout


def session(tmp_path):
    layout = Layout(f"hf:{tmp_path}", None, 16, 1, 32, [8], 4, None, [2])
    return SimpleNamespace(layout=layout, prompts=[[3, 4, 5]], judge=SimpleNamespace(threads=1), programs={})


def test_an_engine_that_aborts_fails_its_row_not_the_run(tmp_path):
    artifact = tmp_path / "model.litertlm"
    artifact.write_text("abort")
    verdict = judge(crashing_bundle, artifact, session(tmp_path), {})
    assert verdict.status == "failed"
    assert "bundle crashed crashing.Engine" in verdict.error and "SIGABRT" in verdict.error, verdict.error
    assert os.getpid() > 0   # still here


def test_an_engine_error_is_the_rows_error(tmp_path):
    artifact = tmp_path / "model.litertlm"
    artifact.write_text("refuse")
    verdict = judge(crashing_bundle, artifact, session(tmp_path), {})
    assert verdict.status == "failed" and "engine refused '3 4 5'" in verdict.error, verdict.error
