"""Every number a file or a flag can set that changes a verdict or a run, with its range: one table, one check.

The config files (``edgeport.toml``, ``[tool.edgeport]``, ``fleet.toml``) come with the pull request a gate
judges, so a value must not be able to switch the gate off: ``nan`` compares false with everything (a
threshold that never fires), ``inf`` lets anything through, a negative count or factor is nonsense that
surfaces later as an internal error. :func:`check_number` refuses all of them (exit 2, one line naming the key
and where it was set) before any work; :func:`direction` says whether a value is looser or tighter than
another (the report lists every loosened one), and :func:`is_vacuous` whether it can fail at all
(``topk_agreement_min = 0`` or ``cosine_min = -1`` checks nothing: never "tightened", and not a gate).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from edgeport.errors import UsageError


@dataclass(frozen=True)
class Limit:
    low: float = -math.inf           # inclusive unless low_open
    high: float = math.inf           # inclusive
    integer: bool = False
    low_open: bool = False
    looser: str = "higher"           # which way the value lets more through: "higher" (a maximum) or "lower" (a minimum)
    vacuous: float | None = None     # at or past this value, towards looser, the check can never fail

    def describe(self) -> str:
        kind = "a whole number" if self.integer else "a finite number"
        low = f"> {_text(self.low)}" if self.low_open else f">= {_text(self.low)}"
        parts = [p for p in (low if math.isfinite(self.low) else "", f"<= {_text(self.high)}" if math.isfinite(self.high) else "") if p]
        return kind + (f" {' and '.join(parts)}" if parts else "")


# Why these ranges: errors and ratios are magnitudes (>= 0, a ratio > 0); cosine lives in [-1, 1] and an
# agreement share in [0, 1] (a bound outside can only always or never fail); a baseline factor below 1 calls an
# unchanged artifact a regression; counts are whole numbers with a cap far above any real use.
LIMITS = {
    # budgets ([budgets.*], --budget): edgeport.validate.parity
    "max_abs_err": Limit(0), "max_rel_err": Limit(0),
    "cosine_min": Limit(-1, 1, looser="lower", vacuous=-1.0), "snr_db_min": Limit(looser="lower"),
    "topk_agreement_min": Limit(0, 1, looser="lower", vacuous=0.0),
    "token_agreement_min": Limit(0, 1, looser="lower", vacuous=0.0),
    "topk": Limit(1, 1 << 20, integer=True), "max_size_ratio": Limit(0, low_open=True),
    "max_latency_ratio": Limit(0, low_open=True),
    # text-generation quality on real text (edgeport.pipeline.tasks.text_generation.quality)
    "kld_mean_max": Limit(0), "kld_p99_max": Limit(0), "top1_agreement_min": Limit(0, 1, looser="lower", vacuous=0.0),
    "checks_drop_max": Limit(0, 1),
    # [baseline] regression thresholds: edgeport.config.BASELINE_DEFAULTS
    "error_factor": Limit(1), "error_floor": Limit(0), "latency_factor": Limit(1), "size_factor": Limit(1),
    # fleet.toml [ray] and the judge's counts (fleet.toml [defaults]/[[model]], flags)
    "cpus_per_task": Limit(0, 1 << 16, low_open=True), "max_retries": Limit(0, 100, integer=True),
    "memory_per_task": Limit(1, 1 << 50, integer=True),
    "seed": Limit(0, (1 << 63) - 1, integer=True), "seq_len": Limit(1, 1 << 20, integer=True),
}


def check_number(key: str, value, where: str) -> float | int:
    """``value`` for ``key`` if it is a number in ``LIMITS[key]``'s range; else exit 2 naming both."""
    limit = LIMITS[key]
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise UsageError(f"{where}: {key} must be a number ({limit.describe()}), got {value!r}")
    if not math.isfinite(value):
        raise UsageError(f"{where}: {key} must be a finite number, got {value} (a non-finite threshold gates nothing)")
    too_low = value <= limit.low if limit.low_open else value < limit.low
    if too_low or value > limit.high or (limit.integer and value != int(value)):
        raise UsageError(f"{where}: {key} must be {limit.describe()}, got {_text(value)}")
    return int(value) if limit.integer else float(value)


def is_vacuous(key: str, value) -> bool:
    """True when a threshold at ``value`` can never fail (``topk_agreement_min = 0``)."""
    limit = LIMITS.get(key)
    if limit is None or limit.vacuous is None or not _is_number(value):
        return False
    return value <= limit.vacuous if limit.looser == "lower" else value >= limit.vacuous


def direction(key: str, old, new) -> str:
    """``loosened``/``tightened`` for a change of ``key`` from ``old`` to ``new`` (None: unset, the check off);
    ``no effect`` for a newly set value that can never fail; ``changed`` when not comparable."""
    if new is None or is_vacuous(key, new):
        return "no effect" if old is None or is_vacuous(key, old) else "loosened"
    if old is None or is_vacuous(key, old):
        return "tightened"
    if not (_is_number(old) and _is_number(new)) or key not in LIMITS:
        return "changed"
    return "loosened" if (new > old) == (LIMITS[key].looser == "higher") else "tightened"


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _text(value) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e18 else f"{value:g}"
