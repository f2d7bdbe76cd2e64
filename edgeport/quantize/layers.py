"""The quantizable layers of an exported program, named once for every target.

A layer's id is the FX node name of its op in the program the target converts (``linear_2``): torch.onnx
keeps it in every ONNX node's metadata, PT2E annotates those very nodes, and litert-torch converts that graph,
so one id serves every quantizer. The user reads the module path (``encoder.layers.0.linear1``), the op and
the line of their own code that called it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from edgeport.diagnostics import user_source

# ops that follow a layer and belong to it for a quantizer: fused into its kernel (ReLU), or folded into its
# weights (batch norm, whose ONNX Conv+BN fusion even carries the norm's name); getitem unpacks the norm's tuple
ABSORBED = ("batch_norm", "_native_batch_norm_legit", "getitem", "relu", "relu6", "hardtanh", "clamp")
# blocks that are one layer for a user and for a quantizer though they are no linear/conv: a recurrent op holds
# all its gates' weights (``aten.lstm.input``: every stacked layer in one node, weights in a list argument),
# attention is where int8 breaks transformers (softmax ranges). Issue 20: a search that does not list them
# answers "1 of 1 layers float" on an LSTM model whose LSTM is the problem.
RECURRENT = ("lstm", "gru", "rnn_tanh", "rnn_relu")
ATTENTION = ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu",
             "_native_multi_head_attention")
# a block is its module: every op the recurrent/attention module runs (an LSTM's state inits and unpacking,
# attention's projections, reshapes and softmax) belongs to the layer, so keeping it float keeps it float whole
BLOCKS = RECURRENT + ATTENTION


@dataclass(frozen=True)
class QuantLayer:
    id: str             # FX node name in the program the target converts
    name: str           # what the user reads: the module path, with the node when a module has several layers
    op: str             # the op, e.g. "linear", "conv2d"
    source: str | None  # the user's line that called it

    def to_json(self) -> dict:
        return {"name": self.name, "node": self.id, "op": self.op, "source": self.source}


class LayerQuantizer(Protocol):
    """What a target gives the search: calibrated once, then asked for outputs of many candidates.

    ``run`` quantizes the program with ``float_layers`` kept float (or, with ``only``, with only that layer
    quantized) and returns the outputs on ``samples`` (flattened, like a runner's). ``measured`` says whether
    those are the real artifact's outputs ("artifact") or a faithful simulation ("simulation"); the search's
    answer is judged on the real artifact either way."""

    measured: str
    layers: list[QuantLayer]

    def run(self, samples: Sequence, float_layers: Sequence[str] = (), only: str | None = None) -> list: ...

    def close(self) -> None: ...


def op_name(node) -> str:
    """``aten.conv2d.default`` -> ``conv2d``."""
    return str(node.target).split(".")[1] if str(node.target).startswith("aten.") else str(node.target)


def fx_layers(program, ops: Sequence[str], weighted: bool = False) -> list[QuantLayer]:
    """The program's nodes whose op is in ``ops`` (``op_name`` form), in graph order. ``weighted``: only
    those whose second argument is a constant (a parameter or buffer), i.e. ops with weights to quantize."""
    constants = _constant_names(program) if weighted else set()
    found = []
    for node in program.graph.nodes:
        if node.op != "call_function" or op_name(node) not in ops:
            continue
        if weighted and not _has_weights(node, constants):
            continue
        stack = node.meta.get("nn_module_stack") or {}
        found.append((node, list(stack.values())[-1][0] if stack else ""))
    modules = [m for _, m in found]
    return [QuantLayer(node.name, _label(node.name, module, modules.count(module) > 1), op_name(node),
                       user_source(node.meta.get("stack_trace"))) for node, module in found]


def block_layers(program) -> list[QuantLayer]:
    """The recurrent blocks that hold weights and the attention blocks: layers for every quantizer."""
    return in_graph_order(program, fx_layers(program, RECURRENT, weighted=True), fx_layers(program, ATTENTION))


def in_graph_order(program, *groups: Sequence[QuantLayer]) -> list[QuantLayer]:
    """Layers of several ``fx_layers`` calls merged in graph order, each once."""
    order = {n.name: i for i, n in enumerate(program.graph.nodes)}
    merged = {layer.id: layer for group in groups for layer in group}
    return sorted(merged.values(), key=lambda layer: order.get(layer.id, len(order)))


def block_module(node) -> str | None:
    """The module path of a block op's innermost module, or None (not a block, or called at the model's top
    level, where "its module" would be the whole model)."""
    if node is None or op_name(node) not in BLOCKS:
        return None
    stack = list((node.meta.get("nn_module_stack") or {}).values())
    path = stack[-1][0] if stack else ""
    return path or None


def block_members(program, node) -> list:
    """The call_function nodes run inside a block op's module (its submodules included), graph order."""
    path = block_module(node)
    if path is None:
        return []
    return [n for n in program.graph.nodes if n.op == "call_function"
            and any(p == path for p, _ in (n.meta.get("nn_module_stack") or {}).values())]


def weight_args(node) -> list:
    """The arguments holding a layer's weights: a recurrent op's parameter list, else its second argument."""
    if op_name(node) in RECURRENT and len(node.args) > 2 and isinstance(node.args[2], (list, tuple)):
        return list(node.args[2])
    return list(node.args[1:2])


def _has_weights(node, constants: set) -> bool:
    args = weight_args(node)
    return bool(args) and all(getattr(a, "name", None) in constants for a in args)


def _label(node: str, module: str, shared: bool) -> str:
    if not module:
        return node
    return f"{module} ({node})" if shared else module


def _constant_names(program) -> set[str]:
    """Placeholder names of the program's parameters, buffers and constants."""
    signature = getattr(program, "graph_signature", None)
    if signature is None:
        return {n.name for n in program.graph.nodes if n.op == "get_attr"}
    return {spec.arg.name for spec in signature.input_specs if spec.target is not None}


def owners(program, layer_ids: Sequence[str]) -> dict[str, str]:
    """FX node name -> the layer it belongs to: each layer's own node and the single-user chain of ops that
    follow it and fuse into it (see ``ABSORBED``); a block's layer also owns its module's other nodes (see
    ``BLOCKS``) unless they are layers asked for themselves."""
    nodes = {n.name: n for n in program.graph.nodes}
    result = {}
    for layer in layer_ids:
        result[layer] = layer
        node = nodes.get(layer)
        for member in block_members(program, node):
            if member.name not in layer_ids:
                result.setdefault(member.name, layer)
        while node is not None and len(node.users) == 1:
            user = next(iter(node.users))
            if user.op != "call_function" or not any(a in str(user.target) for a in ABSORBED):
                break
            result.setdefault(user.name, layer)
            node = user
    return result


def weight_shape(program, layer_id: str) -> tuple[int, ...] | None:
    """Shape of a layer's weight (its second argument), read from the node's fake value."""
    node = next((n for n in program.graph.nodes if n.name == layer_id), None)
    first = weight_args(node)[:1] if node is not None else []
    value = first[0].meta.get("val") if first and hasattr(first[0], "meta") else None
    return tuple(int(d) for d in value.shape) if value is not None else None
