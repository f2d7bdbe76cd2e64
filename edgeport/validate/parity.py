"""Numerical parity of an artifact against PyTorch eager, judged against a per-variant budget.

Metrics per output, over all samples: max abs error; max abs error scaled by max |reference| (reported as
``max_rel_err``: element-wise relative error explodes near zero outputs and says nothing); cosine
similarity; SNR in dB. A budget gates on any subset of them. NaN/Inf in the artifact where the reference
is finite always fails: a non-finite number can never be "within budget".
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
BUDGET_KEYS = ("max_abs_err", "max_rel_err", "cosine_min", "snr_db_min")


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
        if key in budget and metrics[key] > budget[key]:
            out.append(f"{key} {metrics[key]:.3g} > {budget[key]:.3g}")
    if "cosine_min" in budget and metrics["cosine"] < budget["cosine_min"]:
        out.append(f"cosine {metrics['cosine']:.6f} < {budget['cosine_min']}")
    if "snr_db_min" in budget and metrics["snr_db"] < budget["snr_db_min"]:
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
    violations = _violations(per_sample[worst], budget)
    return {
        "name": name,
        "passed": not violations,
        "max_abs_err": max(m["max_abs_err"] for m in per_sample),
        "max_rel_err": max(m["max_rel_err"] for m in per_sample),
        "cosine_min": min(m["cosine"] for m in per_sample),
        "snr_db_min": min(m["snr_db"] for m in per_sample),
        "worst_sample": worst,
        "message": f"{name} sample {worst}: {', '.join(violations)}" if violations else None,
    }
