"""Budgets a run gates with, audited: one config line must not be able to turn the gate off unseen.

A budget is what decides pass or fail, and it comes from files a pull request can change (``edgeport.toml``,
``pyproject.toml``, a CI script's ``--budget``). So:

- :func:`check_budget` refuses (exit 2) a budget that gates nothing (``gate = []``, or every key removed) or
  names in ``gate`` a metric it does not set (``gate = ["max_abs_err"]`` on an fp32 budget): either one
  passes any artifact.
- :func:`budget_changes` lists, per row, every key that differs from the built-in default, marked
  ``loosened`` or ``tightened`` (``changed`` when neither applies); every rendering of a report shows them
  with the config files read (:func:`audit`), recomputed from the rows' own budgets.
- :func:`loosened` tells ``--baseline`` which keys a row's budget loosened since the baseline's: a
  regression of its own.
"""

from __future__ import annotations

from edgeport.errors import UsageError
from edgeport.validate.limits import direction, is_vacuous
from edgeport.validate.parity import BUDGET_KEYS, GATE_KEYS, gates

TOKEN_KEY = "token_agreement_min"
TOPK_KEY = "topk_agreement_min"


def check_budget(budget: dict, label: str, generative: bool = False) -> None:
    """Refuse a budget that gates nothing, or gates on a metric it does not set (see the module docstring).
    ``generative``: text-generation rows get a token-agreement default later, so it counts as set."""
    gate = budget.get("gate")
    if gate is not None:
        unset = [k for k in gate if k not in budget and not (generative and k == TOKEN_KEY)]
        if unset:
            raise UsageError(f"{label}: gate names {unset[0]!r}, which this budget does not set (it would gate "
                             f"nothing on it); set {unset[0]} too or gate on one of: {', '.join(_set_keys(budget))}")
    if not generative and gates(budget, TOKEN_KEY):
        raise UsageError(f"{label}: {TOKEN_KEY} judges generated tokens (--task text-generation); this row "
                         "generates none, so it would gate nothing")
    if gates(budget, TOPK_KEY) and budget.get("topk_outputs") == []:
        raise UsageError(f"{label}: {TOPK_KEY} is gated but topk_outputs = [] names no output (it would gate nothing)")
    active = [k for k in GATE_KEYS if gates(budget, k) and not is_vacuous(k, budget[k])]
    if generative and (gate is None or TOKEN_KEY in gate) and not is_vacuous(TOKEN_KEY, budget.get(TOKEN_KEY)):
        active.append(TOKEN_KEY)
    if not active:
        raise UsageError(f"{label}: this budget gates nothing (gate = {list(gate or [])!r}), so every artifact "
                         f"would pass; gate on at least one of: {', '.join(_set_keys(budget)) or ', '.join(GATE_KEYS)}")


def check_applies(budget: dict, outputs, label: str) -> None:
    """Once the program's outputs are known (before any conversion): ``topk_outputs`` names outputs the
    model has, and a gated top-k agreement applies to at least one output (a float one with a class axis
    last), else it would gate nothing. ``outputs``: (name, shape, dtype) of each output."""
    names = [name for name, _shape, _dtype in outputs]
    unknown = [n for n in budget.get("topk_outputs") or [] if n not in names]
    if unknown:
        raise UsageError(f"{label}: topk_outputs names {unknown[0]!r}, which the model does not output; "
                         f"its outputs: {', '.join(names) or 'none'}")
    if not gates(budget, TOPK_KEY) or is_vacuous(TOPK_KEY, budget[TOPK_KEY]):
        return
    ranked = [n for n, shape, dtype in outputs if _ranks_classes(shape, dtype)]
    if "topk_outputs" in budget:
        ranked = [n for n in names if n in budget["topk_outputs"]]
    if not ranked:
        raise UsageError(f"{label}: {TOPK_KEY} is gated but no output of the model has a class axis to rank "
                         f"(outputs: {', '.join(names) or 'none'}); it would gate nothing")
    k = int(budget.get("topk", 1))
    classes = {n: shape[-1] for n, shape, _dtype in outputs if n in ranked and len(shape) >= 1}
    if classes and all(isinstance(c, int) and 0 < c <= k for c in classes.values()):
        raise UsageError(f"{label}: {TOPK_KEY} is gated with topk = {k}, but the ranked outputs have "
                         f"{', '.join(f'{n}: {c}' for n, c in classes.items())} classes: every class is in the "
                         "top k, so it cannot fail")


def _ranks_classes(shape, dtype: str) -> bool:
    """What parity's top-k judges by default: a float output whose last axis has >= 2 entries."""
    return "float" in str(dtype) and len(shape) >= 1 and (shape[-1] == -1 or shape[-1] >= 2)  # -1: dynamic


def _set_keys(budget: dict) -> list[str]:
    return [k for k in GATE_KEYS if k in budget]


def row_default(row: dict) -> dict | None:
    """The built-in budget of a report row, as the run recorded it beside the row's budget (``builtin``:
    the target's default for the variant, with the text-generation token default); None when not recorded."""
    budget = (row.get("parity") or {}).get("budget") if isinstance(row.get("parity"), dict) else None
    builtin = budget.get("builtin") if isinstance(budget, dict) else None
    return builtin if isinstance(builtin, dict) else None


def budget_changes(budget: dict, reference: dict) -> list[dict]:
    """Each key of ``budget`` that differs from ``reference``: {key, from, to, direction}."""
    found = []
    for key in BUDGET_KEYS:
        old, new = reference.get(key), budget.get(key)
        if old != new:  # unset: that metric stops gating; newly set: it starts (unless it can never fail)
            found.append({"key": key, "from": old, "to": new, "direction": direction(key, old, new)})
    before = {k for k in GATE_KEYS if gates(reference, k)}
    after = {k for k in GATE_KEYS if gates(budget, k)}
    if budget.get("gate") != reference.get("gate") and before != after:
        found.append({"key": "gate", "from": sorted(before), "to": sorted(after),
                      "direction": "loosened" if before - after else "tightened"})
    for key in ("allow_empty", "allow_nonfinite_reference"):
        if bool(budget.get(key)) != bool(reference.get(key)):
            found.append({"key": key, "from": bool(reference.get(key)), "to": bool(budget.get(key)),
                          "direction": "loosened" if budget.get(key) else "tightened"})
    if budget.get("topk_outputs") != reference.get("topk_outputs"):
        found.append({"key": "topk_outputs", "from": reference.get("topk_outputs"), "to": budget.get("topk_outputs"),
                      "direction": "changed"})
    return found


def loosened(budget: dict, reference: dict) -> list[str]:
    """One line per key ``budget`` loosened relative to ``reference``."""
    return [f"budget loosened: {c['key']} {c['from']} -> {c['to']}" for c in budget_changes(budget, reference)
            if c["direction"] == "loosened"]


THRESHOLDS_KEY = "baseline_thresholds"  # report["config"]: the [baseline] thresholds, beside baseline_defaults


def audit(report: dict) -> dict:
    """{files, budgets_changed, baseline_thresholds, baseline_defaults, thresholds_changed}: the config files
    the run read, every row budget that differs from the built-in default (recomputed from the rows: a
    hand-edited summary cannot hide a loosened budget) and every [baseline] threshold that differs from its
    default."""
    changed = []
    for row in report.get("targets") or []:
        budget = (row.get("parity") or {}).get("budget") if isinstance(row, dict) else None
        if isinstance(budget, dict):
            default = row_default(row)
            changes = budget_changes(budget, default) if default is not None else \
                [{"key": "builtin", "from": "recorded", "to": None, "direction": "loosened"}]
            for change in changes:
                changed.append({"target": row.get("target"), "variant": row.get("variant"), **change})
    config = report.get("config") if isinstance(report.get("config"), dict) else {}
    files = config.get("files")
    thresholds, defaults = config.get(THRESHOLDS_KEY), config.get("baseline_defaults")
    kept = {THRESHOLDS_KEY: thresholds, "baseline_defaults": defaults} if isinstance(thresholds, dict) else {}
    return {"files": [str(f) for f in files] if isinstance(files, list) else [], "budgets_changed": changed,
            **kept, "thresholds_changed": threshold_changes(thresholds, defaults)}


def threshold_changes(thresholds, reference) -> list[dict]:
    """Each [baseline] threshold that differs from ``reference`` (the defaults, or a baseline's own)."""
    if not isinstance(thresholds, dict) or not isinstance(reference, dict):
        return []
    return [{"key": k, "from": reference.get(k), "to": v, "direction": direction(k, reference.get(k), v)}
            for k, v in thresholds.items() if v != reference.get(k)]


def audit_lines(report: dict) -> list[str]:
    """The audit as text lines for the terminal, report.md, report.html and JUnit properties."""
    info = audit(report)
    lines = [f"config: {', '.join(info['files']) if info['files'] else 'none read (built-in budgets)'}"]
    for c in info["budgets_changed"]:
        lines.append(f"budget {c['target']}[{c['variant']}] {c['key']}: {c['from']} -> {c['to']} ({_mark(c)})")
    for c in info["thresholds_changed"]:
        lines.append(f"baseline threshold {c['key']}: {c['from']} -> {c['to']} ({_mark(c)})")
    return lines


def _mark(change: dict) -> str:
    return change["direction"].upper() if change["direction"] == "loosened" else change["direction"]
