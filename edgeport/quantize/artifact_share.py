"""How much of a quantized artifact is actually quantized, read from the artifact itself (never assumed from
the variant's name): the share of weights stored in an integer type, the share of FLOPs that run on integer
kernels, the compute ops left float, and the causes a slow or large "int8" row usually has.

A target reads its own format into :class:`WeightedOp` records (``Target.read_quantization``); everything
else here is target-agnostic. FLOPs count multiply-adds of the weighted ops (2 per MAC), the ops that carry
a model's weights and its time: matmuls, convolutions, recurrent cells, embedding lookups (0 FLOPs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

RECURRENT = ("LSTM", "GRU", "RNN")


@dataclass
class WeightedOp:
    op: str                       # the artifact's op type, e.g. CONV_2D, MatMulInteger
    weight_elements: int          # elements of its constant weights
    flops: int                    # 2 x multiply-adds at the artifact's shapes
    weight_quantized: bool        # its weights are stored in an integer type
    int_compute: bool             # it runs an integer kernel (static int8, or dynamic-range/hybrid)
    per_tensor: bool = False      # integer weights with one scale though the op has several output channels
    kernel: tuple = ()            # the weight's shape, for naming the slow ones


@dataclass
class ArtifactQuantization:
    ops: list[WeightedOp]
    activation_qdq: int = 0                               # QUANTIZE/DEQUANTIZE ops on activations
    float_between: dict = field(default_factory=dict)     # float ops between int8 ones: {op: count}
    notes: list[str] = field(default_factory=list)        # what the target knows about its kernels


def summarize(found: ArtifactQuantization) -> dict:
    """The row's ``quantization`` fields: shares, ops left float and the causes that make int8 not pay."""
    weights = sum(o.weight_elements for o in found.ops)
    flops = sum(o.flops for o in found.ops)
    left = {}
    for o in found.ops:
        if not o.int_compute:
            entry = left.setdefault(o.op, {"count": 0, "flops_share": 0.0, "weight_share": 0.0})
            entry["count"] += 1
            entry["flops_share"] += o.flops / flops if flops else 0.0
            entry["weight_share"] += o.weight_elements / weights if weights else 0.0
    for entry in left.values():
        entry["flops_share"], entry["weight_share"] = round(entry["flops_share"], 4), round(entry["weight_share"], 4)
    return {"weight_share": _share(sum(o.weight_elements for o in found.ops if o.weight_quantized), weights),
            "flops_share": _share(sum(o.flops for o in found.ops if o.int_compute), flops),
            "float_ops": left, "activation_qdq": found.activation_qdq,
            "per_tensor_ops": sum(1 for o in found.ops if o.per_tensor), "causes": causes(found, left)}


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def causes(found: ArtifactQuantization, left: dict) -> list[str]:
    """What in the artifact keeps it large or slow, biggest first."""
    out = []
    for op, entry in sorted(left.items(), key=lambda kv: -(kv[1]["flops_share"] + kv[1]["weight_share"])):
        if entry["flops_share"] >= 0.01 or entry["weight_share"] >= 0.01:
            why = " (recurrent: this runtime's int8 path does not cover it)" if any(r in op.upper() for r in RECURRENT) else ""
            out.append(f"{entry['count']} {op} left float ({entry['flops_share']:.0%} of FLOPs, "
                       f"{entry['weight_share']:.0%} of weights){why}")
    if found.float_between:
        between = ", ".join(f"{op} x{n}" for op, n in sorted(found.float_between.items(), key=lambda kv: -kv[1]))
        out.append(f"{found.activation_qdq} quantize/dequantize ops on activations around float ops: {between}")
    per_tensor = [o for o in found.ops if o.per_tensor]
    if per_tensor:
        out.append(f"{len(per_tensor)} op(s) with per-tensor int8 weights where per-channel was possible")
    return out + found.notes


def record(row, target, staging: Path) -> None:
    """Add what the artifact shows to a non-fp32 row's ``quantization`` record (a note if it cannot be read)."""
    reader = getattr(target, "read_quantization", None)
    if reader is None or row.variant == "fp32" or not row.artifact:
        return
    from edgeport.diagnostics import first_line

    try:
        found = summarize(reader(staging / row.artifact))
    except Exception as exc:
        row.note(f"could not read what the artifact quantizes: {first_line(exc)}")
        return
    on_purpose = row.details.pop("float_on_purpose", None) or []  # the target's own choice, with its reason
    on_purpose += [{"name": op, "op": op, "count": entry["count"], "reason": f"the runtime has no int8 {op} kernel "
                    "(edgeport quantizes the recurrent ops it can: onnxruntime LSTM, LiteRT's unrolled LSTM)"}
                   for op, entry in found["float_ops"].items() if any(r in op.upper() for r in RECURRENT)]
    record = {**(row.details.get("quantization") or {}), **found}
    if on_purpose:   # float_layers names every layer the artifact keeps float, whoever chose it, and why
        record["float_on_purpose"] = on_purpose
        record["float_layers"] = [*(record.get("float_layers") or []),
                                  *({k: v for k, v in layer.items() if k != "reason"} | {"why": layer["reason"]}
                                    for layer in on_purpose)]
    row.details["quantization"] = record
