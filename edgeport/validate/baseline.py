"""Baselines: compare a report with an earlier one and mark regressions, row by row (target × variant).

A regression is: a row that was ``ok`` and now fails; parity error (``max_rel_err``, scale-free) grown more
than ``error_factor`` and above ``error_floor``; p50 latency slower than ``latency_factor`` (same thread
count only); artifact size grown more than ``size_factor``. Thresholds come from ``[baseline]`` in the config
(defaults and their reasons: ``edgeport.config.BASELINE_DEFAULTS``). A regression in a required row fails
the run (exit 1); rows new in this report or gone from it are listed, not judged.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from edgeport.errors import UsageError, load_json

KNOWN_SCHEMAS = ("edgeport.report/1",)
# A report has one row per target x variant: a few dozen. Far more (or a file far larger than such a report)
# is a crafted file that would cost minutes and gigabytes to render, so it is refused before it is parsed.
MAX_ROWS = 1000
MAX_REPORT_BYTES = 64 << 20


def load_baseline(path: Path) -> dict:
    """Any baseline we cannot read with certainty is bad input (exit 2), never a silent pass."""
    path = Path(path)
    if path.is_dir():
        path = path / "report.json"
    if not path.is_file():
        raise UsageError(f"--baseline not found: {path}")
    if path.stat().st_size > MAX_REPORT_BYTES:
        raise UsageError(f"--baseline {path} is {path.stat().st_size} bytes, more than any report "
                         f"({MAX_REPORT_BYTES >> 20} MiB); refusing to read it")
    try:
        data = load_json(path.read_text(), f"--baseline {path}")
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:  # (nesting deeper than Python's stack)
        raise UsageError(f"--baseline {path} is not JSON: {exc}") from exc
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema not in KNOWN_SCHEMAS:
        raise UsageError(f"--baseline {path}: unknown report schema {schema!r} (this edgeport reads {', '.join(KNOWN_SCHEMAS)})")
    if not isinstance(data.get("targets"), list):
        raise UsageError(f"--baseline {path}: no 'targets' list")
    if len(data["targets"]) > MAX_ROWS:
        raise UsageError(f"--baseline {path}: {len(data['targets'])} rows, more than {MAX_ROWS}; not a report")
    seen = set()
    for index, row in enumerate(data["targets"]):
        problem = row_problem(row)
        if problem:
            raise UsageError(f"--baseline {path}: row {index} {problem}")
        if (row["target"], row["variant"]) in seen:
            raise UsageError(f"--baseline {path}: row {index} repeats {row['target']}[{row['variant']}]")
        seen.add((row["target"], row["variant"]))
    if not isinstance(data.get("model"), dict):
        raise UsageError(f"--baseline {path}: no 'model' object")
    return data


def row_problem(row) -> str | None:
    """What makes a report row unreadable: rows are matched by target and variant and judged by status."""
    if not isinstance(row, dict):
        return "is not an object"
    for key in ("target", "variant"):
        if not isinstance(row.get(key), str):
            return f"has no {key!r}"
    if row.get("status") not in ("ok", "failed", "skipped"):
        return f"has status {row.get('status')!r} (expected ok, failed or skipped)"
    for key, kinds in ROW_FIELDS.items():
        value = row.get(key)
        if value is not None and (not isinstance(value, kinds) or isinstance(value, bool)):
            return f"has {key} {str(value)[:40]!r} of the wrong type (expected {' or '.join(k.__name__ for k in kinds)})"
    if not all(isinstance(n, str) for n in row.get("notes") or []):
        return "has notes that are not strings"
    if _number((row.get("latency_ms") or {}).get("p50")) is None and (row.get("latency_ms") or {}).get("p50") is not None:
        return "has a latency_ms.p50 that is not a number"
    return None


# The row fields comparisons and validate read as numbers, text or objects: another type (a hand-edited or
# hostile report.json) is bad input, not an internal error half way through a comparison.
ROW_FIELDS = {"artifact": (str,), "sha256": (str,), "error": (str,), "size_bytes": (int, float),
              "parity": (dict,), "latency_ms": (dict,), "notes": (list,)}


def _number(value) -> float | None:
    if isinstance(value, str) and value in ("inf", "-inf", "nan"):
        return float(value)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def row_regressions(row: dict, old: dict, t: dict, compare_latency: bool = True) -> list[str]:
    """Only an ``ok`` baseline row vouches for its numbers: a failed one (e.g. full int8 over budget, which
    ``--fallback float`` now fixes with a few float layers) is no size, error or speed to regress from."""
    if old.get("status") != "ok":
        return []
    found = []
    if row.get("status") == "failed":
        found.append(f"was ok, now failed: {row.get('error')}")
    found += _budget_loosened(row, old)
    new_err = _number((row.get("parity") or {}).get("max_rel_err"))
    old_err = _number((old.get("parity") or {}).get("max_rel_err"))
    if new_err is not None and old_err is not None and new_err > t["error_floor"] and (
            new_err > old_err * t["error_factor"] or math.isnan(new_err)):
        found.append(f"parity error grew: max_rel_err {old_err:.3g} -> {new_err:.3g} (> x{t['error_factor']:g})")
    new_lat, old_lat = row.get("latency_ms") or {}, old.get("latency_ms") or {}
    if compare_latency and new_lat.get("p50") and old_lat.get("p50") and new_lat.get("threads") == old_lat.get("threads") \
            and new_lat["p50"] > old_lat["p50"] * t["latency_factor"]:
        found.append(f"slower: p50 {old_lat['p50']:.3f} -> {new_lat['p50']:.3f} ms (> x{t['latency_factor']:g})")
    old_size = files_bytes(old) or old.get("size_bytes")
    if row.get("size_bytes") and old_size and row["size_bytes"] > old_size * t["size_factor"]:
        found.append(f"bigger: {old_size} -> {row['size_bytes']} bytes (> x{t['size_factor']:g})")
    return found


def files_bytes(row: dict) -> int | None:
    """Bytes of every file a row lists, for a baseline written when ``size_bytes`` counted the artifact's
    main file only (a TPU row's model.jax_export without its weights): then its size_bytes is that file's
    own entry. None when the row's size_bytes already means every file (or there is no list)."""
    files = [f for f in row.get("files") or [] if isinstance(f, dict) and isinstance(f.get("size_bytes"), int)]
    main = next((f["size_bytes"] for f in files if f.get("path") == row.get("artifact")), None)
    total = sum(f["size_bytes"] for f in files)
    return total if main is not None and row.get("size_bytes") == main and total > main else None


def _budget_loosened(row: dict, old: dict) -> list[str]:
    """A budget looser than the baseline's (or than the default, when the baseline row kept none) is a
    regression of its own: a pull request must not make CI green by moving the bar."""
    from edgeport.validate.budget_audit import loosened, row_default

    new_budget, old_budget = (row.get("parity") or {}).get("budget"), (old.get("parity") or {}).get("budget")
    if not isinstance(new_budget, dict):
        return []
    reference = old_budget if isinstance(old_budget, dict) else row_default(row)
    return loosened(new_budget, reference) if isinstance(reference, dict) else []


def thresholds_loosened(report: dict, baseline: dict) -> list[str]:
    """[baseline] thresholds looser than the ones the baseline's own run recorded (or than the defaults): like a
    loosened budget, a regression of its own, so a pull request cannot widen ``size_factor`` to pass its growth."""
    from edgeport.validate.budget_audit import THRESHOLDS_KEY, threshold_changes

    now = report.get("config") if isinstance(report.get("config"), dict) else {}
    then = baseline.get("config") if isinstance(baseline.get("config"), dict) else {}
    recorded = then.get(THRESHOLDS_KEY) if isinstance(then.get(THRESHOLDS_KEY), dict) else {}
    defaults = now.get("baseline_defaults") if isinstance(now.get("baseline_defaults"), dict) else {}
    reference = {**defaults, **{k: v for k, v in recorded.items() if k in defaults}}
    return [f"baseline threshold loosened: {c['key']} {c['from']:g} -> {c['to']:g}"
            for c in threshold_changes(now.get(THRESHOLDS_KEY), reference) if c["direction"] == "loosened"]


def comparability(report: dict, baseline: dict) -> tuple[bool, list[str]]:
    """(comparable, notes). Rows compare only when the program takes and gives the same tensors; a changed
    graph or weights (the usual CI case) and a different machine are said, not refused."""
    from edgeport.validate.environment import differences

    new, old = report.get("model") or {}, baseline.get("model") or {}
    notes = []
    if new.get("signature") and old.get("signature") and new["signature"] != old["signature"]:
        return False, ["baseline is a different model (its inputs/outputs differ): rows not compared"]
    if old.get("spec") != new.get("spec"):
        notes.append(f"baseline model spec {old.get('spec')!r} differs from {new.get('spec')!r}")
    for key, what in (("graph_sha256", "graph"), ("weights_sha256", "weights")):
        if new.get(key) and old.get(key) and new[key] != old[key]:
            notes.append(f"the program's {what} changed since the baseline")
    env = differences(baseline.get("environment"), report.get("environment"))
    if env:
        notes.append("measured in a different environment: " + "; ".join(env))
    return True, notes


def same_machine(report: dict, baseline: dict) -> bool:
    """Latency compares only on the same CPU: across machines it is not a regression of the model."""
    from edgeport.validate.environment import differences

    return not [d for d in differences(baseline.get("environment"), report.get("environment")) if d.startswith("cpu")]


def apply_baseline(report: dict, baseline: dict, thresholds: dict, source: str) -> dict:
    """Mark ``regressions`` on each row and summarize under ``report["baseline"]``; returns the report.
    A baseline of another model cannot vouch for this one: that counts as one regression."""
    comparable, notes = comparability(report, baseline)
    old_rows = {(r.get("target"), r.get("variant")): r for r in baseline["targets"]} if comparable else {}
    count = 0 if comparable else 1
    latency = same_machine(report, baseline)
    if not latency and comparable:
        notes.append("latency not compared: the baseline was measured on another CPU")
    for row in report["targets"]:
        old = old_rows.get((row["target"], row["variant"]))
        row["regressions"] = row_regressions(row, old, thresholds, latency) if old else []
        count += len(row["regressions"]) if row.get("required", True) else 0
    loosened = thresholds_loosened(report, baseline)
    count += len(loosened)
    keys_now = {(r["target"], r["variant"]) for r in report["targets"]}
    report["baseline"] = {
        "source": source, "edgeport_version": baseline.get("edgeport_version"), "thresholds": thresholds,
        "regressions": count, "comparable": comparable, "notes": notes, "loosened": loosened,
        "new_rows": sorted(f"{t}[{v}]" for t, v in keys_now - set(old_rows)),
        "missing_rows": sorted(f"{t}[{v}]" for t, v in set(old_rows) - keys_now),
    }
    return report
