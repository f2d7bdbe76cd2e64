"""Which layers int8 breaks, and the smallest greedy set of them to keep float.

Sensitivity is measured, not estimated: each layer is quantized *alone* and the model's outputs are compared
with PyTorch end to end. Alone, not left out: an outlier tensor breaks int8 at both of its ends (its producer
quantizes it as an output, its consumer as an input), so leaving out one of them changes nothing and a
leave-one-out ranking misses both, while quantizing either one alone already breaks the model. The quantizers'
own per-tensor debug tools (onnxruntime's ``qdq_loss_debug``, ai-edge-quantizer's validation) rank by
energy-weighted SNR, which hides a few huge channels; on the probe models they found the consumer only.

The search adds layers in order of sensitivity, worst first, until a candidate meets the budget on every parity
sample; the winner is then built by the target's own ``convert`` and judged like any artifact. Sensitivity
alone is never taken as proof.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from edgeport.diagnostics import first_line

SENSITIVITY_SAMPLES = 8   # a few parity samples rank layers as well as all of them, at a fraction of the cost
TOP = 5                   # sensitive layers a report names


@dataclass
class Search:
    """What the search did: the curve (``steps``), the float set it ended with and whether that passed."""

    float_layers: list[str] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)
    passed: bool = False
    built: object = None          # what ``confirm`` returned for the last artifact it built
    seconds: float = 0.0
    error: str | None = None      # why the search stopped early (a candidate the quantizer or converter refused)


def step(parity: dict, floats: int, measured: str) -> dict:
    return {"float_layers": floats, "cosine_min": parity.get("cosine_min"), "snr_db_min": parity.get("snr_db_min"),
            "passed": bool(parity.get("passed")), "measured": measured}


def sensitivity(quantizer, samples: Sequence, reference: Sequence, budget: dict, names: list[str]) -> list[dict]:
    """Every layer quantized alone, worst first (lowest SNR, then lowest cosine), on a few samples."""
    from edgeport.validate.parity import compare

    count = min(len(samples), SENSITIVITY_SAMPLES)
    ranked = []
    for layer in quantizer.layers:
        parity = compare(reference[:count], quantizer.run(samples[:count], only=layer.id), budget, names)
        ranked.append({**layer.to_json(), "cosine_min": parity["cosine_min"], "snr_db_min": parity["snr_db_min"],
                       "passed": parity["passed"]})
    return sorted(ranked, key=lambda r: (_number(r["snr_db_min"]), _number(r["cosine_min"])))


def _number(value) -> float:
    return float("inf") if value is None else float(value)


def greedy(quantizer, order: list[str], cap: int, judge: Callable[[Sequence[str]], dict],
           confirm: Callable[[list[str]], tuple[object, dict]], budget: dict) -> Search:
    """Keep the first k layers of ``order`` float for k = 1..cap; ``judge(floats)`` measures a candidate on
    every parity sample (returns parity), ``confirm(floats)`` builds the real artifact and judges it (returns
    (built, parity)). Stops at the first candidate whose real artifact passes. When a simulated winner fails
    for real, the gap between the two becomes a margin the simulation must clear before the next (slow)
    confirmation."""
    start, search, margin = time.perf_counter(), Search(), {}
    for k in range(1, min(cap, len(order)) + 1):
        try:
            if _try(search, quantizer, order[:k], judge, confirm, budget, margin):
                break
        except Exception as exc:  # the artifact built so far stays the row's; the report says why it stopped
            search.error = f"stopped at {k} float layers: {first_line(exc)}"
            break
    search.seconds = round(time.perf_counter() - start, 3)
    return search


def _try(search: Search, quantizer, floats: list[str], judge, confirm, budget: dict, margin: dict) -> bool:
    """One greedy step; True when its artifact passed. Updates ``margin`` after a simulated pass fails for real."""
    parity = judge(floats)
    search.steps.append(step(parity, len(floats), quantizer.measured))
    if not parity["passed"] or not _clears(parity, budget, margin):
        return False
    search.built, real = confirm(floats)
    search.float_layers = floats
    if quantizer.measured != "artifact" or not real["passed"]:  # a simulation's pass, proved or not here
        search.steps.append(step(real, len(floats), "artifact"))
    search.passed = bool(real["passed"])
    if not search.passed:
        margin.update({key: max(0.0, _number(parity.get(key)) - _number(real.get(key)))
                       for key in ("cosine_min", "snr_db_min") if key in budget})
    return search.passed


def _clears(parity: dict, budget: dict, margin: dict) -> bool:
    return all(_number(parity.get(key)) >= budget[key] + extra for key, extra in margin.items() if key in budget)
