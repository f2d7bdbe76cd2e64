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
from edgeport.validate.parity import BUDGET_KEYS, GATE_KEYS, gates

HIGHER_IS_LOOSER = ("max_abs_err", "max_rel_err", "topk", "kld_mean_max", "kld_p99_max", "checks_drop_max")  # the others (*_min) loosen when lowered
TOKEN_KEY = "token_agreement_min"


def check_budget(budget: dict, label: str, generative: bool = False) -> None:
    """Refuse a budget that gates nothing, or gates on a metric it does not set (see the module docstring).
    ``generative``: text-generation rows get a token-agreement default later, so it counts as set."""
    gate = budget.get("gate")
    if gate is not None:
        unset = [k for k in gate if k not in budget and not (generative and k == TOKEN_KEY)]
        if unset:
            raise UsageError(f"{label}: gate names {unset[0]!r}, which this budget does not set (it would gate "
                             f"nothing on it); set {unset[0]} too or gate on one of: {', '.join(_set_keys(budget))}")
    active = [k for k in GATE_KEYS if gates(budget, k)]
    if generative and (gate is None or TOKEN_KEY in gate):
        active.append(TOKEN_KEY)
    if not active:
        raise UsageError(f"{label}: this budget gates nothing (gate = {list(gate or [])!r}), so every artifact "
                         f"would pass; gate on at least one of: {', '.join(_set_keys(budget)) or ', '.join(GATE_KEYS)}")


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
        if old == new:
            continue
        if new is None or old is None:  # unset: that metric stops gating; newly set: it starts
            direction = "loosened" if new is None else "tightened"
        elif not (_is_number(old) and _is_number(new)):
            direction = "changed"
        else:
            direction = "loosened" if (new > old) == (key in HIGHER_IS_LOOSER) else "tightened"
        found.append({"key": key, "from": old, "to": new, "direction": direction})
    before = {k for k in GATE_KEYS if gates(reference, k)}
    after = {k for k in GATE_KEYS if gates(budget, k)}
    if budget.get("gate") != reference.get("gate") and before != after:
        direction = "loosened" if before - after else "tightened"
        found.append({"key": "gate", "from": sorted(before), "to": sorted(after), "direction": direction})
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


def audit(report: dict) -> dict:
    """{files, budgets_changed}: the config files the run read and every row budget that differs from the
    built-in default, recomputed from the rows (a hand-edited summary cannot hide a loosened budget)."""
    changed = []
    for row in report.get("targets") or []:
        budget = (row.get("parity") or {}).get("budget") if isinstance(row, dict) else None
        if isinstance(budget, dict):
            default = row_default(row)
            changes = budget_changes(budget, default) if default is not None else \
                [{"key": "builtin", "from": "recorded", "to": None, "direction": "loosened"}]
            for change in changes:
                changed.append({"target": row.get("target"), "variant": row.get("variant"), **change})
    files = (report.get("config") or {}).get("files") if isinstance(report.get("config"), dict) else None
    return {"files": [str(f) for f in files] if isinstance(files, list) else [], "budgets_changed": changed}


def audit_lines(report: dict) -> list[str]:
    """The audit as text lines for the terminal, report.md and JUnit properties."""
    info = audit(report)
    lines = [f"config: {', '.join(info['files']) if info['files'] else 'none read (built-in budgets)'}"]
    for c in info["budgets_changed"]:
        mark = c["direction"].upper() if c["direction"] == "loosened" else c["direction"]
        lines.append(f"budget {c['target']}[{c['variant']}] {c['key']}: {c['from']} -> {c['to']} ({mark})")
    return lines


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
