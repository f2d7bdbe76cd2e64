"""The two runs behind the public API: ``convert`` (load -> export once -> every target x variant -> report)
and ``validate`` (judge the artifacts already in a directory again).

Both write into a staging directory that replaces the output only when complete, and both send every
library's output (torch logging, warnings, converter and C++ logs) to the run's log, ``DIR/edgeport.log``:
the terminal carries edgeport's own lines.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from edgeport import __version__
from edgeport.errors import ExportFailed, UsageError
from edgeport.pipeline.options import ConvertOptions, JudgeOptions
from edgeport.pipeline.proc import redirected, timed

Progress = Callable[[str], None]
RUN_LOG = "edgeport.log"


@dataclass
class Result:
    report: dict
    out: Path
    exit_code: int


def convert(opts: ConvertOptions, progress: Progress | None = None) -> Result:
    from edgeport.pipeline.outdir import publish, staging_dir
    from edgeport.pipeline.plan import plan

    progress = progress or (lambda _msg: None)
    the_plan = plan(opts)
    staging = staging_dir(opts.output.out)
    try:
        with redirected(staging / RUN_LOG):
            report = into(the_plan)(staging, opts, the_plan, progress)
        publish(staging, opts.output.out)
    except BaseException:
        import shutil

        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Result(report, opts.output.out, 0 if report["passed"] else 1)


def into(the_plan):
    """The run a plan asks for: one forward export, or prefill/decode programs for --task text-generation."""
    if the_plan.generation is None:
        return convert_into
    from edgeport.generative.run import convert_generation

    return convert_generation


@dataclass
class Prepared:
    """What the rows of one model share once it is loaded and exported (also what a fleet's export task
    hands back): the session, the signature, the program's size and fingerprint, the timings so far."""

    session: object
    signature: object
    program: dict
    timings: dict


def convert_into(staging: Path, opts: ConvertOptions, the_plan, progress: Progress) -> dict:
    jobs = row_jobs(opts, the_plan)
    if jobs > 1:
        from edgeport.pipeline.workers import prewarm

        prewarm()  # the workers' imports overlap loading and exporting
    timings: dict[str, float] = {}
    try:
        prepared = prepare(staging, opts, the_plan, progress, timings, workers=jobs > 1)
    except ExportFailed as exc:
        return write_failed(staging, opts, the_plan, str(exc), timings)
    if jobs > 1:
        rows = run_rows_parallel(prepared.session, the_plan, staging, progress, opts, jobs)
    else:
        rows = run_rows(prepared.session, the_plan, staging, progress)
    return finish(staging, opts, the_plan, rows, prepared)


def prepare(staging: Path, opts: ConvertOptions, the_plan, progress: Progress, timings: dict,
            workers: bool = False) -> Prepared:
    """Load, the one torch.export (saved as ``exported.pt2``), samples and PyTorch's reference."""
    from edgeport.export.program import fingerprint, save_program, signature_of
    from edgeport.export.rewrites import apply_module_rewrites
    from edgeport.sources import load_model

    progress("loading model")
    with timed(timings, "load"):
        loaded = load_model(opts.source)
    module_rewrites = apply_module_rewrites(loaded.module)
    progress("torch.export")
    with timed(timings, "export"):
        program = loaded.program or export(loaded, opts.source.dynamic)
        save_program(program, staging / "exported.pt2")
    signature = signature_of(program, loaded.input_names)
    program_id = fingerprint(program, signature)
    if workers and opts.judge.latency:
        from edgeport.pipeline.workers import wait_ready

        wait_ready()  # the workers' imports must not share the CPU with timing PyTorch
    with timed(timings, "reference"):
        session = start_session(loaded, program, signature, opts, the_plan, module_rewrites, progress, program_id)
    return Prepared(session, signature, {"params": param_count(program), **program_id}, timings)


def write_failed(staging: Path, opts: ConvertOptions, the_plan, error: str, timings: dict) -> dict:
    """Every row failed with the same error (the export, or in a fleet the load): report still written."""
    from edgeport.config import is_required
    from edgeport.validate.report import write_outputs

    rows = [{**failed_row(t.name, v, error), "required": is_required(t.name, v, the_plan.config)}
            for t, v in the_plan.rows]
    return write_outputs(staging, assemble(opts.source.model, rows, None, the_plan, timings, opts.judge), None,
                         opts.output.junit)


def finish(staging: Path, opts: ConvertOptions, the_plan, rows: list[dict], prepared: Prepared) -> dict:
    from edgeport.validate.report import write_outputs

    report = assemble(opts.source.model, rows, prepared.session, the_plan, prepared.timings, opts.judge,
                      program=dict(prepared.program))
    return write_outputs(staging, report, manifest(opts.source.model, prepared.signature, rows), opts.output.junit)


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


def row_jobs(opts: ConvertOptions, the_plan) -> int:
    """Worker processes for the rows: one per two cores (or ``--jobs``; see workers.default_jobs), never
    more than there are rows to convert; 1 means in this process, one row after another."""
    from edgeport.pipeline.workers import default_jobs

    installed = [t for t, _v in the_plan.rows if not t.missing_requirements()]
    return max(1, min(opts.jobs or default_jobs(), len(installed)))


def run_rows(session, the_plan, staging: Path, progress: Progress) -> list[dict]:
    from edgeport.config import budget_for, is_required
    from edgeport.pipeline.row import run_row

    rows = []
    for target, variant in the_plan.rows:
        progress(f"{target.name} {variant}")
        budget = budget_for(target.name, variant, the_plan.config, the_plan.budget_flags)
        required = is_required(target.name, variant, the_plan.config)
        rows.append(run_row(target, variant, session, staging, budget, required).to_json())
    return rows


def run_rows_parallel(session, the_plan, staging: Path, progress: Progress, opts: ConvertOptions, jobs: int) -> list[dict]:
    """The rows as tasks (:mod:`edgeport.pipeline.task`; a row whose target splits its conversion is several)
    in worker processes; results merged into ``staging`` in plan order. A crashing worker fails its row."""
    import shutil

    from edgeport.pipeline import task, workers

    shared = task.shared_spec(session, staging, opts.source, str(session.cache.root) if session.cache else None)
    plans = task.plan_rows(session, the_plan.rows)
    work = staging / ".tasks"
    specs = task.task_specs(shared, the_plan, plans, work, staging / RUN_LOG)

    def on_event(i: int, kind: str, payload) -> None:
        name = f"{specs[i]['target']} {specs[i]['variant']}" + (f" (piece {specs[i]['piece']})" if "piece" in specs[i] else "")
        status = (payload.get("status") or ("failed" if payload.get("error") else "done")) if isinstance(payload, dict) else kind
        progress(f"{name}: {'converting' if kind == 'start' else status}")

    try:
        results = workers.run_all(specs, jobs, on_event, gate=session.judge.latency or session.judge.threads == "auto")
        return task.collect(staging, the_plan.rows, plans, specs, results, session.cache)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        (staging / task.INPUTS_FILE).unlink(missing_ok=True)


def export(loaded, dynamic):
    """The one torch.export; with ``--dynamic batch`` dim 0 stays symbolic (targets that cannot keep it
    convert at the example shapes; the report says which dims stayed dynamic on which target)."""
    from edgeport.export.program import batch_dynamic, export_program

    if "batch" not in dynamic:
        return export_program(loaded.module, loaded.example_inputs)
    trace_inputs, shapes = batch_dynamic(loaded.example_inputs)
    return export_program(loaded.module, trace_inputs, dynamic_shapes=shapes)


def assemble(spec: str, rows: list[dict], session, the_plan, timings: dict | None, judge: JudgeOptions,
             program: dict | None = None) -> dict:
    from edgeport.validate import payoff
    from edgeport.validate.environment import environment
    from edgeport.validate.report import build_report, finish_report

    rows = payoff.apply(rows)  # ratios to each target's fp32 row, and their budgets: needs every row
    libraries = sorted({m for r in rows for m in target_requires(r["target"])})
    report = build_report(spec, (program or {}).pop("params", None), rows,
                          session.reference_latency if session else None, session.data if session else None,
                          timings, environment(judge.threads, libraries), program)
    return finish_report(report, the_plan.baseline)


def target_requires(name: str) -> tuple[str, ...]:
    from edgeport.export.registry import get_target, target_names

    return get_target(name).requires if name in target_names() else ()


def manifest(spec: str, signature, rows: list[dict]) -> dict:
    from edgeport.validate.report import build_manifest

    return build_manifest(spec, signature, rows)


def failed_row(target: str, variant: str, error: str) -> dict:
    from edgeport.pipeline.row import Row

    return Row(target, variant, status="failed", error=error).to_json()


def param_count(program) -> int:
    return int(sum(p.numel() for p in program.state_dict.values()))


def stamp() -> dict:
    return {"edgeport_version": __version__, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def check_directory(directory: Path) -> dict:
    from edgeport.validate.report import read_report_dir

    report = read_report_dir(directory)
    if not (directory / "exported.pt2").is_file():
        raise UsageError(f"{directory} has no exported.pt2: nothing to compare the artifacts against")
    return report
