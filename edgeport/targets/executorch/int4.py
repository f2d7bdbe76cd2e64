"""ExecuTorch ``int4-block32`` for text generation: XNNPACK's 8da4w, the scheme ExecuTorch's own LLM export
ships (``--qlinear 8da4w``, :mod:`executorch.extension.llm.export.quantize`): every linear's weight in
signed int4, groups of 32 along its input dimension with one scale each (chosen by torchao's HQQ
scale-only search, as ExecuTorch's export does), and its activations quantized to int8 at run time, per
token, asymmetric. Same name as LiteRT's and ONNX's ``int4-block32`` (int4 weights, blocks of 32), but
unlike ONNX's float compute the matmul itself runs in int8 x int4 (XNNPACK's ``qd8-f32-qb4w`` kernels), so
activations are rounded too. The embedding table stays float (a gather XNNPACK does not take).

The route: torchao's ``quantize_(module, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4,
weight_granularity=PerGroup(32)))`` swaps a ``Linear``'s weight for an ``IntxUnpackedToInt8Tensor`` whose
``F.linear`` traces to torchao's ``choose_qparams_affine``/``quantize_affine``/``dequantize_affine``
around a float linear: the pattern XNNPACK's dynamically quantized partitioner lowers to its 4-bit
groupwise kernels. The text-generation programs come as exported programs, whose unlifted module
(``program.module()``) has no ``nn.Linear`` left, only ``aten.linear`` nodes reading ``get_attr`` weights,
so ``quantize_`` finds nothing there to swap. Each such weight is given to ``quantize_`` inside a
``Linear`` of its own instead (the library's own quantization, qparams and tensor subclass, untouched),
the node reads the quantized parameter and calls ``F.linear`` (``aten.linear`` dispatches below the
subclass's ``__torch_function__``, which it does not implement: "unimplemented operator aten.t"), and the
module is exported again. torchao's PT2E quantizers were the other route, but the XNNPACK quantizer offers
no 4-bit groupwise weights, and re-exporting the model from source would export it twice.

Prefill and decode read the same fp32 weights; ``shared`` maps each weight to its quantized parameter so
every method reads one int4 tensor (as the dynamic-int8 path shares its int8 ones). A weight also read by
something other than a linear (a head tied to the embedding) keeps its fp32 attribute for that reader.
A linear whose input dimension is not a multiple of 32 stays float and is listed.
"""

from __future__ import annotations

GROUP = 32
SCHEME = {"scheme": "8da4w (XNNPACK: int8 dynamic activations, int4 weights)", "weight_bits": 4,
          "group_size": GROUP, "weight_qparams": "symmetric, one scale per group (torchao hqq_scale_only)",
          "activations": "int8 asymmetric per token, quantized at run time",
          "quantizer": "torchao quantize_ Int8DynamicActivationIntxWeightConfig"}
# ``--fallback int8``: a kept group's linears in 8da8w, what ExecuTorch's LLM export ships as ``--qlinear 8da8w``
# (the same torchao config, int8 weights per output channel): XNNPACK's ``qd8-f32-qc8w`` kernels, so a kept linear
# still rounds its activations per token as the int4 ones do (what the candidates simulate, :mod:`.gen_fallback`)
INT8_KEEP = ("8da8w (XNNPACK: int8 dynamic activations per token, int8 weights one symmetric scale per output "
             "channel; torchao Int8DynamicActivationIntxWeightConfig PerAxis(0), hqq_scale_only)")


def int4_block32(program, sample: dict, shared: dict | None = None, kept_float: list | None = None, quantize=None):
    """One method's program with its linears in 8da4w (see the module docstring); ``kept_float`` collects
    the linears left float; ``quantize``: see :func:`int4_module`."""
    import torch

    from edgeport.core.program import capture_mode
    from edgeport.targets._jax import cpu_tracing

    module = int4_module(program, shared, kept_float, quantize)
    fresh = {k: v.clone() for k, v in sample.items()}  # the programs update the cache in place
    with capture_mode(), cpu_tracing(), torch.no_grad():
        return torch.export.export(module, (), kwargs=fresh, strict=False)


def int4_module(program, shared: dict | None = None, kept_float: list | None = None, quantize=None):
    """The program's module with its linears reading 8da4w weights, not exported again: what the export
    traces, so running it in PyTorch computes what the artifact's quantization does (the precision search's
    candidates, :mod:`.gen_fallback`). ``quantize(weight attribute) -> bool`` (None: every weight) leaves
    the linears it refuses float, unlisted (``"int8"``: 8da8w); ``kept_float`` lists only the linears 8da4w
    cannot take."""
    module = program.module()
    floats = quantize_linears(module, {} if shared is None else shared, quantize)
    if kept_float is not None:
        kept_float.extend(f for f in floats if f not in kept_float)
    return module


def quantize_linears(gm, shared: dict, quantize=None) -> list[str]:
    """Every ``aten.linear`` of ``gm`` reading a 2-D weight attribute whose input dimension is a multiple of
    ``GROUP`` (and that ``quantize`` accepts, by its attribute name) now reads its 8da4w parameter through
    ``F.linear`` (8da8w where ``quantize`` says ``"int8"``: any input dimension); returns the names of the
    others ``quantize`` did not refuse."""
    import torch

    floats = []
    for node in list(gm.graph.find_nodes(op="call_function", target=torch.ops.aten.linear.default)):
        weight = _attribute(gm, node.args[1])
        scheme = True if weight is None or quantize is None else quantize(node.args[1].target)
        if not scheme:
            continue
        bits = 8 if scheme == "int8" else 4
        if weight is None or weight.dim() != 2 or (bits == 4 and weight.shape[1] % GROUP):
            floats.append(node.name)
            continue
        name = _register(gm, quantized_weight(weight, shared, bits))
        with gm.graph.inserting_before(node):
            getter = gm.graph.get_attr(name)
        node.replace_input_with(node.args[1], getter)
        node.target = torch.nn.functional.linear
    _drop_unused_attributes(gm)
    return floats


def quantized_weight(weight, shared: dict, bits: int = 4):
    """``weight`` quantized by torchao's ``quantize_`` in a ``Linear`` of its own (once per weight and width:
    ``shared``): 8da4w, or with ``bits`` 8 the 8da8w ExecuTorch's LLM export ships (``--qlinear 8da8w``: int8
    weights, one scale per output channel, ``PerAxis(0)``; :data:`INT8_KEEP`)."""
    import torch
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, PerAxis, PerGroup, quantize_

    from edgeport.core.memory import storage_key

    key = (storage_key(weight), bits)   # None: a tensor with no storage to tell by, never shared
    if key[0] is not None and key in shared:
        return shared[key][1]
    linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta")
    linear.weight = torch.nn.Parameter(weight.detach(), requires_grad=False)
    config = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8 if bits == 8 else torch.int4,
                                                   weight_granularity=PerAxis(0) if bits == 8 else PerGroup(GROUP),
                                                   intx_choose_qparams_algorithm="hqq_scale_only")
    quantize_(linear, config)
    if key[0] is not None:
        shared[key] = (weight, linear.weight)  # the fp32 weight is held: its address stays its own
    return linear.weight


def _attribute(gm, node):
    import operator

    import torch

    if not isinstance(node, torch.fx.Node) or node.op != "get_attr":
        return None
    value = operator.attrgetter(node.target)(gm)
    return value if isinstance(value, torch.Tensor) else None


def _register(gm, parameter) -> str:
    index = 0
    while hasattr(gm, f"_int4_{index}"):
        index += 1
    gm.register_parameter(f"_int4_{index}", parameter)
    return f"_int4_{index}"


def _drop_unused_attributes(gm) -> None:
    """The fp32 weights no node reads any more leave the module (export would lift them as inputs)."""
    for node in list(gm.graph.find_nodes(op="get_attr")):
        if node.users:
            continue
        gm.graph.erase_node(node)
        if not gm.graph.find_nodes(op="get_attr", target=node.target):
            owner, _, leaf = node.target.rpartition(".")
            delattr(gm.get_submodule(owner) if owner else gm, leaf)
    gm.graph.lint()
    gm.recompile()
