"""Where an onnxruntime artifact spends its time, by op type: the cause an ONNX row names when it is slower
than PyTorch eager or than its fp32 row.

onnxruntime's CPU provider runs every op itself (there is no delegate to fall out of), so what helps a user
is time, not FLOPs: which op types take it, and how much goes to quantize/dequantize ops (an int8 graph
whose Q/DQ pairs around float ops cost more than int8 saves). Measured with onnxruntime's own profiler
(``enable_profiling``: one event per node run) on a second session of the same artifact, a few runs of the
sample the judge just ran, capped at :data:`PROFILE_BUDGET_MS` of model time so a large model is not run
for long again. The profile file goes to the run's scratch folder and is removed.
"""

from __future__ import annotations

import json
from pathlib import Path

PROFILE_RUNS = 5
PROFILE_BUDGET_MS = 2000.0     # at most about this much model time is spent profiling
TOP = 4
QDQ = ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear")


def op_times(path: Path, options, feeds: dict, runs: int) -> dict[str, float]:
    """Microseconds per run spent in each op type (first run, which warms up, left out); ``options``: the
    judged session's own (threads), profiling added."""
    import tempfile

    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="ort-profile-") as folder:
        options.enable_profiling, options.profile_file_prefix = True, str(Path(folder) / "profile")
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        for _ in range(runs + 1):
            session.run(None, feeds)
        events = json.loads(Path(session.end_profiling()).read_text())
    nodes = [e for e in events if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")]
    per_run = len(nodes) // (runs + 1)
    times: dict[str, float] = {}
    for event in sorted(nodes, key=lambda e: e["ts"])[per_run:]:   # the warm-up run's nodes come first
        op = (event.get("args") or {}).get("op_name") or "?"
        times[op] = times.get(op, 0.0) + event.get("dur", 0) / runs
    return times


def describe(times: dict[str, float]) -> list[str]:
    """The causes: the op types taking the most time, and the quantize/dequantize ops' share."""
    total = sum(times.values())
    if total <= 0:
        return []
    ranked = sorted(times.items(), key=lambda kv: kv[1], reverse=True)
    top = ", ".join(f"{op} {t / total:.0%}" for op, t in ranked[:TOP])
    causes = [f"time by op type (onnxruntime profile, {total / 1000:.3f} ms of kernels per run): {top}"]
    qdq = sum(t for op, t in times.items() if op in QDQ)
    if qdq / total >= 0.1:
        causes.append(f"quantize/dequantize ops take {qdq / total:.0%} of the kernel time: the int8 graph converts "
                      "between int8 and float around ops that stay float")
    return causes


def speed_causes(path: Path, options, feeds: dict | None, p50_ms: float | None) -> list[str]:
    """:func:`describe` of a short profile, or [] when nothing was timed (no latency, no sample run)."""
    if not feeds or not p50_ms:
        return []
    runs = max(1, min(PROFILE_RUNS, int(PROFILE_BUDGET_MS / p50_ms)))
    if p50_ms > PROFILE_BUDGET_MS:
        return []
    return describe(op_times(path, options, feeds, runs))
