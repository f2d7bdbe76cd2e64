"""ExecuTorch int8: PT2E with ExecuTorch's XNNPACK quantizer, calibrated on the calibration samples, then
lowered like fp32 (XNNPACK takes the quantize/dequantize pairs around each op and runs int8 kernels).

Layers kept float (``--fallback float``, ``job.float_layers``) are kept out through the
quantizer's node filter (``set_filter_function``) on the program's own node names — the ids
:mod:`edgeport.quantize.layers` gives every target — with the ops fused into a layer (its ReLU, its folded
batch norm) following it, so a float layer stays float whole and XNNPACK runs it in fp32.

Convolutions over ONE input channel (an ungrouped conv whose weight has one input channel: a pitch CNN's
512x1 kernel on raw audio, a mono image's first layer) stay float (:func:`float_on_purpose`): XNNPACK's int8
convolution packs input channels in blocks of several bytes, so a single channel is padded to a block at every
kernel tap and the int8 kernel does several times the work of the fp32 one. Measured by ExecuTorch's own
profiler (ETDump) on CREPE-tiny, 32 frames, 1 thread: its 512x1 conv 20.1 ms in int8 against 11.1 ms in fp32,
while its 64x1 convs over 128 channels ran 4x faster in int8 (bench/executorch_int8.py). Such a conv holds a
few hundred weights: keeping it float costs no size, and the row lists it (``quantization.float_on_purpose``).

The fallback search's candidates run the PT2E-converted module in PyTorch (quantize/dequantize in float):
a simulation of the artifact (XNNPACK's int8 kernels round the same way within a few ulps) that skips a
lowering per candidate; the search's answer is then built and judged as the real ``.pte``.
"""

from __future__ import annotations

from typing import Callable, Sequence

from edgeport.core.eager import EagerRunner, to_torch
from edgeport.core.program import capture_mode
from edgeport.quantize.layers import QuantLayer, block_layers, fx_layers, in_graph_order, owners
from edgeport.targets._pt2e import calibrated, float_filter

# the ops XNNPACK's quantizer annotates that carry a weight: what a user would keep float
CONV_OPS = ("conv1d", "conv2d", "convolution")
ONE_CHANNEL_WHY = ("1 input channel: XNNPACK's int8 conv pads the channel to its kernel's channel block and runs slower "
                   "than fp32 (CREPE-tiny's 512x1 conv: 20.1 ms int8, 11.1 ms fp32; bench/executorch_int8.py)")
LAYER_OPS = ("linear", "addmm", "conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d", "convolution")
SCHEMES = {"int8": "static int8 (PT2E, XNNPACK quantizer: per-channel symmetric int8 weights, calibrated int8 "
                   "activations)"}


def layers(program, variant: str) -> list[QuantLayer]:
    """The weighted ops, and the recurrent and attention blocks (each one layer: its module's nodes)."""
    return in_graph_order(program, fx_layers(program, LAYER_OPS), block_layers(program))


def only_filter(program, layer: str) -> Callable:
    """Quantizer node filter quantizing ``layer`` (and what fuses into it) and nothing else."""
    owner = owners(program, [layer])
    return lambda node: owner.get(node.name) == layer


def quantized_module(job, keep: Callable | None = None):
    """The PT2E-converted module (quantize/dequantize around every annotated op) after calibrating on the
    calibration samples; ``keep`` filters the nodes the quantizer may annotate."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer, get_symmetric_quantization_config)

    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    if keep is not None:
        quantizer.set_filter_function(keep)
    dtypes = [i.dtype for i in job.signature.inputs]
    batches = ([to_torch(a, d) for a, d in zip(sample, dtypes)] for sample in job.calibration_samples())
    with capture_mode():
        return calibrated(job.program.module(), quantizer, batches)


def one_channel_convs(program) -> list[QuantLayer]:
    """Ungrouped convolutions whose weight has one input channel (see the module docstring)."""
    nodes = {n.name: n for n in program.graph.nodes}
    found = []
    for layer in fx_layers(program, CONV_OPS, weighted=True):
        node = nodes[layer.id]
        weight = node.args[1].meta.get("val")
        index = 8 if layer.op == "convolution" else 6
        groups = node.args[index] if len(node.args) > index else 1
        if weight is not None and weight.dim() >= 3 and int(weight.shape[1]) == 1 and groups == 1:
            found.append(layer)
    return found


def float_on_purpose(program, user_floats) -> list[dict]:
    """The layers int8 keeps float because XNNPACK's int8 kernel is slower there, with why (beside the user's
    own ``--fallback float`` layers)."""
    return [{**layer.to_json(), "reason": ONE_CHANNEL_WHY} for layer in one_channel_convs(program)
            if layer.id not in set(user_floats or ())]


def quantized_program(job) -> tuple:
    """The int8 program ``convert`` lowers (the converted module exported again), and the layers it kept
    float on purpose (:func:`float_on_purpose`) as the report lists them."""
    import torch

    if not job.calibration_is_real:
        job.notes.append("int8 calibrated on random samples (no --calibration-data): ranges may not match real inputs")
    auto = float_on_purpose(job.program, job.float_layers)
    if auto:
        job.notes.append(f"int8: kept {len(auto)} conv(s) float where XNNPACK's int8 kernel is slower than fp32 "
                         f"({', '.join(a['name'] for a in auto)}; see quantization.float_on_purpose)")
    floats = [*(job.float_layers or ()), *(a["node"] for a in auto)]
    module = quantized_module(job, float_filter(job.program, floats))
    with capture_mode():
        return torch.export.export(module, tuple(job.example_inputs), strict=False), auto


class Pt2eSimulation:
    """The fallback search's candidates: each one's PT2E-converted module run in PyTorch (see the module
    docstring); calibrated per candidate, since the annotated nodes (and so the observers) differ."""

    measured = "simulation"

    def __init__(self, job):
        self.job = job
        self.layers = layers(job.program, job.variant)

    def run(self, samples: Sequence, float_layers: Sequence[str] = (), only: str | None = None) -> list:
        program = self.job.program
        keep = only_filter(program, only) if only is not None else float_filter(program, float_layers)
        runner = EagerRunner(quantized_module(self.job, keep), [i.dtype for i in self.job.signature.inputs], 1)
        return [runner.run(sample) for sample in samples]

    def close(self) -> None:
        """Nothing to release: candidates are modules, not files."""


def prepare(job) -> Pt2eSimulation:
    return Pt2eSimulation(job)
