"""``executorch.runtime`` behind the house's two runner interfaces: :class:`ExecuTorchRunner` (``forward``) and
:class:`ExecuTorchSignatureRunner` (``prefill_<L>`` / ``decode`` of a generative ``.pte``).

Threads: XNNPACK runs on ExecuTorch's one process-wide threadpool, which the runtime can resize
(``_unsafe_reset_threadpool``); each call sets it to the runner's count first, so runners with different
counts (``--threads auto``) can live side by side. The portable kernels are single-threaded whatever the
count. The runtime's C++ logs (``cpuinfo_utils.cpp``, ``threadpool.cpp``) go to fd 2, which the pipeline
redirects into the row's log. Inputs are copied into fresh tensors: a method that updates an input in
place (a KV cache) writes back into what it was given, and callers reuse their arrays.

Memory: XNNPACK packs a method's weights when the method is loaded, into that method's delegates (the
runtime's shared weight cache is not reachable from Python), so a generative ``.pte`` with prefill and
decode loaded holds the weights packed twice beside the mapped file: judging Qwen3-0.6B (2.38 GB fp32)
peaked at 3.00x its weights. ``Program.load_method`` caches every method it loads for the program's life,
so :class:`Loaded` takes each method out of that cache and keeps it itself
(:class:`~edgeport.targets.signature.PerSignature`): above ``ONE_AT_A_TIME_ABOVE`` bytes of ``.pte``, one
method at a time (loading another drops the last one, and its packed weights, first; the row says so in
``runtime_sessions``): 2.12x, a switch about 2 s at 0.6B (bench/LARGE_GENERATION.md, seventh session).
Below it, every method stays, as an app keeps them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from edgeport.errors import load_json
from edgeport.diagnostics import first_line
from edgeport.targets.runner import BaseRunner
from edgeport.targets.signature import PerSignature, SignatureRunner, cast_to, one_at_a_time, tensor
from edgeport.targets.executorch.lower import IO_METHOD
from edgeport.targets.executorch.tied import existing_data

# c10::ScalarType codes the runtime reports (TensorInfo.dtype()) -> numpy
DTYPES = {0: np.uint8, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.int64, 5: np.float16, 6: np.float32,
          7: np.float64, 11: np.bool_}
ONE_METHOD = ("one method of the .pte loaded at a time: XNNPACK packs each loaded method's own copy of the "
              "weights (bench/LARGE_GENERATION.md)")


class Loaded:
    """One ``.pte`` loaded once, its methods loaded on first use (one at a time above ``ONE_AT_A_TIME_ABOVE``
    bytes: :attr:`one_method`, see the module docstring), its I/O names read from the file."""

    def __init__(self, path: Path, threads: int):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "This API is experimental and subject to change"
            from executorch.runtime import Runtime

            self.program = Runtime.get().load_program(str(path), data_path=existing_data(path))
        self.threads = max(1, int(threads))
        names = self.program.method_names
        self.io = load_json(self._load(IO_METHOD).execute([])[0], f"{path}: {IO_METHOD}") if IO_METHOD in names else {}
        self.methods = sorted(names - {IO_METHOD})
        self.one_method = one_at_a_time(path)
        self.method = PerSignature(self._load, self.one_method)

    def _load(self, name: str):
        """``name`` loaded, and taken out of the Program's cache (which would keep it, and its packed weights,
        as long as the program): whoever holds the returned Method decides how long it lives."""
        method = self.program.load_method(name)
        cache = getattr(self.program, "_methods", None)   # executorch.runtime.Program's private cache
        if cache is not None and cache.get(name) is method:
            cache[name] = None
        return method

    def call(self, method: str, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run ``method`` on arrays cast to its declared dtypes; only its user outputs (a method that
        mutates inputs returns the written-back values first: they are dropped)."""
        from executorch.extension.pybindings import portable_lib

        if portable_lib._threadpool_get_thread_count() != self.threads:
            portable_lib._unsafe_reset_threadpool(self.threads)
        outputs = self.method(method).execute(self.feeds(method, arrays))
        wanted = len(self.io.get(method, {}).get("outputs", outputs))
        return [o.detach().numpy().copy() if hasattr(o, "numpy") else np.asarray(o) for o in outputs[len(outputs) - wanted:]]

    def feeds(self, method: str, arrays: Sequence[np.ndarray]) -> list:
        """``arrays`` as the torch tensors ``method`` takes (its declared dtypes and shapes)."""
        import torch

        meta = self.program.metadata(method)
        return [torch.from_numpy(cast_to(a, DTYPES[meta.input_tensor_meta(i).dtype()], meta.input_tensor_meta(i).sizes()).copy())
                for i, a in enumerate(arrays)]

    def describe(self, method: str) -> dict:
        """Manifest entries of ``method``'s inputs and outputs (names from the file, shapes/dtypes from the runtime)."""
        meta, names = self.program.metadata(method), self.io.get(method, {})
        n_out = len(names.get("outputs", [])) or meta.num_outputs()
        first = meta.num_outputs() - n_out

        def entry(info, name, role=None):
            return tensor(name, info.sizes(), DTYPES[info.dtype()], role)

        inputs = [entry(meta.input_tensor_meta(i), _name(names, "inputs", i, "input")) for i in range(meta.num_inputs())]
        outputs = [entry(meta.output_tensor_meta(first + i), _name(names, "outputs", i, "output")) for i in range(n_out)]
        return {"inputs": inputs, "outputs": outputs}


def _name(names: dict, kind: str, index: int, prefix: str) -> str:
    listed = names.get(kind) or []
    return listed[index] if index < len(listed) else f"{prefix}_{index}"


class ExecuTorchRunner(BaseRunner):
    name = "executorch"

    def __init__(self, path: Path, threads: int):
        super().__init__(path, threads)
        self.path = Path(path)
        self.loaded = Loaded(self.path, threads)

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        self.last_inputs = inputs   # what :meth:`details` profiles: the sample the judge timed
        return self.loaded.call("forward", inputs)

    def io(self) -> dict:
        return self.loaded.describe("forward")

    def details(self) -> dict:
        """``op_time``: ms per op outside XNNPACK and per XNNPACK operator, from ExecuTorch's profiler on the
        last sample run (:mod:`.profile`); nothing for an artifact too large to load twice, or a runtime
        built without its event tracer."""
        from edgeport.targets.executorch.profile import PROFILE_MAX_BYTES, op_times

        inputs = getattr(self, "last_inputs", None)
        if inputs is None or self.path.stat().st_size > PROFILE_MAX_BYTES:
            return {}
        try:
            return {"op_time": op_times(self.path, self.loaded.feeds("forward", inputs))}
        except Exception:  # a profile is a diagnosis: without one the row still stands
            return {}

    def speed_causes(self, details: dict) -> list[str]:
        from edgeport.targets.executorch.profile import causes

        return causes(details.get("op_time"))

    @classmethod
    def describe_error(cls, exc: BaseException) -> str:
        """ExecuTorch's Python errors carry only a code (``0x12``, ``0x20``): say which it is."""
        text = first_line(exc)
        for code, meaning in ERRORS.items():
            if code in text:
                return f"artifact does not run in its runtime: {text} ({meaning})"
        return f"artifact does not run in its runtime: {text}"


# executorch/runtime/core/error.h codes its Python errors print
ERRORS = {"0x12": "invalid argument: an input of the wrong dtype or shape", "0x13": "invalid type",
          "0x14": "an operator missing from this runtime build", "0x20": "not found",
          "0x21": "memory allocation failed", "0x22": "access failed: the file could not be read",
          "0x23": "invalid program: a damaged or foreign .pte", "0x24": "invalid external data",
          "0x30": "delegate incompatible with this runtime", "0x32": "invalid delegate handle"}


class ExecuTorchSignatureRunner(SignatureRunner):
    """A generative ``.pte``: its methods by name, fed and answered by the layout's role names."""

    name = "executorch"

    def __init__(self, path: Path, threads: int):
        super().__init__(path, threads)
        self.loaded = Loaded(Path(path), threads)

    def signatures(self) -> list[str]:
        return sorted(self.loaded.methods, key=lambda n: (n == "decode", len(n), n))

    def run(self, name: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = self.loaded.io[name]
        outputs = self.loaded.call(name, [feeds[k] for k in names["inputs"]])
        return dict(zip(names["outputs"], outputs))

    def details(self) -> dict:
        return {"runtime_sessions": ONE_METHOD} if self.loaded.one_method else {}

    def io(self) -> dict[str, dict]:
        described = {name: self.loaded.describe(name) for name in self.signatures()}
        for entry in described.values():
            for output in entry["outputs"]:
                output["role"] = output["name"]
        return described
