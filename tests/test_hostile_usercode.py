"""Issue 33 LOW (hostile class ``user-code``): edgeport's exit code is 0 only when this process published a
passing report; a model's build() cannot end the run (``os._exit(0)``), duplicate it (``fork``: the copy
never publishes) or keep it from exiting (a non-daemon thread)."""

import time

import pytest

from conftest import run_cli

FAST = ("-t", "onnx", "--samples", "1", "--no-latency", "--no-localize")
HEADER = "import os, threading, time, ctypes, torch\n"
MODEL = "    return torch.nn.Linear(4, 4).eval(), (torch.randn(1, 4),)\n"


def _model(tmp_path, body: str):
    (tmp_path / "m.py").write_text(HEADER + "def build():\n" + body + MODEL)
    return f"{tmp_path / 'm.py'}:build"


@pytest.mark.parametrize("body,needle", [("    os._exit(0)\n", "os._exit(0)"),
                                         ("    __import__('posix')._exit(0)\n", "os._exit(0)"),
                                         ("    if os.fork() == 0:\n        pass\n", "os.fork()")])
def test_usercode_exit_or_fork_in_build_is_exit_2_not_a_pass(tmp_path, body, needle):
    result = run_cli("convert", _model(tmp_path, body), "--out", tmp_path / "out", *FAST)
    assert result.returncode == 2, result.stdout + result.stderr
    assert needle in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_usercode_fork_behind_pythons_back_publishes_once(tmp_path):
    """A libc fork() is out of Python's reach: its child returns into edgeport and is stopped as soon as
    build() returns, before it touches the run's staging folder or row workers (the parent waits for it,
    then publishes the one report)."""
    # A raw fork in a threaded interpreter can deadlock its child inside CPython before it runs any code
    # (the GIL's own mutex copied while another thread held it: Python's os.fork repairs that, libc's does
    # not) and the parent then waits forever: the user's deadlock, not what this tests. So the user code
    # keeps the GIL across the call (PyDLL), makes other threads' GIL requests rare (a long switch interval),
    # waits for its child at most 60 s (then kills it and leaves a mark), and a run whose child deadlocked
    # that way is tried again.
    stuck = tmp_path / "child-stuck"
    body = ("    import sys\n    interval = sys.getswitchinterval()\n    sys.setswitchinterval(1000)\n"
            "    pid = ctypes.PyDLL(None).fork()\n"
            "    if pid > 0:\n        sys.setswitchinterval(interval)\n"
            "        for _ in range(600):\n"
            "            if os.waitpid(pid, os.WNOHANG)[0]:\n                break\n"
            "            time.sleep(0.1)\n"
            f"        else:\n            os.kill(pid, 9)\n            os.waitpid(pid, 0)\n            open({str(stuck)!r}, 'w').close()\n")
    for _attempt in range(3):
        stuck.unlink(missing_ok=True)
        result = run_cli("convert", _model(tmp_path, body), "--out", tmp_path / "out", *FAST, "--force")
        if not stuck.exists():
            break
    assert not stuck.exists(), "the forked child deadlocked inside CPython three times"
    assert result.returncode == 0, result.stdout + result.stderr
    assert "forked copy of the run" in result.stderr and (tmp_path / "out" / "report.json").is_file()
    assert result.stdout.count("PASSED") == 1, result.stdout


def test_usercode_non_daemon_thread_does_not_keep_edgeport_running(tmp_path):
    body = "    threading.Thread(target=time.sleep, args=(900,)).start()\n"
    start = time.monotonic()
    # a real interpreter: the interpreter's own exit is what waits for non-daemon threads
    result = run_cli("convert", _model(tmp_path, body), "--out", tmp_path / "out", *FAST, timeout=150, fresh=True)
    assert result.returncode == 0 and time.monotonic() - start < 140, result.stdout + result.stderr
    assert (tmp_path / "out" / "report.json").is_file()


def test_an_exit_handler_from_user_code_cannot_turn_a_failed_run_into_a_pass(tmp_path):
    """``atexit.register(posix._exit, 0)`` in build(): the handlers run when edgeport exits, after the
    verdict; the handler's _exit is refused there too (one line, no traceback), so a run that ends in an
    error after build() (here a budget naming an output the model lacks: exit 2 whatever the machine's
    arithmetic) keeps its exit code. It was 0."""
    body = "    import atexit, posix\n    atexit.register(posix._exit, 0)\n"
    result = run_cli("convert", _model(tmp_path, body), "--out", tmp_path / "out", *FAST,
                     "--budget", "onnx.fp32.topk_outputs=nope")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "topk_outputs names 'nope'" in result.stderr and "Traceback" not in result.stderr
    assert "ignored at exit: UserCodeEscape" in result.stderr, result.stderr
