"""Numerical parity of an artifact against PyTorch eager, judged against a per-variant budget.

Metrics per output, over all samples: max abs error; max abs error scaled by max |reference| (reported as
``max_rel_err``: element-wise relative error explodes near zero outputs and says nothing); cosine
similarity; SNR in dB; for classifier-like outputs (last dim >= 2) top-k agreement = the share of rows whose
reference top-1 class is among the artifact's top-k. A budget gates on any subset of them (its keys, or only
those listed in ``gate``). NaN/Inf in the artifact where the reference is finite always fails: a non-finite
number can never be "within budget". Each output also carries an ``error_histogram`` of |artifact - reference|
(one bin per decade) so a report can show whether an error is one outlier or a shifted distribution.
"""

from __future__ import annotations

import math

import numpy as np

# Why these numbers: fp32 artifacts reorder float ops (fused kernels, XNNPACK) and land ~1e-6 of the output
# scale on the probe models, so 1e-4 scaled leaves room without hiding a real bug. fp16/bf16 carry 11/8
# mantissa bits: ~5e-4/4e-3 per op, accumulated through a network -> judge scaled error loosely and cosine.
# int8 changes every number by design: absolute error is meaningless, so only direction (cosine) and
# signal-to-noise gate.
DEFAULT_BUDGETS: dict[str, dict[str, float]] = {
    "fp32": {"max_rel_err": 1e-4, "cosine_min": 0.99999},
    "fp16": {"max_rel_err": 2e-2, "cosine_min": 0.999},
    "bf16": {"max_rel_err": 5e-2, "cosine_min": 0.995},
    "weight-int8": {"cosine_min": 0.99, "snr_db_min": 20.0},
    "dynamic-int8": {"cosine_min": 0.98, "snr_db_min": 15.0},
    "int8": {"cosine_min": 0.95, "snr_db_min": 10.0},
}
BUDGET_KEYS = ("max_abs_err", "max_rel_err", "cosine_min", "snr_db_min", "topk_agreement_min", "topk")
GATE_KEYS = ("max_abs_err", "max_rel_err", "cosine_min", "snr_db_min", "topk_agreement_min")
LIST_KEYS = ("gate", "topk_outputs")  # budget keys whose value is a list: metrics that gate, outputs top-k applies to
HISTOGRAM_EDGES = [10.0 ** e for e in range(-10, 3)]  # |error| decades 1e-10 .. 1e2


def gates(budget: dict, key: str) -> bool:
    """A budget key gates when it is set and, if the budget names a ``gate`` list, listed there."""
    return key in budget and ("gate" not in budget or key in budget["gate"])


def default_budget(variant: str) -> dict[str, float]:
    return dict(DEFAULT_BUDGETS.get(variant, DEFAULT_BUDGETS["fp32"]))


def _sample_metrics(ref: np.ndarray, out: np.ndarray) -> dict:
    ref64 = ref.astype(np.float64).ravel()
    out64 = out.astype(np.float64).ravel()
    finite_ref = np.isfinite(ref64)
    nonfinite = bool(np.any(~np.isfinite(out64) & finite_ref))
    ref64, out64 = ref64[finite_ref], out64[finite_ref]
    if nonfinite or ref64.size == 0:
        return {"max_abs_err": math.inf if nonfinite else 0.0, "max_rel_err": math.inf if nonfinite else 0.0,
                "cosine": -1.0 if nonfinite else 1.0, "snr_db": -math.inf if nonfinite else math.inf, "nonfinite": nonfinite}
    diff = out64 - ref64
    max_abs = float(np.max(np.abs(diff)))
    scale = float(np.max(np.abs(ref64)))
    norms = float(np.linalg.norm(ref64) * np.linalg.norm(out64))
    cosine = float(np.dot(ref64, out64) / norms) if norms > 0 else (1.0 if max_abs == 0 else 0.0)
    noise = float(np.sum(diff ** 2))
    snr = math.inf if noise == 0 else 10 * math.log10(max(float(np.sum(ref64 ** 2)), 1e-300) / noise)
    return {"max_abs_err": max_abs, "max_rel_err": max_abs / scale if scale > 0 else max_abs,
            "cosine": cosine, "snr_db": snr, "nonfinite": False}


def _violations(metrics: dict, budget: dict) -> list[str]:
    out = []
    if metrics["nonfinite"]:
        out.append("NaN/Inf in artifact output where the reference is finite")
    for key in ("max_abs_err", "max_rel_err"):
        if gates(budget, key) and metrics[key] > budget[key]:
            out.append(f"{key} {metrics[key]:.3g} > {budget[key]:.3g}")
    if gates(budget, "cosine_min") and metrics["cosine"] < budget["cosine_min"]:
        out.append(f"cosine {metrics['cosine']:.6f} < {budget['cosine_min']}")
    if gates(budget, "snr_db_min") and metrics["snr_db"] < budget["snr_db_min"]:
        out.append(f"snr {metrics['snr_db']:.1f} dB < {budget['snr_db_min']} dB")
    return out


def compare(reference: list[list[np.ndarray]], actual: list[list[np.ndarray]], budget: dict, names: list[str]) -> dict:
    """Compare per output across samples; the report names the output, the worst sample and how far."""
    outputs = []
    for index, name in enumerate(names):
        outputs.append(_compare_output(name, [r[index] for r in reference], [a[index] for a in actual], budget))
    failed = [o for o in outputs if not o["passed"]]
    if len(actual[0]) != len(names):
        failed.append({"message": f"artifact returned {len(actual[0])} outputs, the model has {len(names)}"})
    return {
        "passed": not failed,
        "samples": len(reference),
        "max_abs_err": max((o["max_abs_err"] for o in outputs), default=0.0),
        "max_rel_err": max((o["max_rel_err"] for o in outputs), default=0.0),
        "cosine_min": min((o["cosine_min"] for o in outputs), default=1.0),
        "snr_db_min": min((o["snr_db_min"] for o in outputs), default=math.inf),
        "budget": budget,
        "outputs": outputs,
        "message": "; ".join(o["message"] for o in failed) or None,
    }


def _compare_output(name: str, refs: list[np.ndarray], outs: list[np.ndarray], budget: dict) -> dict:
    for sample, (ref, out) in enumerate(zip(refs, outs)):
        if tuple(np.shape(ref)) != tuple(np.shape(out)):
            return {"name": name, "passed": False, "max_abs_err": math.inf, "max_rel_err": math.inf, "cosine_min": -1.0,
                    "snr_db_min": -math.inf, "worst_sample": sample,
                    "message": f"{name} sample {sample}: shape {list(np.shape(out))} != reference {list(np.shape(ref))}"}
    per_sample = [_sample_metrics(r, o) for r, o in zip(refs, outs)]
    worst = max(range(len(per_sample)), key=lambda i: (len(_violations(per_sample[i], budget)), per_sample[i]["max_rel_err"]))
    sample_violations = _violations(per_sample[worst], budget)
    violations = [f"{name} sample {worst}: {', '.join(sample_violations)}"] if sample_violations else []
    result = {
        "name": name,
        "max_abs_err": max(m["max_abs_err"] for m in per_sample),
        "max_rel_err": max(m["max_rel_err"] for m in per_sample),
        "cosine_min": min(m["cosine"] for m in per_sample),
        "snr_db_min": min(m["snr_db"] for m in per_sample),
        "worst_sample": worst,
        "error_histogram": error_histogram(refs, outs),
    }
    if _is_classifier(name, refs[0], budget):
        k = int(budget.get("topk", 1))
        agreement = topk_agreement(refs, outs, k)
        result.update(topk=k, topk_agreement=agreement)
        if gates(budget, "topk_agreement_min") and agreement < budget["topk_agreement_min"]:
            violations.append(f"{name}: top-{k} agreement {agreement:.4f} < {budget['topk_agreement_min']}")
    return {**result, "passed": not violations, "message": "; ".join(violations) or None}


def _is_classifier(name: str, ref: np.ndarray, budget: dict) -> bool:
    """Top-k makes sense for a float output with a class axis last; ``topk_outputs`` narrows it to named outputs."""
    if "topk_outputs" in budget:
        return name in budget["topk_outputs"]
    return np.ndim(ref) >= 1 and np.shape(ref)[-1] >= 2 and np.issubdtype(np.asarray(ref).dtype, np.floating)


def topk_agreement(refs: list[np.ndarray], outs: list[np.ndarray], k: int) -> float:
    """Share of rows (all samples, all leading dims) whose reference top-1 is in the artifact's top-k."""
    ref = np.concatenate([np.asarray(r, np.float64).reshape(-1, np.shape(r)[-1]) for r in refs])
    out = np.concatenate([np.asarray(o, np.float64).reshape(-1, np.shape(o)[-1]) for o in outs])
    k = max(1, min(k, ref.shape[1]))
    top_out = np.argsort(-out, axis=1, kind="stable")[:, :k]
    hits = (top_out == ref.argmax(axis=1)[:, None]).any(axis=1)
    return float(hits.mean()) if hits.size else 1.0


def error_histogram(refs: list[np.ndarray], outs: list[np.ndarray]) -> dict:
    """Counts of |out - ref| per decade: ``counts[0]`` below edges[0] (but > 0), ``counts[i]`` in
    [edges[i-1], edges[i]), ``counts[-1]`` at or above edges[-1] (non-finite included); exact zeros apart."""
    errors = np.concatenate([np.abs(np.asarray(o, np.float64) - np.asarray(r, np.float64)).ravel()
                             for r, o in zip(refs, outs)]) if refs else np.zeros(0)
    errors = np.where(np.isnan(errors), np.inf, errors)
    nonzero = errors[errors != 0]
    counts = np.bincount(np.searchsorted(HISTOGRAM_EDGES, nonzero, side="right"), minlength=len(HISTOGRAM_EDGES) + 1)
    return {"edges": HISTOGRAM_EDGES, "counts": [int(c) for c in counts], "zero": int(errors.size - nonzero.size)}
