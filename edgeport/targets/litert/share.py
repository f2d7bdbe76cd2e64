"""What a ``.tflite`` actually quantizes, read from its flatbuffer (:mod:`edgeport.quantize.artifact_share`).

A weighted op's weight is a constant tensor, or the output of a DEQUANTIZE of one (fp16 and weight-only int8
store the small type and widen it at load time: small on disk, float kernels). The op runs an integer kernel
when its weight is integer and read directly: static int8 (int8 activations too) or dynamic-range ("hybrid":
float activations quantized inside the kernel). FLOPs = 2 x output elements x weight elements per output
channel (TFLite keeps the output channels last in every output and first/last in the weight).
"""

from __future__ import annotations

import math
from pathlib import Path

from edgeport.quantize.artifact_share import ArtifactQuantization, WeightedOp

# op -> input indices holding weights
WEIGHTED = {"FULLY_CONNECTED": (1,), "CONV_2D": (1,), "DEPTHWISE_CONV_2D": (1,), "CONV_3D": (1,),
            "TRANSPOSE_CONV": (1,), "BATCH_MATMUL": (0, 1), "EMBEDDING_LOOKUP": (1,),
            "UNIDIRECTIONAL_SEQUENCE_LSTM": tuple(range(1, 9)), "UNIDIRECTIONAL_SEQUENCE_RNN": (1, 2),
            "BIDIRECTIONAL_SEQUENCE_LSTM": tuple(range(1, 9)) + tuple(range(18, 26)),
            "STABLEHLO_CONVOLUTION": (1,), "STABLEHLO_DOT_GENERAL": (0, 1)}
PER_CHANNEL_OPS = ("FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D", "CONV_3D", "TRANSPOSE_CONV")
INTEGER = {"INT8", "UINT8", "INT4", "INT16"}
CONVERSIONS = ("QUANTIZE", "DEQUANTIZE")


def read(path: Path) -> ArtifactQuantization:
    from ai_edge_litert import schema_py_generated as schema
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model(str(path))
    op_names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    types = {v: k for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
    found, seen = ArtifactQuantization([]), set()
    for graph in model.subgraphs:
        _read_graph(model, graph, lambda op: op_names.get(max(model.operatorCodes[op.opcodeIndex].builtinCode,
                                                               model.operatorCodes[op.opcodeIndex].deprecatedBuiltinCode), "?"),
                    lambda t: types.get(t.type, "?"), found, seen)
    return found


def _read_graph(model, graph, name_of, type_of, found: ArtifactQuantization, seen: set) -> None:
    """``seen``: weight buffers already counted (an unrolled LSTM's 100 steps share one weight: its bytes
    count once, its FLOPs at every step)."""
    ops = list(graph.operators or [])
    producer = {out: op for op in ops for out in op.outputs}
    constant = lambda i: i >= 0 and bool(model.buffers[graph.tensors[i].buffer].data is not None  # noqa: E731
                                        and len(model.buffers[graph.tensors[i].buffer].data))
    for op in ops:
        name = name_of(op)
        if name in CONVERSIONS and op.inputs[0] >= 0 and not constant(op.inputs[0]):
            found.activation_qdq += 1
            _float_neighbours(op, name, ops, producer, name_of, type_of, graph, found)
        if name not in WEIGHTED:
            continue
        weights = []
        for index in WEIGHTED[name]:
            if index >= len(op.inputs) or op.inputs[index] < 0:
                continue
            tensor, direct = op.inputs[index], True
            source = producer.get(tensor)
            if source is not None and name_of(source) == "DEQUANTIZE" and constant(source.inputs[0]):
                tensor, direct = source.inputs[0], False
            if constant(tensor):
                weights.append((graph.tensors[tensor], direct))
        if weights:
            found.ops.append(_weighted(name, weights, graph.tensors[op.outputs[0]], type_of, seen))


def _weighted(name: str, weights: list, output, type_of, seen: set) -> WeightedOp:
    sizes = [math.prod(int(d) for d in t.shape) for t, _ in weights]
    elements = sum(sizes)  # for FLOPs; stored bytes count each buffer once
    stored = sum(n for (t, _), n in zip(weights, sizes) if t.buffer not in seen)
    seen.update(t.buffer for t, _ in weights)
    out_shape = [int(d) for d in output.shape]
    channels = out_shape[-1] if out_shape else 1
    per_out = elements / max(1, channels)  # an LSTM's 4 x [H, I] + 4 x [H, H] gates too: per unit of H, per step
    flops = 0 if name == "EMBEDDING_LOOKUP" else int(2 * math.prod(out_shape) * per_out)
    quantized = all(type_of(t) in INTEGER for t, _ in weights)
    direct = all(d for _, d in weights)
    first = weights[0][0]
    scales = first.quantization.scale if first.quantization is not None and first.quantization.scale is not None else []
    per_tensor = quantized and name in PER_CHANNEL_OPS and len(scales) == 1 and channels > 1
    return WeightedOp(name, stored, flops, quantized, quantized and direct, per_tensor,
                      tuple(int(d) for d in first.shape))


def _float_neighbours(op, name, ops, producer, name_of, type_of, graph, found) -> None:
    """The float op a DEQUANTIZE feeds (or a QUANTIZE reads): what int8 had to step out of."""
    if name == "DEQUANTIZE":
        users = [o for o in ops if op.outputs[0] in list(o.inputs)]
        neighbours = [name_of(u) for u in users]
    else:
        source = producer.get(op.inputs[0])
        neighbours = [name_of(source)] if source is not None else []
    for n in neighbours:
        if n not in CONVERSIONS:
            found.float_between[n] = found.float_between.get(n, 0) + 1
