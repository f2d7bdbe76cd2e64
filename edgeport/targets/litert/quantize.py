"""LiteRT int8 with chosen layers kept in float, and the fast candidate runs the fallback search asks for.

Static int8 (PT2E): litert-torch's ``PT2EQuantizer`` cannot leave a layer float on this stack — its
module-name filter drops the first character of every name (torch 2.13 keys are ``L__self__fc1``, it strips
10 characters), ``set_module_type`` compares a class with the type *string* torch now stores, and a ``None``
config is refused. So edgeport owns the filter: :func:`pt2e_quantizer` annotates the program's nodes through
a predicate on their FX names, and the shipped artifact stays PT2E's.

Candidates are quantized by ai-edge-quantizer on the fp32 ``.tflite`` instead, without re-converting: for
dynamic int8 that *is* what litert-torch's ``full_dynamic_recipe`` runs (so candidates are real artifacts);
for static int8 it is a simulation of PT2E — same scheme (per-channel symmetric int8 weights, min/max int8
activations over the calibration samples, on the ops PT2E leaves int8: ``STATIC_TFL_OPS``) and within cosine
0.9999 of PT2E's ``.tflite`` on the probe models, MobileNetV2 and a text encoder, where its SNR is 0-3 dB
optimistic — whose winner is then built by PT2E and judged for real. (PT2E's own converted q/dq module in
torch is as faithful but took ~60 s per MobileNetV2 candidate here, against ~0.5 s.)

Recipes select ops by a regex on the op's output tensor names, which litert-torch derives from module paths
and fuses (``A;;B``), so they are neither unique nor stable; each weighted op's output tensor is therefore
tagged ``[edgeport:N]`` for the quantizer and untagged afterwards. Ops are matched to FX layers in graph order
by kind, weight size and output channels.
"""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path
from typing import Callable, Sequence

from edgeport.core.scratch import scratch_dir
from edgeport.quantize.layers import QuantLayer, block_layers, fx_layers, in_graph_order, weight_shape
from edgeport.targets.litert import blocks
from edgeport.targets._pt2e import calibrated

CONV = ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "convolution")
MATMUL = ("linear", "addmm", "matmul", "mm", "bmm")
STATIC_OPS = ("linear", "addmm", "conv1d", "conv2d")          # the weighted ops PT2E's annotators quantize
# the ops the simulation quantizes: PT2E's artifacts keep int8 on weighted ops and pools (and the data movement
# between them) but leave most ADD/MUL float (layer norms, attention scaling, residuals). Quantizing ADD/MUL in
# the simulation made it 9 dB pessimistic on a text encoder (the search could never pass); this way it is
# 2-3 dB optimistic (text encoder, MobileNetV2), and an optimistic simulation only costs a confirmation
STATIC_TFL_OPS = ("FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D", "MAX_POOL_2D", "AVERAGE_POOL_2D")
TFL_KINDS = {"FULLY_CONNECTED": MATMUL, "BATCH_MATMUL": MATMUL, "CONV_2D": CONV, "DEPTHWISE_CONV_2D": CONV,
             "CONV_3D": CONV, "TRANSPOSE_CONV": CONV}
TAG = re.compile(r"^\[edgeport:\d+\]")
SCHEMES = {"int8": "static int8 (PT2E: per-channel int8 weights, calibrated int8 activations)",
           "dynamic-int8": "dynamic int8 (ai-edge-quantizer: channelwise int8 weights, activations quantized at run time)"}


def layers(program, variant: str) -> list[QuantLayer]:
    """The weighted ops the variant quantizes, and the recurrent and attention blocks (one layer each, all
    their ops: :mod:`edgeport.targets.litert.blocks`)."""
    weighted = fx_layers(program, STATIC_OPS if variant == "int8" else MATMUL + CONV, weighted=variant != "int8")
    return in_graph_order(program, weighted, block_layers(program))


def program_module(job):
    """The module litert-torch converts and its example args (``--nhwc``: channel-last image inputs)."""
    import litert_torch

    module = job.program.module()
    module.training = False  # the program was exported in eval mode; .eval() is refused on it, the flag is not
    args = tuple(job.example_inputs)
    if job.options.get("nhwc"):
        image_args = [i for i, x in enumerate(args) if x.dim() == 4]
        if not image_args:
            job.notes.append("--nhwc ignored: the model has no 4-D input")
        else:
            module = litert_torch.to_channel_last_io(module, args=image_args)
            args = tuple(channel_last(x) for x in args)
    return module, args


def channel_last(x):
    return x.permute(0, 2, 3, 1).contiguous() if x.dim() == 4 else x


def torch_args(sample, job) -> list:
    from edgeport.core.eager import to_torch

    args = [to_torch(a, i.dtype) for a, i in zip(sample, job.signature.inputs)]
    return [channel_last(x) for x in args] if job.options.get("nhwc") else args


def pt2e_quantizer(keep: Callable | None):
    """litert-torch's static int8 quantizer (per-channel weights), annotating only nodes ``keep`` accepts."""
    from litert_torch.quantize import pt2e_quantizer as pq

    class LayerFilterQuantizer(pq.PT2EQuantizer):
        """The stock global config through edgeport's own node filter (see the module docstring)."""

        def _annotate_for_static_quantization_config(self, model):
            return self._annotate_all_static_patterns(model, self.global_config, keep)

    quantizer = LayerFilterQuantizer() if keep is not None else pq.PT2EQuantizer()
    return quantizer.set_global(pq.get_symmetric_quantization_config(is_per_channel=True))


def pt2e_int8(module, job, keep: Callable | None = None):
    """PT2E static int8: observe activations on the calibration samples, then convert with fake quant kept
    unfolded so litert-torch lowers real int8 kernels. Returns (converted module, QuantConfig)."""
    from litert_torch.quantize import quant_config

    quantizer = pt2e_quantizer(keep)
    batches = (torch_args(sample, job) for sample in job.calibration_samples())
    converted = calibrated(module, quantizer, batches, fold_quantize=False)
    return converted, quant_config.QuantConfig(pt2e_quantizer=quantizer)


def fp32_flatbuffer(job) -> bytes:
    """The fp32 ``.tflite`` of the program: the one the fp32 row wrote, or a fresh conversion."""
    import litert_torch

    written = job.out_dir / "model_fp32.tflite"
    if written.is_file():
        return written.read_bytes()
    module, args = program_module(job)
    return bytes(litert_torch.convert(module, args).model_content())


def weighted_ops(model) -> list[tuple[int, str, tuple]]:
    """(op index, op name, weight signature) of subgraph 0's ops that carry a constant weight."""
    from ai_edge_litert import schema_py_generated as schema

    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    graph, found = model.subgraphs[0], []
    for index, op in enumerate(graph.operators or []):
        code = model.operatorCodes[op.opcodeIndex]
        name = names.get(max(code.builtinCode, code.deprecatedBuiltinCode), "?")
        weights = [graph.tensors[i] for i in list(op.inputs)[1:2] if i >= 0]
        if name in TFL_KINDS and weights and model.buffers[weights[0].buffer].data is not None:
            shape = [int(d) for d in weights[0].shape]
            out = shape[-1] if name == "DEPTHWISE_CONV_2D" else (None if name in ("BATCH_MATMUL", "TRANSPOSE_CONV") else shape[0])
            found.append((index, name, (math.prod(shape), out)))
    return found


def _signature(program, layer: QuantLayer) -> tuple | None:
    """(weight elements, output channels) of an FX layer, as the LiteRT op's weight will show them: a
    ``linear``/conv weight leads with its outputs (TFLite keeps them first: [O, I], [O, kh, kw, I]; depthwise
    [1, kh, kw, O]), a matmul's constant operand ends with them."""
    shape = weight_shape(program, layer.id)
    if shape is None:
        return None
    return math.prod(shape), shape[-1] if layer.op in ("matmul", "mm", "bmm") else shape[0]


def match_ops(program, candidates: list[QuantLayer], ops: list[tuple[int, str, tuple]]) -> dict[str, int]:
    """Layer id -> op index: in graph order, the first unclaimed op of a matching kind and weight (same
    number of elements, same output channels where the op shows them)."""
    claimed: set[int] = set()
    result = {}
    for layer in candidates:
        wanted = _signature(program, layer)
        hit = next((i for i, name, (numel, out) in ops if i not in claimed and layer.op in TFL_KINDS[name] and wanted
                    and numel == wanted[0] and out in (None, wanted[1])), None)
        if hit is not None:
            claimed.add(hit)
            result[layer.id] = hit
    return result


def tag(model, indices) -> None:
    """Give each op's output tensors a unique prefix the quantizer's regexes can select."""
    graph = model.subgraphs[0]
    for index in indices:
        for t in graph.operators[index].outputs:
            name = graph.tensors[t].name
            graph.tensors[t].name = f"[edgeport:{index}]".encode() + (name if isinstance(name, bytes) else name.encode())


def untag(content: bytes) -> bytes:
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(content)
    for graph in model.subgraphs:
        for tensor in graph.tensors:
            name = tensor.name.decode() if isinstance(tensor.name, bytes) else tensor.name
            tensor.name = TAG.sub("", name or "").encode()
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


class AeqQuantizer:
    """Candidates through ai-edge-quantizer on the tagged fp32 flatbuffer, run in the LiteRT interpreter
    (static int8: calibrated once, min/max over every calibration sample)."""

    def __init__(self, job):
        from ai_edge_litert.tools import flatbuffer_utils

        self.static = job.variant == "int8"
        self.measured = "simulation" if self.static else "artifact"
        model = flatbuffer_utils.read_model_from_bytearray(fp32_flatbuffer(job))
        candidates = layers(job.program, job.variant)
        self.ops = {i: [op] for i, op in match_ops(job.program, candidates, weighted_ops(model)).items()}
        self.ops.update(blocks.block_ops(job.program, candidates, model))  # every op of a block, all time steps
        self.layers = [c for c in candidates if c.id in self.ops]
        tag(model, sorted({i for ops in self.ops.values() for i in ops}))
        self.content = bytes(flatbuffer_utils.convert_object_to_bytearray(model))
        self.tmp = scratch_dir("edgeport-fallback-")  # the run's scratch; removed by close()
        try:
            self.qsvs = calibrate(self.content, self.tmp, job, self.recipe(".*")) if self.static else None
        except BaseException:
            self.close()
            raise

    def recipe(self, regex: str) -> list:
        """The variant's recipe on the ops ``regex`` selects: litert-torch's own dynamic recipe, or static
        int8 on the op types PT2E quantizes."""
        from ai_edge_quantizer import quantizer, qtyping
        from litert_torch.generative.quantize import quant_recipes
        from litert_torch.quantize import translate_recipe

        if not self.static:
            dynamic = translate_recipe.translate_to_ai_edge_recipe(quant_recipes.full_dynamic_recipe().generative_recipe)
            return [{**entry, "regex": regex} for entry in dynamic]
        q = quantizer.Quantizer(self.content)
        for op in STATIC_TFL_OPS:
            q.add_static_config(regex, getattr(qtyping.TFLOperationName, op), 8, 8)
        return q.get_quantization_recipe()

    def quantize(self, float_layers: Sequence[str] = (), only: str | None = None) -> bytes:
        from ai_edge_quantizer import qtyping, quantizer
        from ai_edge_quantizer.algorithm_manager import AlgorithmName

        q = quantizer.Quantizer(self.content, self.recipe(".*" if only is None else _regex(self.ops[only])))
        floats = [op for layer in float_layers for op in self.ops.get(layer, ())]
        if floats:
            q.update_quantization_recipe(regex=_regex(floats), algorithm_key=AlgorithmName.NO_QUANTIZE,
                                         operation_name=qtyping.TFLOperationName.ALL_SUPPORTED)
        return bytes(q.quantize(self.qsvs, enable_progress_bar=False, enable_progress_report=False).quantized_model)

    def run(self, samples: Sequence, float_layers: Sequence[str] = (), only: str | None = None) -> list:
        from edgeport.targets.litert.runtime import LiteRTRunner

        path = self.tmp / "candidate.tflite"
        path.write_bytes(self.quantize(float_layers, only))
        runner = LiteRTRunner(path, 1)
        return [runner.run(sample) for sample in samples]

    def close(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def _regex(op_indices: Sequence[int]) -> str:
    """The tags of the ops (one layer's, or several layers' kept float together)."""
    return "|".join(re.escape(f"[edgeport:{i}]") for i in sorted(set(op_indices)))


def calibrate(content: bytes, tmp: Path, job, recipe: list) -> dict:
    """Activation ranges of every tensor: min/max over all calibration samples (ai-edge-quantizer's default
    update is a moving average of per-sample ranges: with one sample per batch, held-out inputs then clip)."""
    import numpy as np
    from ai_edge_quantizer import calibrator, recipe_manager

    from edgeport.targets.litert.runtime import LiteRTRunner

    def minmax(old, new):
        return new if not old else {**new, "min": np.minimum(old["min"], new["min"]), "max": np.maximum(old["max"], new["max"])}

    (tmp / "fp32.tflite").write_bytes(content)
    runner = LiteRTRunner(tmp / "fp32.tflite", 1)
    samples = job.calibration_samples()
    manager = recipe_manager.RecipeManager()
    manager.load_quantization_recipe(recipe)
    c = calibrator.Calibrator(content, num_threads=1, qsv_update_func=minmax)
    c.calibrate({"serving_default": [runner.feeds(s) for s in samples]}, manager)
    return c.get_model_qsvs()


def dynamic_with_float_layers(job) -> bytes:
    """The dynamic-int8 flatbuffer with ``job.float_layers`` kept float."""
    quantizer = AeqQuantizer(job)
    try:
        missing = [layer for layer in job.float_layers if layer not in quantizer.ops]
        if missing:
            job.notes.append(f"float layers without a weighted LiteRT op (left as they are): {', '.join(missing)}")
        return untag(quantizer.quantize(job.float_layers))
    finally:
        quantizer.close()


def prepare(job) -> AeqQuantizer:
    return AeqQuantizer(job)
