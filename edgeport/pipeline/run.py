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
from edgeport.errors import ExportFailed
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
    from edgeport.core.scratch import run_scratch
    from edgeport.pipeline.outdir import publish, staging_dir
    from edgeport.pipeline.plan import plan

    progress = progress or (lambda _msg: None)
    the_plan = plan(opts)
    staging = staging_dir(opts.output.out)
    try:
        with redirected(staging / RUN_LOG), run_scratch(staging):  # scratch: removed before publishing
            opts = from_gguf(opts, progress)
            report = convert_into(staging, opts, the_plan, progress)
        publish(staging, opts.output.out)
    except BaseException:
        import shutil

        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Result(report, opts.output.out, 0 if report["passed"] else 1)


def from_gguf(opts: ConvertOptions, progress: Progress) -> ConvertOptions:
    """A GGUF source as the ``hf:`` directory every task reads, dequantized into the run's scratch folder."""
    from edgeport.sources.gguf import as_hf_source

    return as_hf_source(opts, progress)


def convert_into(staging: Path, opts: ConvertOptions, the_plan, progress: Progress) -> dict:
    """The plan's task: prepare (load, export, reference) -> rows -> report and manifest."""
    task = the_plan.task
    jobs = row_jobs(opts, the_plan) if task.parallel else 1
    if jobs > 1:
        from edgeport.pipeline.workers import prewarm

        prewarm()  # the workers' imports overlap loading and exporting
    timings: dict[str, float] = {}
    try:
        prepared = task.prepare(staging, opts, the_plan, progress, timings, workers=jobs > 1)
    except ExportFailed as exc:
        return write_failed(staging, opts, the_plan, str(exc), timings)
    if jobs > 1:
        rows = run_rows_parallel(prepared.session, the_plan, staging, progress, opts, jobs)
    else:
        rows = run_rows(prepared.session, the_plan, staging, progress)
    return finish(staging, opts, the_plan, rows, prepared)


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
        check_applies(_budget(the_plan, target, variant), outputs, f"budget of {target.name}.{variant}")


def write_failed(staging: Path, opts: ConvertOptions, the_plan, error: str, timings: dict) -> dict:
    """Every row failed with the same error (the export, or in a fleet the load): report still written."""
    from edgeport.config import is_required
    from edgeport.validate.report import write_outputs

    rows = [{**failed_row(t.name, v, error), "required": is_required(t.name, v, the_plan.config)}
            for t, v in the_plan.rows]
    spec = opts.source.gguf["spec"] if opts.source.gguf else opts.source.model
    report = assemble(spec, rows, None, the_plan.task, timings, opts.judge.threads, the_plan.baseline,
                      config=the_plan.config)
    return write_outputs(staging, report, None, opts.output.junit)


def finish(staging: Path, opts: ConvertOptions, the_plan, rows: list[dict], prepared: Prepared) -> dict:
    from edgeport.validate.report import write_outputs

    task = the_plan.task
    gguf = opts.source.gguf
    spec, program = (gguf["spec"], {**prepared.program, "gguf": gguf}) if gguf else (opts.source.model, prepared.program)
    report = assemble(spec, rows, prepared.session, task, prepared.timings, opts.judge.threads,
                      the_plan.baseline, program=dict(program), config=the_plan.config)
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


def row_jobs(opts: ConvertOptions, the_plan) -> int:
    """Worker processes for the rows: one per two cores (or ``--jobs``; see workers.default_jobs), never
    more than there are rows to convert; 1 means in this process, one row after another."""
    from edgeport.pipeline.workers import default_jobs

    installed = [t for t, _v in the_plan.rows if not t.missing_requirements()]
    return max(1, min(opts.jobs or default_jobs(), len(installed)))


def run_rows(session, the_plan, staging: Path, progress: Progress) -> list[dict]:
    """Every row of the plan in this process, one after another; then the rows the task cannot build
    (e.g. a target without text-generation support), skipped with the reason. A task with
    ``release_after_builds`` builds every row first, lets go of what only building needed (a generative
    model's programs: the weights once), then judges: the runtimes' own copies never sit beside them."""
    from edgeport.config import is_required
    from edgeport.core.memory import collect
    from edgeport.pipeline.row import Row, build_row, judge_row, run_row

    task, rows, built = the_plan.task, [], []
    for target, variant in the_plan.rows:
        progress(f"{target.name} {variant}" + ("" if task.name == "forward" else f" ({task.name})"))
        args = (target, variant, session, staging, _budget(the_plan, target, variant),
                is_required(target.name, variant, the_plan.config), task)
        if task.release_after_builds is None:
            rows.append(run_row(*args).to_json())
        else:
            built.append((target, *build_row(*args)))
        collect()   # a finished row's converter graphs and runtime (its mapped weights) go before the next
    if task.release_after_builds is not None:
        task.release_after_builds(session, the_plan.rows)
        rows = [(judge_row(row, target, b, session, staging, task) if b is not None else row).to_json()
                for target, row, b in built]
    for target, variant, why in the_plan.skipped:
        rows.append(Row(target.name, variant, status="skipped", error=why,
                        required=is_required(target.name, variant, the_plan.config)).to_json())
    return rows


def _budget(the_plan, target, variant: str) -> dict:
    from edgeport.config import budget_for

    return budget_for(target.name, variant, the_plan.config, the_plan.budget_flags, the_plan.task.name != "forward")


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
        if kind == "step":
            progress(str(payload))
            return
        name = f"{specs[i]['target']} {specs[i]['variant']}" + (f" (piece {specs[i]['piece']})" if "piece" in specs[i] else "")
        status = (payload.get("status") or ("failed" if payload.get("error") else "done")) if isinstance(payload, dict) else kind
        progress(f"{name}: {'converting' if kind == 'start' else status}")

    try:
        results = workers.run_all(specs, jobs, on_event, gate=session.judge.latency or session.judge.threads == "auto")
        return task.collect(staging, the_plan.rows, plans, specs, results, session.cache)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        (staging / task.INPUTS_FILE).unlink(missing_ok=True)


def preflight(loaded, opts: ConvertOptions, the_plan, workers: bool) -> None:
    from edgeport.core import memory

    middle = memory.program_intermediate_bytes(loaded.program) if loaded.program is not None else 0
    est = check_fits(memory.model_weight_bytes(loaded), opts, the_plan, workers, intermediate_bytes=middle)
    if loaded.program is not None:  # read from a file: its first run happens in a contained child
        probe_program(loaded, opts.source, est.memory)


def probe_program(loaded, source, memory_bytes: int) -> None:
    from edgeport.sources.contained import probe

    probe(loaded.spec, loaded.example_inputs, source.trust_pickle, source.decompositions, memory_bytes)


def check_fits(weight_bytes: int, opts: ConvertOptions, the_plan, workers: bool, programs: int = 1,
               generative: bool = False, intermediate_bytes: int = 0):
    """Refuse (exit 2, with the estimate) a model whose conversion will not fit in memory or on disk: every
    task asks this between its load and its export (a loaded program's declared intermediates included)."""
    from edgeport.core import memory

    est = memory.estimate(weight_bytes, the_plan.rows, row_jobs(opts, the_plan) if workers else 1, programs,
                          generative, intermediate_bytes)
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
