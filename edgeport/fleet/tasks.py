"""What a fleet's Ray tasks run: export one model, run one row, or convert one model whole (a task whose rows
share in-memory state: text generation's programs and reference). Plain functions (the driver wraps them with
``ray.remote``), so this module imports nothing heavy and works the same on a node of a cluster.

Two ways files travel. On the local Ray instance every task sees the driver's file system: the export
writes ``exported.pt2`` and ``task-inputs.npz`` into the model's staging directory and rows convert into
``staging/.tasks/<i>``. On a cluster (``--ray-address``) nothing is assumed shared: the export returns
the two files' bytes as a second Ray object that every row of the model takes as an argument (Ray hands
it over through its object store, once per node), rows write them once per node under the system temp
directory, and return their own files' bytes for the driver to place.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

def collected(task):
    """``task``, collecting after itself (:func:`edgeport.core.memory.collect`): Ray runs task after task in one
    worker process, and what a conversion leaves in module-level state (torch.fx's generated sources) would
    pile up model after model."""
    @functools.wraps(task)
    def run(*args):
        from edgeport.core.memory import collect

        try:
            return task(*args)
        finally:
            collect()
    return run


def started(payload: dict, key: str) -> None:
    """Tell the driver's progress board this task (attempt) started; then the test-only crash hook."""
    from edgeport.pipeline.jobs import test_crash

    board = payload.get("board")
    if board is not None:
        import ray

        ray.get(board.start.remote(key))  # waited for: counted before this attempt can end
    test_crash(key)


@collected
def export_model(payload: dict):
    """Load and export one model, samples and reference: (meta, blob). ``meta["ok"]`` False names the
    stage (load or export) that failed and why; ``blob`` holds the files' bytes when shipping."""
    from edgeport.diagnostics import first_line
    from edgeport.errors import ExportFailed, UsageError
    from edgeport.config import load_config, parse_budget_flags
    from edgeport.targets.registry import get_target
    from edgeport.pipeline.tasks import forward_jobs
    from edgeport.pipeline.tasks import default_task
    from edgeport.pipeline.plan import Plan, load_user_decompositions, row_policies
    from edgeport.core.proc import redirected
    from edgeport.pipeline.run import RUN_LOG, prepare
    from edgeport.quantize.policy import parse_policy

    started(payload, f"{payload['name']}/export")
    opts, ship = payload["opts"], payload["ship"]
    staging = Path(tempfile.mkdtemp(prefix="edgeport-export-")) if ship else Path(payload["staging"])
    timings: dict = {}
    try:
        with redirected(staging / RUN_LOG):
            rows = [(get_target(t), v) for t, v in payload["rows"]]   # also what the pre-flight check weighs
            config, flags = load_config(opts.judge.config), parse_budget_flags(opts.judge.budgets)
            the_task = default_task()
            the_plan = Plan(rows, config, flags, decompositions=load_user_decompositions(opts.source.decompositions),
                            fallback=parse_policy(opts.fallback, opts.fallback_max), task=the_task,
                            policies=row_policies(payload["rows"], config, flags, the_task.generative))  # budgets vs outputs
            try:
                prepared = prepare(staging, opts, the_plan, lambda _m: None, timings)
            except ExportFailed as exc:
                return {"ok": False, "stage": "export", "error": str(exc), "timings": timings}, None
            except Exception as exc:  # the user's model failed to load: this model fails, not the fleet
                why = (str(exc).splitlines() or [""])[0] if isinstance(exc, UsageError) else first_line(exc)
                return {"ok": False, "stage": "load", "error": f"load failed: {why}", "timings": timings}, None
            shared = forward_jobs.shared_spec(prepared.session, staging, opts.source, payload.get("cache_root"))
            plans = forward_jobs.plan_rows(prepared.session, rows)
        meta = {"ok": True, "shared": shared, "plans": plans, "program": prepared.program, "timings": prepared.timings,
                "reference_latency": prepared.session.reference_latency, "data": prepared.session.data}
        return meta, (_blob(staging) if ship else None)
    finally:
        if ship:
            shutil.rmtree(staging, ignore_errors=True)


def _blob(staging: Path) -> dict:
    from edgeport.pipeline.run import RUN_LOG
    from edgeport.pipeline.jobs import INPUTS_FILE, PROGRAM_FILE

    log = staging / RUN_LOG
    return {"program": (staging / PROGRAM_FILE).read_bytes(), "inputs": (staging / INPUTS_FILE).read_bytes(),
            "log": log.read_text(errors="replace") if log.is_file() else ""}


@collected
def convert_model(payload: dict) -> dict:
    """One model converted whole, as ``edgeport convert`` converts it (:func:`edgeport.pipeline.run.convert_into`,
    every row in this process): for a task whose rows are not split into Ray tasks (text generation's rows
    share the prefill/decode programs and the reference in memory). The plan is made again here from the
    options the fleet file checked (same checks, nothing pickled but options). Returns ``{"report"}`` and,
    when shipping (a cluster), ``{"files"}``: the staging directory's bytes for the driver to place."""
    from edgeport.pipeline.plan import plan
    from edgeport.pipeline.run import convert_staged

    started(payload, f"{payload['name']}/convert")
    opts, ship = payload["opts"], payload["ship"]
    staging = Path(tempfile.mkdtemp(prefix="edgeport-model-")) if ship else Path(payload["staging"])
    try:
        report = convert_staged(staging, opts, plan(opts), lambda _m: None)
        files = {str(p.relative_to(staging)): p.read_bytes() for p in staging.rglob("*") if p.is_file()} if ship else None
        return {"report": report, "files": files}
    finally:
        if ship:
            shutil.rmtree(staging, ignore_errors=True)


@collected
def run_row(payload: dict, spec: dict, blob: dict | None):
    """One row (:func:`edgeport.pipeline.jobs.run_job`); with a blob, on this node's own copy of the files."""
    from edgeport.pipeline.jobs import run_job

    started(payload, payload["key"])
    if blob is None:
        return _wrap(run_job(spec))
    local = materialize(blob)
    work = Path(tempfile.mkdtemp(prefix="edgeport-row-"))
    try:
        row = run_job({**spec, "program": str(local / "exported.pt2"), "inputs": str(local / "task-inputs.npz"),
                       "work_dir": str(work / "w"), "log": str(work / "worker.log")})
        files = {str(p.relative_to(work / "w")): p.read_bytes() for p in (work / "w").rglob("*") if p.is_file()}
        return {**_wrap(row), "files": files}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _wrap(result: dict) -> dict:
    return {"piece_result": result} if "piece" in result else {"row": result}


def materialize(blob: dict) -> Path:
    """The model's files on this node, written once per node (atomically: a rename of a finished dir)."""
    digest = hashlib.sha256(blob["program"] + blob["inputs"]).hexdigest()[:20]
    final = Path(tempfile.gettempdir()) / f"edgeport-fleet-{digest}"
    if (final / "task-inputs.npz").is_file():
        os.utime(final)
        return final
    _clean_stale(final.parent)
    tmp = Path(tempfile.mkdtemp(prefix="edgeport-fleet-tmp-"))
    (tmp / "exported.pt2").write_bytes(blob["program"])
    (tmp / "task-inputs.npz").write_bytes(blob["inputs"])
    try:
        os.rename(tmp, final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # another task of this node was first
    return final


def _clean_stale(parent: Path, max_age_s: float = 24 * 3600) -> None:
    """Models' files left on this node by fleets that ended a day ago or more."""
    import time

    for path in parent.glob("edgeport-fleet-*"):
        try:
            if time.time() - path.stat().st_mtime > max_age_s:
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            continue
