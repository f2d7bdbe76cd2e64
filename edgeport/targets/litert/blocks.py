"""Recurrent and attention blocks as ONE layer on LiteRT (issue 20): every op they became in the ``.tflite``.

litert-torch unrolls an LSTM into ~15 ops per time step (a FULLY_CONNECTED on the hidden state, SLICEs, gate
LOGISTIC/TANH, MULs and ADDs) and decomposes attention into BATCH_MATMULs, a SOFTMAX and MULs: no single op
stands for the block, so matching ops to layers by their weight (``quantize.match_ops``) misses it, and the
fallback search never listed the LSTM. But litert-torch names every op's output tensor after the module
hierarchy of the FX node it came from (its debuginfo rule: ``<type>_<attr>`` per module, ``/``-joined, then
``;``), so a block's ops — all unrolled time steps — are those whose output name lies under the block
module's hierarchy. The same names select them in ai-edge-quantizer recipes (regex search on the name).
"""

from __future__ import annotations

import re
from typing import Sequence

from edgeport.quantize.layers import QuantLayer, block_module


def hierarchy(node) -> str | None:
    """The module hierarchy litert-torch writes into the names of ``node``'s module's tensors (without the
    trailing ``;``), or None when the node is no block (see :func:`edgeport.quantize.layers.block_module`)."""
    if block_module(node) is None:
        return None
    parts = []
    for name, layer in (node.meta.get("nn_module_stack") or {}).values():
        kind = layer if isinstance(layer, str) else (
            layer.__qualname__ if layer.__module__ == "builtins" else f"{layer.__module__}.{layer.__qualname__}")
        parts.append(kind + (f"_{name.split('.')[-1]}" if name else ""))
    return "/".join(parts)


def name_regex(prefixes: Sequence[str]) -> str:
    """A regex matching tensor names under any of the hierarchies (the module itself or its submodules),
    also as a part of a fused name (``A;;B``)."""
    return "|".join(f"(?:^|;){re.escape(p)}(?:;|/)" for p in prefixes)


def block_ops(program, layers: Sequence[QuantLayer], model) -> dict[str, list[int]]:
    """Block layer id -> indices of subgraph 0's ops whose output tensor is named under the block's module."""
    nodes = {n.name: n for n in program.graph.nodes}
    graph = model.subgraphs[0]
    names = [[_text(graph.tensors[t].name) for t in op.outputs] for op in graph.operators or []]
    found = {}
    for layer in layers:
        prefix = hierarchy(nodes.get(layer.id))
        if prefix is None:
            continue
        pattern = re.compile(name_regex([prefix]))
        hits = [i for i, outs in enumerate(names) if any(pattern.search(o) for o in outs)]
        if hits:
            found[layer.id] = hits
    return found


def regex_of(program, layer_ids: Sequence[str]) -> str | None:
    """Recipe regex selecting the ops of the given block layers (None when none of them is a block)."""
    nodes = {n.name: n for n in program.graph.nodes}
    prefixes = [p for p in (hierarchy(nodes.get(i)) for i in layer_ids) if p]
    return name_regex(prefixes) if prefixes else None


def _text(name) -> str:
    return name.decode() if isinstance(name, bytes) else (name or "")
