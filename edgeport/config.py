"""Project configuration: ``edgeport.toml`` or ``[tool.edgeport]`` in ``pyproject.toml``, plus ``--budget`` flags.

Budgets resolve from general to specific, each layer overriding the last: built-in default for the variant,
``[budgets.<variant>]``, ``[budgets."<target>.<variant>"]``, then ``--budget`` flags in the same three forms
(``KEY=V``, ``VARIANT.KEY=V``, ``TARGET.VARIANT.KEY=V``).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from edgeport.errors import UsageError
from edgeport.validate.parity import BUDGET_KEYS, default_budget


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
        if not sep or metric not in BUDGET_KEYS or len(scope) > 2:
            raise UsageError(f"bad --budget {flag!r}: expected [TARGET.][VARIANT.]KEY=VALUE with KEY one of {', '.join(BUDGET_KEYS)}")
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
            if metric not in BUDGET_KEYS:
                raise UsageError(f"unknown budget key {metric!r} in [budgets.{table_key}]; known: {', '.join(BUDGET_KEYS)}")
            budget[metric] = float(value)
    for layer in ((), (variant,), (target, variant)):  # general to specific
        for scope, metric, value in flags:
            if scope == layer:
                budget[metric] = value
    return budget
