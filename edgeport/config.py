"""Project configuration: ``edgeport.toml`` or ``[tool.edgeport]`` in ``pyproject.toml``, plus ``--budget`` flags.

Budgets resolve from general to specific, each layer overriding the last: built-in default for the variant,
``[budgets.<variant>]``, ``[budgets."<target>.<variant>"]``, then ``--budget`` flags in the same three forms
(``KEY=V``, ``VARIANT.KEY=V``, ``TARGET.VARIANT.KEY=V``). ``gate`` and ``topk_outputs`` take lists
(``gate=cosine_min,snr_db_min`` on the command line).

Other keys: ``optional = ["<target>", "<target>.<variant>"]`` (targets or target.variant rows whose failure does not fail
the run) and ``[baseline]`` regression thresholds (``BASELINE_DEFAULTS``).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from edgeport.errors import UsageError
from edgeport.validate.parity import BUDGET_KEYS, GATE_KEYS, LIST_KEYS, default_budget

# Why these numbers: parity errors of a fixed converter on fixed samples are deterministic, so any real growth
# is a change; x2 leaves room for a dependency bump that reorders float ops, and errors below the floor (1e-6
# of the output scale) are float noise whatever their ratio. Latency on shared 2-core CI runners swings
# +-30% run to run: only p50 slower by more than x1.5 counts. Artifact size is deterministic: +5% is real.
BASELINE_DEFAULTS = {"error_factor": 2.0, "error_floor": 1e-6, "latency_factor": 1.5, "size_factor": 1.05}


def load_config(path: Path | None = None, cwd: Path | None = None) -> dict:
    cwd = cwd or Path.cwd()
    if path is not None:
        if not Path(path).is_file():
            raise UsageError(f"config file not found: {path}")
        return _read_toml(Path(path), tool_table=Path(path).name == "pyproject.toml")
    if (cwd / "edgeport.toml").is_file():
        return _read_toml(cwd / "edgeport.toml", tool_table=False)
    if (cwd / "pyproject.toml").is_file():
        return _read_toml(cwd / "pyproject.toml", tool_table=True)
    return {}


def _read_toml(path: Path, tool_table: bool) -> dict:
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot parse {path}: {exc}") from exc
    return data.get("tool", {}).get("edgeport", {}) if tool_table else data


def parse_budget_flags(flags: list[str]) -> list[tuple[tuple[str, ...], str, float]]:
    """``--budget litert.fp16.cosine_min=0.99`` -> ((litert, fp16), cosine_min, 0.99)."""
    parsed = []
    for flag in flags:
        key, sep, value = flag.partition("=")
        *scope, metric = key.split(".") if key else [""]
        if not sep or metric not in BUDGET_KEYS + LIST_KEYS or len(scope) > 2:
            raise UsageError(f"bad --budget {flag!r}: expected [TARGET.][VARIANT.]KEY=VALUE with KEY one of {', '.join(BUDGET_KEYS + LIST_KEYS)}")
        if metric in LIST_KEYS:
            parsed.append((tuple(scope), metric, _check_list(metric, [v for v in value.split(",") if v], f"--budget {flag!r}")))
            continue
        try:
            parsed.append((tuple(scope), metric, float(value)))
        except ValueError as exc:
            raise UsageError(f"bad --budget {flag!r}: {value!r} is not a number") from exc
    return parsed


def budget_for(target: str, variant: str, config: dict, flags: list[tuple[tuple[str, ...], str, float]]) -> dict:
    budget = default_budget(variant)
    tables = config.get("budgets", {})
    for table_key in (variant, f"{target}.{variant}"):
        for metric, value in tables.get(table_key, {}).items():
            where = f"[budgets.{table_key}]"
            if metric in LIST_KEYS:
                budget[metric] = _check_list(metric, value, where)
                continue
            if metric not in BUDGET_KEYS:
                raise UsageError(f"unknown budget key {metric!r} in {where}; known: {', '.join(BUDGET_KEYS + LIST_KEYS)}")
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise UsageError(f"budget {metric} in {where} must be a number, got {value!r}")
            budget[metric] = float(value)
    for layer in ((), (variant,), (target, variant)):  # general to specific
        for scope, metric, value in flags:
            if scope == layer:
                budget[metric] = value
    return budget


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


def baseline_thresholds(config: dict) -> dict:
    table = config.get("baseline", {})
    unknown = [k for k in table if k not in BASELINE_DEFAULTS]
    if unknown:
        raise UsageError(f"unknown key {unknown[0]!r} in [baseline]; known: {', '.join(BASELINE_DEFAULTS)}")
    try:
        return {**BASELINE_DEFAULTS, **{k: float(v) for k, v in table.items()}}
    except (TypeError, ValueError) as exc:
        raise UsageError(f"[baseline] thresholds must be numbers: {exc}") from exc
