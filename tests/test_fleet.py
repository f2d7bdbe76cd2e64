"""edgeport fleet on a real local Ray instance (one Ray start for the module): a failing model is reported
and the others convert, a task whose worker dies is retried, each model gets the usual directory and the
fleet its fleet.json/md/html. Bad fleet files and unreachable clusters are exit 2, before Ray starts (or
within a bounded time)."""

import hashlib
import json
import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

from conftest import REPO, read_manifest, read_report, run_cli

FLEET = """
[defaults]
targets = ["litert", "onnx"]
samples = 2
latency = false

[[model]]
name = "mlp"
spec = "models.py:mlp"

[[model]]
name = "cnn"
spec = "sub/cnn.py:build"
targets = ["onnx"]
quantize = ["dynamic-int8"]
fallback = "float"
fallback_max = 2

[[model]]
name = "broken"
spec = "broken.py:build"

[[model]]
name = "noload"
spec = "broken.py:no_weights"
targets = ["onnx"]
"""

BROKEN = """import torch
class M(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x
def build():
    return M(), (torch.randn(2, 3),)
def no_weights():
    raise FileNotFoundError("weights.bin")
"""

CNN = """import torch
from torch import nn
def build():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten()), (torch.randn(1, 3, 8, 8),)
"""


def _fleet_dir(root):
    root.mkdir(parents=True, exist_ok=True)
    (root / "fleet.toml").write_text(FLEET)
    (root / "models.py").write_text((REPO / "tests" / "models.py").read_text())
    (root / "broken.py").write_text(BROKEN)
    (root / "sub").mkdir(exist_ok=True)
    (root / "sub" / "cnn.py").write_text(CNN)
    return root


@pytest.fixture(scope="module")
def fleet_run(tmp_path_factory):
    root = _fleet_dir(tmp_path_factory.mktemp("fleet"))
    counter = root / "onnx-attempts"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EDGEPORT_TEST_CRASH", f"mlp/onnx/fp32={counter}")   # its first worker dies
        start = time.perf_counter()
        result = run_cli("fleet", "fleet.toml", "--out", root / "out", cwd=root, timeout=900)
    return root, result, counter, time.perf_counter() - start


@pytest.mark.slow
def test_failing_model_is_reported_and_the_rest_convert(fleet_run):
    root, result, _counter, _seconds = fleet_run
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr == "", result.stderr
    fleet = json.loads((root / "out" / "fleet.json").read_text())
    assert fleet["schema"] == "edgeport.fleet/1" and fleet["passed"] is False
    models = {m["name"]: m for m in fleet["models"]}
    assert list(models) == ["mlp", "cnn", "broken", "noload"]
    assert models["mlp"]["passed"] and models["cnn"]["passed"] and not models["broken"]["passed"]
    assert not models["noload"]["passed"] and models["noload"]["rows"][0]["status"] == "failed"
    assert models["noload"]["error"].startswith("load failed: calling no_weights() from") and "weights.bin" in models["noload"]["error"]
    assert [(r["target"], r["variant"], r["status"]) for r in models["mlp"]["rows"]] == [
        ("litert", "fp32", "ok"), ("onnx", "fp32", "ok")]
    assert [(r["target"], r["variant"], r["status"]) for r in models["cnn"]["rows"]] == \
        [("onnx", "fp32", "ok"), ("onnx", "dynamic-int8", "ok")]
    int8 = read_report(root / "out" / "cnn")["targets"][1]   # fallback = "float" reached the row's worker
    assert int8["quantization"]["float_layers"] == [] and int8["quantization"]["search"][0]["passed"]
    assert {r["status"] for r in models["broken"]["rows"]} == {"failed"}
    assert "torch.export failed" in models["broken"]["error"] and "broken.py:4" in models["broken"]["error"]
    for name, model in models.items():
        report = read_report(root / "out" / name)
        assert model["report"] == f"{name}/report.json" and report["passed"] == model["passed"]
    assert (root / "out" / "mlp" / "exported.pt2").is_file()
    assert (root / "out" / "mlp" / "onnx" / "parity_sample" / "index.json").is_file()
    assert sorted(p.name for p in (root / "out").iterdir() if p.name.startswith(".")) == [".edgeport"]
    assert (root / "out" / "ray-logs").is_dir()


@pytest.mark.slow
def test_force_replaces_the_models_of_an_earlier_fleet(tmp_path):
    """--force on an earlier fleet's OUT: a model directory this fleet does not have goes (fleet.json and the
    directories agree, as `convert --force` replaces its --out); what edgeport did not write stays."""
    from edgeport.pipeline.marker import write_marker

    (tmp_path / "models.py").write_text((REPO / "tests" / "models.py").read_text())
    (tmp_path / "fleet.toml").write_text('[[model]]\nname = "mlp"\nspec = "models.py:mlp"\ntargets = ["onnx"]\n'
                                         'samples = 2\nlatency = false\n')
    out = tmp_path / "out"
    for directory in (out / "mlp", out / "gone", out):   # an earlier fleet of the models mlp and gone
        directory.mkdir(parents=True, exist_ok=True)
        write_marker(directory)
    (out / "mine").mkdir()
    (out / "mine" / "notes.txt").write_text("the user's own")
    refused = run_cli("fleet", "fleet.toml", "--out", out, "--force", cwd=tmp_path, timeout=900)
    assert refused.returncode == 2 and "mine" in refused.stderr, refused.stdout + refused.stderr
    assert (out / "mine" / "notes.txt").read_text() == "the user's own"  # not edgeport's: --force is refused
    shutil.rmtree(out / "mine")
    result = run_cli("fleet", "fleet.toml", "--out", out, "--force", cwd=tmp_path, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [m["name"] for m in json.loads((out / "fleet.json").read_text())["models"]] == ["mlp"]
    assert read_report(out / "mlp")["passed"] and not (out / "gone").exists()


@pytest.mark.slow
def test_a_task_whose_worker_died_is_retried(fleet_run):
    root, result, counter, _seconds = fleet_run
    assert counter.read_text() == "2", "killed on the first attempt, done on the second"
    row = next(r for r in read_report(root / "out" / "mlp")["targets"] if r["target"] == "onnx")
    assert row["status"] == "ok" and any("ran 2 times" in n for n in row["notes"])


@pytest.mark.slow
def test_fleet_reports_link_each_model_and_progress_is_logged(fleet_run):
    root, result, _counter, _seconds = fleet_run
    md, html = (root / "out" / "fleet.md").read_text(), (root / "out" / "fleet.html").read_text()
    assert "[report](mlp/report.md)" in md and "| broken | NO | fp32 failed | fp32 failed |" in md
    assert "href='cnn/report.html'" in html and "FAILED" in html
    for line in ("edgeport fleet: mlp/export running", "edgeport fleet: mlp/onnx/fp32 done",
                 "edgeport fleet: broken/export failed"):
        assert line in result.stdout, result.stdout
    assert "FAILED — report:" in result.stdout and "broken: torch.export failed" in result.stdout


BAD = {
    "syntax": ("[[model]\nname = 'x'\n", "not valid TOML"),
    "unknown_table": ("[default]\n[[model]]\nname = 'a'\nspec = 'm.py:f'\n", "unknown table or key 'default'"),
    "unknown_key": ("[[model]]\nname = 'a'\nspec = 'm.py:f'\ntarget = ['onnx']\n", "[[model]] #1 ('a'): unknown key 'target'"),
    "unknown_target": ("[[model]]\nname = 'a'\nspec = 'm.py:f'\ntargets = ['nope']\n", "('a'): unknown target 'nope'"),
    "unknown_variant": ("[defaults]\ntargets = ['onnx']\nquantize = ['int3']\n[[model]]\nname = 'a'\nspec = 'm.py:f'\n",
                        "--quantize 'int3' is not offered"),
    "duplicate": ("[[model]]\nname = 'a'\nspec = 'm.py:f'\n[[model]]\nname = 'a'\nspec = 'm.py:f'\n",
                  "[[model]] #2 ('a'): duplicate model name 'a'"),
    "no_spec": ("[[model]]\nname = 'a'\n", "('a'): spec must be"),
    "bad_type": ("[[model]]\nname = 'a'\nspec = 'm.py:f'\nsamples = 'two'\n", "samples must be int"),
    "bad_ray": ("[ray]\ncpus = 2\n[[model]]\nname = 'a'\nspec = 'm.py:f'\n", "[ray]: unknown key 'cpus'"),
    "bad_fallback": ("[[model]]\nname = 'a'\nspec = 'm.py:f'\ntargets = ['onnx']\nfallback = 'float'\n",
                     "--fallback float needs a quantized variant"),
    "bad_fallback_max": ("[defaults]\nfallback_max = true\n[[model]]\nname = 'a'\nspec = 'm.py:f'\n",
                         "fallback_max must be a layer count"),
    "no_models": ("[defaults]\nsamples = 2\n", "needs at least one [[model]]"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_fleet_file_is_exit_2_naming_the_entry(tmp_path, case):
    text, needle = BAD[case]
    (tmp_path / "m.py").write_text("import torch\ndef f():\n    return torch.nn.Linear(2, 2), (torch.randn(1, 2),)\n")
    (tmp_path / "fleet.toml").write_text(text)
    result = run_cli("fleet", tmp_path / "fleet.toml", "--out", tmp_path / "out")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and needle in result.stderr, result.stderr
    assert result.stderr.startswith("edgeport: error: fleet.toml") and not (tmp_path / "out").exists()


def test_a_model_opts_out_of_a_default_fallback(tmp_path):
    """[defaults] fallback = "float" for the quantized models; a model with nothing to quantize cannot take
    it (exit 2 naming it) and says fallback = false, which drops the default fallback_max with it."""
    (tmp_path / "m.py").write_text("import torch\ndef f():\n    return torch.nn.Linear(2, 2), (torch.randn(1, 2),)\n")
    fleet = ("[defaults]\ntargets = ['onnx']\nquantize = ['dynamic-int8']\nfallback = 'float'\nfallback_max = 2\n"
             "[[model]]\nname = 'q'\nspec = 'm.py:f'\n[[model]]\nname = 'plain'\nspec = 'm.py:f'\nquantize = []\n")
    (tmp_path / "fleet.toml").write_text(fleet)
    result = run_cli("fleet", tmp_path / "fleet.toml", "--out", tmp_path / "out")
    assert result.returncode == 2 and "('plain'): --fallback float needs a quantized variant" in result.stderr
    (tmp_path / "fleet.toml").write_text(fleet + "fallback = false\n")
    result = run_cli("fleet", tmp_path / "fleet.toml", "--out", tmp_path / "out", "--ray-address", "bogus")
    assert result.returncode == 2 and "is not HOST:PORT" in result.stderr, result.stderr   # past every plan
    from edgeport.fleet.spec import read_fleet

    models = {m.name: m.opts for m in read_fleet(tmp_path / "fleet.toml", tmp_path / "out").models}
    assert (models["q"].fallback, models["q"].fallback_max) == ("float", "2")
    assert (models["plain"].fallback, models["plain"].fallback_max) == (None, None)


def test_causal_lm_in_a_fleet_is_planned_for_text_generation(tmp_path):
    """A causal LM in a fleet is planned as `edgeport convert` plans it (text generation by default, its
    keys checked: a bad prefill_lens is exit 2 naming the entry); task = "forward" plans the forward task."""
    import tiny_lm

    from edgeport.fleet.spec import read_fleet

    tiny_lm.save(tiny_lm.build("llama"), tmp_path / "llama")
    entry = "[[model]]\nname = 'lm'\nspec = 'hf:./llama'\ntargets = ['onnx']\n"
    (tmp_path / "fleet.toml").write_text(entry + "prefill_lens = ['8']\n")
    result = run_cli("fleet", tmp_path / "fleet.toml", "--out", tmp_path / "out")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stdout + result.stderr
    assert "('lm'): prefill_lens must be a list of integers" in result.stderr, result.stderr
    (tmp_path / "fleet.toml").write_text(entry + "prefill_lens = [8]\ncache_len = 32\ngen_tokens = 4\n")
    [lm] = read_fleet(tmp_path / "fleet.toml", tmp_path / "out").models
    assert lm.plan.task.generative and not lm.plan.task.jobs.by_default and lm.plan.generation.cache_len == 32
    (tmp_path / "fleet.toml").write_text(entry + "task = 'forward'\nseq_len = 8\n")
    [lm] = read_fleet(tmp_path / "fleet.toml", tmp_path / "out").models
    assert not lm.plan.task.generative and lm.plan.task.jobs.by_default


LLM_FLEET = """
[defaults]
targets = ["onnx"]
samples = 2
latency = false

[[model]]
name = "lm"
spec = "hf:./llama"
prefill_lens = [8]
cache_len = 32
gen_tokens = 4
eval_tokens = 24

[[model]]
name = "mlp"
spec = "models.py:mlp"
"""


@pytest.mark.slow
def test_a_fleet_converts_an_llm_for_text_generation_beside_a_forward_model(tmp_path):
    """Text generation in a fleet: the LM is one Ray task converting it whole (its rows share the programs
    and the reference), published with the usual generation report and manifest beside a forward model."""
    import tiny_lm

    tiny_lm.save(tiny_lm.build("llama"), tmp_path / "llama")
    (tmp_path / "models.py").write_text((REPO / "tests" / "models.py").read_text())
    (tmp_path / "fleet.toml").write_text(LLM_FLEET)
    result = run_cli("fleet", "fleet.toml", "--out", tmp_path / "out", cwd=tmp_path, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    fleet = json.loads((tmp_path / "out" / "fleet.json").read_text())
    assert fleet["passed"] and [m["name"] for m in fleet["models"]] == ["lm", "mlp"]
    lm = read_report(tmp_path / "out" / "lm")
    assert lm["generation"]["task"] == "text-generation" and lm["generation"]["prompts"] == 2
    [row] = lm["targets"]
    assert (row["target"], row["status"]) == ("onnx", "ok") and row["generation"]["token_agreement"] == 1.0
    assert read_manifest(tmp_path / "out" / "lm")["generation"]["cache_len"] == 32
    assert read_report(tmp_path / "out" / "mlp")["passed"]
    assert sorted(p.name for p in (tmp_path / "out" / "lm").iterdir() if p.name.startswith(".")) == [".edgeport"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("address,needle", [("bogus", "is not HOST:PORT"), (None, "cannot reach Ray at")])
def test_bad_or_refused_ray_address_is_exit_2_at_once(tmp_path, address, needle):
    _fleet_dir(tmp_path)
    address = address or f"127.0.0.1:{_closed_port()}"
    start = time.perf_counter()
    result = run_cli("fleet", tmp_path / "fleet.toml", "--out", tmp_path / "out", "--ray-address", address)
    assert result.returncode == 2 and needle in result.stderr, result.stdout + result.stderr
    assert time.perf_counter() - start < 30 and not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_silent_ray_address_is_exit_2_within_a_bounded_time(tmp_path, scheme):
    """A port that accepts and never answers (like a firewall proxy or another service)."""
    _fleet_dir(tmp_path)
    listener = socket.socket()
    listener.bind(("127.0.0.2", 0))
    listener.listen(16)
    held, stop = [], threading.Event()

    def accept():
        listener.settimeout(0.5)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        start = time.perf_counter()
        address = f"{scheme}127.0.0.2:{listener.getsockname()[1]}"
        result = run_cli("fleet", tmp_path / "fleet.toml", "--out", tmp_path / "out", "--ray-address", address)
        seconds = time.perf_counter() - start
    finally:
        stop.set()
        thread.join()
        listener.close()
    assert result.returncode == 2, result.stdout + result.stderr
    assert "no Ray cluster answered at" in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert seconds < 30 and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_fleet_on_a_running_cluster_ships_files_through_ray(tmp_path):
    """--ray-address: nothing shared but Ray itself: the export travels as an object, rows send their
    files back, edgeport's code travels with the job."""
    import os
    import secrets
    import shutil
    import subprocess
    import sys
    import tempfile

    root = _fleet_dir(tmp_path / "fleet")
    (root / "fleet.toml").write_text(FLEET.split("[[model]]\nname = \"cnn\"")[0])   # mlp only
    port, session = _closed_port(), tempfile.mkdtemp(prefix="ep-ray-")
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16), "RAY_USAGE_STATS_ENABLED": "0",
           "EDGEPORT_CACHE": str(tmp_path / "node-cache"), "TMPDIR": str(tmp_path)}
    env.pop("EDGEPORT_TEST_CRASH", None)
    head = subprocess.Popen([sys.executable, "-c", "import sys; from ray.scripts.scripts import main; main()", "start",
                             "--head", "--block", "--port", str(port), "--temp-dir", session, "--num-cpus", "2",
                             "--include-dashboard", "false", "--object-store-memory", str(300 * 2**20)],
                            env={k: v for k, v in env.items() if k != "PYTHONPATH"} | {"PYTHONPATH": _ray_path()},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        result = _when_up(lambda: run_cli("fleet", "fleet.toml", "--out", root / "out", "--ray-address",
                                          f"127.0.0.1:{port}", cwd=root, env=env))
    finally:
        head.terminate()
        head.wait(60)
        shutil.rmtree(session, ignore_errors=True)
    assert result.returncode == 0, result.stdout + result.stderr
    fleet = json.loads((root / "out" / "fleet.json").read_text())
    assert fleet["passed"] and fleet["ray"]["address"] == f"127.0.0.1:{port}"
    report = read_report(root / "out" / "mlp")
    for row in report["targets"]:
        assert (root / "out" / "mlp" / row["artifact"]).is_file() and row["status"] == "ok"
    for artifact in read_manifest(root / "out" / "mlp")["artifacts"]:   # every file came back from its node
        for item in artifact["files"]:
            data = (root / "out" / "mlp" / item["path"]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == item["sha256"], item["path"]
    assert (root / "out" / "mlp" / "exported.pt2").is_file() and not (root / "out" / "ray-logs").exists()
    assert any((tmp_path / "node-cache").rglob("meta.json")), "the node's own cache was used"


def _ray_path() -> str:
    """Where Ray is importable from in this test run (installed, or on PYTHONPATH)."""
    import os

    import ray

    return os.pathsep.join(p for p in [str(REPO), os.environ.get("PYTHONPATH", ""), str(ray.__path__[0]).rsplit("/ray", 1)[0]] if p)


def _when_up(call, attempts: int = 20):
    """Run ``call`` once the head answers (it takes seconds to start); the last result otherwise."""
    for _ in range(attempts):
        result = call()
        if result.returncode != 2 or "cannot reach Ray" not in result.stderr:
            return result
        time.sleep(2)
    return result


def test_progress_view_live_on_a_terminal_lines_in_a_log():
    import io

    from rich.console import Console

    from edgeport.fleet.view import View

    view = View()
    screen = io.StringIO()
    view.console = Console(file=screen, force_terminal=True, width=100)
    states = {"a/export": "done", "a/onnx/fp32": "running", "b/export": "queued", "c/export": "failed"}
    with view:
        view.update(states)
    text = screen.getvalue()
    assert "1 queued · 1 running · 1 done · 1 failed" in text and "a/onnx/fp32" in text and "a/export" not in text
    log = View()
    log.lines = Console(file=io.StringIO(), width=100)
    with log:
        log.update(states)
        log.update({**states, "a/onnx/fp32": "done"})
    lines = log.lines.file.getvalue().splitlines()
    assert lines == ["edgeport fleet: a/export done", "edgeport fleet: a/onnx/fp32 running", "edgeport fleet: b/export queued",
                     "edgeport fleet: c/export failed", "edgeport fleet: a/onnx/fp32 done"]


def test_fleet_with_a_150_character_out_keeps_ray_sockets_short(tmp_path):
    """Issue 33 item 5 (hostile class ``fleet-paths``): Ray's session folder (its unix sockets) is a private
    short-named folder under the runtime dir, whatever ``--out`` (150 characters here) and TMPDIR (a CI
    runner's deep one) are, removed at the end; its logs land in OUT/ray-logs."""
    import tempfile

    runtime = tempfile.mkdtemp(prefix="t", dir="/tmp")   # XDG_RUNTIME_DIR: what the run leaves there is seen
    deep_tmp = tmp_path / ("t" * 40)
    deep_tmp.mkdir()
    out = tmp_path / "w"
    out = out / ("d" * (150 - len(str(out)) - 1))
    assert len(str(out)) == 150
    (tmp_path / "fleet.toml").write_text(f'[[model]]\nname = "mlp"\nspec = "{REPO / "tests" / "models.py"}:mlp"\n'
                                         'targets = ["onnx"]\nsamples = 1\nlatency = false\nlocalize = false\n')
    env = {**os.environ, "TMPDIR": str(deep_tmp), "XDG_RUNTIME_DIR": runtime}
    try:
        result = run_cli("fleet", "fleet.toml", "--out", out, cwd=tmp_path, env=env, fresh=True, timeout=900)
        assert result.returncode == 0, result.stdout + result.stderr
        assert json.loads((out / "fleet.json").read_text())["passed"] and (out / "ray-logs").is_dir()
        assert os.listdir(runtime) == [] and not [p for p in os.listdir(out) if "ray-" in p and p != "ray-logs"]
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def test_ray_session_folder_is_private_short_and_outside_out(tmp_path, monkeypatch):
    from edgeport.fleet.cluster import SOCKET_PATH_MAX, SOCKET_PATH_ROOM, local_base

    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("RAY_AUTH_MODE", "token")   # what local_base sets, undone after the test
    monkeypatch.setenv("RAY_AUTH_TOKEN", "0" * 64)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / ("x" * 120)))  # a temp dir too deep: /tmp instead
    (tmp_path / ("x" * 120)).mkdir()
    base = local_base(tmp_path / ("o" * 150))
    try:
        assert base.parent == Path("/tmp") and len(str(base)) + SOCKET_PATH_ROOM <= SOCKET_PATH_MAX
        assert (base.stat().st_mode & 0o777) == 0o700
    finally:
        base.rmdir()
