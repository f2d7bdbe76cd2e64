"""The TPU target's generative artifact (``DIR/tpu/generate_<variant>/``): one ``jax.export`` program per
signature and the weights they share. Parity runs each program's CPU lowering (the bytes that were
written, deserialized), pinned to jax's CPU backend like :class:`~edgeport.targets.tpu.runtime.JaxXlaRunner`;
on a TPU host the same files run on the TPU. int64 feeds become the int32 the programs take (x64 off)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeport.targets.signature import SignatureRunner, cast_to, tensor
from edgeport.errors import load_json

META_FILE = "meta.json"
WEIGHTS_FILE = "weights.safetensors"


class JaxSignatureRunner(SignatureRunner):
    name = "xla_cpu"

    def __init__(self, path: Path, threads: int):
        import jax

        from edgeport.targets._jax import prefer_cpu_backend
        from edgeport.targets.tpu.weights import load as load_weights

        prefer_cpu_backend()
        super().__init__(path, threads)
        folder = Path(path)
        self.meta = load_json((folder / META_FILE).read_text(), str(folder / META_FILE))["signatures"]
        self.cpu = jax.devices("cpu")[0]
        weights = jax.device_put(load_weights(folder / WEIGHTS_FILE), self.cpu)
        self.programs = {}
        for name, entry in self.meta.items():
            exported = jax.export.deserialize(bytearray((folder / entry["file"]).read_bytes()))
            self.programs[name] = (jax.jit(exported.call), {w: weights[w] for w in entry["weights"]})

    def signatures(self) -> list[str]:
        return list(self.meta)

    def run(self, name: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import jax

        call, weights = self.programs[name]
        entry = self.meta[name]
        args = [cast_to(feeds[i["name"]], i["dtype"], i["shape"]) for i in entry["inputs"]]
        with jax.default_device(self.cpu), jax.enable_x64(False):  # as exported, whatever this process set
            outputs = call(weights, *args)
        return {o["name"]: _numpy(v) for o, v in zip(entry["outputs"], outputs)}

    def io(self) -> dict[str, dict]:
        return {name: {"inputs": [tensor(i["name"], i["shape"], i["dtype"]) for i in entry["inputs"]],
                       "outputs": [tensor(o["name"], o["shape"], o["dtype"], o["name"]) for o in entry["outputs"]]}
                for name, entry in self.meta.items()}


def _numpy(array) -> np.ndarray:
    out = np.asarray(array)
    return out.astype(np.float32) if out.dtype.name == "bfloat16" else out
