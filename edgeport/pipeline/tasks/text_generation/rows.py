"""One target x variant of a generative model, as the one pipeline's row runs it
(:func:`edgeport.pipeline.row.run_row`): the target's rewrites on every signature's program -> convert ->
load -> greedy generation on every prompt -> tokens and logits judged -> timed.
"""

from __future__ import annotations

from pathlib import Path

from edgeport.diagnostics import first_line
from edgeport.pipeline.row import BuildFailed, Row, Verdict, conversion_error
from edgeport.pipeline.tasks import Built


def build(row: Row, target, variant: str, session, out_dir: Path, budget: dict) -> Built:
    """Every signature's program with the target's rewrites (as forward programs get them), converted into
    one artifact by the target's generative support; or the same conversion from the cache
    (:mod:`.reuse`: ``row.details["cache"]`` says hit, miss or off)."""
    from edgeport.core.memory import release
    from edgeport.core.progress import scoped
    from edgeport.pipeline.reuse import cached_conversion
    from edgeport.pipeline.tasks.text_generation.judge import generation_budget
    from edgeport.pipeline.tasks.text_generation.reuse import row_key
    from edgeport.targets.base import GenerativeJob

    bundle = target.generation().bundle(variant)
    passes = [] if bundle else declared_passes(target)
    job = GenerativeJob(dict(session.programs), session.samples, session.layout.to_json(), variant, out_dir,
                        dict(session.target_options), notes=list(session.notes), passes=tuple(passes),
                        progress=scoped(session.progress, f"{target.name} {variant}"))
    support = target.generation()
    from_source = not bundle and bool(support.from_source and support.from_source(job))
    convert = lambda: _convert(target, bundle, passes, job, session, from_source)  # noqa: E731
    key = row_key(target, variant, session, passes, from_source)
    try:
        if key is None:
            row.details["cache"] = "off"
            converted = convert()
        else:
            converted = cached_conversion(session.cache, key, job, convert, row.details, target.name)
    except Exception as exc:
        raise BuildFailed(conversion_error(exc, job.programs["decode"]), job.notes) from exc
    row.rewrites = list(converted.rewrites)
    converted.files += tokenizer_files(out_dir.parent)
    job.programs = {}  # the rewritten programs (and the converter's graphs they anchor) go before the judge
    release(session.weight_bytes)
    return Built(converted, job, generation_budget(budget, bundle.precision if bundle else variant), key, job.notes)


def tokenizer_files(staging: Path) -> list[Path]:
    """The tokenizer copied beside the artifacts (``DIR/tokenizer/``): an app cannot drive a generative
    artifact from text without it, so it is one of every generative artifact's files."""
    folder = staging / "tokenizer"
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else []


def _convert(target, bundle, passes: list[str], job, session, from_source: bool):
    """The conversion itself: the rewrites on each program, then the target's (or the bundle's) converter;
    the passes applied ride on the result as its rewrites (so a cache hit reports them too). A target that
    builds from the model's own files (``GenerativeSupport.from_source``) gets the rewrites only if it falls
    back to the programs (``job.rewrite``)."""
    state = {"ran": False, "applied": []}

    def rewrite() -> list[str]:
        if passes and not state["ran"]:
            job.programs, state["applied"], notes = rewritten_programs(target, session.programs, session.samples, passes)
            job.notes.extend(notes)
        state["ran"] = True
        return list(state["applied"])

    job.rewrite = rewrite
    if not bundle and not from_source:
        rewrite()
    converted = (bundle.impl().convert if bundle else target.generation().convert)(job)
    done = [] if converted.from_source else state["applied"]   # not built from the rewritten programs
    converted.rewrites = [*done, *(r for r in converted.rewrites if r not in done)]
    return converted


def rewritten_programs(target, programs: dict, samples: dict, names: list[str] | None = None) -> tuple[dict, list[str], list[str]]:
    """(programs, passes applied, notes): the target's node rewrites (e.g. ``sort_by_rank`` for a MoE router
    that sorts) on each prefill/decode program, re-exported with its named inputs, the way forward's program
    gets them (:func:`edgeport.targets.rewrites.rewrite_for_target`, the same fallbacks and notes)."""
    from edgeport.targets.rewrites import rewrite_for_target

    names = declared_passes(target) if names is None else names
    out, applied, notes = {}, [], []
    for name, program in programs.items():
        result = rewrite_for_target(program, names, example_kwargs=samples.get(name))
        notes += [f"{note} ({name})" for note in result.notes]
        out[name] = result.program
        applied += [a for a in result.applied if a not in applied]
    return out, applied, notes


def declared_passes(target) -> list[str]:
    """The target's node passes and its program passes but the user's decompositions (a generative model
    has no custom ops): ``upcast_fp32`` is a no-op on programs exported from a model upcast at load, and
    is passed anyway so every declared pass reaches both tasks' programs the same way."""
    from edgeport.targets.rewrites import PROGRAM_PASSES, REWRITES

    return [n for n in target.rewrites if n in REWRITES or (n in PROGRAM_PASSES and n != "user_decompositions")]


def judge(row: Row, target, built: Built, session, staging: Path) -> None:
    """A cached verdict (--reuse-verdict on a hit), or generate + compare + time, then stored for a later run."""
    from edgeport.pipeline.reuse import keep_verdict, reused_verdict

    from edgeport.core.memory import release

    if not reused_verdict(row, built.key, session, built.budget):
        row.apply(judge_any(target.generation(), row.variant, built.converted.artifact, session, built.budget))
        if not keep_groups_float(row, target, built, session, staging):   # --fallback float (:mod:`.fallback`)
            keep_verdict(row, built.key, session, built.budget)
    release(session.weight_bytes)  # the runtime and its packed weights, before the next row is judged


def keep_groups_float(row: Row, target, built: Built, session, staging: Path) -> bool:
    """True when ``--fallback float`` rebuilt the row (its verdict is not the cached conversion's)."""
    from edgeport.pipeline.tasks.text_generation import fallback

    programs = lambda: rewritten_programs(target, session.programs, session.samples, list(built.job.passes))[0]  # noqa: E731
    return fallback.applies(target, row, session, built.budget) and \
        fallback.keep_groups_float(row, target, built, session, staging, judge_generative, tokenizer_files, programs)


def rejudge(row: Row, target, path: Path, session, budget: dict) -> None:
    from edgeport.pipeline.tasks.text_generation.judge import generation_budget

    if target.generation() is None:
        row.status, row.error = "failed", f"target {row.target!r} has no text-generation support in this edgeport"
        return
    support = target.generation()
    bundle = support.bundle(row.variant)
    row.apply(judge_any(support, row.variant, path, session,
                        generation_budget(budget, bundle.precision if bundle else row.variant)))


def judge_any(support, variant: str, artifact: Path, session, budget: dict) -> Verdict:
    """A bundle variant is judged by its own runtime (from text); every other one by the prefill/decode loop."""
    bundle = support.bundle(variant)
    if bundle:
        from edgeport.pipeline.tasks.text_generation.bundle import judge

        return judge(bundle.impl(), artifact, session, budget)
    return judge_generative(support, artifact, session, budget)


def judge_generative(support, artifact: Path, session, budget: dict) -> Verdict:
    """Load, generate on every prompt, compare with the reference, teacher-force the eval text, time; a
    load/run failure fails the row."""
    from edgeport.pipeline.tasks.text_generation.judge import (artifact_latency, compare_generations, generation_block, peak_rss,
                                           reset_peak_rss)
    from edgeport.pipeline.tasks.text_generation.quality import tokens_budget
    from edgeport.pipeline.plan import fixed_threads

    layout = session.layout
    before = reset_peak_rss()
    try:
        runner = support.load(artifact, fixed_threads(session.judge.threads))
        quality, got = quality_and_generations(runner, session)
        checks = run_checks(runner, session)
        budget = tokens_budget(budget, quality)
        tokens, parity = compare_generations(session.reference, got, budget)
        latency, decode = artifact_latency(runner, layout, session.prompts[-1]) if session.judge.latency else (None, None)
        io, judged_on = runner.io(), runner.details()
    except Exception as exc:
        return Verdict("failed", f"artifact does not run in its runtime: {first_line(exc)}")
    rss = {"peak_rss_bytes": peak_rss(), "rss_before_load_bytes": before}
    block = generation_block(session.prompts, layout.gen_tokens, tokens, parity, latency, session.eager, io, rss)
    latency_ms = {**{k: decode[k] for k in ("p50", "p90", "runs")}, "threads": runner.threads} if decode else None
    notes = ["--threads auto: generative rows run at all cores (no runner sweep)"] if session.judge.threads == "auto" else []
    failures = quality_gate(quality, checks, budget, parity)
    error = None if not failures else f"parity: {'; '.join(failures)}"
    details = {"generation": block, "signatures": io, **judged_on, **({"quality": quality} if quality else {}),
               **({"checks": checks} if checks else {})}
    return Verdict("failed" if failures else "ok", error, parity, latency_ms, None, details,
                   notes + parity.get("notes", []) + session_notes(session))


def quality_and_generations(runner, session) -> tuple[dict | None, list]:
    """(the ``quality`` block, the greedy generation of every prompt): the quality windows and the prompts run
    together (:func:`~.loop.interleaved`: a runtime rebuilt per signature switches twice for all of them)."""
    from edgeport.pipeline.tasks.text_generation.loop import greedy_steps, interleaved
    from edgeport.pipeline.tasks.text_generation.quality import measured, window_steps

    ref, layout = getattr(session, "quality", None), session.layout
    windows = window_steps(runner, layout, ref) if ref is not None else []
    done = interleaved(runner, [*windows, *(greedy_steps(runner, layout, p, layout.gen_tokens) for p in session.prompts)])
    return (measured(ref, done[:len(windows)]) if ref is not None else None), done[len(windows):]


def run_checks(runner, session) -> dict | None:
    from edgeport.pipeline.tasks.text_generation.checks import run_checks as run

    prepared = getattr(session, "checks", None)
    return run(runner, session.layout, prepared) if prepared is not None else None


def quality_gate(quality: dict | None, checks: dict | None, budget: dict, parity: dict) -> list[str]:
    """Every failure of the row: the logits/tokens parity, then the quality budgets and the task checks (the
    parity's ``passed`` follows them, so the summary and JUnit read the row as failed)."""
    from edgeport.pipeline.tasks.text_generation.checks import checks_failures
    from edgeport.pipeline.tasks.text_generation.quality import quality_failures

    failures = [] if parity["passed"] else [parity["message"]]
    if quality is not None:
        failures += quality_failures(quality, budget)
    if checks is not None:
        failures += checks_failures(checks, budget)
    parity["passed"] = not failures
    return failures


def session_notes(session) -> list[str]:
    note = getattr(session, "quality_note", None)
    return [note] if note else []
