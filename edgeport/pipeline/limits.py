"""Per-row limits: a row (target x variant: convert + judge) that runs past its time or memory budget is
stopped and fails alone, naming the step it was in and what it had used; the other rows are judged and
published. Why: one converter stuck on one model (ExecuTorch lowering an unrolled LSTM ran 16 minutes at
7.2 GB, 5,000x the weights) must not cost the rows that passed when the CI job's own timeout kills the run.

How: every forward row runs in a worker process (:mod:`edgeport.pipeline.workers`) whenever a limit
applies, which is by default. A row that runs in the driver process (text generation's rows, which share the
prefill/decode programs and the reference in memory; a program with custom ops) is bounded there
(:func:`bounded`): its build and its judge each get the row's limits, and past one the row is interrupted
with :class:`RowStopped` and fails the same way. The driver samples the worker's process tree (the worker and what it
started, e.g. a TPU compile) every :data:`SAMPLE_SECONDS` and kills the tree past a limit. Memory is the
sum of Pss (``/proc/PID/smaps_rollup``): pages the fork server's children share copy-on-write count once.
An address-space rlimit would not do: jax/XLA and the converters reserve far more virtual memory than they
touch, so it refuses allocations of healthy rows.

Defaults come from the pre-flight estimate (:mod:`edgeport.core.memory`): memory twice the row's own
estimated peak (the target's factor x fp32 weights + the runtime) plus 1 GB, at least 4 GB; time
20 minutes plus 20 per GB of fp32 weights, scaled by the target's ``relative_cost``. ``--row-timeout`` /
``--row-memory`` (or ``[limits]`` in edgeport.toml) override them; ``none`` turns a limit off, and with
both off (and ``-j 1``) rows run one after another in the driver process as before.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from edgeport.errors import UsageError

GB = 1e9
GIB = 1 << 30
MIN_MEMORY = int(4 * GB)
MEMORY_HEADROOM = int(1 * GB)
BASE_SECONDS = 20 * 60.0
SECONDS_PER_GB = 20 * 60.0
SAMPLE_SECONDS = 0.5
OFF = ("none", "off", "0")


@dataclass(frozen=True)
class Requested:
    """What the user asked for: None = the default from the estimate, 0 = no limit, else the value."""

    seconds: float | None = None
    memory: int | None = None
    where: str = "default"          # the flag or config that set them, for the message of a stopped row

    def any_active(self) -> bool:
        return self.seconds != 0 or self.memory != 0


def parse_seconds(text, what: str) -> float:
    """``90``, ``90s``, ``20m``, ``1.5h`` -> seconds; ``none``/``off``/``0`` -> 0 (no limit)."""
    value = str(text).strip().lower()
    if value in OFF:
        return 0.0
    scale = {"s": 1, "m": 60, "h": 3600}.get(value[-1:], None)
    try:
        number = float(value[:-1] if scale else value)
    except ValueError:
        number = -1.0
    if not number > 0 or number == float("inf"):
        raise UsageError(f"{what} {text!r}: expected a duration such as 20m, 90s, 1h or none")
    return number * (scale or 1)


def parse_bytes(text, what: str) -> int:
    """``6G``, ``512M``, a byte count -> bytes; ``none``/``off``/``0`` -> 0 (no limit)."""
    from edgeport.cache import parse_size

    value = str(text).strip().lower()
    return 0 if value in OFF else parse_size(str(text), what)


AUTO = "auto"   # the CLI's value when no flag is given: the config's limit, else the estimate's default


def requested(row_timeout: str | None, row_memory: str | None, config: dict) -> Requested:
    """The flags, else edgeport.toml's ``[limits] row_timeout / row_memory``, else the defaults (``auto``:
    the CLI's default) or none (``None``: a library caller's default, whose rows stay in its own process
    where it may have patched or registered things); bad values are exit 2 before any work."""
    table = config.get("limits", {})
    if not isinstance(table, dict) or set(table) - {"row_timeout", "row_memory"}:
        raise UsageError(f"[limits] in the config takes row_timeout and row_memory, got {table!r}")
    seconds = _pick(row_timeout, table, "row_timeout", lambda v, w: parse_seconds(v, w))
    memory = _pick(row_memory, table, "row_memory", lambda v, w: parse_bytes(v, w))
    given = {row_timeout, row_memory} - {None, AUTO}
    return Requested(seconds, memory, "flag" if given else "config" if table else "default")


def _pick(flag, table: dict, key: str, parse):
    if flag not in (None, AUTO):
        return parse(flag, f"--{key.replace('_', '-')}")
    if key in table:
        return parse(table[key], f"[limits] {key}")
    return None if flag == AUTO else 0


def row_limits(asked: Requested, target, variant: str, weight_bytes: int) -> dict:
    """``{"seconds", "memory", "where"}`` for one row (None: no limit): what was asked, or the default
    from the row's own pre-flight estimate (see the module docstring)."""
    from edgeport.core.memory import BASE_BYTES

    estimate = BASE_BYTES + weight_bytes * target.measured.memory_factor
    memory = asked.memory if asked.memory is not None else max(MIN_MEMORY, int(2 * estimate + MEMORY_HEADROOM))
    seconds = asked.seconds if asked.seconds is not None else \
        (BASE_SECONDS + SECONDS_PER_GB * weight_bytes / GB) * max(1.0, target.relative_cost)
    return {"seconds": round(seconds, 1) or None, "memory": int(memory) or None, "where": asked.where}


# ----------------------------------------------------------------------------------- the driver's watch

def descendants(root: int) -> list[int]:
    """``root`` and every process below it (a worker's converter or compile subprocesses)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def tree_pss(root: int) -> int:
    """Bytes of the process tree under ``root``: the sum of its processes' Pss (0 for any that has gone)."""
    total = 0
    for pid in descendants(root):
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
                    break
        except (OSError, ValueError, IndexError):
            continue
    return total


def kill_tree(root: int) -> None:
    """SIGKILL ``root`` and everything it started (its children first seen, then killed in one pass)."""
    for pid in reversed(descendants(root)):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue


def past_limit(limits: dict, seconds: float, memory: int) -> str | None:
    """``"time"`` or ``"memory"`` when a row is past one of its limits, else None."""
    if limits.get("seconds") and seconds > limits["seconds"]:
        return "time"
    if limits.get("memory") and memory > limits["memory"]:
        return "memory"
    return None


def stopped_message(kind: str, limits: dict, stage: str | None, seconds: float, peak: int) -> str:
    """The row's error: which limit, the step it was in, and what it had used."""
    from edgeport.core.progress import duration

    flag = {"time": "--row-timeout", "memory": "--row-memory"}[kind]
    limit = duration(limits["seconds"]) if kind == "time" else f"{limits['memory'] / GIB:.1f} GiB"
    source = "default from the pre-flight estimate; " if limits.get("where") == "default" else ""
    return (f"stopped: past its {kind} limit of {limit} ({source}{flag} sets it) during "
            f"'{stage or 'start'}', after {duration(seconds)} at {peak / GIB:.2f} GiB peak memory")


# ------------------------------------------------------------------------------ a row in the driver process

class RowStopped(BaseException):
    """A row in this process past one of its limits (:func:`bounded`): the message names the limit, the step
    and what the row had used; ``limit`` is the report's block, as a worker's stopped row carries. A
    BaseException, as KeyboardInterrupt is: a converter's ``except Exception`` must not swallow the stop."""

    def __init__(self, message: str, limit: dict):
        super().__init__(message)
        self.limit = limit


_ACTIVE: dict = {}   # the bounded block in progress: what the watcher found past a limit ("fired")
INTERRUPT = signal.SIGUSR2
REFIRE_SECONDS = 10.0


def _interrupted(_signum, _frame) -> None:
    """The interrupt's handler (installed once, never removed: a signal arriving after its block ended is
    ignored rather than left to the default action, which would end the process)."""
    fired = _ACTIVE.get("fired")
    if fired is not None:
        raise RowStopped(*fired)


@contextlib.contextmanager
def bounded(limits: dict, stage: Callable[[], str | None]):
    """The block (one row's build, or its judge) under ``limits`` in this process. A watcher thread samples
    every :data:`SAMPLE_SECONDS` the time and the memory the block added (Pss of this process and what it
    started, over what they held when it began); past a limit it kills the processes the block started and
    interrupts the main thread with a signal whose handler raises :class:`RowStopped`. What it cannot stop: a
    native call that never returns to Python (the exception lands when it does) or that allocates past the
    machine before the next sample."""
    if not (limits.get("seconds") or limits.get("memory")) or threading.current_thread() is not threading.main_thread():
        yield
        return
    if signal.getsignal(INTERRUPT) is not _interrupted:
        signal.signal(INTERRUPT, _interrupted)
    done = threading.Event()
    _ACTIVE.clear()
    watcher = threading.Thread(target=_watch_block, args=(limits, stage, done), name="edgeport-row-limits", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
        _ACTIVE.clear()


def _watch_block(limits: dict, stage: Callable[[], str | None], done: threading.Event) -> None:
    """:func:`bounded`'s watcher: sample until the block ends or passes a limit; then stop it (again every
    :data:`REFIRE_SECONDS` until it has ended: a bare ``except`` in a library may have eaten one)."""
    me, start, peak = os.getpid(), time.monotonic(), 0
    before, base = set(descendants(me)), tree_pss(me)
    while not done.wait(SAMPLE_SECONDS):
        peak = max(peak, tree_pss(me) - base)
        seconds = time.monotonic() - start
        kind = past_limit(limits, seconds, peak)
        if kind:
            where = stage()
            where = where.split(": ", 1)[-1] if where else None
            limit = {"kind": kind, **{k: limits.get(k) for k in ("seconds", "memory")}, "stage": where,
                     "seconds_used": round(seconds, 1), "peak_memory_bytes": peak}
            _ACTIVE["fired"] = (stopped_message(kind, limits, where, seconds, peak), limit)
            break
    while not done.is_set():
        for pid in reversed(descendants(me)):
            if pid not in before:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        signal.pthread_kill(threading.main_thread().ident, INTERRUPT)
        done.wait(REFIRE_SECONDS)
