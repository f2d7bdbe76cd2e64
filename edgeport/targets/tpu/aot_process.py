"""The parent's side of :mod:`edgeport.targets.tpu.aot_child`: start the child for a list of compiles of one
program, watch its progress, and turn a child that died or hung into a failed entry for the compile it was
on, then go on with the rest in a new child.

Why one child for several topologies, not one each: a child pays a Python start, the jax import and
libtpu's load before its first compile (about 3 s on an idle 2-core host; a compile after that takes
~0.5 s for a small program), so a row's default three topologies cost one start, not three. The isolation
is the same: the child writes each compile's row as it finishes, so when it dies the first compile
without a row is the one that killed it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from edgeport.core.scratch import scratch
from edgeport.core.proc import child_env

# A compile making no progress for this long is killed (a MobileNetV2 compile takes ~1 min per topology
# on 2 cores).
COMPILE_TIMEOUT_S = 1800.0
POLL_S = 0.05
# Set by a caller running compiles in threads (the --tpu-batch sweep) when its own thread is cancelled: each
# watcher kills its child and stops (a signal reaches only the main thread, not the watchers).
CANCEL = threading.Event()


def run_compiles(requests: list[dict], serialized: bytes, common: dict, timeout: float = COMPILE_TIMEOUT_S) -> list[dict]:
    """One result per request (in order): the child's compile row, or ``{"ok": False, "error", "process"}``
    for the compile a child died or hung on (``process`` says how; such an entry is never cached)."""
    results: list = [None] * len(requests)
    with scratch("edgeport-aot-") as tmp:  # the run's scratch (edgeport.core.scratch)
        export = tmp / "program.jax_export"
        export.write_bytes(serialized)
        pending = list(range(len(requests)))
        while pending:
            paths = {i: tmp / f"row{i}.json" for i in pending}
            items = [{**requests[i], "result": str(paths[i])} for i in pending]
            failure = _run_child(tmp, {**common, "export": str(export), "items": items}, list(paths.values()), timeout)
            for i in pending:
                if paths[i].is_file():
                    results[i] = json.loads(paths[i].read_text())
            pending = [i for i in pending if results[i] is None]
            if pending:  # the child stopped before this one's row: it is the compile that killed it
                results[pending.pop(0)] = failure or {"ok": False, "error": "libtpu compile process wrote no result",
                                                      "process": "no result"}
    return results


def _run_child(tmp: Path, request: dict, rows: list[Path], timeout: float) -> dict | None:
    """Run the child until it exits, or kill it when no new row appeared for ``timeout`` seconds. None
    when it exited cleanly; else the failure of the compile it was on."""
    spec, log = tmp / "request.json", tmp / "child.log"
    spec.write_text(json.dumps(request))
    with open(log, "w") as stderr:
        child = subprocess.Popen([sys.executable, "-m", "edgeport.targets.tpu.aot_child", str(spec)],
                                 stdout=subprocess.DEVNULL, stderr=stderr, cwd=tmp, env=child_env())
        try:
            if _wait(child, rows, timeout):
                return {"ok": False, "error": f"libtpu compile timed out after {timeout:g} s (killed)",
                        "process": "timed out"}
        except BaseException:  # cancelled (SIGTERM, Ctrl-C): the compile must not outlive the run
            child.kill()
            child.wait()
            raise
    if child.returncode == 0:
        return None
    unfinished = [Path(f"{p}.log") for p in rows if not p.is_file()]
    text = "".join(p.read_text(errors="replace") for p in [log, *unfinished] if p.is_file())
    sys.stderr.write(text[-4000:])  # the run's log keeps libtpu's last words
    return {"ok": False, "error": _death(child.returncode, text), "process": f"exit {child.returncode}"}


def _wait(child, rows: list[Path], timeout: float) -> bool:
    """Until ``child`` exits (False), or no new row appeared for ``timeout`` seconds (killed: True)."""
    done, deadline = 0, time.monotonic() + timeout
    while child.poll() is None:
        time.sleep(POLL_S)
        if CANCEL.is_set():
            raise RuntimeError("compile cancelled")
        finished = sum(1 for p in rows if p.is_file())
        if finished > done:
            done, deadline = finished, time.monotonic() + timeout
        if time.monotonic() > deadline:
            child.kill()
            child.wait()
            return True
    return False


def _death(returncode: int, stderr: str) -> str:
    """The signal (or exit code) and libtpu's own reason: the last fatal (``F...``/``Check failed``) line."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    fatal = [ln for ln in lines if (ln.startswith("F") and ".cc:" in ln) or "Check failed" in ln]
    how = f"killed by {signal.Signals(-returncode).name}" if returncode < 0 else f"exited with code {returncode}"
    reason = (fatal or lines or [""])[-1]
    return (f"libtpu compile process {how}" + (f": {reason}" if reason else ""))[:500]
