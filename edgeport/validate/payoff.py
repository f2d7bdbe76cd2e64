"""Does a quantized variant pay off? Each non-fp32 row against its own target's fp32 row of the same run.

People pick int8 to be smaller and faster; a row that is neither still passes parity, so the report must say
so itself. Every row whose variant is not the baseline gets, in its ``quantization`` block:

- ``size_ratio``: its artifact's bytes ÷ the fp32 artifact's, and ``latency_ratio``: its p50 ÷ the fp32
  row's p50 — only when both were timed with the same thread count (the same runtime: same target);
- ``baseline``: what it was compared with, or why nothing (``null`` ratios and a note, never a guess);
- ``flags``: a row that is not smaller, or slower, than its fp32 row, with the causes its target read from
  the artifact (:mod:`edgeport.quantize.artifact_share`: ops left float, Q/DQ pairs, per-tensor scales,
  kernels without an int8 path). A flag is a note, not a failure...

...unless a budget says so: ``max_size_ratio`` / ``max_latency_ratio`` fail the row above them. A ratio budget
must gate on a number the row has: when the ratio cannot be measured (no fp32 row, fp32 failed, latency
off, different threads) a row with that budget fails and says why, rather than passing unchecked.

fp32 is every target's default variant, built on every run (``-q int8`` adds int8 beside it), so the
baseline is always asked for; it is missing only when its row failed or was skipped.
"""

from __future__ import annotations

BASELINE = "fp32"
RATIO_BUDGETS = {"max_size_ratio": "size_ratio", "max_latency_ratio": "latency_ratio"}
# "slower" is a p50 more than 10% above fp32's: on a shared machine the same artifact's p50 moves by that much
# between runs (measured: bench/quant_payoff.py repeats), and a flag that flips with noise teaches users to
# ignore it. Size is exact: not smaller is at or above fp32's bytes.
SLOWER = 1.10


def apply(rows: list[dict]) -> list[dict]:
    """Fill the ratios and flags of every non-baseline row in place (rows as report.json holds them)."""
    baselines = {r["target"]: r for r in rows if r.get("variant") == BASELINE}
    for row in rows:
        if row.get("variant") != BASELINE and (row.get("artifact") or _ratio_budget(row)):
            compare_row(row, baselines.get(row["target"]))
    return rows


def compare_row(row: dict, base: dict | None) -> None:
    record = dict(row.get("quantization") or {})
    for key in ("size_ratio", "latency_ratio", "baseline", "flags"):
        record.pop(key, None)
    why_not = _baseline_problem(row, base)
    record["baseline"] = {"variant": BASELINE, "size_bytes": (base or {}).get("size_bytes"),
                          "p50_ms": ((base or {}).get("latency_ms") or {}).get("p50"), "missing": why_not}
    record["size_ratio"] = None if why_not else _ratio(row.get("size_bytes"), base.get("size_bytes"))
    record["latency_ratio"], latency_gap = (None, None) if why_not else _latency_ratio(row, base)
    record["flags"] = _flags(record, row.get("not_delegated") or {}, row.get("speed_causes"))
    row["quantization"] = record
    notes = row.setdefault("notes", [])
    notes[:] = [n for n in notes if not n.startswith(NOTE_PREFIXES)]
    if why_not:
        notes.append(f"{NOTE_PREFIXES[0]}{why_not}")
    elif latency_gap and (row.get("latency_ms") or (base.get("latency_ms"))):  # --no-latency needs no note
        notes.append(f"{NOTE_PREFIXES[0]}{latency_gap}")
    notes += [f"{NOTE_PREFIXES[1]}{flag}" for flag in record["flags"]]
    _gate(row, record, why_not or latency_gap)


NOTE_PREFIXES = ("no ratio to fp32: ", "does not pay off: ")


def _baseline_problem(row: dict, base: dict | None) -> str | None:
    if base is None:
        return f"no {BASELINE} row for {row['target']} in this run"
    if base.get("status") == "skipped" or not base.get("artifact") or not base.get("size_bytes"):
        return f"the {row['target']} {BASELINE} row has no artifact ({base.get('status')})"
    return None


def _latency_ratio(row: dict, base: dict) -> tuple[float | None, str | None]:
    mine, theirs = row.get("latency_ms") or {}, base.get("latency_ms") or {}
    if not mine.get("p50") or not theirs.get("p50"):
        return None, "p50 not measured on both rows (latency off, or a row did not run)"
    if mine.get("threads") != theirs.get("threads"):
        return None, f"timed with {mine.get('threads')} threads against fp32's {theirs.get('threads')}"
    return _ratio(mine["p50"], theirs["p50"]), None


def _ratio(a, b) -> float | None:
    return round(a / b, 4) if a and b else None


def _flags(record: dict, not_delegated: dict, speed_causes: list | None = None) -> list[str]:
    """"not smaller"/"slower" lines, each with the causes read from the artifact and what its runtime read
    from it (``speed_causes``: ops outside its accelerator, unrolled loops — the same list a row slower than
    eager names, :mod:`edgeport.validate.speed`), or saying none was found."""
    outside = list(speed_causes or []) or (
        [f"ops outside the delegate: {', '.join(f'{op} x{n}' for op, n in not_delegated.items())}"] if not_delegated else [])
    causes = "; ".join([*(record.get("causes") or []), *outside]) or "no cause found in the artifact"
    flags = []
    if record["size_ratio"] is not None and record["size_ratio"] >= 1.0:
        flags.append(f"not smaller than fp32 (size ×{record['size_ratio']:.2f}): {causes}")
    if record["latency_ratio"] is not None and record["latency_ratio"] > SLOWER:
        flags.append(f"slower than fp32 (p50 ×{record['latency_ratio']:.2f}): {causes}")
    return flags


def _ratio_budget(row: dict) -> dict:
    budget = (row.get("parity") or {}).get("budget") or {}
    return {k: budget[k] for k in RATIO_BUDGETS if k in budget}


def _gate(row: dict, record: dict, unmeasured: str | None) -> None:
    """Fail the row over a ratio budget, or whose ratio budget has nothing to gate on."""
    problems = []
    for key, limit in _ratio_budget(row).items():
        value = record[RATIO_BUDGETS[key]]
        if value is None:
            problems.append(f"{key} {limit:g} set but {RATIO_BUDGETS[key]} not measured ({unmeasured or 'no value'})")
        elif value > limit:
            problems.append(f"{RATIO_BUDGETS[key]} {value:.3f} > {key} {limit:g}")
    if problems:
        row["status"] = "failed"
        row["error"] = "; ".join(filter(None, [row.get("error"), *problems]))
