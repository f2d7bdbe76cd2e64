"""Rows slower than PyTorch eager, with why (issue 20 item 3): one pass over all the rows of a run.

An artifact slower than the model it came from is worth a line only with what to do about it: what in the
artifact costs the time (the causes its runtime read from it — ops outside the accelerator, loops the
converter unrolled; the same ``speed_causes`` a quantized row's "slower than fp32" flag names,
:mod:`edgeport.validate.payoff`) and which other target ran the same variant faster than eager in the same
run (so the user knows the model is not simply slow everywhere). Each such row gets ``slower_than_eager``;
a row its runtime can say nothing about still gets it, saying so.
"""

from __future__ import annotations


def apply(rows: list[dict], reference: dict | None) -> list[dict]:
    """Fill ``slower_than_eager`` on every timed row whose p50 is above eager's (rows as report.json holds them)."""
    eager = (reference or {}).get("p50")
    if not eager:
        return rows
    ratios = {id(r): _ratio(r, eager) for r in rows}
    for row in rows:
        ratio = ratios[id(row)]
        if ratio is None or ratio <= 1.0:
            row.pop("slower_than_eager", None)
            continue
        faster = [{"target": o["target"], "variant": o["variant"], "ratio": ratios[id(o)]} for o in rows
                  if o is not row and o.get("variant") == row.get("variant") and ratios[id(o)] is not None
                  and ratios[id(o)] < ratio]
        row["slower_than_eager"] = {"ratio": ratio, "causes": list(row.get("speed_causes") or []) or
                                    ["no cause found in the artifact by its runtime"],
                                    "faster_elsewhere": sorted(faster, key=lambda f: f["ratio"])}
        _note(row, ratio, row["slower_than_eager"]["faster_elsewhere"])
    return rows


NOTE = "p50 above PyTorch eager's"  # starts with "p50 ": validate measures again and drops it (fresh_notes)


def _note(row: dict, ratio: float, faster: list[dict]) -> None:
    notes = row.setdefault("notes", [])
    notes[:] = [n for n in notes if not n.startswith(NOTE)]
    if faster:
        others = ", ".join(f"{f['target']} {f['variant']} {f['ratio']:.2f}x" for f in faster[:3])
        notes.append(f"{NOTE} ({ratio:.2f}x) where other targets ran the same variant faster in this run ({others}): "
                     "see slower_than_eager.causes")


def _ratio(row: dict, eager: float) -> float | None:
    p50 = (row.get("latency_ms") or {}).get("p50")
    return round(p50 / eager, 3) if row.get("status") == "ok" and p50 else None
