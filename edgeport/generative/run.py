"""``edgeport convert --task text-generation``: load -> export prefill/decode once -> reference generation
-> every target x variant (convert, generate, judge) -> report and manifest.

Called by :func:`edgeport.pipeline.run.convert` inside the same staging directory and run log as a forward
conversion, so publishing, ``--force`` and the log work the same way.
"""

from __future__ import annotations

from pathlib import Path

from edgeport.errors import ExportFailed
from edgeport.pipeline.proc import timed


def convert_generation(staging: Path, opts, the_plan, progress) -> dict:
    from edgeport.generative.export import export_generation, load_causal_lm
    from edgeport.generative.manifest import generation_manifest
    from edgeport.validate.report import write_outputs

    timings: dict[str, float] = {}
    progress("loading model")
    with timed(timings, "load"):
        loaded = load_causal_lm(opts.source)
    real, data = real_prompts(opts, the_plan.generation, loaded[0])
    progress("export_for_generation (prefill + decode)")
    try:
        with timed(timings, "export"):
            exported = export_generation(opts.source, the_plan.generation, staging, loaded)
    except ExportFailed as exc:
        rows = failed_rows(the_plan, str(exc))
        return write_outputs(staging, assemble(opts.source.model, rows, None, the_plan, timings, opts.judge.threads),
                             None, opts.output.junit)
    progress("PyTorch reference (generate)")
    with timed(timings, "reference"):
        session = start_session(exported, opts, real, data)
    rows = run_rows(session, the_plan, staging, progress)
    params = sum(p.numel() for p in exported.model.parameters())
    report = assemble(opts.source.model, rows, session, the_plan, timings, opts.judge.threads, int(params))
    manifest = generation_manifest(opts.source.model, session, rows, staging)
    return write_outputs(staging, report, manifest, opts.output.junit)


def real_prompts(opts, plan, model) -> tuple[list, dict | None]:
    """--data prompts, read and checked before the export (a bad file is exit 2 before minutes of work)."""
    if not opts.judge.data:
        return [], None
    from edgeport.generative.layout import Layout
    from edgeport.generative.prompts import read_prompts

    shape = Layout(opts.source.model, plan.architecture, int(model.config.vocab_size), 0, plan.cache_len,
                   list(plan.prefill_lens), plan.gen_tokens, None, [])
    return read_prompts(opts.judge.data, shape, Path(opts.source.model[3:]))


def start_session(exported, opts, real: list, data: dict | None):
    from edgeport.generative.prompts import random_prompts
    from edgeport.generative.reference import eager_latency, generate_reference
    from edgeport.generative.rows import GenSession
    from edgeport.pipeline.plan import fixed_threads

    layout = exported.layout
    prompts = real + random_prompts(layout, opts.judge.samples, opts.judge.seed)
    reference = generate_reference(exported.model, prompts, layout.gen_tokens, layout.cache_len)
    eager = eager_latency(exported.model, layout, fixed_threads(opts.judge.threads)) if opts.judge.latency else None
    return GenSession(layout, exported.programs, exported.samples, prompts, reference, eager, opts.judge,
                      dict(opts.target_options), data, {"real": len(real), "random": len(prompts) - len(real)},
                      notes=list(exported.notes))


def run_rows(session, the_plan, staging: Path, progress) -> list[dict]:
    from edgeport.config import budget_for, is_required
    from edgeport.generative.rows import run_generation_row
    from edgeport.pipeline.row import Row

    rows = []
    for target, variant in the_plan.generation.rows:
        progress(f"{target.name} {variant} (text-generation)")
        budget = budget_for(target.name, variant, the_plan.config, the_plan.budget_flags)
        required = is_required(target.name, variant, the_plan.config)
        rows.append(run_generation_row(target, variant, session, staging, budget, required))
    for target, variant, why in the_plan.generation.skipped:
        rows.append(Row(target.name, variant, status="skipped", error=why,
                        required=is_required(target.name, variant, the_plan.config)).to_json())
    return rows


def failed_rows(the_plan, error: str) -> list[dict]:
    from edgeport.config import is_required
    from edgeport.pipeline.row import Row

    return [{**Row(t.name, v, status="failed", error=error).to_json(), "required": is_required(t.name, v, the_plan.config)}
            for t, v in the_plan.rows]


def assemble(spec: str, rows: list[dict], session, the_plan, timings: dict | None, threads, params: int | None = None,
             baseline=None) -> dict:
    """report.json for generative rows: the forward report's fields (so every rendering, baseline and JUnit
    reads it) plus its ``generation`` block."""
    from edgeport.export.registry import get_target, target_names
    from edgeport.validate.environment import environment
    from edgeport.validate import payoff
    from edgeport.validate.report import build_report, finish_report

    rows = payoff.apply(rows)  # ratios to each target's fp32 row, and their budgets (as the forward report)
    libraries = sorted({m for r in rows if r["target"] in target_names() for m in get_target(r["target"]).requires})
    report = build_report(spec, params, rows, session.reference_latency if session else None,
                          session.data if session else None, timings, environment(threads, libraries + ["transformers"]))
    if session is not None:
        report["generation"] = session.report_block()
    return finish_report(report, baseline if baseline is not None else getattr(the_plan, "baseline", None))
