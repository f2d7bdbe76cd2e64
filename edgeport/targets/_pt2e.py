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


def calibrated(module, quantizer, batches: Iterable[list], fold_quantize: bool = True):
    """``prepare_pt2e`` -> observe activations on every batch of positional torch args -> ``convert_pt2e``."""
    import torch
    from torchao.quantization.pt2e import quantize_pt2e

    prepared = quantize_pt2e.prepare_pt2e(module, quantizer)
    with torch.no_grad():
        for args in batches:
            prepared(*args)
    return quantize_pt2e.convert_pt2e(prepared, fold_quantize=fold_quantize)
