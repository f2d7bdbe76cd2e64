"""``executorch.runtime`` behind the house's two runner interfaces: :class:`ExecuTorchRunner` (``forward``) and
:class:`ExecuTorchSignatureRunner` (``prefill_<L>`` / ``decode`` of a generative ``.pte``).

Threads: XNNPACK runs on ExecuTorch's one process-wide threadpool, which the runtime can resize
(``_unsafe_reset_threadpool``); each call sets it to the runner's count first, so runners with different
counts (``--threads auto``) can live side by side. The portable kernels are single-threaded whatever the
count. The runtime's C++ logs (``cpuinfo_utils.cpp``, ``threadpool.cpp``) go to fd 2, which the pipeline
redirects into the row's log. Inputs are copied into fresh tensors: a method that updates an input in
place (a KV cache) writes back into what it was given, and callers reuse their arrays.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from edgeport.errors import load_json
from edgeport.targets.executorch._base import BaseRunner, SignatureRunner, cast_to, first_line, tensor
from edgeport.targets.executorch.lower import IO_METHOD

# c10::ScalarType codes the runtime reports (TensorInfo.dtype()) -> numpy
DTYPES = {0: np.uint8, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.int64, 5: np.float16, 6: np.float32,
          7: np.float64, 11: np.bool_}


class Loaded:
    """One ``.pte`` loaded once, its methods loaded on first use, its I/O names read from the file."""

    def __init__(self, path: Path, threads: int):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "This API is experimental and subject to change"
            from executorch.runtime import Runtime

            self.program = Runtime.get().load_program(str(path))
        self.threads = max(1, int(threads))
        names = self.program.method_names
        self.io = load_json(self.program.load_method(IO_METHOD).execute([])[0]) if IO_METHOD in names else {}
        self.methods = sorted(names - {IO_METHOD})

    def call(self, method: str, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run ``method`` on arrays cast to its declared dtypes; only its user outputs (a method that
        mutates inputs returns the written-back values first: they are dropped)."""
        import torch

        from executorch.extension.pybindings import portable_lib

        if portable_lib._threadpool_get_thread_count() != self.threads:
            portable_lib._unsafe_reset_threadpool(self.threads)
        meta = self.program.metadata(method)
        feeds = [torch.from_numpy(cast_to(a, DTYPES[meta.input_tensor_meta(i).dtype()], meta.input_tensor_meta(i).sizes()).copy())
                 for i, a in enumerate(arrays)]
        outputs = self.program.load_method(method).execute(feeds)
        wanted = len(self.io.get(method, {}).get("outputs", outputs))
        return [o.detach().numpy().copy() if hasattr(o, "numpy") else np.asarray(o) for o in outputs[len(outputs) - wanted:]]

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
        self.loaded = Loaded(Path(path), threads)

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return self.loaded.call("forward", inputs)

    def io(self) -> dict:
        return self.loaded.describe("forward")

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

    def io(self) -> dict[str, dict]:
        described = {name: self.loaded.describe(name) for name in self.signatures()}
        for entry in described.values():
            for output in entry["outputs"]:
                output["role"] = output["name"]
        return described
