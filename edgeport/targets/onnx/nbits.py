"""onnxruntime's block-wise weight quantizer, MatMul -> ``MatMulNBits`` (``com.microsoft``, run by its CPU
provider), for two variants:

- ``int4-block32`` (forward and text generation): signed int4 weights in blocks of 32 along K, one fp32
  scale per block (symmetric: no zero points). ``accuracy_level`` unset: the kernel dequantizes a block and
  computes in float, so the error is the weights' alone (LiteRT's int4-block32 quantizes activations too).
- ``dynamic-int8`` of text generation (:data:`INT8_BLOCKS`): int8 weights in blocks of 64, ``accuracy_level``
  4: activations quantized to int8 at run time per row and block, integer dot products. ``quantize_dynamic``
  quantizes activations per tensor, one scale for the whole prompt in a prefill graph, whose outlier tokens
  then cost every other token its precision (SmolLM2-135M, per-channel weights: mean KLD 0.068; 0.057 with
  only the prefill graph quantized, 0.018 with only the decode graph; this scheme 0.0057; bench/LLM_QUALITY.md). Blocks of 64 divide the
  hidden sizes of common small LLMs (576, 896, 960, 2048; 128 pads 576 to 640) at 1/16 of scales.

The weights of every MatMul with a constant 2-D weight (and of every Gemm, first rewritten as MatMul + Add)
are quantized by ``onnxruntime.quantization.matmul_nbits_quantizer``'s ``DefaultWeightOnlyQuantizer`` (its
math, its packing). Other ops (an embedding's Gather, norms) keep their fp32 weights, except a table tied to the
lm_head: the head (a MatMul on the table through a Transpose, which the quantizer alone skips) and the embedding
read one quantized copy (:mod:`.tied_head`).

Weights are read one at a time: the graph is loaded without its external data (``model.onnx.data`` of a
large forward model, a generative graph's data), a weight is read into a temporary copy, quantized, and
dropped; only the tensors left as they were are read in just before the graph is saved (as
:mod:`.lazy_weights` does for ``quantize_dynamic``). ``MatMulNBitsQuantizer(path)`` itself loads the whole
graph with its data.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterable

INT4 = {"bits": 4, "block_size": 32, "symmetric": True, "op": "MatMulNBits",
        "compute": "float (accuracy_level unset: blocks dequantized in the kernel)"}
INT8_BLOCKS = {"bits": 8, "block_size": 64, "symmetric": True, "op": "MatMulNBits", "accuracy_level": 4,
               "compute": "int8 (activations quantized at run time, per row and block)"}
# the groups ``--fallback int8`` keeps in an int4-block32 row: int8 weights, the row's blocks, float compute (as
# INT4: no activation quantization, so the search's simulation reproduces them; INT8_BLOCKS' cannot be)
INT8_KEEP = {"bits": 8, "block_size": 32, "symmetric": True, "op": "MatMulNBits",
             "compute": "float (accuracy_level unset: blocks dequantized in the kernel)"}


def weight_quantizer(scheme: dict):
    """onnxruntime's block-wise weight quantizer for ``scheme`` (MatMul weights)."""
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, DefaultWeightOnlyQuantizer

    config = DefaultWeightOnlyQuantConfig(block_size=scheme["block_size"], is_symmetric=scheme["symmetric"],
                                          accuracy_level=scheme.get("accuracy_level"), bits=scheme["bits"],
                                          op_types_to_quantize=("MatMul",))
    return DefaultWeightOnlyQuantizer(config)


def quantize_nbits(src: Path, dst: Path, scheme: dict = INT4, *, nodes_to_exclude: Iterable[str] = (),
                   nodes_to_quantize=None, external: bool | None = None, node_schemes: dict | None = None,
                   memo: dict | None = None) -> int:
    """Write ``dst``: ``src`` with its MatMul/Gemm weights in ``scheme``'s blocks. ``nodes_to_exclude`` /
    ``nodes_to_quantize`` name the graph's MatMul/Gemm nodes (the float-fallback's layers); ``node_schemes``
    ({node: scheme}) quantizes those nodes in another scheme (``--fallback int8``'s kept groups). ``external``:
    save the weights in ``dst.name + '.data'`` (default: when ``src`` keeps any outside the graph). ``memo``
    (one dict over the calls that quantize graphs sharing one ``weights.data``, e.g. a model's prefill and decode
    graphs): a weight already quantized in that scheme is not read nor quantized again (:class:`_Memo`).
    Returns how many nodes became MatMulNBits."""
    import onnx
    from onnx.external_data_helper import uses_external_data

    from edgeport.targets.onnx.lazy_weights import inline_tensor

    model = onnx.load(str(src), load_external_data=False)
    graph, folder = model.graph, str(Path(src).parent)
    if external is None:
        external = any(uses_external_data(t) for t in graph.initializer)
    quantizer = weight_quantizer(scheme)
    if node_schemes:
        quantizer = _per_node(quantizer, node_schemes)
    log = logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer")
    level = log.level
    log.setLevel(logging.WARNING)   # it logs two INFO lines per node on its own handler
    try:
        model, done = _quantize_nodes(model, quantizer, folder, nodes_to_exclude, nodes_to_quantize, _Memo(memo, folder))
    finally:
        log.setLevel(level)
    graph = model.graph
    for tensor in graph.initializer:   # the weights left as they were (an embedding), read in to be saved
        if uses_external_data(tensor):
            inline_tensor(tensor, folder, copy=False)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
    if external:
        onnx.save(model, str(dst), save_as_external_data=True, all_tensors_to_one_file=True,
                  location=Path(dst).name + ".data", size_threshold=1024)
    else:
        onnx.save(model, str(dst))
    return done


def _per_node(default, node_schemes: dict):
    """node name -> its quantizer: ``node_schemes``' scheme for the nodes it names, else ``default``."""
    built = {}
    for scheme in node_schemes.values():
        built.setdefault(id(scheme), weight_quantizer(scheme))
    return lambda name: built[id(node_schemes[name])] if name in node_schemes else default


def _quantize_nodes(model, quantizer, folder: str, nodes_to_exclude, nodes_to_quantize, memo: "_Memo"):
    """(model, nodes quantized): each eligible node's weight read, quantized and dropped in turn (or taken from
    ``memo``). A head tied to the embedding table is quantized once for both (:mod:`.tied_head`).
    ``quantizer``: one, or a function node name -> the node's (:func:`quantize_nbits`' ``node_schemes``)."""
    from edgeport.targets.onnx import tied_head

    graph = model.graph
    excluded, included = set(nodes_to_exclude), None if nodes_to_quantize is None else set(nodes_to_quantize)
    inits = {t.name: t for t in graph.initializer}
    producers = {o: n for n in graph.node for o in n.output}
    readers = tied_head.consumers(graph)
    pick = quantizer if callable(quantizer) else (lambda _name: quantizer)
    nodes, added, tied, done = [], {}, {}, 0
    for node in graph.node:
        wanted = node.name not in excluded and (included is None or node.name in included)
        head = wanted and tied_head.tied_table(node, producers, readers, inits, pick(node.name).config.block_size)
        as_matmul = (*tied_head.as_matmul(node, *head, folder), [], head[1]) if head else \
            _as_matmul(node, inits, folder) if wanted else None
        if as_matmul is None:
            nodes.append(node)
            continue
        matmul, read, after, source = as_matmul
        new, tensors = memo.quantized(matmul, source, pick(node.name), read, graph)
        if len(new) == 1 and new[0] is matmul:  # the quantizer left it (not a 2-D weight)
            nodes.append(node)
            continue
        done += 1
        nodes.extend([*new, *after])
        if head and new[0].op_type == "MatMulNBits":
            tied[head[1].name] = (head[0], new[0])
        for tensor in tensors:
            added.setdefault(tensor.name, tensor)  # a weight two MatMuls share: stored once
    del graph.node[:]
    transposes = {id(t) for t, _nbits in tied.values() if t is not None}
    graph.node.extend(n for n in nodes if id(n) not in transposes)   # the tied heads' Transposes
    graph.initializer.extend(added.values())
    for table, (_transpose, nbits_node) in tied.items():
        graph.initializer.extend(tied_head.gathers(graph, table, nbits_node))
    _drop_unused(graph)
    return model, done


class _Scratch:
    """The graph the quantizer finds a node's weight in and adds its packed weight and scales to: a list, not a
    ``GraphProto`` (which copied the weight in, and the packed weight again: 15 s of a 1B model's 90)."""

    def __init__(self, weight):
        self.initializer, self.input, self.value_info, self.output = [weight], [], [], []


class _Memo:
    """A weight's quantized tensors, by where its data lies (file, offset, length) and the scheme: the prefill
    and decode graphs of a generative model read one ``weights.data``, and each used to read and quantize
    every weight again (the tied head's table transposed twice): 45 s of 95 at Llama-3.2-1B. A hit rebinds
    the cached node to this graph's names (its input, output, and weight names)."""

    def __init__(self, store: dict | None, folder: str):
        self.store, self.folder = store, folder

    def key(self, source, quantizer, transposed: bool):
        import os

        where = {e.key: e.value for e in source.external_data}
        if self.store is None or "location" not in where:
            return None
        config = quantizer.config
        return (os.path.realpath(os.path.join(self.folder, where["location"])), where.get("offset", "0"),
                where.get("length"), transposed, config.bits, config.block_size, config.is_symmetric,
                config.accuracy_level)

    def quantized(self, matmul, source, quantizer, read, graph) -> tuple[list, list]:
        """(the nodes replacing ``matmul``, the tensors they add)."""
        key = self.key(source, quantizer, matmul.input[1] != source.name)
        if key is not None and key in self.store:
            return _rebound(*self.store[key], matmul)
        weight = read()
        scratch = _Scratch(weight)
        new = quantizer.quantize(matmul, [graph, scratch])
        tensors = [t for t in scratch.initializer if t is not weight]
        if key is not None and len(new) == 1 and new[0] is not matmul and _rebindable(new[0], matmul, tensors):
            self.store[key] = (matmul, new[0], tensors)
        return new, tensors


def _rebindable(node, matmul, tensors) -> bool:
    """Whether ``node`` reads only ``matmul``'s input and tensors named after its weight, and writes its output."""
    weight = matmul.input[1]
    return (list(node.output) == list(matmul.output) and node.input[0] == matmul.input[0]
            and all(t.name.startswith(weight) for t in tensors)
            and set(node.input[1:]) <= {t.name for t in tensors})


def _rebound(cached, node, tensors, matmul) -> tuple[list, list]:
    """``node`` (built for ``cached``) and its ``tensors`` renamed for ``matmul``: same data, this graph's names."""
    import onnx

    old, new = cached.input[1], matmul.input[1]
    renamed = []
    for tensor in tensors:
        copy = onnx.TensorProto()
        copy.CopyFrom(tensor)
        copy.name = new + tensor.name[len(old):]
        renamed.append(copy)
    out = onnx.NodeProto()
    out.CopyFrom(node)
    out.input[:] = [matmul.input[0], *(new + name[len(old):] for name in node.input[1:])]
    out.output[:] = list(matmul.output)
    out.name = matmul.name + node.name[len(cached.name):] if node.name.startswith(cached.name) else matmul.name
    return [out], renamed


def _as_matmul(node, inits: dict, folder: str):
    """(MatMul node, a function reading its weight in, nodes after it, the stored weight) for a MatMul or Gemm
    with a constant weight, or None. A Gemm (alpha = beta = 1, A not transposed) becomes ``<name>_MatMul`` on B
    (transposed if ``transB``) and ``<name>_Add`` of C, as onnxruntime's dynamic quantizer rewrites it."""
    import onnx
    from onnx import helper

    from edgeport.targets.onnx.lazy_weights import inline_tensor, transposed_tensor

    if node.op_type not in ("MatMul", "Gemm") or len(node.input) < 2 or node.input[1] not in inits:
        return None
    tensor = inits[node.input[1]]
    if tensor.data_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16) or len(tensor.dims) != 2:
        return None
    if node.op_type == "MatMul":
        return node, lambda: inline_tensor(tensor, folder, copy=True), [], tensor
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0 or attrs.get("transA", 0):
        return None
    name = f"{tensor.name}_transposed" if attrs.get("transB", 0) else tensor.name

    def read():
        return transposed_tensor(tensor, folder, name) if name != tensor.name else inline_tensor(tensor, folder, copy=True)

    bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
    product = f"{node.output[0]}_MatMul" if bias else node.output[0]
    matmul = helper.make_node("MatMul", [node.input[0], name], [product], name=f"{node.name}_MatMul")
    after = [helper.make_node("Add", [product, bias], [node.output[0]], name=f"{node.name}_Add")] if bias else []
    return matmul, read, after, tensor


def _drop_unused(graph) -> None:
    """Initializers no node reads any more (the fp32 weights now quantized; subgraphs count as readers)."""
    used = set()

    def walk(g):
        for n in g.node:
            used.update(n.input)
            for attr in n.attribute:
                for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                    walk(sub)
        used.update(o.name for o in g.output)

    walk(graph)
    keep = [t for t in graph.initializer if t.name in used]
    dropped = {t.name for t in graph.initializer} - {t.name for t in keep}
    del graph.initializer[:]
    graph.initializer.extend(keep)
    inputs = [i for i in graph.input if i.name not in dropped]   # an old graph lists its weights as inputs too
    del graph.input[:]
    graph.input.extend(inputs)
