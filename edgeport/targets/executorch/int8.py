"""ExecuTorch ``dynamic-int8`` for text generation: PT2E with the XNNPACK quantizer's dynamic config on each
method (int8 per-channel symmetric linear weights, activations quantized per call): no calibration, the
scheme ExecuTorch's LLM recipes start from. The converted module (quantize/dequantize around each linear)
is exported again and lowered; the precision search (:mod:`.gen_fallback`) runs it in PyTorch instead.

In the converted module an activation is quantized over the whole tensor (``choose_qparams.tensor``), where
XNNPACK's dynamically quantized linear quantizes each row (token) on its own: the same for a decode step (one
token; module and ``.pte`` agree to 1e-7 on a tiny llama), coarser for a prefill of several tokens (its
logits 0.017 off the ``.pte``'s where fp32's are 0.009 off, same model): a simulated candidate's KLD errs
high at the one prefill position of each eval window.
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
