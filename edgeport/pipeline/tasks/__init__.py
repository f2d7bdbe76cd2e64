"""The tasks the one pipeline runs: ``forward`` (one program, judged by its outputs) and ``text-generation``
(prefill/decode programs with a KV cache, judged by the tokens they generate).

Both take the same path — plan -> prepare (load, export once, reference) -> rows (target x variant: build ->
judge) -> report -> manifest, and ``validate`` judges a directory again the same way. A :class:`Task` is
only what differs: how the programs and the reference are made, how one row's artifact is built and
judged, and what the task adds to the report. Like targets, tasks are a table of module paths, each module
defining ``TASK``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

TASK_MODULES = {
    "forward": "edgeport.pipeline.tasks.forward",
    "text-generation": "edgeport.pipeline.tasks.text_generation.task",
}


@dataclass
class Prepared:
    """What the rows of one model share once it is loaded and exported (also what a fleet's export task
    hands back): the session, the signature, the program's size and fingerprint, the timings so far."""

    session: Any
    signature: Any
    program: dict
    timings: dict


@dataclass
class Built:
    """One row's artifact as the task built it: the target's :class:`~edgeport.targets.base.Converted`, the
    job it was built from (its notes), the cache key (None: not cached) and the budget the judge applies."""

    converted: Any
    job: Any
    budget: dict
    key: str | None = None
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RowJobs:
    """A task's rows as jobs in worker processes (:mod:`edgeport.pipeline.jobs`, ``convert -j``): a worker
    must not depend on how it was started, so what its rows share is written once (files in the staging
    directory, a JSON spec) and the session is rebuilt from them in the worker."""

    shared_spec: Callable[..., dict]   # (session, staging, source, cache_root) -> what every row's spec holds
    restore: Callable[[dict], Any]     # spec -> the session, rebuilt in the worker
    plan_rows: Callable[..., list]     # (session, rows) -> per row {key, cached, pieces, piece0_key}
    # False: rows run in workers only when ``--jobs`` asks (each worker loads the weights again: a
    # generative model's rows stay in the driver, bounded, by default; a fleet converts such a model whole)
    by_default: bool = True


@dataclass(frozen=True)
class Task:
    name: str
    # (staging, opts, plan, progress, timings, workers) -> Prepared; raises ExportFailed
    prepare: Callable[..., Prepared]
    # (row, target, variant, session, out_dir, budget) -> Built; raises when the target's converter does
    build: Callable[..., Built]
    # (row, target, built, session, staging) -> None: the verdict (parity, latency, ...) applied to the row
    judge: Callable[..., None]
    # (spec, prepared, rows, staging) -> manifest.json's content, or None
    manifest: Callable[..., dict | None]
    # validate DIR: does DIR hold this task's programs; the reference read back from DIR; one artifact judged
    owns_directory: Callable[[Path], bool]
    # (directory, judge, reading, progress) -> (session, program fields for the report); ``reading``: the
    # SourceOptions programs in DIR are read with (--trust-pickle, --decompositions)
    reference_from: Callable[..., tuple]
    # (row, target, path, session, budget) -> None: the verdict applied to the row
    rejudge: Callable[..., None]
    report_block: Callable[[Any], dict] | None = None     # session -> report[name] (e.g. report["generation"])
    block_key: str | None = None
    sections: Callable[[dict], list] | None = None       # report -> the task's ReportSections
    libraries: tuple[str, ...] = ()                      # listed in the report's environment besides the targets'
    jobs: RowJobs | None = None                          # how rows run in worker processes (None: never)
    # (session, plan rows) -> None: when set, every row is built before any is judged, and this runs in
    # between (what only the conversions needed goes before the runtimes load their artifacts)
    release_after_builds: Callable[..., None] | None = None
    log_prefix: str = "convert"
    # its rows are judged on generated tokens: budgets of the generation family (edgeport.config.budget_for),
    # and its progress lines name the task (forward's, the default, do not)
    generative: bool = False

    def row_label(self, target: str, variant: str) -> str:
        """A row's progress line."""
        return f"{target} {variant}" + (f" ({self.name})" if self.generative else "")


def get_task(name: str) -> Task:
    return importlib.import_module(TASK_MODULES[name]).TASK


def default_task() -> Task:
    """Forward: what a model that is not a causal LM (or a caller that names no task) is converted for."""
    return get_task("forward")


def task_of(generation) -> Task:
    """The task a plan runs: text generation when the plan made a generation plan, else the default."""
    return get_task("text-generation") if generation is not None else default_task()


def task_for_directory(directory: Path) -> Task:
    """The task whose programs ``directory`` holds (forward, the catch-all, last)."""
    for name in reversed(TASK_MODULES):
        task = get_task(name)
        if task.owns_directory(directory):
            return task
    return default_task()
