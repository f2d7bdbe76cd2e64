"""--out safety: edgeport never deletes what it did not write, refuses what it can check before converting,
and swaps a finished run in atomically (concurrent runs each end with a complete directory)."""

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import REPO, read_report, run_cli, write_model_file
from edgeport.errors import UsageError
from edgeport.pipeline import outdir
from edgeport.pipeline.outdir import MARKER, check_output_dir, clean_stale, publish, staging_dir

MODELS = REPO / "tests" / "models.py"
FAST = ("-t", "onnx", "--no-latency", "--samples", "2")


def _usage_error(result, needle: str):
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("edgeport: error:") and needle in lines[0], result.stderr


def _tree(directory: Path) -> dict:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def _project(tmp_path: Path) -> Path:
    """A user's project directory: a model file and something else worth keeping."""
    project = tmp_path / "project"
    project.mkdir()
    write_model_file(project, "from torch import nn\n\ndef build():\n    return nn.Linear(4, 2).eval(), (torch.randn(1, 4),)\n")
    (project / "notes.txt").write_text("keep me")
    return project


def test_out_dot_force_is_refused_and_nothing_deleted(tmp_path):
    project = _project(tmp_path)
    before = _tree(project)
    result = run_cli("convert", "model.py:build", "--out", ".", "--force", *FAST, cwd=project)
    _usage_error(result, "is the working directory")
    assert _tree(project) == before
    _usage_error(run_cli("convert", "model.py:build", "--out", "..", "--force", *FAST, cwd=project), "one of its parents")


def test_out_holding_the_model_file_is_refused_even_if_ours(tmp_path):
    project = _project(tmp_path)
    (project / MARKER).write_text("edgeport.report/1\n")  # even an edgeport-looking dir: the input is inside
    before = _tree(project)
    result = run_cli("convert", f"{project / 'model.py'}:build", "--out", project, "--force", *FAST)
    _usage_error(result, "holds an input of this run")
    assert _tree(project) == before


def test_force_refuses_a_directory_edgeport_did_not_write(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("mine")
    _usage_error(run_cli("convert", f"{MODELS}:mlp", "--out", out, "--force", *FAST), "was not written by edgeport")
    assert (out / "precious.txt").read_text() == "mine"


def test_force_replaces_our_own_output(tmp_path):
    out = tmp_path / "out"
    assert run_cli("convert", f"{MODELS}:mlp", "--out", out, *FAST).returncode == 0
    assert (out / MARKER).is_file() and oct(out.stat().st_mode & 0o777) != oct(0o700)
    _usage_error(run_cli("convert", f"{MODELS}:mlp", "--out", out, *FAST), "pass --force")
    (out / "stale.txt").write_text("the user's, not edgeport's")  # --force replaces only what edgeport wrote
    _usage_error(run_cli("convert", f"{MODELS}:mlp", "--out", out, "--force", *FAST), "stale.txt")
    (out / "stale.txt").unlink()
    result = run_cli("convert", f"{MODELS}:mlp", "--out", out, "--force", *FAST)
    assert result.returncode == 0, result.stderr
    assert not (out / "stale.txt").exists() and read_report(out)["passed"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging, trash or lock file left


def test_two_concurrent_converts_both_finish_and_leave_a_complete_directory(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    procs = [subprocess.Popen([sys.executable, "-m", "edgeport", "convert", f"{MODELS}:mlp", "--out", str(out), *FAST],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(timeout=600), p.stderr.read()) for p in procs]
    for code, stderr in results:
        assert code == 0 and "Traceback" not in stderr and "internal error" not in stderr, stderr
    report = read_report(out)
    assert report["targets"][0]["status"] == "ok"
    assert (out / report["targets"][0]["artifact"]).is_file() and (out / "exported.pt2").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_concurrent_publishes_never_collide(tmp_path):
    """Eight runs publish into one --out at once: each swap succeeds (no ENOTEMPTY), the result is one
    complete run, and no staging/trash directory is left."""
    out = tmp_path / "out"
    stagings = []
    for i in range(8):
        staging = staging_dir(out)
        (staging / "report.json").write_text(json.dumps({"schema": "edgeport.report/1", "run": i}))
        (staging / "artifact.bin").write_bytes(bytes([i]) * 1000)
        stagings.append(staging)
    errors = []
    barrier = threading.Barrier(len(stagings))

    def run(staging):
        barrier.wait()
        try:
            publish(staging, out)
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(s,)) for s in stagings]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    run_id = json.loads((out / "report.json").read_text())["run"]
    assert (out / "artifact.bin").read_bytes() == bytes([run_id]) * 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert not (out / outdir.PID_FILE).exists()


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_staging_of_a_dead_run_is_cleaned_and_nothing_else(tmp_path):
    import socket

    host = socket.gethostname()
    dirs = {name: tmp_path / name for name in (".out.staging-dead1", ".out.trash-dead2", ".out.staging-live",
                                               ".out.staging-nopid", ".out.staging-otherhost", ".out.mine", ".other.staging-x")}
    for path in dirs.values():
        path.mkdir()
        (path / "file").write_text("x")
    dead = _dead_pid()
    for name in (".out.staging-dead1", ".out.trash-dead2", ".other.staging-x", ".out.mine"):
        (dirs[name] / outdir.PID_FILE).write_text(f"{dead} {host}\n")
    (dirs[".out.staging-live"] / outdir.PID_FILE).write_text(f"{os.getpid()} {host}\n")
    (dirs[".out.staging-otherhost"] / outdir.PID_FILE).write_text(f"{dead} some-other-host\n")
    staging = staging_dir(tmp_path / "out")
    left = sorted(p.name for p in tmp_path.iterdir() if p != staging)
    assert left == sorted(set(dirs) - {".out.staging-dead1", ".out.trash-dead2"})
    assert clean_stale(tmp_path, "out") == []  # our own live staging stays


def test_symlink_out_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (real / "keep.txt").write_text("keep")
    link = tmp_path / "out"
    link.symlink_to(real)
    _usage_error(run_cli("convert", f"{MODELS}:mlp", "--out", link, "--force", *FAST), "is a symlink")
    assert link.is_symlink() and (real / "keep.txt").read_text() == "keep"


def test_missing_junit_directory_is_refused_before_loading_the_model(tmp_path):
    marker = tmp_path / "LOADED"
    model = write_model_file(tmp_path, f"from pathlib import Path\n\ndef build():\n    Path({str(marker)!r}).write_text('x')\n"
                                       "    return nn.Linear(4, 2).eval(), (torch.randn(1, 4),)\n")
    out = tmp_path / "out"
    result = run_cli("convert", f"{model}:build", "--out", out, "--junit", tmp_path / "nope" / "junit.xml", *FAST)
    _usage_error(result, "does not exist")
    assert not marker.exists() and not out.exists()
    _usage_error(run_cli("convert", f"{model}:build", "--out", out, "--junit", "sub/junit.xml", *FAST), "file name inside")
    assert not marker.exists()


@pytest.mark.parametrize("case,needle", [
    ("file", "exists and is not a directory"),
    ("data_inside", "holds an input"),
    ("cwd_parent", "one of its parents"),
])
def test_check_output_dir_cases(tmp_path, monkeypatch, case, needle):
    monkeypatch.chdir(tmp_path)
    out, inputs = tmp_path / "out", []
    if case == "file":
        out.write_text("x")
    elif case == "data_inside":
        (out / "data").mkdir(parents=True)
        (out / MARKER).write_text("edgeport.report/1\n")
        inputs = outdir.input_paths(f"{MODELS}:mlp", str(out / "data"), None)
    else:
        (tmp_path / "deep").mkdir()
        monkeypatch.chdir(tmp_path / "deep")
        out = tmp_path
    with pytest.raises(UsageError, match=needle):
        check_output_dir(out, True, inputs)


def test_input_paths_finds_files_and_packages_without_importing(tmp_path, monkeypatch):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise SystemExit('imported!')\n")
    monkeypatch.chdir(tmp_path)
    found = outdir.input_paths("mypkg.models:build", f"{MODELS}:mlp", "hf:" + str(tmp_path), None, "missing.npz")
    assert [p.resolve() for p in found] == [pkg.resolve(), MODELS.resolve(), tmp_path.resolve()]


def test_read_only_parent_is_refused_before_any_work(tmp_path, monkeypatch):
    """Root ignores permission bits, so the access check is made to see a read-only parent: the refusal
    must come from check_output_dir in plan(), before the model is loaded."""
    from edgeport import api, sources

    parent = tmp_path / "ro"
    parent.mkdir()
    real_access = os.access
    monkeypatch.setattr(outdir.os, "access", lambda p, mode: False if Path(p) == parent.resolve() else real_access(p, mode))

    def no_load(*_args, **_kwargs):
        raise AssertionError("the model was loaded before the output directory was checked")

    monkeypatch.setattr(sources, "load_model", no_load)
    opts = api.convert_options(model=f"{MODELS}:mlp", out=parent / "sub" / "out", targets=["onnx"], latency=False, samples=2)
    with pytest.raises(UsageError, match=r"is not a writable directory"):
        api.convert(opts)
    assert list(parent.iterdir()) == []


def test_a_terminated_run_removes_its_staging_directory(tmp_path):
    """SIGTERM (a cancelled CI job) mid-run: exit 143 and no staging directory left beside --out (a 1B model's
    staging is gigabytes); nothing else in the parent touched."""
    import signal
    import time

    project = _project(tmp_path)
    model = write_model_file(project, "import time\n\ndef build():\n    time.sleep(60)\n    return nn.Linear(4, 2).eval(), (torch.randn(1, 4),)\n",
                             name="slow.py")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "edgeport", "convert", f"{model}:build", "--out", str(tmp_path / "out"), *FAST],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not list(tmp_path.glob(".out.staging-*")) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert list(tmp_path.glob(".out.staging-*")), "the run never made its staging directory"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 143
    assert sorted(p.name for p in tmp_path.iterdir()) == ["project"]
