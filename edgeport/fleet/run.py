"""``edgeport fleet``: every model of a fleet file exported once and its rows converted, as Ray tasks.

The task graph: one export task per model (load, torch.export, samples, PyTorch's reference) and, when it
finishes, one task per (target, variant) row of that model, all sharing that export. A model whose task
keeps its rows in one process by default (``RowJobs.by_default`` false: text generation) is one task that converts it whole
(:func:`edgeport.fleet.tasks.convert_model`); models still run side by side. Tasks ask Ray for
CPUs and memory and are retried when their worker dies (``max_retries``; a Python exception is a result,
not retried). The driver (this process) only schedules, merges each model's rows into its staging
directory in plan order and publishes it, exactly as ``edgeport convert`` lays out its --out.
A model that fails to load or export gets a report of failed rows; the other models go on. Stopped by
SIGTERM, a model with finished rows is published with the others cancelled, marked incomplete
(:func:`stop_models`), and fleet.json says the fleet is incomplete.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from edgeport.diagnostics import first_line
from edgeport.errors import Terminated
from edgeport.pipeline.validate import LATENCY_NOTE  # noqa: F401  (added to fleet rows; validate strips it)


WHOLE = "whole"   # a pending task that converts its model whole (Scheduler._converted)


@dataclass
class ModelRun:
    model: object                      # FleetModel
    staging: Path
    meta: dict | None = None           # what its export task returned
    blob: object = None                # ObjectRef of the exported files (shipping to a cluster)
    plans: list = field(default_factory=list)      # per row: cache key, pieces (RowJobs.plan_rows)
    specs: list = field(default_factory=list)      # one per task (a split row has several)
    results: dict = field(default_factory=dict)    # task index -> row JSON, piece dict or error line
    report: dict | None = None
    error: str | None = None


class Scheduler:
    """Submits tasks as their inputs become ready and collects results; ``view`` sees every task's state."""

    def __init__(self, ray, fleet, out: Path, view, ship: bool, cache_root: str | None):
        self.ray, self.fleet, self.out, self.view, self.ship = ray, fleet, out, view, ship
        self.cache_root = cache_root
        self.board = _board_class(ray).remote()
        options = dict(num_cpus=fleet.ray.cpus_per_task, memory=fleet.ray.memory_per_task,
                       max_retries=fleet.ray.max_retries, retry_exceptions=False)
        from edgeport.fleet.tasks import convert_model, export_model, run_row

        self.export_fn = ray.remote(num_returns=2, **options)(export_model)
        self.row_fn = ray.remote(**options)(run_row)
        self.whole_fn = ray.remote(**options)(convert_model)
        self.pending: dict = {}        # ObjectRef -> (ModelRun, row index or None)
        self.states: dict[str, str] = {}
        self.attempts: dict[str, int] = {}   # task key -> attempts started (from the board)
        self.runs: list[ModelRun] = []

    def run(self) -> list[ModelRun]:
        from edgeport.pipeline.outdir import staging_dir

        for model in self.fleet.models:
            run = ModelRun(model, staging_dir(self.out / model.name))
            self.runs.append(run)
            payload = {"name": model.name, "opts": model.opts, "ship": self.ship, "staging": str(run.staging),
                       "cache_root": self.cache_root, "board": self.board,
                       "rows": [(t.name, v) for t, v in model.plan.rows]}
            if model.plan.task.jobs and model.plan.task.jobs.by_default:
                meta_ref, run.blob = self.export_fn.remote(payload)
                self._submitted(meta_ref, run, None, f"{model.name}/export")
            else:
                self._submitted(self.whole_fn.remote(payload), run, WHOLE, f"{model.name}/convert")
        while self.pending:
            ready, _ = self.ray.wait(list(self.pending), num_returns=len(self.pending), timeout=0.5)
            for ref in ready:
                run, index = self.pending.pop(ref)
                if index is None:
                    self._exported(run, ref)
                elif index == WHOLE:
                    self._converted(run, ref)
                else:
                    self._row_done(run, index, ref)
            self._refresh()
        return self.runs

    def _converted(self, run: ModelRun, ref) -> None:
        """A model converted whole: its files placed (shipping), its staging directory published."""
        from edgeport.pipeline.outdir import publish

        key = f"{run.model.name}/convert"
        result = self._get(ref, lambda error: {"error": error})
        if "error" in result:
            self.states[key], run.error = "failed", result["error"]
            self._finish(run, {"ok": False, "stage": "convert", "error": result["error"], "timings": {}})
            return
        for rel, data in (result.get("files") or {}).items():
            path = run.staging / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        self.states[key] = "done" if result["report"].get("passed") else "failed"
        try:
            publish(run.staging, run.model.opts.output.out)
            run.report = result["report"]
        except Exception as exc:  # our bug: this model fails, the fleet goes on
            run.error = f"could not publish: {first_line(exc)}"

    def _submitted(self, ref, run: ModelRun, index: int | None, key: str) -> None:
        self.pending[ref] = (run, index)
        self.states[key] = "queued"

    def _refresh(self) -> None:
        self._fetch_attempts()
        for key, state in self.states.items():
            if state == "queued" and self.attempts.get(key):
                self.states[key] = "running"
        self.view.update(self.states)

    def _fetch_attempts(self) -> None:
        try:
            self.attempts = self.ray.get(self.board.attempts.remote(), timeout=5)
        except Exception:
            pass

    def _exported(self, run: ModelRun, ref) -> None:
        from edgeport.pipeline.run import RUN_LOG
        from edgeport.pipeline.jobs import job_specs

        name = run.model.name
        meta = self._get(ref, lambda error: {"ok": False, "stage": "export", "error": error, "timings": {}})
        self.states[f"{name}/export"] = "done" if meta["ok"] else "failed"
        if not meta["ok"]:
            run.error = meta["error"]
            self._finish(run, meta)
            return
        run.meta, run.plans = meta, meta["plans"]
        if self.ship:
            self._unpack_export(run)
        run.specs = job_specs(meta["shared"], run.model.plan, run.plans, run.staging / ".tasks", run.staging / RUN_LOG)
        for i, spec in enumerate(run.specs):
            key = task_key(name, spec)
            payload = {"key": key, "board": self.board}
            self._submitted(self.row_fn.remote(payload, spec, run.blob if self.ship else None), run, i, key)

    def _unpack_export(self, run: ModelRun) -> None:
        from edgeport.pipeline.run import RUN_LOG
        from edgeport.pipeline.jobs import PROGRAM_FILE

        blob = self.ray.get(run.blob)
        (run.staging / PROGRAM_FILE).write_bytes(blob["program"])
        with open(run.staging / RUN_LOG, "a") as log:
            log.write(blob["log"])

    def _row_done(self, run: ModelRun, index: int, ref) -> None:
        spec = run.specs[index]
        key = task_key(run.model.name, spec)
        result = self._get(ref, lambda error: {"error": error})
        for rel, data in (result.pop("files", None) or {}).items():
            path = Path(spec["work_dir"]) / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        value = result.get("row", result.get("piece_result", result.get("error")))
        if isinstance(value, dict) and "target" in value:   # a row: say what the fleet knows about it
            self._fetch_attempts()
            tries = self.attempts.get(key, 1)
            if tries > 1:
                value.setdefault("notes", []).append(f"ran {tries} times: its worker died before (Ray retried it)")
            if value.get("latency_ms"):
                value.setdefault("notes", []).append(LATENCY_NOTE)
        run.results[index] = value
        failed = not isinstance(value, dict) or value.get("status") == "failed" or value.get("error")
        self.states[key] = "failed" if failed else "done"
        if len(run.results) == len(run.specs):
            self._finish(run, run.meta)

    def _get(self, ref, failed):
        """The task's value, or ``failed(error line)`` when the task raised or its worker kept dying."""
        ray = self.ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            return failed(f"task failed: {first_line(exc.cause if exc.cause is not None else exc)}")
        except ray.exceptions.RayError as exc:
            retries = self.fleet.ray.max_retries
            return failed(f"worker died ({type(exc).__name__}); Ray ran the task {retries + 1} times: {first_line(exc)}")

    def _finish(self, run: ModelRun, meta: dict) -> None:
        """Merge the rows in plan order, write the model's report and publish its directory."""
        try:
            run.report = finish_model(run, meta)
        except Exception as exc:  # our bug: this model fails, the fleet goes on
            run.error = f"could not write the report: {first_line(exc)}"


def stop_models(runs: list[ModelRun], exc, seconds: float) -> dict:
    """A stopped fleet: each unpublished model with at least one finished row is published, its other rows
    cancelled and its report incomplete; a model without one is dropped (its staging removed), saying so.
    Returns fleet.json's ``stopped`` block."""
    import shutil
    import signal

    from edgeport.pipeline.stop import cancelled_row

    block = {"signal": signal.Signals(exc.exit_code - 128).name, "exit_code": exc.exit_code, "after_seconds": round(seconds, 1)}
    for run in (r for r in runs if r.report is None and r.error is None):
        finished = [i for i, r in run.results.items() if isinstance(r, dict) and "target" in r]
        if not (run.meta and run.meta.get("ok") and finished):
            shutil.rmtree(run.staging, ignore_errors=True)
            run.error = f"stopped by {block['signal']} before any of its rows finished"
            continue
        for i, spec in enumerate(run.specs):
            if i not in run.results:
                run.results[i] = {"stopped": cancelled_row(spec["target"], spec["variant"], True, block, None)["error"],
                                  "cancelled": True}
        marks = {"incomplete": True, "stopped": {**block, "rows": len(run.model.plan.rows), "finished_rows": len(finished)}}
        try:
            run.report = finish_model(run, run.meta, marks)
        except Exception as exc:  # our bug: this model fails, the others are still published
            run.error = f"could not write the report: {first_line(exc)}"
    return block


def finish_model(run: ModelRun, meta: dict, marks: dict | None = None) -> dict:
    import shutil

    from edgeport.core.program import Signature, TensorInfo
    from edgeport.pipeline.outdir import publish
    from edgeport.pipeline.run import Prepared, finish, write_failed
    from edgeport.pipeline.jobs import INPUTS_FILE, collect, open_cache

    model, staging = run.model, run.staging
    if not meta.get("ok"):
        report = write_failed(staging, model.opts, model.plan, meta["error"], meta.get("timings") or {})
    else:
        results = [run.results[i] for i in range(len(run.specs))]
        cache = open_cache(meta["shared"]["cache"]) if meta["shared"]["cache"]["root"] else None
        rows = collect(staging, model.plan.rows, run.plans, run.specs, results, cache)
        shutil.rmtree(staging / ".tasks", ignore_errors=True)
        (staging / INPUTS_FILE).unlink(missing_ok=True)
        info = lambda d: TensorInfo(d["name"], tuple(d["shape"]), d["dtype"])  # noqa: E731
        signature = meta["shared"]["signature"]
        prepared = Prepared(SimpleNamespace(reference_latency=meta["reference_latency"], data=meta["data"]),
                            Signature(tuple(map(info, signature["inputs"])), tuple(map(info, signature["outputs"]))),
                            dict(meta["program"]), dict(meta["timings"]))
        report = finish(staging, model.opts, model.plan, rows, prepared, marks)
    publish(staging, model.opts.output.out)
    return report


def task_key(model: str, spec: dict) -> str:
    piece = f"/piece{spec['piece']}" if "piece" in spec else ""
    return f"{model}/{spec['target']}/{spec['variant']}{piece}"


def _board_class(ray):
    """A tiny actor the tasks tell when they start (each attempt): queued vs running, and retry counts."""

    @ray.remote(num_cpus=0)
    class Board:
        def __init__(self):
            self.counts = {}

        def start(self, key: str) -> None:
            self.counts[key] = self.counts.get(key, 0) + 1

        def attempts(self) -> dict:
            return dict(self.counts)

    return Board


def run_fleet(fleet, out: Path, ray_address: str | None, view) -> tuple[list[ModelRun], dict]:
    """Start or join Ray, run every task, stop; returns the model runs and facts about the cluster."""
    import edgeport
    from edgeport.cache import Cache
    from edgeport.fleet.cluster import cluster_info, ray_cluster

    start = time.perf_counter()
    code_dir = Path(edgeport.__file__).resolve().parent
    with ray_cluster(ray_address, out, code_dir) as ray:
        check_feasible(ray, fleet)
        info = {"address": ray_address or "local", **cluster_info(ray)}
        cache_root = None if ray_address else str(Cache().root)
        scheduler = Scheduler(ray, fleet, out, view, ship=ray_address is not None, cache_root=cache_root)
        try:
            runs = scheduler.run()
        except Terminated as exc:   # publish what finished; fleet.json says the fleet is incomplete
            runs, info["stopped"] = scheduler.runs, stop_models(scheduler.runs, exc, time.perf_counter() - start)
    info["seconds"] = round(time.perf_counter() - start, 3)
    return runs, info


def check_feasible(ray, fleet) -> None:
    """A task asking more than the cluster has would wait forever: say so instead (exit 2)."""
    from edgeport.errors import UsageError

    resources = ray.cluster_resources()
    cpus, memory = resources.get("CPU", 0), resources.get("memory", 0)
    if fleet.ray.cpus_per_task > cpus or fleet.ray.memory_per_task > memory:
        raise UsageError(f"[ray] asks {fleet.ray.cpus_per_task} CPUs and {fleet.ray.memory_per_task / 2**30:.1f} GiB "
                         f"per task; the cluster has {cpus:g} CPUs and {memory / 2**30:.1f} GiB")
