"""A multi-signature ``.tflite`` (``prefill_<L>``, ``decode``) through ai-edge-litert's Interpreter
(XNNPACK applied by default). Inputs and outputs keep the names the signatures were built with (the
layout's roles); int64 feeds are narrowed to the int32 the model takes, and outputs come back as they are
(the cache lengths as int32, which the next call takes)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeport.targets.signature import SignatureRunner, cast_to, tensor


class LiteRTSignatureRunner(SignatureRunner):
    name = "interpreter"

    def __init__(self, path: Path, threads: int):
        from edgeport.targets.litert.interpreter import interpreter

        super().__init__(path, threads)
        self.interpreter = interpreter(path, threads)   # XNNPACK's weight cache, or builtin kernels (see there)
        self.name = self.interpreter.runner_name
        self.runners = {name: self.interpreter.get_signature_runner(name) for name in self.interpreter.get_signature_list()}
        self.inputs = {name: r.get_input_details() for name, r in self.runners.items()}

    def signatures(self) -> list[str]:
        return list(self.runners)

    def run(self, name: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        details = self.inputs[name]
        args = {k: cast_to(feeds[k], d["dtype"], d["shape"]) for k, d in details.items()}
        # the runtime's outputs are fresh arrays already: a second copy cost ~20% of a decode step (bench/generation.py)
        return {k: np.asarray(v) for k, v in self.runners[name](**args).items()}

    def io(self) -> dict[str, dict]:
        out = {}
        for name, runner in self.runners.items():
            out[name] = {"inputs": [_describe(k, d) for k, d in runner.get_input_details().items()],
                         "outputs": [_describe(k, d, role=k) for k, d in runner.get_output_details().items()]}
        return out


def _describe(name: str, detail: dict, role: str | None = None) -> dict:
    entry = tensor(name, detail["shape"], detail["dtype"], role)
    scale, zero = detail.get("quantization", (0.0, 0))
    if scale:
        entry["quantization"] = {"scale": float(scale), "zero_point": int(zero)}
    return entry
