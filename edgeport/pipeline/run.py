"""The two runs behind the public API: ``convert`` (load -> export once -> every target x variant -> report)
and ``validate`` (judge the artifacts already in a directory again).

Both write into a staging directory that replaces the output only when complete, and both send every
library's output (torch logging, warnings, converter and C++ logs) to the run's log, ``DIR/edgeport.log``:
the terminal carries edgeport's own lines.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from edgeport import __version__
from edgeport.errors import ExportFailed, UsageError
from edgeport.pipeline.options import ConvertOptions, JudgeOptions
from edgeport.pipeline.proc import redirected

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


def convert_into(staging: Path, opts: ConvertOptions, the_plan, progress: Progress) -> dict:
    from edgeport.config import is_required
    from edgeport.export.program import fingerprint, save_program, signature_of
    from edgeport.export.rewrites import apply_module_rewrites
    from edgeport.sources import load_model
    from edgeport.validate.report import write_outputs

    timings: dict[str, float] = {}
    progress("loading model")
    with timed(timings, "load"):
        loaded = load_model(opts.source)
    module_rewrites = apply_module_rewrites(loaded.module)
    progress("torch.export")
    try:
        with timed(timings, "export"):
            program = loaded.program or export(loaded, opts.source.dynamic)
            save_program(program, staging / "exported.pt2")
    except ExportFailed as exc:
        rows = [{**failed_row(t.name, v, str(exc)), "required": is_required(t.name, v, the_plan.config)}
                for t, v in the_plan.rows]
        return write_outputs(staging, assemble(opts.source.model, rows, None, the_plan, timings, opts.judge), None,
                             opts.output.junit)
    signature = signature_of(program, loaded.input_names)
    with timed(timings, "reference"):
        session = start_session(loaded, program, signature, opts, the_plan, module_rewrites, progress)
    rows = run_rows(session, the_plan, staging, progress)
    report = assemble(opts.source.model, rows, session, the_plan, timings, opts.judge,
                      program={"params": param_count(program), **fingerprint(program, signature)})
    return write_outputs(staging, report, manifest(opts.source.model, signature, rows), opts.output.junit)


def start_session(loaded, program, signature, opts: ConvertOptions, the_plan, module_rewrites, progress):
    from edgeport.pipeline.session import Session
    from edgeport.validate.data import load_data

    calibration = load_data(opts.calibration_data, signature, "--calibration-data") if opts.calibration_data else None
    return Session.start(loaded, program, signature, opts.judge, progress, module_rewrites=tuple(module_rewrites),
                         decompositions=the_plan.decompositions, calibration=calibration,
                         target_options=dict(opts.target_options), dynamic=tuple(opts.source.dynamic),
                         fallback=the_plan.fallback)


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
    from edgeport.validate.environment import environment
    from edgeport.validate.report import build_report, finish_report

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


@contextlib.contextmanager
def timed(timings: dict, name: str):
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[name] = round(time.perf_counter() - start, 3)


def stamp() -> dict:
    return {"edgeport_version": __version__, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def check_directory(directory: Path) -> dict:
    from edgeport.validate.report import read_report_dir

    report = read_report_dir(directory)
    if not (directory / "exported.pt2").is_file():
        raise UsageError(f"{directory} has no exported.pt2: nothing to compare the artifacts against")
    return report
