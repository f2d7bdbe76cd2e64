"""Loader and runner for the TPU target's deployment artifact (``DIR/tpu/<variant>/``).

The artifact is a ``jax.export`` program serialized for platforms ``("cpu", "tpu")`` plus its weights in
``weights.safetensors`` beside it. The program takes ``(weights: dict[name, array], *inputs)`` with the
inputs in the exported program's flattened signature order and returns the user outputs in the program's
output order, so no caller has to know about pytrees, dict keys or mutated buffers.

A serving process::

    from edgeport.targets.tpu.runtime import load
    model = load("dist/tpu/fp32")          # on a TPU host jax's default backend is the TPU
    outputs = model(x)                     # list of arrays, in the model's output order

Parity uses :class:`JaxXlaRunner`, which pins execution to jax's CPU backend: the CPU lowering of the very
bytes that were written, after a serialize -> deserialize round trip.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from edgeport.targets._jax import prefer_cpu_backend
from edgeport.targets.runner import BaseRunner
from edgeport.errors import load_json

EXPORT_FILE = "model.jax_export"
WEIGHTS_FILE = "weights.safetensors"
META_FILE = "meta.json"


class LoadedModel:
    """A deserialized artifact: call it with numpy/jax inputs, get a list of output arrays."""

    def __init__(self, directory: Path):
        import jax

        from edgeport.targets.tpu.weights import load as load_weights

        self.directory = Path(directory)
        self.meta = load_json((self.directory / META_FILE).read_text(), str(self.directory / META_FILE))
        self.exported = jax.export.deserialize(bytearray((self.directory / EXPORT_FILE).read_bytes()))
        # mapped, and aliased (not copied) by jax's CPU client; a TPU host copies them to the device
        self.weights = jax.device_put(load_weights(self.directory / WEIGHTS_FILE))
        self.input_dtypes = [a.dtype for a in self.exported.in_avals[len(self.weights):]]
        # jit once: Exported.call alone re-traces on every call (~0.3 ms of Python per call)
        self.call = jax.jit(self.exported.call)

    def __call__(self, *inputs) -> list:
        args = [np.asarray(x).astype(dtype, copy=False) for x, dtype in zip(inputs, self.input_dtypes)]
        return list(self.call(self.weights, *args))


def load(directory: str | Path) -> LoadedModel:
    """Load ``DIR/tpu/<variant>/`` for serving; runs on jax's default backend (TPU on a TPU host)."""
    return LoadedModel(Path(directory))


def load_executable(directory: str | Path, topology: str):
    """On a TPU host: the executable compiled ahead of time for ``topology`` (skips compilation).

    Same trust rule as ``jax.experimental.serialize_executable``: only load executables you produced.
    """
    from jax.experimental.serialize_executable import deserialize_and_load

    model = load(directory)
    blob = (Path(directory) / model.meta["executables"][topology]).read_bytes()
    return deserialize_and_load(blob, model.exported.in_tree, model.exported.out_tree, backend="tpu")


class JaxXlaRunner(BaseRunner):
    """Runner for parity and latency: the artifact's CPU lowering through XLA. ``path`` is the serialized
    export file (the report's artifact) or its directory."""

    name = "xla_cpu"

    def __init__(self, path: Path, threads: int):
        import jax

        prefer_cpu_backend()
        super().__init__(path, threads)
        path = Path(path)
        self.model = load(path.parent if path.is_file() else path)
        self.cpu = jax.devices("cpu")[0]
        self.weights = jax.device_put(self.model.weights, self.cpu)

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        import jax

        args = [np.asarray(x).astype(d, copy=False) for x, d in zip(inputs, self.model.input_dtypes)]
        with jax.default_device(self.cpu):  # numpy inputs land on the CPU device inside the jitted call
            outputs = self.model.call(self.weights, *args)
        return [_numpy(o) for o in outputs]

    def io(self) -> dict:
        """manifest.json's runtime view: -1 marks a dim that stayed symbolic (meta.json names it); never quantized."""
        tensor = lambda t: {"name": t["name"], "shape": [d if isinstance(d, int) else -1 for d in t["shape"]],  # noqa: E731
                            "dtype": t["dtype"], "quantization": None}
        return {"inputs": [tensor(t) for t in self.model.meta["inputs"]],
                "outputs": [tensor(t) for t in self.model.meta["outputs"]]}


def _numpy(array) -> np.ndarray:
    """bf16 (which numpy cannot compute with) comes back as float32."""
    out = np.asarray(array)
    return out.astype(np.float32) if out.dtype.name == "bfloat16" else out
