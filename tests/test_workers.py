"""Rows of one convert in worker processes: the same output as one after another, a crashing worker fails
only its row, TPU compiles split per topology, and timing waits until nothing else runs."""

import hashlib
import json
import os
from collections import deque

import pytest

from conftest import REPO, read_report, run_cli, write_model_file

from edgeport.pipeline import workers

MODELS = REPO / "tests" / "models.py"
TOPOLOGIES = ("--tpu-topology", "v5e:1x1", "--tpu-topology", "v6e:1x1")


def _files(out):
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and not p.name.endswith(".log"))


DEEP = """def build():
    torch.manual_seed(0)
    layers = [m for _ in range(55) for m in (nn.Linear(8, 8), nn.Tanh())]   # 110 ops: big enough to split
    return nn.Sequential(*layers), (torch.randn(2, 8),)
"""


@pytest.mark.slow
def test_parallel_rows_match_sequential_and_split_tpu_compiles(tmp_path):
    model = write_model_file(tmp_path, DEEP)
    argv = ("convert", f"{model}:build", "-t", "litert", "-t", "onnx", "-t", "tpu", *TOPOLOGIES, "--samples", "2", "--no-cache")
    sequential = run_cli(*argv, "-j", "1", "--no-latency", "--out", tmp_path / "seq")
    parallel = run_cli(*argv, "-j", "2", "--out", tmp_path / "par")   # latency on: the timing gate is used
    assert sequential.returncode == 0 and parallel.returncode == 0, parallel.stdout + parallel.stderr
    assert "tpu fp32 (piece 1): converting" in parallel.stdout, "two topologies: the TPU row is split"
    seq, par = read_report(tmp_path / "seq"), read_report(tmp_path / "par")
    assert [(r["target"], r["status"], r["artifact"]) for r in seq["targets"]] == \
           [(r["target"], r["status"], r["artifact"]) for r in par["targets"]]
    assert _files(tmp_path / "seq") == _files(tmp_path / "par")
    assert not any(p.name.startswith((".tasks", "task-inputs")) for p in (tmp_path / "par").iterdir())
    rows = {r["target"]: r for r in par["targets"]}
    assert [(c["topology"], c["ok"]) for c in rows["tpu"]["tpu_compile"]] == [("v5e:1x1", True), ("v6e:1x1", True)]
    meta = json.loads((tmp_path / "par" / "tpu" / "fp32" / "meta.json").read_text())
    assert sorted(meta["executables"]) == ["v5e:1x1", "v6e:1x1"]
    # the split row's file list names piece 1's executable too, digested after meta.json was merged
    files = {f["path"]: f for f in rows["tpu"]["files"]}
    assert {"tpu/fp32/executables/v5e_1x1.tpu_exec", "tpu/fp32/executables/v6e_1x1.tpu_exec",
            "tpu/fp32/meta.json", "tpu/fp32/weights.safetensors"} <= set(files), sorted(files)
    for path, item in files.items():
        assert hashlib.sha256((tmp_path / "par" / path).read_bytes()).hexdigest() == item["sha256"], path
    assert sorted(files) == sorted(f["path"] for f in {r["target"]: r for r in seq["targets"]}["tpu"]["files"])
    for r in rows.values():
        assert r["latency_ms"]["p50"] > 0 and r["parity_sample"] == f"{r['target']}/parity_sample/index.json"
    for name in ("litert", "onnx"):
        assert rows[name]["sha256"] == {r["target"]: r for r in seq["targets"]}[name]["sha256"]


def test_a_crashing_worker_fails_its_row_only(tmp_path, monkeypatch):
    counter = tmp_path / "attempts"
    monkeypatch.setenv("EDGEPORT_TEST_CRASH", f"onnx/fp32={counter}")
    result = run_cli("convert", f"{MODELS}:mlp", "-t", "litert", "-t", "onnx", "-j", "2", "--no-latency",
                     "--samples", "2", "--out", tmp_path / "out")
    assert result.returncode == 1, result.stdout + result.stderr
    rows = {r["target"]: r for r in read_report(tmp_path / "out")["targets"]}
    assert rows["litert"]["status"] == "ok"
    assert rows["onnx"]["status"] == "failed" and "worker process exited with code 1" in rows["onnx"]["error"]
    assert counter.read_text() == "1"
    assert "onnx fp32: worker" in result.stdout and result.stderr == "", result.stderr


# installed as sitecustomize in every process of the run (driver, fork server, workers): torch.onnx refuses
# the shared program, as it does for some real models, so the ONNX target captures the eager module itself
REFUSE_SHARED = """import edgeport.targets.onnx.target as onnx_target
def _refuse(job):
    raise RuntimeError("the shared program is refused")
onnx_target._export_shared = _refuse
"""
UNSEEDED = """def build():
    return nn.Sequential(nn.Linear(6, 4), nn.Tanh()), (torch.randn(2, 6),)
"""


@pytest.mark.parametrize("jobs", [pytest.param("1", marks=pytest.mark.slow), "2"])   # -j 2 is the case; -j 1 the baseline
def test_a_worker_loads_the_eager_module_again_for_the_target_that_captures_it(tmp_path, jobs):
    """-j 2 gives what -j 1 gives: a worker holds no eager module, so it loads the user's model again (only
    when a target asks) with the program's weights, even when build() does not seed its init."""
    (tmp_path / "patch").mkdir()
    (tmp_path / "patch" / "sitecustomize.py").write_text(REFUSE_SHARED)
    model = write_model_file(tmp_path, UNSEEDED)
    result = run_cli("convert", f"{model}:build", "-t", "onnx", "-q", "dynamic-int8", "-j", jobs, "--no-latency",
                     "--samples", "2", "--no-cache", "--out", tmp_path / "out",
                     env={**os.environ, "PYTHONPATH": str(tmp_path / "patch")})
    assert result.returncode == 0, result.stdout + result.stderr
    rows = read_report(tmp_path / "out")["targets"]
    assert [(r["variant"], r["status"], r["rewrites"]) for r in rows] == \
        [("fp32", "ok", ["own_capture"]), ("dynamic-int8", "ok", ["own_capture"])]
    assert rows[0]["parity"]["max_abs_err"] < 1e-5


CHANGES_ON_RELOAD = """from pathlib import Path
def build():
    built = Path(__file__).with_name("built-once")
    act = nn.ReLU() if built.exists() else nn.Tanh()
    built.touch()
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 4), act), (torch.randn(2, 6),)
"""


def test_a_reloaded_module_that_is_not_the_reference_is_not_used(tmp_path):
    (tmp_path / "patch").mkdir()
    (tmp_path / "patch" / "sitecustomize.py").write_text(REFUSE_SHARED)
    model = write_model_file(tmp_path, CHANGES_ON_RELOAD)
    result = run_cli("convert", f"{model}:build", "-t", "onnx", "-q", "dynamic-int8", "-j", "2", "--no-latency",
                     "--samples", "2", "--no-cache", "--out", tmp_path / "out",
                     env={**os.environ, "PYTHONPATH": str(tmp_path / "patch")})
    assert result.returncode == 1, result.stdout + result.stderr
    for row in read_report(tmp_path / "out")["targets"]:
        assert row["status"] == "failed" and "the shared program is refused" in row["error"], row
        assert any("does not reproduce the reference" in n for n in row["notes"]), row["notes"]


class _Conn:
    def __init__(self):
        self.sent = []

    def send(self, message):
        self.sent.append(message)


def _worker(i, waiting=False, timing=False):
    return workers.Worker(i, process=None, conn=_Conn(), waiting=waiting, timing=timing)


def test_timing_waits_until_nothing_converts_or_times():
    converting, waiter = _worker(0), _worker(1, waiting=True)
    running = {0: converting, 1: waiter}
    workers._grant(running, deque())
    assert waiter.conn.sent == [], "another row is still converting"
    converting.waiting = True
    workers._grant(running, deque([5]))
    assert waiter.conn.sent == [] and converting.conn.sent == [], "a queued row starts before anyone times"
    workers._grant(running, deque())
    assert converting.conn.sent == [("go", None)] and converting.timing and not converting.waiting
    workers._grant(running, deque())
    assert waiter.conn.sent == [], "one timing at a time"
    converting.timing = False
    del running[0]
    workers._grant(running, deque())
    assert waiter.conn.sent == [("go", None)]


def test_only_programs_big_enough_split_their_tpu_compiles():
    import torch

    import models
    from edgeport.targets.tpu.aot import pieces

    small = torch.export.export(*models.mlp())
    namespace = {"torch": torch, "nn": torch.nn}
    exec(DEEP, namespace)
    big = torch.export.export(*namespace["build"]())
    options = {"tpu_topology": ["v5e:1x1", "v6e:1x1"]}
    assert pieces(options, small) == []
    assert pieces(options, big) == [{"tpu_topology": ["v5e:1x1"]}, {"tpu_topology": ["v6e:1x1"], "compile_only": True}]
    assert pieces({"tpu_topology": ["v5e:1x1"]}, big) == [] and pieces({**options, "artifact_only": True}, big) == []
    # --tpu-batch: piece 0 sweeps every topology (the other pieces only compile theirs)
    assert pieces({**options, "tpu_batch": ["1,8"]}, big)[0]["sweep_topology"] == ["v5e:1x1", "v6e:1x1"]


def test_text_generation_rows_run_in_workers_when_asked(tmp_path, monkeypatch):
    """``-j 2`` on an LLM: its rows run in workers rebuilt from ``exported/`` and the spec (the crash hook fires
    only in a worker: the killed row fails alone), the other row is token-exact with its quality block and
    its --checks answered through the tokenizer the worker read again, and ``validate`` accepts the output."""
    import tiny_lm

    model = tiny_lm.save(tiny_lm.build("llama"), tmp_path / "llama", tokenizer=True)
    checks = tmp_path / "checks.json"
    checks.write_text(json.dumps([{"name": "any", "prompt": "the cat", "regex": ".*", "max_new_tokens": 3}]))
    counter = tmp_path / "attempts"
    monkeypatch.setenv("EDGEPORT_TEST_CRASH", f"onnx/dynamic-int8={counter}")
    out = tmp_path / "out"
    result = run_cli("convert", f"hf:{model}", "-t", "onnx", "-q", "fp32", "-q", "dynamic-int8", *tiny_lm.GEN_ARGS,
                     "--no-latency", "--eval-tokens", "32", "--checks", checks, "-j", "2", "--out", out, timeout=900)
    assert result.returncode == 1 and result.stderr == "", result.stdout + result.stderr
    rows = {r["variant"]: r for r in read_report(out)["targets"]}
    assert counter.read_text() == "1"
    assert rows["dynamic-int8"]["status"] == "failed" and "worker process exited" in rows["dynamic-int8"]["error"]
    fp32 = rows["fp32"]
    assert fp32["status"] == "ok", fp32.get("error")
    total = tiny_lm.PROMPTS * tiny_lm.NEW
    assert fp32["generation"]["tokens_matched"] == fp32["generation"]["tokens_total"] == total
    assert fp32["quality"]["tokens"] > 0 and fp32["quality"]["kld_mean"] < 1e-6, fp32["quality"]
    assert fp32["checks"]["total"] == 1 and fp32["checks"]["passed"] == 1
    assert any(f["path"].startswith("tokenizer/") for f in fp32["files"]) and not (out / ".tasks").exists()
    monkeypatch.delenv("EDGEPORT_TEST_CRASH")
    again = run_cli("validate", out, "--no-latency", "--samples", str(tiny_lm.PROMPTS))
    assert "onnx" in again.stdout and "fp32" in again.stdout, again.stdout + again.stderr
    assert {r["variant"]: r["status"] for r in read_report(out)["targets"]}["fp32"] == "ok"
