"""Where a ``.pte`` spends its time, per op, measured by ExecuTorch's own profiler (ETDump).

FLOPs say what XNNPACK *could* take; they do not say what the ops left outside cost: a grid sample, a group
norm or an index on the portable kernels (plain single-threaded C++ loops) can hold 0.02% of the FLOPs and
most of the time. The runtime wheel records a profile event for every portable op (``native_call_<op>``)
and, inside each XNNPACK delegate, for every XNNPACK operator (``Convolution (NHWC, QC8) IGEMM #1``,
``Convert (NC) #2`` — XNNPACK's quantize/dequantize of activations —, ``Transpose`` — layout changes);
the method is loaded a second time with ETDump on and run on the sample the judge timed. The medians over
a few runs give the row's ``op_time`` block and the causes a slow row names (:func:`causes`).
"""

from __future__ import annotations

import re
import statistics
import tempfile
from pathlib import Path

from edgeport.targets.executorch.tied import existing_data

RUNS = 5
# artifacts above this are not loaded a second time for the profile (the weights would be held twice)
PROFILE_MAX_BYTES = 256 << 20
PORTABLE_PREFIX = "native_call_"
BOOKKEEPING = ("OPERATOR_CALL", "DELEGATE_CALL", "Method::execute", "Method::init", "Program::load_method")


def op_times(path: Path, inputs: list, method: str = "forward", runs: int = RUNS) -> dict:
    """The ``op_time`` block of ``method`` of the ``.pte`` at ``path`` run on ``inputs`` (torch tensors):
    median ms per event over ``runs`` runs, split into portable ops and XNNPACK operators (see the module
    docstring). Uses the process's threadpool as the judge set it."""
    from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc
    from executorch.extension.pybindings import portable_lib

    module = portable_lib._load_for_executorch(str(path), existing_data(path), enable_etdump=True)
    for _ in range(runs + 1):   # the first run packs XNNPACK's weights: it is dropped below
        module.run_method(method, inputs)
    with tempfile.TemporaryDirectory(prefix="edgeport-etdump-") as tmp:
        dump = Path(tmp) / "run.etdp"
        module.write_etdump_result_to_file(str(dump), str(Path(tmp) / "debug.bin"))
        parsed = deserialize_from_etdump_flatcc(dump.read_bytes())
    del module
    blocks = [b for b in parsed.run_data if b.name == "Execute" and b.events][1:]
    return summarize([[(e.profile_event.name or e.profile_event.delegate_debug_id_str,
                        e.profile_event.name is None, e.profile_event.end_time - e.profile_event.start_time)
                       for e in b.events if e.profile_event is not None] for b in blocks])


def summarize(runs: list[list[tuple[str, bool, int]]]) -> dict:
    """Per run a list of (event name, delegated?, nanoseconds) -> the ``op_time`` block (ms, medians)."""
    per: dict[tuple[str, bool], list[float]] = {}
    for events in runs:
        summed: dict[tuple[str, bool], float] = {}
        for name, delegated, ns in events:   # an op name twice in one run (two partitions' calls): added
            summed[(name, delegated)] = summed.get((name, delegated), 0.0) + ns / 1e6
        for key, value in summed.items():
            per.setdefault(key, []).append(value)
    ms = {key: statistics.median(v) for key, v in per.items()}
    portable, delegated = {}, {}
    for (name, is_delegated), value in ms.items():
        if is_delegated:
            delegated[name] = value
        elif name.startswith(PORTABLE_PREFIX):
            op = name[len(PORTABLE_PREFIX):]
            portable[op] = portable.get(op, 0.0) + value
    # the delegate calls' own time (XNNPACK's per-operator events are whole microseconds: a tiny op reads 0)
    delegated_ms = ms.get(("DELEGATE_CALL", False)) or sum(delegated.values())
    portable_ms = sum(portable.values())
    total = ms.get(("Method::execute", False)) or portable_ms + delegated_ms
    kind = lambda pattern: round(sum(v for n, v in delegated.items() if re.match(pattern, n)), 4)  # noqa: E731
    return {"total_ms": round(total, 4), "delegated_ms": round(delegated_ms, 4), "portable_ms": round(portable_ms, 4),
            "time_share": round(delegated_ms / (delegated_ms + portable_ms), 4) if delegated_ms + portable_ms else None,
            "portable": {op: round(v, 4) for op, v in sorted(portable.items(), key=lambda kv: -kv[1])},
            "slowest": [[n, round(v, 4)] for n, v in sorted(delegated.items(), key=lambda kv: -kv[1])[:5]],
            "converts_ms": kind(r"Convert \("), "transposes_ms": kind(r"Transpose \(")}


def causes(block: dict | None) -> list[str]:
    """What costs the time, read from an ``op_time`` block: the ops outside XNNPACK with their ms, XNNPACK's
    own quantize/dequantize converts and layout transposes when they are a visible share, the slowest
    XNNPACK operators (a quantized row slower than fp32: which kernel). Ops outside under 1% of the time are
    not a cause (the row's ``op_time`` still lists them)."""
    if not block or not block.get("total_ms"):
        return []
    total, out = block["total_ms"], []
    share = lambda v: f"{v:.3f} ms ({100 * v / total:.0f}%)"  # noqa: E731
    if block["portable"] and block["portable_ms"] >= 0.01 * total:
        ops = ", ".join(f"{op} {share(v)}" for op, v in list(block["portable"].items())[:5])
        out.append(f"ops outside XNNPACK (portable kernels) take {share(block['portable_ms'])} of {total:.3f} ms: {ops}")
    if block["converts_ms"] >= 0.05 * total:
        out.append(f"XNNPACK's quantize/dequantize converts of activations take {share(block['converts_ms'])}")
    if block["transposes_ms"] >= 0.05 * total:
        out.append(f"layout transposes inside XNNPACK take {share(block['transposes_ms'])}")
    if block["slowest"]:
        out.append("slowest XNNPACK operators: " + ", ".join(f"{n} {share(v)}" for n, v in block["slowest"][:3]))
    return out
