"""A head tied to the embedding table, quantized once for both uses (:mod:`.nbits`).

torch.onnx exports a tied lm_head (SmolLM2, Llama-3.2, Qwen3, Gemma: one tensor for the embedding and the
head) as ``Gather(E, ids)`` for the embedding and ``MatMul(x, Transpose(E))`` for the head. onnxruntime's
``MatMulNBits`` quantizer takes only a MatMul whose weight is an initializer, so the head was left fp32: 113 MB
of SmolLM2-135M's 187 MB int4 artifact (bench/LLM_QUALITY.md).

Here the head's MatMul reads ``E`` transposed (a copy, K x N as the quantizer wants it), which the quantizer
packs as ``MatMulNBits`` blocks: ``(N = vocab, K / block, block bytes)`` -- row ``v`` of ``E`` quantized in
blocks along the hidden size, the layout of onnxruntime's ``GatherBlockQuantized`` with ``uint8`` data
(``bits`` 4 or 8, values packed along the last axis low bits first, zero point 2^(bits-1) when none is given:
the symmetric scheme's implicit one). So every ``Gather`` of ``E`` becomes a ``GatherBlockQuantized`` of the
same packed bytes and scales (reshaped to ``(vocab, -1)``: onnxruntime folds the reshape at load), and ``E``
leaves the artifact: the table is stored once, quantized, and the embedding a token gets is the row the head
multiplies with (the same dequantized values, bit for bit).

All or nothing: when the table has a reader other than Gathers on axis 0 and the head, or the hidden size is
not a whole number of blocks, the head stays as it was (fp32, shared with the Gather). The float-fallback's
simulation (:mod:`.gen_fallback`) overrides ``E`` in the fp32 graphs with the artifact's dequantized head: that
is both uses at once, as here.

In float graphs the head reads the table as it is stored (:func:`head_as_gemm`): ``Gemm(x, E, transB=1)``
between two Reshapes, not ``MatMul(x, Transpose(E))``. onnxruntime folds a constant Transpose at load into a
transposed copy of the table (1 GB for Llama-3.2-1B), in every session: the prefill and decode sessions of one
artifact held the table three times. ``Gemm`` with ``transB`` multiplies by the stored table (onnxruntime's
M = 1 kernel reads B transposed in place), so the sessions share the weights file's pages
(:mod:`.signatures`). The quantizer takes either form.
"""

from __future__ import annotations

from onnx import helper


def consumers(graph) -> dict[str, list]:
    """{value name: [nodes reading it]} of the graph's top level."""
    out: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            out.setdefault(name, []).append(node)
    return out


def tied_table(node, producers: dict, readers: dict, inits: dict, block_size: int):
    """(Transpose node or None, table initializer) when ``node`` is the head on a 2-D table -- a MatMul reading it
    through a Transpose, or :func:`head_as_gemm`'s Gemm (None: no Transpose to drop) -- whose other readers are
    all Gathers on axis 0 (the embedding) and whose rows are whole blocks; else None."""
    transpose = transposed_table(node, producers, readers, inits)
    gemm = transpose is None and gemm_on_table(node, inits)
    if transpose is None and not gemm:
        return None
    table = inits[node.input[1] if gemm else transpose.input[0]]
    if table.dims[1] % block_size:
        return None
    others = [r for r in readers.get(table.name, ()) if r is not (node if gemm else transpose)]
    if not all(r.op_type == "Gather" and r.input[0] == table.name and _axis(r) == 0 for r in others):
        return None
    return (None if gemm else transpose), table


def transposed_table(node, producers: dict, readers: dict, inits: dict):
    """The Transpose (perm 1, 0) of a 2-D initializer that MatMul ``node`` alone reads as its weight, or None."""
    transpose = producers.get(node.input[1]) if node.op_type == "MatMul" and len(node.input) == 2 else None
    if transpose is None or transpose.op_type != "Transpose" or transpose.input[0] not in inits:
        return None
    perm = next((list(helper.get_attribute_value(a)) for a in transpose.attribute if a.name == "perm"), [1, 0])
    if perm != [1, 0] or len(inits[transpose.input[0]].dims) != 2 or len(readers.get(node.input[1], ())) != 1:
        return None
    return transpose


def gemm_on_table(node, inits: dict) -> bool:
    """``node`` is :func:`head_as_gemm`'s head: Gemm(x, E, transB=1), no bias, E a 2-D initializer."""
    if node.op_type != "Gemm" or len(node.input) != 2 or node.input[1] not in inits:
        return False
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    plain = attrs.get("alpha", 1.0) == 1.0 and attrs.get("beta", 1.0) == 1.0 and not attrs.get("transA", 0)
    return plain and attrs.get("transB", 0) == 1 and len(inits[node.input[1]].dims) == 2


def head_as_gemm(path) -> int:
    """Rewrite the graph at ``path`` (read without its external data) so every MatMul reading a 2-D initializer
    through a Transpose reads it as stored: ``Reshape(x, (-1, K))``, ``Gemm(., E, transB=1)`` (the MatMul's
    name and metadata, which :mod:`.gen_fallback` groups by), ``Reshape`` back to ``x``'s leading dims + N.
    Returns how many; the graph is saved only when there were some."""
    import onnx
    from onnx import numpy_helper

    import numpy as np

    model = onnx.load(str(path), load_external_data=False)
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    producers = {o: n for n in graph.node for o in n.output}
    readers = consumers(graph)
    nodes, dropped, constants = [], set(), []
    for node in graph.node:
        transpose = transposed_table(node, producers, readers, inits)
        if transpose is None:
            nodes.append(node)
            continue
        rows, width = inits[transpose.input[0]].dims
        name, x, y = node.name or node.output[0], node.input[0], node.output[0]
        constants += [numpy_helper.from_array(np.array(v, np.int64), f"{name}_{k}")
                      for k, v in (("flat", [-1, width]), ("zero", [0]), ("last", [-1]), ("n", [rows]))]
        gemm = helper.make_node("Gemm", [f"{name}_rows", transpose.input[0]], [f"{name}_out"], name=name, transB=1)
        gemm.metadata_props.extend(node.metadata_props)
        nodes += [helper.make_node("Reshape", [x, f"{name}_flat"], [f"{name}_rows"], name=f"{name}_rows"),
                  gemm,
                  helper.make_node("Shape", [x], [f"{name}_shape"], name=f"{name}_shape"),
                  helper.make_node("Slice", [f"{name}_shape", f"{name}_zero", f"{name}_last"], [f"{name}_lead"],
                                   name=f"{name}_lead"),
                  helper.make_node("Concat", [f"{name}_lead", f"{name}_n"], [f"{name}_dims"], axis=0,
                                   name=f"{name}_dims"),
                  helper.make_node("Reshape", [f"{name}_out", f"{name}_dims"], [y], name=f"{name}_back")]
        dropped.add(id(transpose))
    if dropped:
        del graph.node[:]
        graph.node.extend(n for n in nodes if id(n) not in dropped)
        graph.initializer.extend(constants)
        onnx.save(model, str(path))
    return len(dropped)


def _axis(node) -> int:
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"), 0)


def as_matmul(node, transpose, table, folder: str):
    """(the head's MatMul on the table transposed, a function reading that weight in): what the quantizer packs."""
    from edgeport.targets.onnx.lazy_weights import transposed_tensor

    name = f"{table.name}_transposed"
    return (helper.make_node("MatMul", [node.input[0], name], list(node.output), name=node.name),
            lambda: transposed_tensor(table, folder, name))


def gathers(graph, table: str, nbits_node) -> list:
    """Replace every Gather of ``table`` with a GatherBlockQuantized of ``nbits_node``'s packed weight and
    scales (reshaped to ``(vocab, -1)``); returns the initializers those reshapes need."""
    from onnx import numpy_helper

    import numpy as np

    attrs = {a.name: helper.get_attribute_value(a) for a in nbits_node.attribute}
    packed, scales = nbits_node.input[1], nbits_node.input[2]
    rows = numpy_helper.from_array(np.array([attrs["N"], -1], np.int64), f"{packed}_rows")
    nodes = []
    for node in graph.node:
        if node.op_type != "Gather" or node.input[0] != table:
            nodes.append(node)
            continue
        data, scale = f"{node.name}_{packed}", f"{node.name}_{scales}"
        nodes += [helper.make_node("Reshape", [packed, rows.name], [data], name=f"{node.name}_data"),
                  helper.make_node("Reshape", [scales, rows.name], [scale], name=f"{node.name}_scales"),
                  helper.make_node("GatherBlockQuantized", [data, node.input[1], scale], list(node.output),
                                   name=node.name, domain="com.microsoft", bits=attrs["bits"],
                                   block_size=attrs["block_size"], gather_axis=0, quantize_axis=1)]
    del graph.node[:]
    graph.node.extend(nodes)
    return [rows]
