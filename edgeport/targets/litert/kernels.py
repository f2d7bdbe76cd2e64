"""LiteRT int8 that pays off on XNNPACK (issue 20): which layers int8 would make slower, and the LSTM weights
PT2E cannot quantize.

Convolutions over ONE input channel (a pitch CNN's 512x1 kernel on raw audio, a mono image's first layer):
XNNPACK's int8 kernels run them slower than fp32 — measured with ``bench/conv_int8.py`` (1 thread, same
process): a 512x1 conv, 1 -> 64 channels, stride 4 on 1024 samples: fp32 0.195 ms, static int8 per-channel
0.422 ms (x2.16), per-tensor x2.68, dynamic-range x88 (the hybrid conv leaves XNNPACK); while 64x1 convs with
32-64 input channels, a 9-tap conv1d and 3x3 convs ran 6-10x FASTER in int8. Such a conv holds a few hundred
weights, so keeping it float costs no size: both int8 variants keep it float and the row says so.

Recurrent layers: PT2E annotates linear/conv nodes, and ``aten.lstm`` is neither, so the LSTM (whose weights
are most of a speech model) stays float in a static int8 ``.tflite`` — the row said int8 and was 2% smaller.
litert-torch unrolls it into FULLY_CONNECTED ops; ai-edge-quantizer's dynamic-range recipe on the PT2E
artifact quantizes exactly those float FCs (int8 weights, hybrid kernels), leaving the int8 ones as they are.
"""

from __future__ import annotations

from edgeport.quantize.layers import RECURRENT, QuantLayer, fx_layers, op_name

CONV_OPS = ("conv1d", "conv2d", "convolution")


def slow_int8_convs(program, variant: str = "int8") -> list[QuantLayer]:
    """Ungrouped convolutions with one input channel; for dynamic-range also depthwise ones (its hybrid
    depthwise kernel leaves XNNPACK: x20 on a 3x3, 96 channels, 56x56). See the module docstring."""
    nodes = {n.name: n for n in program.graph.nodes}
    found = []
    for layer in fx_layers(program, CONV_OPS, weighted=True):
        node = nodes[layer.id]
        weight = node.args[1].meta.get("val")
        groups = node.args[6] if op_name(node) in ("conv1d", "conv2d") and len(node.args) > 6 else \
            (node.args[8] if len(node.args) > 8 else 1)
        if weight is None or weight.dim() < 3 or int(weight.shape[1]) != 1:
            continue
        if groups == 1 or (variant == "dynamic-int8" and groups == int(weight.shape[0])):
            found.append(layer)
    return found


def float_on_purpose(program, variant: str, user_floats) -> list[dict]:
    """The layers int8 keeps float for speed, with why (beside the user's own ``float_layers``)."""
    reasons = {True: "depthwise: the dynamic-range (hybrid) depthwise conv leaves XNNPACK (x20 slower than fp32, "
               "bench/conv_int8.py)", False: "1 input channel: XNNPACK's int8 conv is slower than fp32 there "
               "(x2.2 static, x88 dynamic-range on a 512x1 kernel, bench/conv_int8.py)"}
    return [{**layer.to_json(), "reason": reasons[_grouped(program, layer.id)]}
            for layer in slow_int8_convs(program, variant) if layer.id not in set(user_floats or ())]


def _grouped(program, layer_id: str) -> bool:
    node = next(n for n in program.graph.nodes if n.name == layer_id)
    index = 6 if op_name(node) in ("conv1d", "conv2d") else 8
    return len(node.args) > index and node.args[index] != 1


def with_fast_layers(job):
    """(job with the slow-in-int8 convs added to its float layers, those layers as the report lists them)."""
    if job.variant not in ("int8", "dynamic-int8"):
        return job, []
    auto = float_on_purpose(job.program, job.variant, job.float_layers)
    if not auto:
        return job, []
    from dataclasses import replace

    floats = [*(job.float_layers or ()), *(layer["node"] for layer in auto)]
    job.notes.append(f"{job.variant}: kept {len(auto)} conv(s) float where XNNPACK's int8 kernel is slower than "
                     f"fp32 ({', '.join(a['name'] for a in auto)}; see quantization.float_on_purpose)")
    return replace(job, float_layers=tuple(floats)), auto


def quantize_recurrent(path, job) -> None:
    """Static int8 of a model with recurrent layers: the unrolled FCs of each recurrent block get dynamic-range
    int8 weights, except the blocks the user keeps float (``--fallback float`` names the block; its ops are
    found by name, :mod:`edgeport.targets.litert.blocks`)."""
    from edgeport.targets.litert import blocks

    recurrent = fx_layers(job.program, RECURRENT, weighted=True)
    if not recurrent:
        return
    floats = set(job.float_layers or ())
    kept = [layer for layer in recurrent if layer.id in floats]
    chosen = [layer for layer in recurrent if layer.id not in floats]
    if kept:
        job.notes.append(f"int8: recurrent layers kept float by --fallback float: {', '.join(k.name for k in kept)}")
    regex = blocks.regex_of(job.program, [layer.id for layer in chosen])
    if regex is None:
        return
    path.write_bytes(dynamic_range_fcs(path.read_bytes(), regex))
    job.notes.append(f"int8: recurrent layers ({', '.join(c.name for c in chosen)}) quantized dynamic-range (int8 "
                     "weights, float activations): PT2E has no int8 LSTM")


def dynamic_range_fcs(content: bytes, regex: str = ".*") -> bytes:
    """Dynamic-range int8 on the float FULLY_CONNECTED ops (of a PT2E int8 flatbuffer) whose output tensor
    name ``regex`` selects."""
    from ai_edge_quantizer import qtyping, quantizer
    from litert_torch.generative.quantize import quant_recipes
    from litert_torch.quantize import translate_recipe

    dynamic = translate_recipe.translate_to_ai_edge_recipe(quant_recipes.full_dynamic_recipe().generative_recipe)
    recipe = [{**entry, "regex": regex, "operation": qtyping.TFLOperationName.FULLY_CONNECTED} for entry in dynamic]
    q = quantizer.Quantizer(content, recipe)
    return bytes(q.quantize(enable_progress_bar=False, enable_progress_report=False).quantized_model)
