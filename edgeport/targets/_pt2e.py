"""PT2E quantization shared by the targets that quantize through torchao's ``prepare_pt2e`` /
``convert_pt2e`` (LiteRT static int8; any target whose quantizer is a PT2E ``Quantizer``): the calibration
pass and the node predicate that keeps ``--fallback float`` layers out of the quantizer. One place, so no
target imports another's quantizer."""

from __future__ import annotations

from typing import Callable, Iterable

from edgeport.quantize.layers import owners


def float_filter(program, float_layers) -> Callable | None:
    """A node predicate for a quantizer's annotator: False for the nodes of ``float_layers`` (and the ops
    fused into them), which then stay float; None when every layer is quantized. Takes the program and the
    layers (not a job) so a fallback search can ask for any candidate set."""
    wanted = set(float_layers or [])
    if not wanted:
        return None
    owner = owners(program, sorted(wanted))
    return lambda node: owner.get(node.name) not in wanted


def calibrated(module, quantizer, batches: Iterable, fold_quantize: bool = True, shared: dict | None = None):
    """``prepare_pt2e`` -> observe activations on every batch (a list of positional torch args, or a dict of
    keyword args) -> ``convert_pt2e``, the weights' quantization folded by :func:`fold_weight_quantization`
    when ``fold_quantize`` (``shared``: see there). Whatever happens, torchao forgets the modules it saw
    (:func:`forget_modules`). Runs under :func:`._jax.cpu_tracing`: quantizers that find their patterns by
    tracing them with dynamo (XNNPACK's) then work whatever accelerator module this process registered."""
    import torch
    from torchao.quantization.pt2e import quantize_pt2e

    from edgeport.targets._jax import cpu_tracing

    try:
        with cpu_tracing():
            prepared = quantize_pt2e.prepare_pt2e(module, quantizer)
            with torch.no_grad():
                for args in batches:
                    prepared(**args) if isinstance(args, dict) else prepared(*args)
            converted = quantize_pt2e.convert_pt2e(prepared, fold_quantize=False)
        del prepared
        if fold_quantize:
            fold_weight_quantization(converted, shared)
        return converted
    finally:
        forget_modules()


def forget_modules() -> None:
    """torchao 0.18 and torch 2.13 each look up a module's device through a ``functools.cache``d function
    (``torchao.utils._assert_and_get_unique_device``, ``torch.ao.quantization.fx.utils
    .assert_and_get_unique_device``), keyed by the module itself: every module ``prepare_pt2e`` and
    ``convert_pt2e`` saw, with its weights (the quantized ones included), stayed alive for the rest of the
    process, under every later conversion and judge (bench/LARGE_GENERATION.md, eighth session). Cleared after
    each quantization; a lookup costs nothing to redo."""
    import importlib

    for module, name in DEVICE_CACHES:
        try:
            lookup = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if hasattr(lookup, "cache_clear"):
            lookup.cache_clear()


DEVICE_CACHES = (("torchao.utils", "_assert_and_get_unique_device"),
                 ("torch.ao.quantization.fx.utils", "assert_and_get_unique_device"))

# the weight quantized per chunk of channels: a bounded float temporary however large the weight
FOLD_CHUNK_BYTES = 32 << 20


def fold_weight_quantization(gm, shared: dict | None = None) -> None:
    """``convert_pt2e``'s constant folding, without its memory: each weight's ``quantize_per_channel`` (or
    ``quantize_per_tensor``) becomes the int8 constant it computes, named and registered as torchao's own
    folding does it (``_frozen_param<i>``), so the module, the program exported from it and the artifact are
    the same. torchao's folder evaluates the whole graph: every weight's quantization in float temporaries of
    the weight's size (a tied embedding table as the head's weight is the model's largest), then every
    weight's dequantization too, only to throw it away (qwen3-small, 0.37 GB of fp32 weights: its two methods'
    dynamic-int8 quantization peaked 1.14 GB above the exported programs; 0.29 GB here). Here one weight is
    quantized at a time, a slice of channels per step; a quantization whose input is not a plain weight (a
    transposed one, say) is left to torchao's folder.

    ``shared``: a dict kept across the modules of one model (a generative model's prefill and decode
    programs read the same weights): a weight quantized the same way (same scales) is quantized once and the
    modules share the int8 tensor, as the fp32 programs share the fp32 one."""
    from torchao.quantization.pt2e.constant_fold import constant_fold, replace_node_with_constant
    from torchao.quantization.pt2e.quantize_pt2e import _quant_node_constraint

    shared = {} if shared is None else shared
    for node in list(gm.graph.nodes):
        value = _weight_quantized(gm, node, shared)
        if value is not None:
            replace_node_with_constant(gm, node, value)
    if any(_quant_node_constraint(n) and _constant_input(n) for n in gm.graph.nodes):
        constant_fold(gm, _quant_node_constraint)
        return
    for node in list(gm.graph.find_nodes(op="get_attr")):
        if not node.users:
            if hasattr(gm, node.target):
                delattr(gm, node.target)
            gm.graph.erase_node(node)
    gm.graph.eliminate_dead_code()
    gm.graph.lint()
    gm.recompile()


def _weight_quantized(gm, node, shared: dict):
    """The int8 value of ``node`` if it quantizes a weight (all its tensor inputs are attributes), else None;
    computed a slice of the quantization axis at a time (per-tensor: of the first dimension), or taken from
    ``shared`` when the same weight was quantized with the same parameters before."""
    import torch

    ops = torch.ops.quantized_decomposed
    if node.op != "call_function" or node.kwargs or node.target not in (ops.quantize_per_channel.default,
                                                                        ops.quantize_per_tensor.default):
        return None
    args = [_attribute(gm, a) if isinstance(a, torch.fx.Node) else a for a in node.args]
    weight = args[0]
    if any(a is None for a in args) or not isinstance(weight, torch.Tensor) or weight.numel() == 0 \
            or weight.dim() == 0 or weight.device.type != "cpu":
        return None
    per_channel = node.target is ops.quantize_per_channel.default
    axis = args[3] % weight.dim() if per_channel else 0
    key = (node.target, weight.untyped_storage().data_ptr(), weight.storage_offset(), weight.shape, weight.stride(),
           *(a if not isinstance(a, torch.Tensor) else (a.dtype, a.shape) for a in args[1:]))
    for _weight, params, value in shared.get(key, ()):   # the weight is held: its address stays its own
        if all(torch.equal(a, b) for a, b in zip(params, args[1:3]) if isinstance(a, torch.Tensor)):
            return value
    out = torch.empty(weight.shape, dtype=args[-1])
    step = max(1, FOLD_CHUNK_BYTES // max(1, weight.nbytes // weight.shape[axis]))
    with torch.no_grad():
        for start in range(0, weight.shape[axis], step):
            n = min(step, weight.shape[axis] - start)
            part = [weight.narrow(axis, start, n)]
            if per_channel:
                part += [args[1].narrow(0, start, n), args[2].narrow(0, start, n), *args[3:]]
            else:
                part += list(args[1:])
            out.narrow(axis, start, n).copy_(node.target(*part))
    shared.setdefault(key, []).append((weight, args[1:3], out))
    return out


def _attribute(gm, node):
    """The tensor a ``get_attr`` node reads, or None for any other node."""
    import operator

    return operator.attrgetter(node.target)(gm) if node.op == "get_attr" else None


def _constant_input(node) -> bool:
    """Whether every node ``node`` reads is computed from attributes alone (what torchao's folder folds)."""
    seen, todo = set(), list(node.all_input_nodes)
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        if current.op == "placeholder" or (current.op == "call_function" and not current.all_input_nodes):
            return False
        todo.extend(current.all_input_nodes)
    return bool(seen)
