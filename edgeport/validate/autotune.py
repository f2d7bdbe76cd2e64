"""``--threads auto``: time every way a target can run its artifact (runner x thread count) briefly on one
sample and keep the fastest.

A short sweep, not a full measurement: each candidate gets a few warm-up calls and a small time budget,
enough to rank runners whose speeds differ by more than the noise of a shared 2-core machine. The winner
is then measured like any fixed --threads runner, so the report's latency is never a sweep number.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path

from edgeport.diagnostics import first_line
from edgeport.validate.latency import measure

SWEEP_SECONDS = 0.3


def max_threads() -> int:
    return max(1, os.cpu_count() or 1)


def pick_runner(target, artifact: Path, sample: list, seconds: float = SWEEP_SECONDS):
    """(the fastest loaded runner, ``runner_choice`` for the report: the pick and every candidate's p50).

    A candidate that cannot load or run is recorded with its error and skipped; if all fail, the last
    error is raised so the row fails like a fixed --threads load would.
    """
    sweep: dict[str, dict] = {}
    best = None
    error: Exception | None = None
    configs = target.runner_configs(max_threads())
    for config in configs:
        try:
            runner = target.load_config(artifact, config)
            runner.run(sample)
            timing = measure(lambda: runner.run(sample), config.threads, warmup=2, min_runs=5, budget_seconds=seconds)
        except Exception as exc:  # e.g. CompiledModel refusing a model the Interpreter runs
            error = exc
            sweep[config.label] = {"error": first_line(exc, 200)}
            continue
        sweep[config.label] = {"p50": round(timing["p50"], 4)}
        if best is None or timing["p50"] < best[2]:
            best = (runner, config, timing["p50"])
    if best is None:
        raise error or RuntimeError("no runner to pick from")
    runner, config, _ = best
    best = None
    gc.collect()  # release the losing runners (and their native logs) now, not at exit
    return runner, {"runner": config.runner, "threads": config.threads, "sweep": sweep if len(configs) > 1 else {}}
