"""Loops a ``.tflite`` runs unrolled, read from the flatbuffer (issue 20 item 3).

A recurrent layer has no loop in a LiteRT graph: litert-torch unrolls ``aten.lstm`` into one copy of the cell
per time step (a FULLY_CONNECTED on the hidden state, SLICEs, LOGISTIC/TANH gates, MULs, ADDs: ~15 ops), so a
3-layer LSTM over 100 frames is thousands of tiny kernel calls where PyTorch runs one fused LSTM kernel per
layer — the speaker encoder's fp32 ``.tflite`` ran 2x slower than eager with every op inside XNNPACK. The
loop is visible in the artifact: every step's matmul reads the SAME constant weight tensor, and successive
reads are a fixed number of ops apart (the ops of one step). Read lazily (the generated flatbuffer
accessors, no object tree), so a large model costs a scan of its operator list, not a copy of its weights.
"""

from __future__ import annotations

from pathlib import Path
from statistics import median

from edgeport.targets.litert.flatbuffer import is_constant, opcode_names

LOOP_OPS = ("FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D")
MIN_STEPS = 3   # a weight read twice is a shared layer more often than a loop (tied heads, siamese branches)


def unrolled_loops(path: Path) -> list[dict]:
    """One record per constant weight read by ``MIN_STEPS`` or more ops of the same kind in subgraph 0:
    ``{"module", "op", "weight", "steps", "ops_per_step", "ops", "model_ops"}``; biggest loop first."""
    import mmap

    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        return _loops_of(mapped)   # the mapped file, not a copy: a 2 GB model's weights are never read here


def _loops_of(buffer) -> list[dict]:
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAs(buffer, 0)
    if model.SubgraphsLength() == 0:
        return []
    codes = opcode_names(model)
    graph = model.Subgraphs(0)
    reads: dict[int, list[int]] = {}
    for index in range(graph.OperatorsLength()):
        op = graph.Operators(index)
        if codes[op.OpcodeIndex()] in LOOP_OPS and op.InputsLength() > 1 and op.Inputs(1) >= 0 \
                and is_constant(model, graph.Tensors(op.Inputs(1))):
            reads.setdefault(op.Inputs(1), []).append(index)
    loops = [_loop(graph, codes, tensor, indices) for tensor, indices in reads.items() if len(indices) >= MIN_STEPS]
    for loop in loops:
        loop["model_ops"] = graph.OperatorsLength()
    return sorted(loops, key=lambda loop: -loop["ops"])


def _loop(graph, codes: list[str], tensor: int, indices: list[int]) -> dict:
    first = graph.Operators(indices[0])
    per_step = int(median(b - a for a, b in zip(indices, indices[1:])))
    out = graph.Tensors(first.Outputs(0)).Name() if first.OutputsLength() else b""
    module = (out or b"").decode(errors="replace").split(";")[0].split("/")[-1]
    return {"module": module.rsplit(".", 1)[-1] or None, "op": codes[first.OpcodeIndex()],
            "weight": [int(d) for d in graph.Tensors(tensor).ShapeAsNumpy()], "steps": len(indices),
            "ops_per_step": per_step, "ops": per_step * len(indices)}


def describe(loops: list[dict]) -> str | None:
    """The report's cause line for the loops, or None."""
    if not loops:
        return None
    total = loops[0]["model_ops"]
    unrolled = min(total, sum(loop["ops"] for loop in loops))
    parts = ", ".join(f"{loop['module'] or loop['op']} {loop['steps']} steps x {loop['ops_per_step']} ops "
                      f"({loop['op']} on weight {'x'.join(map(str, loop['weight']))} each step)" for loop in loops[:4])
    more = f" and {len(loops) - 4} more" if len(loops) > 4 else ""
    return (f"unrolled loops: {parts}{more} = {unrolled} of the graph's {total} ops run as separate small kernel "
            "calls, one copy per time step (PyTorch runs one fused kernel per recurrent layer)")
