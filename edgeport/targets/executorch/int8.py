"""ExecuTorch ``dynamic-int8`` for text generation: PT2E with the XNNPACK quantizer's dynamic config on each
method (int8 per-channel symmetric linear weights, activations quantized per call): no calibration, the
scheme ExecuTorch's LLM recipes start from. The converted module (quantize/dequantize around each linear)
is exported again and lowered; the precision search (:mod:`.gen_fallback`) runs it in PyTorch instead.

In the converted module an activation is quantized over the whole tensor (``choose_qparams.tensor``), where
XNNPACK's dynamically quantized linear quantizes each row (token) on its own: the same for a decode step (one
token; module and ``.pte`` agree to 1e-7 on a tiny llama), coarser for a prefill of several tokens (its
logits 0.017 off the ``.pte``'s where fp32's are 0.009 off, same model), and a prefill's cache feeds every
later step. The precision search's candidates therefore quantize each row on its own
(:func:`per_row_activations`: the same op, row by row), as the ``.pte`` does: a prefill's logits then match
the ``.pte``'s to 1.5e-7. Teacher-forced decode steps after it still differ on some steps (0.005 max where
fp32 is 0.0097 off, tiny llama; others to 1e-5): XNNPACK's kernel rounds differently there, not traced.
"""

from __future__ import annotations

from edgeport.core.program import capture_mode
from edgeport.targets._jax import cpu_tracing
from edgeport.targets._pt2e import calibrated


def dynamic_int8(program, sample: dict, shared: dict | None = None, quantize=None):
    """One method's program with int8 dynamically quantized linear weights (see the module docstring);
    ``shared``: int8 weights other methods of the model already have (:func:`.._pt2e.fold_weight_quantization`)."""
    import torch

    converted = dynamic_int8_module(program, sample, shared, quantize)
    with capture_mode(), cpu_tracing():
        return torch.export.export(converted, (), kwargs=_fresh(sample), strict=False)


def dynamic_int8_module(program, sample: dict, shared: dict | None = None, quantize=None):
    """The PT2E-converted module :func:`dynamic_int8` exports (quantize/dequantize around each linear, in
    PyTorch: the precision search's candidates run it); ``quantize(weight attribute) -> bool`` keeps the
    linears it refuses out of the quantizer (its node filter), so they stay float."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer, get_symmetric_quantization_config)

    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True))
    if quantize is not None:
        quantizer.set_filter_function(_weights_filter(quantize))
    with capture_mode(), cpu_tracing():
        return calibrated(program.module(), quantizer, [_fresh(sample)], shared=shared)


def _fresh(sample: dict) -> dict:
    return {k: v.clone() for k, v in sample.items()}   # the programs update the cache in place


def _weights_filter(quantize):
    """The quantizer's node filter: a linear reading a weight attribute is annotated when ``quantize`` takes
    its name; every other node as without a filter."""
    import torch

    def keep(node) -> bool:
        weight = node.args[1] if node.target == torch.ops.aten.linear.default and len(node.args) > 1 else None
        return not (isinstance(weight, torch.fx.Node) and weight.op == "get_attr") or quantize(weight.target)
    return keep


def per_row_activations(gm) -> None:
    """Each ``choose_qparams.tensor`` -> ``quantize_per_tensor`` -> ``dequantize_per_tensor`` chain of a converted
    module (an activation's dynamic quantization) replaced by :func:`rows_quantized`: every row (token) with
    its own scale and zero point, as XNNPACK's dynamically quantized linear computes them."""
    import operator

    import torch

    ops = torch.ops.quantized_decomposed
    for node in list(gm.graph.find_nodes(op="call_function", target=ops.dequantize_per_tensor.tensor)):
        quantized, scale = node.args[0], node.args[1]
        if not (isinstance(quantized, torch.fx.Node) and quantized.target == ops.quantize_per_tensor.tensor
                and isinstance(scale, torch.fx.Node) and scale.target is operator.getitem
                and scale.args[0].target == ops.choose_qparams.tensor):
            continue
        with gm.graph.inserting_before(node):
            node.replace_all_uses_with(gm.graph.call_function(rows_quantized, (quantized.args[0], *scale.args[0].args[1:])))
        gm.graph.erase_node(node)
    gm.graph.eliminate_dead_code()
    gm.recompile()


def rows_quantized(x, qmin: int, qmax: int, eps: float, dtype):
    """``x`` quantized and dequantized one row (last dimension) at a time, by the per-tensor ops themselves."""
    import torch

    ops = torch.ops.quantized_decomposed
    rows = x.reshape(-1, x.shape[-1])
    out = torch.empty_like(rows)
    for i, row in enumerate(rows):
        scale, zero = ops.choose_qparams.tensor(row, qmin, qmax, eps, dtype)
        out[i] = ops.dequantize_per_tensor.tensor(ops.quantize_per_tensor.tensor(row, scale, zero, qmin, qmax, dtype),
                                                  scale, zero, qmin, qmax, dtype)
    return out.reshape(x.shape)
