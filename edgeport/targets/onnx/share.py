"""What a quantized ``.onnx`` actually quantizes, read from its graph (:mod:`edgeport.quantize.artifact_share`).

Three shapes of int8 in onnxruntime's output (and one of int4, ``MatMulNBits``: packed int4 blocks, weight
K x N, a float kernel unless ``accuracy_level`` 4): integer ops (``MatMulInteger``, ``ConvInteger``,
``DynamicQuantizeLSTM``, ``QLinear*``: integer weights, integer kernels), and QDQ (``DequantizeLinear`` of an
int8 initializer feeding a float op: onnxruntime fuses it into an int8 kernel when the op's activations come
through a DequantizeLinear too, else the weight is widened and the kernel is float). FLOPs come from the
graph's inferred shapes (2 x output elements x weight elements per output channel).
"""

from __future__ import annotations

import math
from pathlib import Path

from edgeport.quantize.artifact_share import ArtifactQuantization, WeightedOp

# op -> (weight input indices, output channel axis)
WEIGHTED = {"MatMul": ((0, 1), -1), "Gemm": ((1,), -1), "Conv": ((1,), 1), "ConvTranspose": ((1,), 1),
            "LSTM": ((1, 2), None), "GRU": ((1, 2), None), "RNN": ((1, 2), None),
            "MatMulInteger": ((1,), -1), "ConvInteger": ((1,), 1), "QLinearConv": ((3,), 1),
            "QLinearMatMul": ((3,), -1), "DynamicQuantizeMatMul": ((1,), -1), "MatMulIntegerToFloat": ((1,), -1),
            "DynamicQuantizeLSTM": ((1, 2), None), "Gather": ((0,), None), "MatMulNBits": ((1,), -1)}
INTEGER_OPS = ("MatMulInteger", "ConvInteger", "QLinearConv", "QLinearMatMul", "DynamicQuantizeMatMul",
               "MatMulIntegerToFloat", "DynamicQuantizeLSTM")
# ops onnxruntime's QDQ fusion turns into integer kernels (or passes int8 through): a DequantizeLinear feeding
# anything else widens to float there
QDQ_FUSED = ("Conv", "MatMul", "Gemm", "Add", "Mul", "MaxPool", "AveragePool", "GlobalAveragePool", "Concat",
             "Resize", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Relu", "Clip", "LeakyRelu", "Sigmoid",
             "Gather", "Split", "Slice", "Flatten", "Where", "ArgMax", "Softmax", "QuantizeLinear", "Pad")
INT_TYPES = (2, 3, 5, 22, 21)   # uint8, int8, int16, int4, uint4 (onnx.TensorProto)
LAYOUT = ("Transpose", "Reshape", "Squeeze", "Unsqueeze")
SLOW = {"ConvInteger": "ConvInteger (dynamic int8 convolution): onnxruntime's kernel runs slower than its fp32 Conv"}


def read(path: Path) -> ArtifactQuantization:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # contrib ops the inference does not know: FLOPs fall back to what shapes are known
        pass
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    shapes = {v.name: [d.dim_value or 1 for d in v.type.tensor_type.shape.dim]
              for v in [*graph.value_info, *graph.input, *graph.output] if v.type.tensor_type.HasField("shape")}
    producer = {out: n for n in graph.node for out in n.output}
    found, seen = ArtifactQuantization([]), set()
    for node in graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear") and node.input[0] not in inits:
            found.activation_qdq += 1
            if node.op_type == "DequantizeLinear":
                for user in (n for n in graph.node if node.output[0] in n.input and n.op_type not in QDQ_FUSED):
                    found.float_between[user.op_type] = found.float_between.get(user.op_type, 0) + 1
        op = _weighted(node, inits, shapes, producer)
        if op is not None:
            fresh = _weight_names(node, inits, producer) - seen
            op.weight_elements = op.weight_elements if node.op_type == "MatMulNBits" and fresh else \
                sum(math.prod(inits[n].dims) for n in fresh)
            seen |= _weight_names(node, inits, producer)
            found.ops.append(op)
            if node.op_type in SLOW and SLOW[node.op_type] not in found.notes:
                found.notes.append(SLOW[node.op_type])
    return found


def _weight_names(node, inits: dict, producer: dict) -> set[str]:
    """The initializers behind a weighted node's weight inputs (counted once however many nodes share them)."""
    return {w.name for w, _ in _weights_of(node, inits, producer)}


def _weights_of(node, inits: dict, producer: dict) -> list:
    """(initializer, read directly) of each weight input; an unfolded LSTM's are traced through its Slices."""
    indices, axis = WEIGHTED[node.op_type]
    weights = [w for w in (_weight(node.input[i], inits, producer) for i in indices if i < len(node.input)) if w[0] is not None]
    weights = [(w, d) for w, d in weights if len(w.dims) >= 2 and math.prod(w.dims) >= 64]  # not shape constants
    if not weights and axis is None and node.op_type != "Gather":  # an unfolded LSTM: weights sliced at run time
        weights = [(w, True) for i in indices if i < len(node.input) for w in _traced(node.input[i], inits, producer)]
    return weights


def _traced(name: str, inits: dict, producer: dict, depth: int = 0) -> list:
    """The initializers a run-time Slice/Concat chain builds a weight from (torch.onnx's LSTM gate reorder)."""
    if name in inits:
        return [inits[name]] if math.prod(inits[name].dims) >= 64 else []
    source = producer.get(name)
    if source is None or depth > 12 or source.op_type not in ("Slice", "Concat", "QuantizeLinear", "DequantizeLinear", *LAYOUT):
        return []
    return [w for i in source.input if i for w in _traced(i, inits, producer, depth + 1)]


def _weight(name: str, inits: dict, producer: dict):
    """(initializer, read directly) behind an input: itself, or the int8 initializer a DequantizeLinear widens,
    through the Transpose/Reshape a folded Gemm leaves in between."""
    direct = True
    for _ in range(4):
        if name in inits:
            return inits[name], direct
        source = producer.get(name)
        if source is None or source.op_type not in ("DequantizeLinear", *LAYOUT):
            break
        direct = direct and source.op_type != "DequantizeLinear"
        name = source.input[0]
    return None, False


def _weighted(node, inits: dict, shapes: dict, producer: dict) -> WeightedOp | None:
    if node.op_type not in WEIGHTED:
        return None
    axis = WEIGHTED[node.op_type][1]
    weights = _weights_of(node, inits, producer)
    if not weights:
        return None
    elements = sum(math.prod(w.dims) for w, _ in weights)
    quantized = all(w.data_type in INT_TYPES for w, _ in weights)
    if node.op_type == "MatMulNBits":  # packed blocks (uint8 bytes): the weight is K x N, its compute float
        attrs = {a.name: a.i for a in node.attribute}   # unless accuracy_level 4 (int8 activations)
        elements = attrs.get("K", 0) * attrs.get("N", 0) or elements
        a = shapes.get(node.input[0])   # its output's shape is unknown to onnx's inference (a contrib op)
        flops = 2 * elements * math.prod(a[:-1]) if a else _flops(node, elements, axis, shapes)
        op = WeightedOp(node.op_type, elements, flops, True,
                        attrs.get("accuracy_level") == 4, kernel=(attrs.get("K"), attrs.get("N")))
        return op
    if node.op_type in INTEGER_OPS:
        int_compute = True
    elif quantized:  # QDQ: an int8 kernel only when every activation input is dequantized too
        activations = [i for i in node.input[:2] if i and _weight(i, inits, producer)[0] is None]
        int_compute = all((producer.get(i) is not None and producer[i].op_type == "DequantizeLinear") for i in activations)
    else:
        int_compute = False
    flops = 0 if node.op_type == "Gather" else _flops(node, elements, axis, shapes)
    per_tensor = quantized and axis is not None and _per_tensor(node, weights[0][0], producer, inits)
    return WeightedOp(node.op_type, elements, flops, quantized, int_compute, per_tensor, tuple(weights[0][0].dims))


def _flops(node, elements: int, axis, shapes: dict) -> int:
    if axis is None:  # recurrent: X is [T, B, I] (or [B, T, I]): every step multiplies all gates' weights
        x = shapes.get(node.input[0])
        return int(2 * elements * (x[0] * x[1] if x and len(x) >= 2 else 1))
    out = shapes.get(node.output[0])
    if not out:
        return 2 * elements
    return int(2 * math.prod(out) * elements / max(1, out[axis]))


def _per_tensor(node, weight, producer: dict, inits: dict) -> bool:
    """One scale for a weight with several output channels (QDQ: the DequantizeLinear's scale)."""
    source = next((producer[i] for i in node.input if i in producer and producer[i].op_type == "DequantizeLinear"
                   and producer[i].input[0] == weight.name), None)
    if source is None or len(source.input) < 2 or source.input[1] not in inits:
        return False
    scale = inits[source.input[1]]
    return math.prod(scale.dims) == 1 and weight.dims[0] > 1
