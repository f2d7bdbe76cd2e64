"""The two runs behind the public API: ``convert`` (load -> export once -> every target x variant -> report)
and ``validate`` (judge the artifacts already in a directory again), for every task (forward,
text-generation: :mod:`edgeport.pipeline.tasks`).

Both write into a staging directory that replaces the output only when complete, and both send every
library's output (torch logging, warnings, converter and C++ logs) to the run's log, ``DIR/edgeport.log``:
the terminal carries edgeport's own lines.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable
from pathlib import Path

from edgeport import __version__
from edgeport.errors import ExportFailed, Terminated
from edgeport.core.proc import redirected, timed
from edgeport.pipeline.options import ConvertOptions
from edgeport.pipeline.report import assemble
from edgeport.pipeline.tasks import Prepared  # noqa: F401  (what prepare returns; the fleet builds one too)

from edgeport.core.progress import Progress  # noqa: F401  (the one progress callable: edgeport.core.progress)
RUN_LOG = "edgeport.log"


@dataclass
class Result:
    report: dict
    out: Path
    exit_code: int


def convert(opts: ConvertOptions, progress: Progress | None = None) -> Result:
    from edgeport.pipeline.outdir import publish, staging_dir
    from edgeport.pipeline import stop
    from edgeport.pipeline.plan import plan

    progress = progress or (lambda _msg: None)
    the_plan = plan(opts)
    staging = staging_dir(opts.output.out)
    try:
        report = convert_staged(staging, opts, the_plan, progress)
        with stop.held():
            publish(staging, opts.output.out)
    except BaseException:
        import shutil

        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Result(report, opts.output.out, stop.exit_code(report))


def convert_staged(staging: Path, opts: ConvertOptions, the_plan, progress: Progress) -> dict:
    """The plan's conversion into ``staging`` (library output to its log; a GGUF source dequantized into the
    run's scratch, removed before anything is published): what ``convert`` and a fleet's whole-model task run."""
    from edgeport.core.scratch import run_scratch

    with redirected(staging / RUN_LOG), run_scratch(staging):
        return convert_into(staging, from_gguf(opts, progress), the_plan, progress)


def from_gguf(opts: ConvertOptions, progress: Progress) -> ConvertOptions:
    """A GGUF source as the ``hf:`` directory every task reads, dequantized into the run's scratch folder."""
    from edgeport.sources.gguf import as_hf_source

    return as_hf_source(opts, progress)


def convert_into(staging: Path, opts: ConvertOptions, the_plan, progress: Progress) -> dict:
    """The plan's task: prepare (load, export, reference) -> rows -> report and manifest. Stopped by
    SIGTERM, what had finished is written, marked incomplete (:mod:`edgeport.pipeline.stop`)."""
    from edgeport.pipeline.stop import Watch

    task, watch = the_plan.task, Watch(progress)
    from edgeport.pipeline.workers import row_workers

    jobs, isolated = row_workers(opts, the_plan)
    if isolated:
        from edgeport.pipeline.workers import prewarm

        prewarm()  # the workers' imports overlap loading and exporting
    timings: dict[str, float] = {}
    prepared = None
    try:
        prepared = task.prepare(staging, opts, the_plan, watch.progress, timings, workers=isolated)
        if isolated:
            rows = run_rows_parallel(prepared.session, the_plan, staging, watch, opts, jobs)
        else:
            rows = run_rows(prepared.session, the_plan, staging, watch.progress, watch)
    except ExportFailed as exc:
        return write_failed(staging, opts, the_plan, str(exc), timings)
    except Terminated as exc:
        from edgeport.pipeline.stop import held

        if not watch.done:
            raise   # nothing finished: nothing to publish (the staging directory goes, as before)
        with held():   # a second SIGTERM does not cut the report short
            return stopped(staging, opts, the_plan, prepared, watch, exc)
    return finish(staging, opts, the_plan, rows, prepared)


def stopped(staging: Path, opts: ConvertOptions, the_plan, prepared, watch, exc: Terminated) -> dict:
    """The report of a run SIGTERM stopped: finished rows as they are, the others cancelled; incomplete."""
    from edgeport.pipeline import stop

    block = stop.stopped_block(exc, watch, the_plan.rows)
    rows = watch.final if watch.final is not None else stop.settle(the_plan, watch, block, skipped_rows(the_plan))
    stop.prune(staging, rows)
    return finish(staging, opts, the_plan, rows, prepared, {"incomplete": True, "stopped": block})


def prepare(staging: Path, opts: ConvertOptions, the_plan, progress: Progress, timings: dict,
            workers: bool = False) -> Prepared:
    """The forward task's preparation: load, the one torch.export (saved as ``exported.pt2``), samples and
    PyTorch's reference."""
    from edgeport.core.program import fingerprint, save_program, signature_of

    loaded, program, module_rewrites = load_and_export(opts.source, progress, timings,
                                                       preflight=lambda m: preflight(m, opts, the_plan, workers))
    save_program(program, staging / "exported.pt2")
    signature = signature_of(program, loaded.input_names)
    check_budgets_apply(the_plan, signature)
    program_id = fingerprint(program, signature)
    if workers and opts.judge.latency:
        from edgeport.pipeline.workers import wait_ready

        wait_ready()  # the workers' imports must not share the CPU with timing PyTorch
    with timed(timings, "reference"):
        session = start_session(loaded, program, signature, opts, the_plan, module_rewrites, progress, program_id)
    return Prepared(session, signature, {"params": param_count(program), **program_id}, timings)


def check_budgets_apply(the_plan, signature) -> None:
    """Budgets that depend on the program's outputs (``topk_outputs``, a gated top-k agreement) are checked
    against them as soon as they are known, before any conversion: exit 2, not a gate that checks nothing."""
    from edgeport.validate.budget_audit import check_applies

    outputs = [(o.name, o.shape, o.dtype) for o in signature.outputs]
    for target, variant in the_plan.rows:
        check_applies(the_plan.policy(target, variant).budget, outputs, f"budget of {target.name}.{variant}")


def write_failed(staging: Path, opts: ConvertOptions, the_plan, error: str, timings: dict) -> dict:
    """Every row failed with the same error (the export, or in a fleet the load): report still written."""
    from edgeport.validate.report import write_outputs

    rows = [{**failed_row(t.name, v, error), "required": the_plan.policy(t, v).required}
            for t, v in the_plan.rows]
    spec = opts.source.gguf["spec"] if opts.source.gguf else opts.source.model
    report = assemble(spec, rows, None, the_plan.task, timings, opts.judge.threads, the_plan.baseline,
                      config=the_plan.config)
    return write_outputs(staging, report, None, opts.output.junit)


def finish(staging: Path, opts: ConvertOptions, the_plan, rows: list[dict], prepared: Prepared,
           marks: dict | None = None) -> dict:
    """report.json (``marks``: a stopped run's ``incomplete``/``stopped``), the renderings and the manifest."""
    from edgeport.validate.report import write_outputs

    task = the_plan.task
    gguf = opts.source.gguf
    spec, program = (gguf["spec"], {**prepared.program, "gguf": gguf}) if gguf else (opts.source.model, prepared.program)
    report = assemble(spec, rows, prepared.session, task, prepared.timings, opts.judge.threads,
                      the_plan.baseline, program=dict(program), config=the_plan.config)
    report = {**report, **marks, "passed": False} if marks else report
    return write_outputs(staging, report, task.manifest(spec, prepared, rows, staging), opts.output.junit)


def start_session(loaded, program, signature, opts: ConvertOptions, the_plan, module_rewrites, progress,
                  program_id: dict | None = None):
    from edgeport.cache import Cache
    from edgeport.pipeline.session import Session
    from edgeport.validate.data import load_data

    calibration = load_data(opts.calibration_data, signature, "--calibration-data") if opts.calibration_data else None
    return Session.start(loaded, program, signature, opts.judge, progress, module_rewrites=tuple(module_rewrites),
                         decompositions=the_plan.decompositions, calibration=calibration,
                         target_options=dict(opts.target_options), dynamic=tuple(opts.source.dynamic),
                         fallback=the_plan.fallback, program_id=program_id, cache=Cache() if opts.cache else None,
                         reuse_verdict=opts.reuse_verdict)


def run_rows(session, the_plan, staging: Path, progress: Progress, watch=None) -> list[dict]:
    """Every row of the plan in this process, one after another, each build and judge under the row's
    limits (:func:`edgeport.pipeline.limits.bounded`); then the rows the task cannot build (e.g. a target
    without text-generation support), skipped with the reason. A task with ``release_after_builds`` builds
    every row first, lets go of what only building needed (a generative model's programs: the weights
    once), then judges: the runtimes' own copies never sit beside them. ``watch``
    (:class:`edgeport.pipeline.stop.Watch`) hears each finished row."""
    from edgeport.core.memory import collect
    from edgeport.pipeline import stop
    from edgeport.pipeline.row import build_row

    task, rows, built = the_plan.task, [], []
    watch = watch or stop.Watch(progress)
    for target, variant in the_plan.rows:
        progress(task.row_label(target.name, variant))
        policy = the_plan.policy(target, variant)
        args = (target, variant, session, staging, policy.budget, policy.required, task)
        row, b = in_bounds(the_plan, session, args, watch, lambda: build_row(*args))
        if task.release_after_builds is None:
            rows.append(_judged(the_plan, session, args, watch, row, b))
            watch.finished(rows[-1])
        else:
            built.append((args, row, b))
        collect()   # a finished row's converter graphs and runtime (its mapped weights) go before the next
    if task.release_after_builds is not None:
        task.release_after_builds(session, the_plan.rows)
        for args, row, b in built:
            rows.append(_judged(the_plan, session, args, watch, row, b))
            watch.finished(rows[-1])
    stop.prune(staging, rows, {r["target"] for r in rows if r.get("limit")})   # what a stopped row half-wrote
    for row in skipped_rows(the_plan):
        rows.append(row)
        watch.finished(row)
    return rows


def _judged(the_plan, session, args: tuple, watch, row, built) -> dict:
    """The built row judged under its limits (a row that did not build is final as it is), as JSON."""
    from edgeport.pipeline.row import judge_row

    if built is None:
        return row.to_json()
    target, staging, task = args[0], args[3], args[6]
    return in_bounds(the_plan, session, args, watch, lambda: (judge_row(row, target, built, session, staging, task), None),
                     row)[0].to_json()


def in_bounds(the_plan, session, args: tuple, watch, call, row=None) -> tuple:
    """``call()`` -> (Row, Built or None), run in this process under the row's limits; past one, the row
    (``row``, or a new one) fails with the stop's message and its ``limit`` block, as a worker's would.
    No limits (a library caller's default, ``none``): just ``call()``."""
    from edgeport.pipeline.limits import RowStopped, bounded, row_limits
    from edgeport.pipeline.row import Row
    from edgeport.pipeline.jobs import test_stall

    target, variant, required = args[0], args[1], args[5]
    active = the_plan.limits is not None and the_plan.limits.any_active()
    limits = row_limits(the_plan.limits, target, variant, session.weight_bytes) if active else {}
    try:
        with bounded(limits, lambda: watch.last):
            if row is None:
                test_stall(f"{target.name}/{variant}", watch.progress)
            return call()
    except RowStopped as exc:
        row = row or Row(target.name, variant, required=required)
        row.status, row.error, row.details["limit"] = "failed", str(exc), exc.limit
        return row, None


def skipped_rows(the_plan) -> list[dict]:
    """The rows the plan cannot build (a target without text-generation support, a variant a target does
    not offer), skipped with the reason."""
    from edgeport.pipeline.row import Row

    return [Row(target.name, variant, status="skipped", error=why,
                required=the_plan.policy(target, variant).required).to_json()
            for target, variant, why in [*the_plan.skipped, *the_plan.not_offered]]


def run_rows_parallel(session, the_plan, staging: Path, watch, opts: ConvertOptions, jobs: int) -> list[dict]:
    """The rows as tasks (:mod:`edgeport.pipeline.jobs`; a row whose target splits its conversion is several)
    in worker processes; results merged into ``staging`` in plan order. A crashing worker, or one past its
    limits (:mod:`edgeport.pipeline.limits`), fails its row. Stopped by SIGTERM: the finished tasks'
    rows are merged, the others cancelled (``watch.final``), and the stop goes on up."""
    import shutil

    from edgeport.pipeline import jobs as row_jobs_of, workers

    jobs_of = the_plan.task.jobs
    cache_root = str(session.cache.root) if session.cache else None
    shared = {**jobs_of.shared_spec(session, staging, opts.source, cache_root), "task": the_plan.task.name}
    plans = jobs_of.plan_rows(session, the_plan.rows)
    work = staging / ".tasks"
    specs = row_jobs_of.job_specs(shared, the_plan, plans, work, staging / RUN_LOG, session.weight_bytes)
    results, stages = [None] * len(specs), {}
    try:
        workers.run_all(specs, jobs, row_events(specs, watch, jobs), gate=session.judge.latency or session.judge.threads == "auto",
                        results=results, stages=stages)
        return row_jobs_of.collect(staging, the_plan.rows, plans, specs, results, session.cache) + skipped_rows(the_plan)
    except Terminated as exc:
        watch.final = _cancelled_rest(staging, the_plan, plans, specs, results, stages, watch, exc, session)
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
        (staging / row_jobs_of.INPUTS_FILE).unlink(missing_ok=True)


def row_events(specs: list[dict], watch, jobs: int):
    """The workers' events as progress lines: a row's steps, and one verdict line per finished task. A row's
    start reads as in-process rows' (its name) at -j 1, and says ``converting`` beside others."""

    def on_event(i: int, kind: str, payload) -> None:
        if kind == "step":
            watch.progress(str(payload))
            return
        name = f"{specs[i]['target']} {specs[i]['variant']}" + (f" (piece {specs[i]['piece']})" if "piece" in specs[i] else "")
        if kind == "start":
            watch.progress(f"{name}: converting" if jobs > 1 else name)
        elif isinstance(payload, dict) and ("status" in payload or "stopped" in payload) and "piece" not in specs[i]:
            row = payload if "status" in payload else {"status": "failed", "error": payload["stopped"]}
            watch.finished({**row, "target": specs[i]["target"], "variant": specs[i]["variant"]})
        else:
            error = payload.get("error") if isinstance(payload, dict) else payload
            watch.progress(f"{name}: {'failed — ' + str(error) if error else 'done'}")
    return on_event


def _cancelled_rest(staging: Path, the_plan, plans, specs, results, stages, watch, exc, session) -> list[dict]:
    """A stopped run's rows: the finished tasks merged as usual, every task still running or waiting
    cancelled (saying the step it was in), the plan's skipped rows as they are."""
    from edgeport.pipeline import jobs as row_jobs_of, stop

    block = stop.stopped_block(exc, watch, the_plan.rows)
    for i, spec in enumerate(specs):
        if results[i] is None:
            stage, seconds = stages.get(i, (None, None))
            stage = stage.split(": ", 1)[-1] if stage else None
            results[i] = {"stopped": stop.cancelled_row(spec["target"], spec["variant"], True, block, stage, seconds)["error"],
                          "cancelled": True}
    return row_jobs_of.collect(staging, the_plan.rows, plans, specs, results, session.cache) + skipped_rows(the_plan)


def preflight(loaded, opts: ConvertOptions, the_plan, workers: bool) -> None:
    from edgeport.core import memory

    middle = memory.program_intermediate_bytes(loaded.program) if loaded.program is not None else 0
    check_fits(memory.model_weight_bytes(loaded), opts, the_plan, workers, intermediate_bytes=middle)


def check_fits(weight_bytes: int, opts: ConvertOptions, the_plan, workers: bool, programs: int = 1,
               generative: bool = False, intermediate_bytes: int = 0):
    """Refuse (exit 2, with the estimate) a model whose conversion will not fit in memory or on disk: every
    task asks this between its load and its export (a loaded program's declared intermediates included)."""
    from edgeport.core import memory

    from edgeport.pipeline.workers import row_jobs

    est = memory.estimate(weight_bytes, the_plan.rows, row_jobs(opts, the_plan) if workers else 1, programs,
                          generative, intermediate_bytes, workers)
    memory.check(est, opts.output.out, opts.max_memory)
    return est


def load_and_export(source, progress: Progress, timings: dict, preflight: Callable | None = None) -> tuple:
    """(loaded, program, module rewrites): the one load -> module rewrites -> torch.export that ``convert``,
    ``check`` and ``quantize --sensitivity`` share. With ``--dynamic batch`` dim 0 stays symbolic (targets
    that cannot keep it convert at the example shapes; the report says which dims stayed dynamic where).
    ``preflight(loaded)`` runs between the load and the export (convert's memory and disk check)."""
    from edgeport.core.program import batch_dynamic, export_program
    from edgeport.sources import load_model
    from edgeport.targets.rewrites import apply_module_rewrites

    progress("loading model")
    with timed(timings, "load"):
        loaded = load_model(source)
    if preflight is not None:
        preflight(loaded)
    module_rewrites = apply_module_rewrites(loaded.module)
    progress("torch.export")
    with timed(timings, "export"):
        if loaded.program is not None:
            program = loaded.program
        elif "batch" not in source.dynamic:
            program = export_program(loaded.module, loaded.example_inputs)
        else:
            trace_inputs, shapes = batch_dynamic(loaded.example_inputs)
            program = export_program(loaded.module, trace_inputs, dynamic_shapes=shapes)
    return loaded, program, module_rewrites


def failed_row(target: str, variant: str, error: str) -> dict:
    from edgeport.pipeline.row import Row

    return Row(target, variant, status="failed", error=error).to_json()


def param_count(program) -> int:
    return int(sum(p.numel() for p in program.state_dict.values()))


def stamp() -> dict:
    return {"edgeport_version": __version__, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
