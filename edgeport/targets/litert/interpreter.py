"""The runtime a generative ``.tflite`` is judged (and ``edgeport generate`` runs) in: XNNPACK with its weight
cache in a file, through LiteRT's CompiledModel; a weight-only quantized file on TFLite's builtin kernels.

XNNPACK packs every weight into its own layout. Without a weight cache the Interpreter packs each signature's
weights separately, all at its first call (prefill and decode: 2x the fp32 weights, beside the mapped file),
so judging a 2.38 GB fp32 model held 3x its weights. With ``xnnpack_weight_cache_path`` (a file; LiteRT-LM
runs models this way) the packed weights are written once for all signatures and mapped back: measured on a
Qwen3-shaped model, 1.5x the weights instead of 3x, the same logits, prefill and decode as fast
(bench/LARGE_GENERATION.md, "Memory, fifth session"). The cache file lives in a scratch folder for the
runner's lifetime (it is as large as the packed weights): in a ``convert``, the run's own scratch beside
``--out`` (:mod:`edgeport.core.scratch`), so a failed or cancelled run leaves no gigabytes in ``/tmp``.

ai-edge-quantizer's weight-only recipe (``weight-int8``) stores int8 weights behind DEQUANTIZE ops. XNNPACK
(applied by default) dequantizes every such weight to fp32 when a signature is first run and packs its own
copy of it, and keeps both: on Qwen3-shaped models it held 4.3x the fp32 weights for the first signature and
4.7x with prefill and decode (bench/LARGE_GENERATION.md, "Memory, fifth session"), so judging a 0.6 GB
weight-int8 file of a 2.38 GB model took 11.8 GB. TFLite's builtin kernels dequantize each constant once
per signature and multiply the fp32 result in place (no packed copy): 2x the fp32 weights with two
signatures. Measured there: decode as fast as XNNPACK's (memory-bound either way), prefill slower. The row
says which kernels judged it (``runtime_kernels``), so the latency it reports is read as what it is; an
app that runs the file with XNNPACK pays XNNPACK's memory for XNNPACK's prefill. The dequantized copies
are made at a signature's first call, one per signature; judging keeps one signature's Interpreter at a
time (:class:`OneSignatureAtATime`), so the 2x is 1x (a switch dequantizes that signature again).

Both apply above ``MEMORY_RUNTIMES_ABOVE`` bytes of fp32-equivalent weights (the threshold at which the
conversion goes lightweight too), where XNNPACK's copies are gigabytes: a smaller model is judged as an app
runs it by default (the Interpreter with XNNPACK), its latency unchanged, and no cache file is written.
"""

from __future__ import annotations

import mmap
import os
import shutil
import weakref
from pathlib import Path

import numpy as np

from edgeport.core.scratch import scratch_dir
from edgeport.targets.litert import LIGHTWEIGHT_ABOVE
from edgeport.targets.signature import PerSignature

MEMORY_RUNTIMES_ABOVE = LIGHTWEIGHT_ABOVE
BUILTIN = ("TFLite builtin kernels (XNNPACK off): XNNPACK holds the dequantized and the packed fp32 "
           "weights of a weight-only int8 model, ~4.7x the fp32 weights (bench/LARGE_GENERATION.md)")


def weight_only(path: Path) -> bool:
    """The file dequantizes int8 constant weights with DEQUANTIZE ops (the weight-only recipe), read
    through the schema's lazy accessors over the mapped file (no copy of a weight)."""
    from ai_edge_litert import schema_py_generated as schema

    from edgeport.targets.litert.flatbuffer import opcode_names

    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        model = schema.Model.GetRootAs(mapped, 0)
        dequantize = {i for i, name in enumerate(opcode_names(model)) if name == "DEQUANTIZE"}
        found = any(_dequantizes_int8(model, model.Subgraphs(s), dequantize, schema.TensorType.INT8)
                    for s in range(model.SubgraphsLength())) if dequantize else False
        del model   # the accessors hold views of the mapping, which must close
    return found


def _dequantizes_int8(model, graph, codes: set, int8: int) -> bool:
    from edgeport.targets.litert.flatbuffer import is_constant

    for i in range(graph.OperatorsLength()):
        op = graph.Operators(i)
        if op.OpcodeIndex() in codes and op.InputsLength() > 0:
            tensor = graph.Tensors(op.Inputs(0))
            if tensor.Type() == int8 and is_constant(model, tensor):
                return True
    return False


def large(path: Path, weight_only_file: bool) -> bool:
    """Whether ``path``'s weights, as fp32, exceed :data:`MEMORY_RUNTIMES_ABOVE` (int8 weights dequantize to
    four times their bytes)."""
    return Path(path).stat().st_size * (4 if weight_only_file else 1) > MEMORY_RUNTIMES_ABOVE


def builtin_kernels(path: Path) -> bool:
    """A large weight-only file is judged on the builtin kernels (see the module docstring)."""
    return weight_only(path) and large(path, True)


def kernel_options(path: Path) -> dict:
    """Interpreter keyword arguments for judging ``path``: builtin kernels for a large weight-only file (see
    the module docstring), the default (XNNPACK) otherwise."""
    if not builtin_kernels(path):
        return {}
    from ai_edge_litert.interpreter import OpResolverType

    return {"experimental_op_resolver_type": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES}


def interpreter(path: Path, threads: int):
    """What a generative row is judged in: for a large model, the builtin-kernel Interpreter (weight-only file)
    or :class:`CachedWeights` (XNNPACK's weight cache in a file); otherwise the default Interpreter. Each
    answers ``get_signature_list`` and ``get_signature_runner``; ``runner_name`` says which."""
    from ai_edge_litert.interpreter import Interpreter

    options = kernel_options(Path(path))
    if options:
        return OneSignatureAtATime(lambda: Interpreter(model_path=str(path), num_threads=threads, **options))
    if not large(path, False):
        found = Interpreter(model_path=str(path), num_threads=threads)
        found.runner_name = "interpreter"
        return found
    return CachedWeights(Path(path), threads)


class OneSignatureAtATime:
    """Interpreters from ``make``, one signature's alive at a time (:class:`PerSignature`): calling another
    signature drops the Interpreter that ran the last one (and the weights it dequantized) and builds a fresh
    one. Tensor details come from an Interpreter that never runs (it dequantizes nothing)."""

    runner_name = "interpreter (builtin kernels, one signature at a time)"

    def __init__(self, make):
        self.make, self.details = make, make()
        self.running = PerSignature(self._build, one=True)   # name -> (its Interpreter, its signature runner)

    def _build(self, name: str) -> tuple:
        interpreter = self.make()
        return interpreter, interpreter.get_signature_runner(name)

    @property
    def live(self) -> str | None:
        """The signature that ran last (the only one whose Interpreter is alive)."""
        return next(iter(self.running.live), None)

    @property
    def live_interpreter(self):
        return self.running.live[self.live][0] if self.live else None

    def get_signature_list(self) -> dict:
        return self.details.get_signature_list()

    def get_signature_runner(self, name: str) -> "_Switching":
        return _Switching(self, name, self.details.get_signature_runner(name))

    def call(self, name: str, feeds: dict) -> dict:
        return self.running(name)[1](**feeds)


class _Switching:
    """One signature of :class:`OneSignatureAtATime`, called like the Interpreter's signature runner."""

    def __init__(self, owner: OneSignatureAtATime, name: str, details):
        self.owner, self.name, self.details = owner, name, details

    def get_input_details(self) -> dict:
        return self.details.get_input_details()

    def get_output_details(self) -> dict:
        return self.details.get_output_details()

    def __call__(self, **feeds) -> dict:
        return self.owner.call(self.name, feeds)


class CachedWeights:
    """The ``.tflite`` in LiteRT's CompiledModel on CPU (XNNPACK) with XNNPACK's weight cache in a scratch
    file (see the module docstring), behind the Interpreter's signature-runner surface."""

    runner_name = "compiled_model (XNNPACK weight cache)"

    def __init__(self, path: Path, threads: int):
        from ai_edge_litert.compiled_model import CompiledModel
        from ai_edge_litert.cpu_options import CpuOptions
        from ai_edge_litert.hardware_accelerator import HardwareAccelerator
        from ai_edge_litert.options import Options

        folder = str(scratch_dir("edgeport-xnnpack-"))  # the run's scratch, not /tmp
        self._cleanup = weakref.finalize(self, shutil.rmtree, folder, True)
        self.cache_file = os.path.join(folder, "weights.xnnpack_cache")
        cpu = CpuOptions(num_threads=threads, xnnpack_weight_cache_path=self.cache_file)
        self.model = CompiledModel.from_file(str(path), options=Options(hardware_accelerators=HardwareAccelerator.CPU,
                                                                         cpu_options=cpu))

    def get_signature_list(self) -> dict:
        return self.model.get_signature_list()

    def get_signature_runner(self, name: str) -> "CompiledSignature":
        return CompiledSignature(self.model, name)


class CompiledSignature:
    """One signature of a CompiledModel called like the Interpreter's signature runner: ``runner(**feeds)``
    -> ``{output name: array}``; its tensor buffers are made once and reused by every call."""

    def __init__(self, model, name: str):
        self.model, self.index = model, model.get_signature_index(name)
        names = model.get_signature_list()[name]
        self.input_names, self.output_names = list(names["inputs"]), list(names["outputs"])
        self.inputs, self.outputs = model.get_input_tensor_details(name), model.get_output_tensor_details(name)
        self.input_buffers = model.create_input_buffers(self.index)
        self.output_buffers = model.create_output_buffers(self.index)

    def get_input_details(self) -> dict:
        return self.inputs

    def get_output_details(self) -> dict:
        return self.outputs

    def __call__(self, **feeds) -> dict:
        for name, buffer in zip(self.input_names, self.input_buffers):
            detail = self.inputs[name]
            buffer.write(np.ascontiguousarray(np.asarray(feeds[name], np.dtype(detail["dtype"])).reshape(detail["shape"])))
        self.model.run_by_index(self.index, self.input_buffers, self.output_buffers)
        out = {}
        for name, buffer in zip(self.output_names, self.output_buffers):
            shape = tuple(int(s) for s in self.outputs[name]["shape"])
            out[name] = buffer.read(int(np.prod(shape)), np.dtype(self.outputs[name]["dtype"])).reshape(shape)
        return out
