"""``--fallback float`` for text generation: a quantized row that misses its quality budget (mean/p99 KLD,
same top-1 over the eval text) keeps the weight groups that cost the most KLD in float, is rebuilt by its
target's quantizer and judged again on the same text, like any row.

Why this shape (forward's search, :mod:`edgeport.quantize.fallback`, judges cosine/SNR on parity samples;
an LLM's yardstick is the distribution over real text):
- Groups, not single matmuls: the target names them (a decoder block's attention, its MLP, the lm_head), so
  a 30-block model has 61 candidates, not 211, and each is something a user can name.
- Sensitivity: each group quantized *alone* (everything else float), teacher-forced over the first
  ``SENSITIVITY_TOKENS`` tokens of the eval text, KLD against PyTorch fp32. Alone, as forward measures it:
  the KLD a group adds is what keeping it float takes away.
- Candidates run in the target's simulation (``measured``: the artifact's own quantized weights in the fp32
  graphs) over the whole eval text; the most sensitive groups go float first, k = 1..cap (``--fallback-max``).
  The first candidate within budget is built for real and judged by :func:`.rows.judge_generative`; if the
  real artifact misses, the gap becomes a margin the next simulated candidate must clear (at most
  ``MAX_BUILDS`` rebuilds). A simulation's pass is never the verdict.

``--fallback int8`` (a variant whose ``GenerativeFallback.keeps`` has it: int4-block32 on ONNX, LiteRT and ExecuTorch) is the same search with
the kept groups at int8 instead of float: candidates simulate them at int8, the rebuild stores them at int8 (a
fraction of float's size). Sensitivity is the same either way (each group alone, the rest float).

The row's ``quantization`` block records the groups kept (key ``float_layers``, each with its ``precision``;
``keep`` and, for int8, ``kept_scheme``), the most sensitive groups (KLD alone), the search curve (kept groups ->
mean/p99 KLD, top-1, measured on), and before/after (quality and size).
"""

from __future__ import annotations

import time
from pathlib import Path

from edgeport.diagnostics import first_line

SENSITIVITY_TOKENS = 32   # a short slice ranks groups; candidates are measured on the whole eval text
MAX_BUILDS = 3            # real rebuilds (quantize + judge) one search may spend
TOP = 5                   # sensitive groups the report names
FALLBACK_WHY = "--fallback float: the quantized row missed its quality budget"
METRICS = ("kld_mean", "kld_p99", "top1_agreement")


def applies(target, row, session, budget: dict) -> bool:
    """``--fallback float``, a variant whose weight groups can stay float, and a row whose quality block
    misses its budget (a row failing only its task checks or tokens is not what float weights fix)."""
    from edgeport.pipeline.tasks.text_generation.quality import quality_failures

    support, policy, quality = target.generation(), session.fallback, row.details.get("quality")
    return bool(policy is not None and policy.mode and support is not None and quality
                and support.can_keep_float(row.variant, policy.mode) and getattr(session, "quality", None) is not None
                and quality_failures(quality, budget))


def keep_groups_float(row, target, built, session, staging: Path, judge, files, programs=None) -> bool:
    """Search, rebuild and re-judge the row in place; True when its artifact was rebuilt (its verdict is no
    longer the cached conversion's). ``judge``: the row's own (:func:`.rows.judge_generative`); ``files``:
    the files every generative artifact carries besides its own (the tokenizer); ``programs()``: the row's
    programs with the target's rewrites (:func:`.rows.rewritten_programs`), for a quantizer that needs them."""
    from edgeport.core.progress import scoped
    from edgeport.pipeline.plan import fixed_threads

    support, start, mode = target.generation(), time.perf_counter(), session.fallback.mode
    say = scoped(session.progress, f"{target.name} {row.variant}") if session.progress else (lambda _m: None)
    try:
        quantizer = support.float_fallback.prepare(Path(built.converted.artifact), row.variant,
                                                   fixed_threads(session.judge.threads),
                                                   **_prepare_args(target, built, session, mode, programs))
    except Exception as exc:
        row.note(f"--fallback {mode} could not start: {first_line(exc)}")
        return False
    try:
        record, rebuilt = _search(row, support, quantizer, built, session, staging, say, (judge, files))
    except Exception as exc:
        row.note(f"--fallback {mode} stopped: {first_line(exc)}")
        return False
    finally:
        quantizer.close()
    kept = {} if mode == "float" else {"kept_scheme": getattr(quantizer, "kept_scheme", mode)}
    row.details["quantization"] = {"scheme": support.float_fallback.variants[row.variant], "keep": mode, **kept,
                                   **record, "seconds": round(time.perf_counter() - start, 3)}
    return rebuilt


def _prepare_args(target, built, session, mode: str, programs) -> dict:
    """``keep`` for a mode other than float; ``job`` for a target whose quantizer works on the programs
    (``GenerativeFallback.programs``): the row's job with every program as the row converted it
    (``programs()``: the target's rewrites on the session's programs, which :func:`.session.release_programs`
    kept for this)."""
    from dataclasses import replace

    args = {} if mode == "float" else {"keep": mode}
    if target.generation().float_fallback.programs:
        if not session.programs:
            raise RuntimeError("the exported programs were let go before the judge")
        args["job"] = replace(built.job, programs=programs(), notes=[])
    return args


def _search(row, support, quantizer, built, session, staging: Path, say, judged) -> tuple[dict, bool]:
    from edgeport.pipeline.tasks.text_generation.check_search import ForChecks
    from edgeport.pipeline.tasks.text_generation.quality import quality_failures

    budget, groups = built.budget, quantizer.groups
    before = {**_metrics(row.details["quality"]), "size_bytes": row.size_bytes}
    say(f"--fallback {session.fallback.mode}: {len(groups)} weight groups, each quantized alone")
    ranked = sensitivity(quantizer, session, groups)
    cap = session.fallback.cap(len(groups))
    record = {"metric": "kld", "layers": len(groups), "cap": cap, "float_layers": [], "sensitive_layers": ranked[:TOP],
              "search": [_step(before, 0, "artifact", not quality_failures(row.details["quality"], budget))],
              "before": before, "measured": quantizer.measured}
    order, margin, builds, rebuilt, mode = [r["name"] for r in ranked], {}, 0, False, session.fallback.mode
    aim, kept, why = ForChecks(quantizer, session, groups, say), [], {}
    for k in range(1, min(cap, len(order)) + 1):
        group, reason = aim.next(order, kept)
        if group is None:
            break
        kept, why[group] = kept + [group], reason
        say(f"--fallback {mode}: {k} group(s) {mode} (+{group}, for the {why[group]}), simulated over the eval text")
        failures = _candidate(quantizer, groups, kept, session, _tightened(budget, margin), aim)
        record["search"].append({**failures.pop(), "for": why[group], **_why(failures)})
        if failures:   # said as it happens: a search stopped by --row-timeout keeps no record, only its log
            say(f"--fallback {mode}: {k} group(s) {mode} fail: {'; '.join(failures)}")
            continue
        say(f"--fallback {mode}: rebuilding with {k} group(s) {mode}, judged again")
        real = _rebuild(row, support, quantizer, kept, session, staging, budget, judged)
        builds, rebuilt = builds + 1, True
        record["search"].append({**_step(real, k, "artifact", row.status == "ok"),
                                 **_why([row.error] if row.status != "ok" and row.error else [])})
        record["float_layers"] = [_kept(g, groups[g], mode, why[g]) for g in kept]
        if row.status == "ok" or builds >= MAX_BUILDS or real["kld_mean"] is None:   # None: it did not run
            break
        margin = {key: max(0.0, abs(real.get(key, 0) - record["search"][-2][key])) for key in METRICS}
    if aim.rankings:
        record["check_rankings"] = aim.rankings
    _conclude(row, record, rebuilt, before, cap, mode)
    return record, rebuilt


def _candidate(quantizer, groups: dict, kept: list[str], session, budget: dict, aim) -> list:
    """The failures of the simulated candidate keeping ``kept`` (the quality budget, then the checks), its
    search step last; ``aim`` hears what it lost."""
    from edgeport.pipeline.tasks.text_generation.quality import quality_failures

    mode = session.fallback.mode
    quantized = [g for g in groups if g not in kept]
    candidate = lambda: quantizer.runner(quantized, **({} if mode == "float" else {"kept": kept}))  # noqa: E731
    sim = _measure(candidate(), session, session.quality)
    failures, lost = quality_failures(sim, budget), []
    missed = bool(failures)
    if not missed:
        failures, lost = _check_failures(candidate(), session, budget, aim.lost)
    aim.saw(missed, lost)
    step = _step(sim, len(kept), quantizer.measured, not failures)
    return [*failures, {**step, **({"lost_checks": lost} if lost else {})}]


def _kept(name: str, info: dict, mode: str, why: str) -> dict:
    reason = FALLBACK_WHY.replace("float", mode, 1)
    if why == "checks":
        reason = f"--fallback {mode}: a candidate met the quality budget but lost task checks (--checks)"
    return {"name": name, "op": info["op"], "source": None, "matmuls": info["matmuls"], "precision": mode,
            "why": reason, "for": why}


def sensitivity(quantizer, session, groups: dict) -> list[dict]:
    """Every group quantized alone over a short slice of the eval text, worst (highest mean KLD) first."""
    short = _slice(session.quality, SENSITIVITY_TOKENS)
    ranked = []
    for name, info in groups.items():
        metrics = _measure(quantizer.runner([name]), session, short)
        ranked.append({"name": name, "op": info["op"], "source": None, "matmuls": info["matmuls"],
                       "fp32_bytes": info["fp32_bytes"], **_metrics(metrics), "tokens": metrics["tokens"]})
    return sorted(ranked, key=lambda r: (-r["kld_mean"], r["top1_agreement"]))


def _measure(runner, session, reference) -> dict:
    """The quality block of one candidate; its runtime (a copy of the weights) is gone before the next."""
    from edgeport.core.memory import release
    from edgeport.pipeline.tasks.text_generation.quality import measure

    try:
        return measure(runner, session.layout, reference)
    finally:
        getattr(runner, "close", lambda: None)()
        release(session.weight_bytes)


def _check_failures(runner, session, budget: dict, first=()) -> tuple[list[str], list[str]]:
    """The task checks (--checks) on a candidate that meets the quality budget: the simulation gives the
    artifact's logits, so a check the rebuilt artifact would lose is lost here, without a rebuild. The checks
    an earlier candidate lost (``first``) are asked first. (failure lines, checks lost)."""
    from edgeport.core.memory import release
    from edgeport.pipeline.tasks.text_generation.checks import candidate_check_failures

    if getattr(session, "checks", None) is None:
        runner.close()
        return [], []
    try:
        return candidate_check_failures(runner, session.layout, session.checks, budget, first)
    finally:
        runner.close()
        release(session.weight_bytes)


def _why(failures: list[str]) -> dict:
    return {"failed_on": "; ".join(failures)} if failures else {}


def _slice(reference, tokens: int):
    """The first window of the eval text, cut to ``tokens`` scored predictions (all of it when shorter)."""
    from dataclasses import replace

    window = reference.windows[0][: reference.context + tokens]
    return replace(reference, windows=[window], logits=[reference.logits[0][: len(window) - reference.context]])


def _rebuild(row, support, quantizer, floats: list[str], session, staging: Path, budget: dict, judged) -> dict:
    """The real artifact with ``floats`` float, judged like any row; the row now describes it."""
    from edgeport.core.files import digested

    judge, files = judged
    converted = quantizer.build(floats)
    converted.files += files(staging)
    row.apply(judge(support, converted.artifact, session, budget))
    row.artifact = str(Path(converted.artifact).relative_to(staging))
    row.files, row.size_bytes, row.sha256 = digested(converted, staging)
    row.details.update(converted.details)
    return _metrics(row.details.get("quality") or {})


def _conclude(row, record: dict, rebuilt: bool, before: dict, cap: int, mode: str = "float") -> None:
    """before/after and the size cost in the record; the row's note or error says what the search did."""
    if rebuilt:
        record["after"] = {**_metrics(row.details.get("quality") or {}), "size_bytes": row.size_bytes}
        record["size_vs_full_quantized"] = round(row.size_bytes / before["size_bytes"], 4) if before["size_bytes"] else None
    kept = ", ".join(layer["name"] for layer in record["float_layers"])
    if rebuilt and row.status == "ok":
        at = "float" if mode == "float" else f"at {mode}"
        for_checks = [layer["name"] for layer in record["float_layers"] if layer.get("for") == "checks"]
        also = f" and keep the task checks ({', '.join(for_checks)} for them)" if for_checks else ""
        row.note(f"--fallback {mode} kept {len(record['float_layers'])} of {record['layers']} weight groups {at} "
                 f"to meet the quality budget{also}: {kept} (mean KLD {before['kld_mean']:.4g} -> "
                 f"{record['after']['kld_mean']:.4g}, size x{record['size_vs_full_quantized']})")
        return
    best = min((s for s in record["search"] if s["float_layers"]), key=lambda s: s["kld_mean"], default=None)
    tried = f"; best mean KLD {best['kld_mean']:.4g} with {best['float_layers']} {mode} ({best['measured']})" if best else ""
    row.status = "failed"
    row.error = (f"{row.error or 'quality budget missed'}; --fallback {mode}: still over budget with up to {cap} of "
                 f"{record['layers']} weight groups {mode} (--fallback-max){tried}; raise --fallback-max or relax the budget")


def _tightened(budget: dict, margin: dict) -> dict:
    """The budget a simulated candidate must meet after a real artifact missed what its simulation met."""
    if not margin:
        return budget
    out = dict(budget)
    for key, gap in (("kld_mean_max", margin["kld_mean"]), ("kld_p99_max", margin["kld_p99"])):
        if key in out:
            out[key] = max(0.0, out[key] - gap)
    if "top1_agreement_min" in out:
        out["top1_agreement_min"] = min(1.0, out["top1_agreement_min"] + margin["top1_agreement"])
    return out


def _metrics(quality: dict) -> dict:
    return {key: quality.get(key) for key in (*METRICS, "ppl")}


def _step(metrics: dict, floats: int, measured: str, passed: bool) -> dict:
    return {"float_layers": floats, **{k: metrics.get(k) for k in METRICS}, "passed": bool(passed), "measured": measured,
            "cosine_min": None, "snr_db_min": None}
