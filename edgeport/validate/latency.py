"""Latency: warm up, then time single calls until a count or time budget is spent; report p50/p90.

Percentiles of single calls (not a mean of a loop) because the shared 2-core machines are noisy and the
median is what survives noise; p90 shows the tail a user will feel.
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable

# A call slower than this is timed fewer times: its p50 over 3 runs moves by far less than the call lasts, and
# 13 calls of a 15 s prefill (a 1B-class model's, on 2 cores) spent 3 minutes of a row's judge proving nothing more.
SLOW_CALL_SECONDS = 1.0
SLOW_CALL_RUNS = 3

# Set in a worker process that shares the machine with other workers of the same run
# (edgeport.pipeline.workers): timing waits until it holds the machine alone. None: time right away.
_GATE = None


def set_gate(gate) -> None:
    """``gate.acquire()`` / ``gate.release()`` around every timing loop of this process."""
    global _GATE
    _GATE = gate


@contextlib.contextmanager
def quiet_machine():
    if _GATE is None:
        yield
        return
    _GATE.acquire()
    try:
        yield
    finally:
        _GATE.release()


def measure(call: Callable[[], object], threads: int, warmup: int = 3, min_runs: int = 10,
            max_runs: int = 200, budget_seconds: float = 2.0) -> dict:
    with quiet_machine():
        return _measure(call, threads, warmup, min_runs, max_runs, budget_seconds)


def warm_up(call: Callable[[], object], warmup: int, min_runs: int) -> int:
    """Run the warm-up calls; the number of timed runs to insist on: ``min_runs``, or :data:`SLOW_CALL_RUNS`
    (after a single warm-up) when one call takes longer than :data:`SLOW_CALL_SECONDS`."""
    if warmup < 1:
        return min_runs
    start = time.perf_counter()
    call()
    if time.perf_counter() - start > SLOW_CALL_SECONDS:
        return min(min_runs, SLOW_CALL_RUNS)
    for _ in range(warmup - 1):
        call()
    return min_runs


def _measure(call: Callable[[], object], threads: int, warmup: int, min_runs: int, max_runs: int,
             budget_seconds: float) -> dict:
    min_runs = warm_up(call, warmup, min_runs)
    times = []
    deadline = time.perf_counter() + budget_seconds
    while len(times) < max_runs and (len(times) < min_runs or time.perf_counter() < deadline):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    pick = lambda q: times[min(len(times) - 1, int(q * len(times)))]  # noqa: E731
    return {"p50": max(pick(0.5), 1e-6), "p90": max(pick(0.9), 1e-6), "runs": len(times), "threads": threads}
