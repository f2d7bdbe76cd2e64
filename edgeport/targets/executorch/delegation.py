"""What XNNPACK took and what it left: the row's ``delegation`` block and ``edgeport check``'s list.

After ``to_edge_transform_and_lower`` every partition XNNPACK accepted is one ``executorch_call_delegate``
node whose lowered module keeps the partition's original edge graph; every other op runs on ExecuTorch's
portable kernels (plain C++ loops, single-threaded, often 10-100x slower than XNNPACK's). Counting the
original graphs gives the share of ops and of FLOPs that run delegated, and the ops left behind are the
ones to rewrite or to expect slow.

FLOPs: 2 x MACs for convolutions, linear layers, matmuls and attention; one per output element for other
arithmetic; none for data movement (views, copies, concatenation, indexing) and quantize/dequantize.
"""

from __future__ import annotations

import math

PORTABLE_WHY = "runs on ExecuTorch's portable kernels (not delegated to XNNPACK): converts, but slower"
# bookkeeping nodes that are not ops of the model: tuple unpacking and PT2E's quantize/dequantize pairs
_NOT_OPS = ("getitem", "quantized_decomposed.")
_MOVEMENT = {"aten.cat", "aten.copy", "aten.clone", "aten.full", "aten.full_like", "aten.arange", "aten.scalar_tensor",
             "aten.index_put", "aten.index", "aten.embedding", "aten.zeros", "aten.ones", "aten.empty", "aten.where"}


def op_name(node) -> str:
    """``aten.cumsum.default`` for an edge op (the ATen overload it wraps) or an ATen op."""
    wrapped = getattr(node.target, "_op", None)  # EdgeOpOverload -> OpOverload (an OpOverload's own _op is C++)
    return str(wrapped if hasattr(wrapped, "overloadpacket") else node.target)


def is_op(node) -> bool:
    return node.op == "call_function" and not any(k in op_name(node) for k in _NOT_OPS) \
        and "executorch_call_delegate" not in op_name(node)


def flops(node) -> int:
    """The FLOPs of one edge/ATen node from its fake values (see the module docstring)."""
    name, out = op_name(node), node.meta.get("val")
    packet = name.rsplit(".", 1)[0]
    if not hasattr(out, "shape") or packet in _MOVEMENT or packet.endswith("_copy") or "dim_order" in packet:
        return 0
    values = [a.meta.get("val") if hasattr(a, "meta") else a for a in node.args]
    first = values[0] if values and hasattr(values[0], "shape") else None
    if packet in ("aten.linear", "aten.mm", "aten.addmm", "aten.bmm", "aten.matmul", "aten.baddbmm"):
        operand = values[0] if packet == "aten.linear" else values[-2] if packet in ("aten.addmm", "aten.baddbmm") else values[0]
        return 2 * out.numel() * int(operand.shape[-1])
    if packet == "aten.convolution":
        weight = values[1]
        return 2 * out.numel() * math.prod(int(d) for d in weight.shape[1:])
    if "scaled_dot_product_attention" in packet and first is not None:
        key = values[1]
        return 4 * math.prod(int(d) for d in first.shape) * int(key.shape[-2])
    return int(out.numel())


def summary(edge) -> dict:
    """The ``delegation`` block of an EdgeProgramManager after lowering, over all its methods."""
    delegated_nodes = portable_nodes = delegated_flops = portable_flops = partitions = 0
    portable: dict[str, int] = {}
    for method in edge.methods:
        module = edge.exported_program(method).graph_module
        for node in module.graph.nodes:
            if node.op == "call_function" and "executorch_call_delegate" in op_name(node):
                partitions += 1
                inner = [n for n in getattr(module, node.args[0].target).original_module.graph.nodes if is_op(n)]
                delegated_nodes += len(inner)
                delegated_flops += sum(flops(n) for n in inner)
            elif is_op(node):
                portable_nodes += 1
                portable_flops += flops(node)
                portable[op_name(node)] = portable.get(op_name(node), 0) + 1
    nodes, total_flops = delegated_nodes + portable_nodes, delegated_flops + portable_flops
    return {"backend": "XnnpackBackend", "partitions": partitions, "nodes": nodes, "nodes_delegated": delegated_nodes,
            "node_share": round(delegated_nodes / nodes, 4) if nodes else None, "flops": total_flops,
            "flops_delegated": delegated_flops,
            "flops_share": round(delegated_flops / total_flops, 4) if total_flops else None,
            "portable_ops": dict(sorted(portable.items(), key=lambda kv: (-kv[1], kv[0])))}


def portable_ops(program) -> dict[str, tuple[int, str]]:
    """``edgeport check``: the ops of ``program`` that XNNPACK would leave on the portable kernels, as
    ``{op: (count, why)}`` (found by running the very partitioner ``convert`` runs, without serializing)."""
    from edgeport.diagnostics import first_line
    from edgeport.targets.executorch.lower import edge_program

    try:
        found = summary(edge_program({"forward": program}))["portable_ops"]
    except Exception as exc:  # check reports, it does not crash: the conversion would fail the same way
        return {"(lowering)": (1, f"ExecuTorch lowering fails: {first_line(exc)}")}
    return {op: (count, PORTABLE_WHY) for op, count in found.items()}
