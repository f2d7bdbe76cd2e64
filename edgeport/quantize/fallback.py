"""What a quantized row does after its first judgement: name the layers that break int8 and, with
``--fallback float``, keep the fewest of them float that meets the budget — proved on the rebuilt artifact.

The row gets ``quantization``: the scheme, the float layers, the most sensitive layers with the error each one
causes alone, the search curve (float layers -> cosine/SNR, pass/fail, measured on the artifact or on the
target's simulation of it) and what the float layers cost against full int8 (size, p50).
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from edgeport.diagnostics import first_line
from edgeport.quantize.search import TOP, greedy, sensitivity, step

REFERENCE_PROBLEMS = ("reference_nonfinite", "empty", "degenerate_reference")
# quantization.float_layers lists every layer the artifact keeps float, each with why: the search's (this),
# or the target's own choice (artifact_share.record adds those with the target's reason)
FALLBACK_WHY = "--fallback float: int8 broke the budget here"


def rebuilt(row) -> bool:
    """The row's artifact was rebuilt by the search (it kept layers float to meet the budget)."""
    floats = (row.details.get("quantization") or {}).get("float_layers") or []
    return any(layer.get("why") == FALLBACK_WHY for layer in floats)


def applies(target, row, session) -> bool:
    """A quantized variant whose layers can stay float, judged, and either failing for a reason a layer can
    cause or asked to search (a passing row then records that it kept no layer float)."""
    if not target.can_keep_float(row.variant) or not row.parity:
        return False
    if row.parity["passed"]:
        return session.fallback.mode is not None
    failing = [o for o in row.parity["outputs"] if not o["passed"]]
    return bool(failing) and not all(any(o.get(k) for k in REFERENCE_PROBLEMS) for o in failing)


def keep_layers_float(row, target, job, session, budget: dict, judge, staging: Path) -> bool:
    """Analyse (and with ``--fallback float`` repair) the row in place; True when the row's failure is now
    explained by its layers, so bisecting for a converter bug would add nothing."""
    scheme = target.float_fallback.variants[row.variant]
    if row.parity["passed"]:
        row.details["quantization"] = {"scheme": scheme, "float_layers": [], "sensitive_layers": [],
                                       "search": [step(row.parity, 0, "artifact")]}
        return False
    start = time.perf_counter()
    try:
        quantizer = target.float_fallback.prepare(job)
    except Exception as exc:
        row.note(f"could not measure int8 layer sensitivity: {first_line(exc)}")
        return False
    try:
        record = _analyse(row, target, job, session, budget, judge, staging, quantizer)
    except Exception as exc:
        row.note(f"could not measure int8 layer sensitivity: {first_line(exc)}")
        return False
    finally:
        quantizer.close()
    row.details["quantization"] = {"scheme": scheme, **record, "seconds": round(time.perf_counter() - start, 3)}
    return True


def _analyse(row, target, job, session, budget, judge, staging, quantizer) -> dict:
    names = [o.name for o in session.signature.outputs]
    ranked = sensitivity(quantizer, session.samples, session.reference, budget, names)
    by_id = {layer.id: layer for layer in quantizer.layers}
    record = {"layers": len(quantizer.layers), "float_layers": [], "sensitive_layers": ranked[:TOP],
              "search": [step(row.parity, 0, "artifact")], "measured": quantizer.measured}
    if not quantizer.layers:
        row.note("int8: no layer of this model can be kept float by this quantizer")
        return record
    if session.fallback.mode is None:
        row.error = f"{row.error}; {_blame(ranked)}; --fallback float keeps the layers that break int8 in float"
        return record
    cap = session.fallback.cap(len(quantizer.layers))
    from edgeport.validate.parity import compare

    def measure(floats):
        return compare(session.reference, quantizer.run(session.samples, floats), budget, names)

    def confirm(floats):
        built_job = replace(job, float_layers=tuple(floats), notes=[])
        converted = target.convert(built_job)
        verdict = judge(target, converted.artifact, session, budget)
        return (converted, verdict, built_job.notes), verdict.parity or {"passed": False}

    if quantizer.measured != "artifact":  # the simulation's own full int8, beside the artifact's: its bias
        record["search"].append(step(measure(()), 0, quantizer.measured))
    search = greedy(quantizer, [r["node"] for r in ranked], cap, measure, confirm, budget)
    record["search"] += search.steps
    record.update(cap=cap, search_seconds=search.seconds)
    if search.built is not None:
        _adopt(row, search.built, staging, record, [by_id[i] for i in search.float_layers])
    if search.error:
        record["search_error"] = search.error
        row.error = f"{row.error}; --fallback float {search.error}"
    elif not search.passed:
        row.error = f"{row.error}; {_gave_up(record, cap, session.fallback.text)}"
    return record


def _adopt(row, built, staging: Path, record: dict, floats: list) -> None:
    """The rebuilt artifact becomes the row's: its verdict, size, hash, and its cost against full int8."""
    from edgeport.core.files import digested

    converted, verdict, notes = built
    full_size, full_latency = row.size_bytes, (row.latency_ms or {}).get("p50")
    row.apply(verdict)
    row.note(*notes)
    row.artifact = str(converted.artifact.relative_to(staging))
    row.files, row.size_bytes, row.sha256 = digested(converted, staging)
    row.details.update(converted.details)
    latency = (row.latency_ms or {}).get("p50")
    record["float_layers"] = [{**layer.to_json(), "why": FALLBACK_WHY} for layer in floats]
    record["size_vs_full_quantized"] = round(row.size_bytes / full_size, 4) if full_size else None
    record["latency_vs_full_quantized"] = round(latency / full_latency, 4) if latency and full_latency else None
    if verdict.parity and verdict.parity["passed"]:
        kept = ", ".join(layer.name for layer in floats)
        row.note(f"int8 kept {len(floats)} of {record['layers']} layers float to meet the budget: {kept}")


def _blame(ranked: list[dict]) -> str:
    """The layers that break int8 on their own (else the worst few), each with the error it causes alone."""
    bad = [r for r in ranked if not r["passed"]][:3] or ranked[:3]
    named = ", ".join(f"{r['name']} ({r['op']}{', ' + r['source'] if r.get('source') else ''}: alone "
                      f"cosine {r['cosine_min']:.4f}, SNR {r['snr_db_min']:.1f} dB)" for r in bad)
    return f"most sensitive int8 layers: {named}"


def _gave_up(record: dict, cap: int, cap_text: str) -> str:
    return (f"--fallback float: still over budget with {cap} of {record['layers']} layers float (the cap, "
            f"--fallback-max {cap_text}){best_steps(record['search'])}; raise --fallback-max or relax the budget")


def best_steps(steps: list[dict]) -> str:
    """The search's best, per metric: the highest cosine and the highest SNR may come from different float
    sets, and a simulation's number is not the artifact's, so each is quoted with its float count and how it
    was measured — the same numbers as the row's ``quantization.search`` table, never a mix of them."""
    tried = [s for s in steps if s["float_layers"]]
    parts = []
    for key, text in (("cosine_min", "cosine {:.4f}"), ("snr_db_min", "SNR {:.1f} dB")):
        scored = [s for s in tried if isinstance(s.get(key), (int, float))]
        if scored:
            best = max(scored, key=lambda s: s[key])
            parts.append(f"{text.format(best[key])} with {best['float_layers']} float ({best.get('measured') or '?'})")
    return f"; best {', best '.join(parts)}" if parts else ""
