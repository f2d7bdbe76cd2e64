"""Numerical parity of an artifact against PyTorch eager, judged against a per-variant budget.

Metrics per output, over all samples: max abs error; max abs error scaled by max |reference| (reported as
``max_rel_err``: element-wise relative error explodes near zero outputs and says nothing); cosine
similarity; SNR in dB; for classifier-like outputs (last dim >= 2) top-k agreement = the share of rows whose
reference top-1 class is among the artifact's top-k. A budget gates on any subset of them (its keys, or only
those listed in ``gate``). Each output also carries an ``error_histogram`` of |artifact - reference| (one bin
per decade) so a report can show whether an error is one outlier or a shifted distribution.

Honest verdicts: an artifact passes only when something was compared.

- NaN/Inf in the artifact where the reference is finite always fails: a non-finite number can never be
  "within budget".
- A reference that is itself NaN/Inf has nothing to be compared with, and NaN in the artifact where the
  reference is NaN is not "equal": the output reports ``reference_nonfinite`` (how many elements) and fails,
  unless the budget says ``allow_nonfinite_reference = true``; then only the finite elements are judged
  (the artifact's values at the non-finite ones are not: converters legitimately turn -inf masks into the
  dtype's lowest number).
- An output with no elements to compare (zero-size, or nothing finite left) fails as "nothing compared"
  unless the budget says ``allow_empty = true``. ``elements_compared`` says how many were.
- A degenerate reference — max |ref| below ``TINY`` (1e-30), i.e. all zeros or denormals — carries no
  signal: runtimes flush denormals to zero (FTZ/DAZ), so a correct artifact returns 0 where PyTorch returned
  3e-40, and cosine (0 for a zero vector), SNR and scaled error (|err| / |ref| = 1) are meaningless there.
  Blaming the converter for that would be wrong, and so would passing anything. So such an output is
  reported as ``degenerate_reference`` and judged on absolute error only, against the budget's own
  ``max_abs_err`` when it sets one, else against ``TINY``: an artifact that is also ~0 passes (with the
  report saying the reference is degenerate), one that produces signal where the model produced none fails
  with a message that names the degenerate reference rather than a cosine of 0.000. Why 1e-30: float32's
  smallest normal number is 1.2e-38, so anything below 1e-30 is within a few hundred ulps of the denormal
  range that FTZ runtimes flush; no real model output carries information at that scale, while 1e-30 is
  still far below any float16/bfloat16/int8 step, so those variants are not excused by it.
  A single degenerate sample inside an output that has signal in other samples (e.g. an all-zero input) is
  judged against the output's scale over all samples (scaled error), without cosine/SNR for that sample.

Metrics that are meaningless for an output (cosine of a degenerate reference, anything of an empty one) are
``None`` at output level. The row-level summary (``max_abs_err``, ``max_rel_err``, ``cosine_min``) is always
a number, as report.schema.json requires: aggregates over the outputs that have the metric; when none has
one, ``max_rel_err`` falls back to ``max_abs_err`` and ``cosine_min`` to 1.0 for a pass, 0.0 for a failure.
"""

from __future__ import annotations

import math

import numpy as np

# The budgets a target declares per variant (Target.budgets), by precision class. Why these numbers: fp32
# artifacts reorder float ops (fused kernels, XNNPACK) and land ~1e-6 of the output scale on the probe models,
# so 1e-4 scaled leaves room without hiding a real bug. fp16/bf16 carry 11/8 mantissa bits: ~5e-4/4e-3 per op,
# accumulated through a network -> judge scaled error loosely and cosine. int8 changes every number by design:
# absolute error is meaningless, so only direction (cosine) and signal-to-noise gate.
FP32 = {"max_rel_err": 1e-4, "cosine_min": 0.99999}
FP16 = {"max_rel_err": 2e-2, "cosine_min": 0.999}
BF16 = {"max_rel_err": 5e-2, "cosine_min": 0.995}
WEIGHT_INT8 = {"cosine_min": 0.99, "snr_db_min": 20.0}
DYNAMIC_INT8 = {"cosine_min": 0.98, "snr_db_min": 15.0}
STATIC_INT8 = {"cosine_min": 0.95, "snr_db_min": 10.0}
# int4 weights in blocks (dynamic-range, generative): logits of a generated step keep ~0.96-0.99 cosine on the
# probe models, so tokens (token_agreement_min) and direction gate, not error size
INT4_BLOCK = {"cosine_min": 0.95, "snr_db_min": 10.0}
# a bf16/fp16 model is judged at least as loosely as its own precision (edgeport.pipeline.row)
REFERENCE_PRECISION = {"bf16": BF16, "fp16": FP16}
# token_agreement_min: text-generation rows only (share of the reference's greedy tokens reproduced before the
# first divergence; edgeport.pipeline.tasks.text_generation.judge gives its per-variant default)
# max_size_ratio / max_latency_ratio: a variant's size / p50 against its target's fp32 row (not parity: gated by
# edgeport.validate.payoff once every row of the run is in)
# kld_mean_max / kld_p99_max / top1_agreement_min: text-generation rows only, on teacher-forced real text
# (edgeport.pipeline.tasks.text_generation.quality gives their per-variant defaults); checks_drop_max: the share
# of --checks PyTorch passes that an artifact may fail (text_generation.checks; default 0, int4-block32 0.1)
QUALITY_KEYS = ("kld_mean_max", "kld_p99_max", "top1_agreement_min", "checks_drop_max")
BUDGET_KEYS = ("max_abs_err", "max_rel_err", "cosine_min", "snr_db_min", "topk_agreement_min", "topk",
               "token_agreement_min", "max_size_ratio", "max_latency_ratio", *QUALITY_KEYS)
GATE_KEYS = ("max_abs_err", "max_rel_err", "cosine_min", "snr_db_min", "topk_agreement_min", "token_agreement_min",
             *QUALITY_KEYS)
LIST_KEYS = ("gate", "topk_outputs")  # budget keys whose value is a list: metrics that gate, outputs top-k applies to
ALLOW_KEYS = ("allow_empty", "allow_nonfinite_reference")  # true/false: let an output pass that compared nothing / some
HISTOGRAM_EDGES = [10.0 ** e for e in range(-10, 3)]  # |error| decades 1e-10 .. 1e2
TINY = 1e-30  # max |reference| below this is no signal (see the module docstring); also the default absolute floor


def gates(budget: dict, key: str) -> bool:
    """A budget key gates when it is set and, if the budget names a ``gate`` list, listed there."""
    return key in budget and ("gate" not in budget or key in budget["gate"])


def _finite_pairs(ref: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, bool]:
    """(reference, artifact) at the finite reference elements, how many reference elements were not finite,
    and whether the artifact is NaN/Inf anywhere the reference is finite."""
    ref64 = np.asarray(ref).astype(np.float64).ravel()
    out64 = np.asarray(out).astype(np.float64).ravel()
    finite_ref = np.isfinite(ref64)
    nonfinite = bool(np.any(~np.isfinite(out64) & finite_ref))
    return ref64[finite_ref], out64[finite_ref], int(ref64.size - np.count_nonzero(finite_ref)), nonfinite


def _sample_metrics(ref: np.ndarray, out: np.ndarray, output_scale: float) -> dict:
    """Metrics of one sample; ``output_scale`` (max |ref| over all samples) scales a degenerate sample's error."""
    ref64, out64, ref_nonfinite, nonfinite = _finite_pairs(ref, out)
    base = {"elements": int(ref64.size), "reference_nonfinite": ref_nonfinite, "nonfinite": nonfinite, "degenerate": False}
    if ref64.size == 0:
        return {**base, "max_abs_err": None, "max_rel_err": None, "cosine": None, "snr_db": None}
    if nonfinite:
        return {**base, "max_abs_err": math.inf, "max_rel_err": math.inf, "cosine": -1.0, "snr_db": -math.inf}
    diff = out64 - ref64
    max_abs = float(np.max(np.abs(diff)))
    scale = float(np.max(np.abs(ref64)))
    if scale < TINY:  # no signal in this sample: direction and SNR are undefined, scaled error needs another scale
        rel = max_abs / output_scale if output_scale >= TINY else None
        return {**base, "degenerate": True, "max_abs_err": max_abs, "max_rel_err": rel, "cosine": None, "snr_db": None}
    norms = float(np.linalg.norm(ref64) * np.linalg.norm(out64))
    cosine = float(np.dot(ref64, out64) / norms) if norms > 0 else 0.0  # ref has signal: a zero artifact is wrong
    noise = float(np.sum(diff ** 2))
    snr = math.inf if noise == 0 else 10 * math.log10(max(float(np.sum(ref64 ** 2)), 1e-300) / noise)
    return {**base, "max_abs_err": max_abs, "max_rel_err": max_abs / scale, "cosine": cosine, "snr_db": snr}


def absolute_floor(budget: dict) -> float:
    """What absolute error a degenerate (no-signal) reference tolerates: the budget's own, else ``TINY``."""
    return float(budget["max_abs_err"]) if gates(budget, "max_abs_err") else TINY


def _violations(metrics: dict, budget: dict) -> list[str]:
    """What one sample breaks; metrics that are ``None`` (meaningless for the sample) do not gate."""
    if metrics["nonfinite"]:
        return ["NaN/Inf in artifact output where the reference is finite"]
    if metrics["elements"] == 0:
        return []  # judged per output: "nothing compared"
    if metrics["degenerate"] and metrics["max_rel_err"] is None:  # the whole output is degenerate
        floor = absolute_floor(budget)
        return [f"artifact output differs by up to {metrics['max_abs_err']:.3g} (> {floor:.3g} absolute)"] \
            if metrics["max_abs_err"] > floor else []
    out = []
    for key in ("max_abs_err", "max_rel_err"):
        if gates(budget, key) and metrics[key] is not None and metrics[key] > budget[key]:
            out.append(f"{key} {metrics[key]:.3g} > {budget[key]:.3g}")
    if gates(budget, "cosine_min") and metrics["cosine"] is not None and metrics["cosine"] < budget["cosine_min"]:
        out.append(f"cosine {metrics['cosine']:.6f} < {budget['cosine_min']}")
    if gates(budget, "snr_db_min") and metrics["snr_db"] is not None and metrics["snr_db"] < budget["snr_db_min"]:
        out.append(f"snr {metrics['snr_db']:.1f} dB < {budget['snr_db_min']} dB")
    return out


def compare(reference: list[list[np.ndarray]], actual: list[list[np.ndarray]], budget: dict, names: list[str]) -> dict:
    """Compare per output across samples; the report names the output, the worst sample and how far."""
    returned = min(len(a) for a in actual) if actual else 0
    outputs = [_compare_output(name, [r[index] for r in reference], [a[index] for a in actual], budget)
               for index, name in enumerate(names[:returned])]
    failed = [o for o in outputs if not o["passed"]]
    if returned != len(names) or any(len(a) != len(names) for a in actual):
        failed.append({"message": f"artifact returned {len(actual[0]) if actual else 0} outputs, the model has {len(names)}"})
    elif not names and not budget.get("allow_empty"):
        failed.append({"message": "nothing compared: the model has no outputs (set allow_empty = true if that is expected)"})
    passed = not failed
    max_abs = max((o["max_abs_err"] for o in outputs if o["max_abs_err"] is not None), default=0.0)
    return {
        "passed": passed,
        "samples": len(reference),
        "elements_compared": sum(o.get("elements_compared", 0) for o in outputs),
        "max_abs_err": max_abs,
        "max_rel_err": max((o["max_rel_err"] for o in outputs if o["max_rel_err"] is not None), default=max_abs),
        "cosine_min": min((o["cosine_min"] for o in outputs if o["cosine_min"] is not None), default=1.0 if passed else 0.0),
        "snr_db_min": min((o["snr_db_min"] for o in outputs if o["snr_db_min"] is not None), default=math.inf),
        "budget": budget,
        "outputs": outputs,
        "notes": [n for o in outputs for n in o.get("notes", [])],
        "message": "; ".join(o["message"] for o in failed) or None,
    }


def _compare_output(name: str, refs: list[np.ndarray], outs: list[np.ndarray], budget: dict) -> dict:
    for sample, (ref, out) in enumerate(zip(refs, outs)):
        if tuple(np.shape(ref)) != tuple(np.shape(out)):
            return {"name": name, "passed": False, "max_abs_err": math.inf, "max_rel_err": math.inf, "cosine_min": -1.0,
                    "snr_db_min": -math.inf, "worst_sample": sample,
                    "message": f"{name} sample {sample}: shape {list(np.shape(out))} != reference {list(np.shape(ref))}"}
    scale = _output_scale(refs)
    per_sample = [_sample_metrics(r, o, scale) for r, o in zip(refs, outs)]
    ranked = [(len(_violations(m, budget)), _badness(m)) for m in per_sample]
    worst = max(range(len(per_sample)), key=ranked.__getitem__)
    sample_violations = _violations(per_sample[worst], budget)
    sample_violations += _worse_elsewhere(per_sample, worst, budget) if sample_violations else []
    result = {
        "name": name,
        "max_abs_err": _extreme(per_sample, "max_abs_err", max),
        "max_rel_err": _extreme(per_sample, "max_rel_err", max),
        "cosine_min": _extreme(per_sample, "cosine", min),
        "snr_db_min": _extreme(per_sample, "snr_db", min),
        "worst_sample": worst,
        "elements_compared": sum(m["elements"] for m in per_sample),
        "error_histogram": error_histogram(refs, outs),
    }
    problems, notes = _output_findings(name, per_sample, scale, budget, result)
    if sample_violations:
        why = f"{degenerate_message(scale)}; " if result.get("degenerate_reference") else ""
        problems.append(f"{name} sample {worst}: {why}{', '.join(sample_violations)}")
    elif result.get("degenerate_reference"):
        notes.append(f"{name}: {degenerate_message(scale)}; judged on absolute error ≤ {absolute_floor(budget):.3g} instead")
    problems += _topk_findings(name, refs, outs, budget, result)
    return {**result, "notes": notes, "passed": not problems, "message": "; ".join(problems) or None}


# the metrics a row's headline carries, with the extreme that is "worst" for each
EXTREMES = (("cosine", "cosine_min", min, "{:.6f}"), ("snr_db", "snr_db_min", min, "{:.1f} dB"),
            ("max_rel_err", "max_rel_err", max, "{:.3g}"))


def _worse_elsewhere(per_sample: list[dict], worst: int, budget: dict) -> list[str]:
    """The worst sample is picked by how many limits it breaks, then by scaled error: another sample can
    hold a lower cosine. The message then also quotes the output's own extreme (the number the row's
    ``cosine_min`` shows), so the error and the row's metrics never disagree."""
    found = []
    for key, budget_key, pick, fmt in EXTREMES:
        values = [(m[key], i) for i, m in enumerate(per_sample) if m.get(key) is not None and not m.get("nonfinite")]
        if not values or not gates(budget, budget_key) or per_sample[worst].get(key) is None:
            continue
        value, sample = pick(values)
        if value != per_sample[worst][key]:
            word = "lowest" if pick is min else "highest"
            found.append(f"{word} {key.replace('_db', '')} {fmt.format(value)} at sample {sample}")
    return found


def _badness(metrics: dict) -> float:
    """How far off a sample is, for naming the worst one: scaled error where there is a scale."""
    value = metrics["max_rel_err"] if metrics["max_rel_err"] is not None else metrics["max_abs_err"]
    return -math.inf if value is None else value


def _extreme(per_sample: list[dict], key: str, pick) -> float | None:
    values = [m[key] for m in per_sample if m[key] is not None]
    return pick(values) if values else None


def _output_scale(refs: list[np.ndarray]) -> float:
    """max |reference| over every sample's finite elements (0 when there are none)."""
    scales = [float(np.max(np.abs(r[np.isfinite(r)]))) for r in (np.asarray(x).astype(np.float64) for x in refs)
              if np.isfinite(r).any()]
    return max(scales, default=0.0)


def degenerate_message(scale: float) -> str:
    return (f"reference output is all zeros/denormal (max |ref| {scale:.3g}): the model's output carries no signal; "
            "cosine/relative error are meaningless")


def _output_findings(name: str, per_sample: list[dict], scale: float, budget: dict, result: dict) -> tuple[list, list]:
    """Output-wide problems (non-finite reference, nothing compared) and notes (what the budget allowed);
    fills ``reference_nonfinite``, ``empty`` and ``degenerate_reference`` into ``result``."""
    problems, notes = [], []
    bad_ref = sum(m["reference_nonfinite"] for m in per_sample)
    if bad_ref:
        hit = sum(1 for m in per_sample if m["reference_nonfinite"])
        result["reference_nonfinite"] = bad_ref
        text = f"{name}: the reference (PyTorch) output holds {bad_ref} NaN/Inf value(s) in {hit} of {len(per_sample)} samples"
        if budget.get("allow_nonfinite_reference"):
            notes.append(f"{text}; only its finite elements were compared (allow_nonfinite_reference)")
        else:
            problems.append(f"{text}: nothing to compare them with (set allow_nonfinite_reference = true to judge only the finite elements)")
    if result["elements_compared"] == 0:
        result["empty"] = True
        why = "every reference element is NaN/Inf" if bad_ref else "the output has no elements"
        if budget.get("allow_empty"):
            notes.append(f"{name}: nothing compared ({why}; allow_empty)")
        elif not problems:  # a non-finite reference already says why
            problems.append(f"{name}: nothing compared: {why} (set allow_empty = true if that is expected)")
    elif scale < TINY:
        result["degenerate_reference"] = {"max_abs_ref": scale, "abs_floor": absolute_floor(budget),
                                          "message": degenerate_message(scale)}
    return problems, notes


def _topk_findings(name: str, refs: list[np.ndarray], outs: list[np.ndarray], budget: dict, result: dict) -> list[str]:
    """Top-k agreement for classifier outputs with signal (a degenerate or empty reference ranks nothing)."""
    if result["elements_compared"] == 0 or result.get("degenerate_reference") or not _is_classifier(name, refs[0], budget):
        return []
    k = int(budget.get("topk", 1))
    agreement = topk_agreement(refs, outs, k)
    result.update(topk=k, topk_agreement=agreement)
    if agreement is not None and gates(budget, "topk_agreement_min") and agreement < budget["topk_agreement_min"]:
        return [f"{name}: top-{k} agreement {agreement:.4f} < {budget['topk_agreement_min']}"]
    return []


def _is_classifier(name: str, ref: np.ndarray, budget: dict) -> bool:
    """Top-k makes sense for a float output with a class axis last; ``topk_outputs`` narrows it to named outputs."""
    if "topk_outputs" in budget:
        return name in budget["topk_outputs"]
    return np.ndim(ref) >= 1 and np.shape(ref)[-1] >= 2 and np.issubdtype(np.asarray(ref).dtype, np.floating)


def topk_agreement(refs: list[np.ndarray], outs: list[np.ndarray], k: int) -> float | None:
    """Share of rows (all samples, all leading dims) whose reference top-1 is in the artifact's top-k; rows
    whose reference is not all finite rank nothing and are left out (None when no row is left)."""
    ref = np.concatenate([np.asarray(r, np.float64).reshape(-1, np.shape(r)[-1]) for r in refs])
    out = np.concatenate([np.asarray(o, np.float64).reshape(-1, np.shape(o)[-1]) for o in outs])
    rows = np.isfinite(ref).all(axis=1)
    ref, out = ref[rows], out[rows]
    if not ref.size:
        return None
    k = max(1, min(k, ref.shape[1]))
    top_out = np.argsort(-np.nan_to_num(out, nan=-np.inf), axis=1, kind="stable")[:, :k]
    hits = (top_out == ref.argmax(axis=1)[:, None]).any(axis=1)
    return float(hits.mean())


def error_histogram(refs: list[np.ndarray], outs: list[np.ndarray]) -> dict:
    """Counts of |out - ref| per decade at the finite reference elements: ``counts[0]`` below edges[0] (but
    > 0), ``counts[i]`` in [edges[i-1], edges[i]), ``counts[-1]`` at or above edges[-1] (a non-finite artifact
    value included); exact zeros apart."""
    pairs = [_finite_pairs(r, o)[:2] for r, o in zip(refs, outs)]
    errors = np.concatenate([np.abs(o - r) for r, o in pairs]) if pairs else np.zeros(0)
    errors = np.where(np.isnan(errors), np.inf, errors)
    nonzero = errors[errors != 0]
    counts = np.bincount(np.searchsorted(HISTOGRAM_EDGES, nonzero, side="right"), minlength=len(HISTOGRAM_EDGES) + 1)
    return {"edges": HISTOGRAM_EDGES, "counts": [int(c) for c in counts], "zero": int(errors.size - nonzero.size)}
