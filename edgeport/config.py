"""Project configuration: ``edgeport.toml`` or ``[tool.edgeport]`` in ``pyproject.toml``, plus ``--budget`` flags.

Budgets resolve from general to specific, each layer overriding the last: built-in default for the variant,
``[budgets.<variant>]``, ``[budgets."<target>.<variant>"]``, then ``--budget`` flags in the same three forms
(``KEY=V``, ``VARIANT.KEY=V``, ``TARGET.VARIANT.KEY=V``). ``gate`` and ``topk_outputs`` take lists
(``gate=cosine_min,snr_db_min`` on the command line).

``allow_empty`` and ``allow_nonfinite_reference`` take true/false (``validate/parity.py`` says what they allow).

Other keys: ``optional = ["<target>", "<target>.<variant>"]`` (rows whose failure does not fail the run) and
``[baseline]`` regression thresholds (``BASELINE_DEFAULTS``).

Everything is checked when it is read, before any work: an unknown target, variant or key, a non-finite
threshold (``nan`` compares false with everything, so it would gate nothing) is exit 2 naming it. Target and
variant names come from the target registry, so a new target needs no change here.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from edgeport.errors import UsageError, load_toml
from edgeport.validate.parity import ALLOW_KEYS, BUDGET_KEYS, GATE_KEYS, LIST_KEYS

# Why these numbers: parity errors of a fixed converter on fixed samples are deterministic, so any real growth
# is a change; x2 leaves room for a dependency bump that reorders float ops, and errors below the floor (1e-6
# of the output scale) are float noise whatever their ratio. Latency on shared 2-core CI runners swings
# +-30% run to run: only p50 slower by more than x1.5 counts. Artifact size is deterministic: +5% is real.
BASELINE_DEFAULTS = {"error_factor": 2.0, "error_floor": 1e-6, "latency_factor": 1.5, "size_factor": 1.05}


TOP_KEYS = ("budgets", "optional", "baseline")
FILES_KEY = "_files"  # the config files read, kept with the config for the report


def load_config(path: Path | None = None, cwd: Path | None = None) -> dict:
    cwd = cwd or Path.cwd()
    if path is not None:
        if not Path(path).is_file():
            raise UsageError(f"config file not found: {path}")
        found, tool_table = Path(path), Path(path).name == "pyproject.toml"
    elif (cwd / "edgeport.toml").is_file():
        found, tool_table = cwd / "edgeport.toml", False
    elif (cwd / "pyproject.toml").is_file():
        found, tool_table = cwd / "pyproject.toml", True
    else:
        return {}
    config = _read_toml(found, tool_table)
    check_config(config, found.name)
    return {**config, FILES_KEY: [str(found)]}  # every report names the config file it was judged by


def _read_toml(path: Path, tool_table: bool) -> dict:
    try:
        data = load_toml(path.read_text(), str(path))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot parse {path}: {exc}") from exc
    return data.get("tool", {}).get("edgeport", {}) if tool_table else data


def check_config(config: dict, where: str = "config") -> None:
    """Every key is known, every budget table names a known variant or target.variant and holds known keys
    with values in range, every ``optional`` entry names a known row, and [baseline] holds known thresholds in
    range: a typo must not silently leave a budget, row or threshold as it was."""
    unknown = [k for k in config if k not in TOP_KEYS]
    if unknown:
        raise UsageError(f"unknown key {unknown[0]!r} in {where}; known: {', '.join(TOP_KEYS)}")
    baseline_thresholds(config, where)
    tables = config.get("budgets", {})
    if not isinstance(tables, dict):
        raise UsageError(f"budgets in {where} must be tables like [budgets.VARIANT], got {tables!r}")
    for table_key, table in tables.items():
        label = f'[budgets."{table_key}"] in {where}'
        if not isinstance(table, dict):
            raise UsageError(f"{label} must be a table of KEY = VALUE, got {table!r}")
        _check_scope(tuple(table_key.split(".")), label)
        for metric, value in table.items():
            _table_value(metric, value, label)
            _check_ratio_scope(tuple(table_key.split(".")), metric, label)
    optional = config.get("optional", [])
    if not isinstance(optional, list) or not all(isinstance(o, str) for o in optional):
        raise UsageError(f"optional in {where} must be a list of targets or target.variant, got {optional!r}")
    for entry in optional:
        _check_scope(tuple(entry.split(".")), f"optional entry {entry!r} in {where}", target_alone=True)


def _check_scope(scope: tuple[str, ...], where: str, target_alone: bool = False) -> None:
    """``scope`` is (), (VARIANT,) or (TARGET, VARIANT) of targets the registry knows (``target_alone``:
    a lone name is a TARGET instead); anything else is a typo that would silently match no row."""
    from edgeport.targets.registry import all_variants, get_target, target_names

    names = target_names()
    if len(scope) > 2 or not all(scope):
        raise UsageError(f"{where}: expected {'TARGET or ' if target_alone else ''}[TARGET.]VARIANT, got {'.'.join(scope)!r}")
    if len(scope) == 1 and target_alone:
        if scope[0] not in names:
            raise UsageError(f"{where}: unknown target {scope[0]!r}; known: {', '.join(names)}")
        return
    if len(scope) == 1 and scope[0] not in all_variants():
        hint = f" ({scope[0]!r} is a target: write {scope[0]}.VARIANT)" if scope[0] in names else ""
        raise UsageError(f"{where}: unknown variant {scope[0]!r}{hint}; known: {', '.join(sorted(all_variants()))}")
    if len(scope) == 2:
        target, variant = scope
        if target not in names:
            raise UsageError(f"{where}: unknown target {target!r}; known: {', '.join(names)}")
        if variant not in get_target(target).every_variant:
            raise UsageError(f"{where}: target {target!r} has no variant {variant!r}; its variants: {', '.join(get_target(target).every_variant)}")


KNOWN_KEYS = BUDGET_KEYS + LIST_KEYS + ALLOW_KEYS


def parse_budget_flags(flags: list[str]) -> list[tuple[tuple[str, ...], str, Any]]:
    """``--budget litert.fp16.cosine_min=0.99`` -> ((litert, fp16), cosine_min, 0.99); target, variant, key
    and value are all checked here, before any work."""
    parsed = []
    for flag in flags:
        key, sep, value = flag.partition("=")
        *scope, metric = key.split(".") if key else [""]
        where = f"--budget {flag!r}"
        if not sep or metric not in KNOWN_KEYS or len(scope) > 2:
            raise UsageError(f"bad {where}: expected [TARGET.][VARIANT.]KEY=VALUE with KEY one of {', '.join(KNOWN_KEYS)}")
        _check_scope(tuple(scope), where)
        _check_ratio_scope(tuple(scope), metric, where)
        if metric in LIST_KEYS:
            parsed.append((tuple(scope), metric, _check_list(metric, [v for v in value.split(",") if v], where)))
        elif metric in ALLOW_KEYS:
            parsed.append((tuple(scope), metric, _flag_bool(value, where)))
        else:
            parsed.append((tuple(scope), metric, _number(metric, _flag_float(value, where), where)))
    return parsed


def _check_ratio_scope(scope: tuple[str, ...], metric: str, where: str) -> None:
    """A size/latency ratio compares a variant with fp32: on fp32 itself it could never gate (a budget that
    gates nothing is refused, like a typo). Unscoped, it applies to every other variant."""
    from edgeport.validate.payoff import BASELINE, RATIO_BUDGETS

    if metric in RATIO_BUDGETS and scope and scope[-1] == BASELINE:
        raise UsageError(f"{where}: {metric} compares a variant with its target's {BASELINE} row; "
                         f"{BASELINE} has nothing to compare with (set it for the quantized variants)")


def _flag_float(value: str, where: str) -> float:
    try:
        return float(value)
    except ValueError as exc:
        raise UsageError(f"bad {where}: {value!r} is not a number") from exc


def _flag_bool(value: str, where: str) -> bool:
    known = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
    if value.lower() not in known:
        raise UsageError(f"bad {where}: expected true or false, got {value!r}")
    return known[value.lower()]


def _number(metric: str, value, where: str) -> float:
    """A threshold in its range (``edgeport.validate.limits``): finite (nan compares false with everything,
    inf lets everything through: a budget that gates nothing), ``topk`` a whole number >= 1."""
    from edgeport.validate.limits import check_number

    return float(check_number(metric, value, f"bad {where}"))


def _table_value(metric: str, value, where: str):
    """One KEY = VALUE of a [budgets.*] table, checked like the flag form."""
    if metric in LIST_KEYS:
        return _check_list(metric, value, where)
    if metric in ALLOW_KEYS:
        if not isinstance(value, bool):
            raise UsageError(f"budget {metric} in {where} must be true or false, got {value!r}")
        return value
    if metric not in BUDGET_KEYS:
        raise UsageError(f"unknown budget key {metric!r} in {where}; known: {', '.join(KNOWN_KEYS)}")
    return _number(metric, value, f"budget in {where}")


def budget_for(target: str, variant: str, config: dict, flags: list[tuple[tuple[str, ...], str, Any]],
               generative: bool = False) -> dict:
    """The target's own budget for ``variant`` (an unknown variant is an error), then [budgets.*], then flags;
    one that gates nothing is exit 2 (``check_budget``). The built-in default rides along as ``builtin`` so
    every report can list what a config changed, from the rows alone."""
    from edgeport.targets.registry import get_target
    from edgeport.validate.budget_audit import check_budget

    budget = get_target(target).budget(variant)
    builtin = dict(budget)
    tables = config.get("budgets", {})
    for table_key in (variant, f"{target}.{variant}"):
        for metric, value in tables.get(table_key, {}).items():
            budget[metric] = _table_value(metric, value, f"[budgets.{table_key}]")
    for layer in ((), (variant,), (target, variant)):  # general to specific
        for scope, metric, value in flags:
            if scope == layer:
                budget[metric] = value
    check_budget(budget, f"budget of {target}.{variant}", generative)
    if variant == "fp32":  # unscoped ratio budgets are for the variants compared with it (see _check_ratio_scope)
        budget = {k: v for k, v in budget.items() if k not in ("max_size_ratio", "max_latency_ratio")}
    return {**budget, "builtin": builtin}


def _check_list(key: str, value, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{key} in {where} must be a list of names, got {value!r}")
    if key == "gate" and (bad := [v for v in value if v not in GATE_KEYS]):
        raise UsageError(f"gate in {where} names unknown metric {bad[0]!r}; known: {', '.join(GATE_KEYS)}")
    return list(value)


def is_required(target: str, variant: str, config: dict) -> bool:
    """Rows are required unless ``optional`` names their target or ``target.variant``."""
    optional = config.get("optional", [])
    if not isinstance(optional, list):
        raise UsageError(f"optional must be a list of targets or target.variant, got {optional!r}")
    return target not in optional and f"{target}.{variant}" not in optional


def baseline_thresholds(config: dict, where: str = "config") -> dict:
    """[baseline] over the defaults, each in its range (finite, factors >= 1: ``size_factor = inf`` would let any
    growth through). A value looser than the default is listed LOOSENED in every rendering of the report."""
    from edgeport.validate.limits import check_number

    table = config.get("baseline", {})
    if not isinstance(table, dict):
        raise UsageError(f"[baseline] in {where} must be a table of KEY = VALUE, got {table!r}")
    unknown = [k for k in table if k not in BASELINE_DEFAULTS]
    if unknown:
        raise UsageError(f"unknown key {unknown[0]!r} in [baseline] in {where}; known: {', '.join(BASELINE_DEFAULTS)}")
    return {**BASELINE_DEFAULTS, **{k: float(check_number(k, v, f"[baseline] in {where}")) for k, v in table.items()}}
