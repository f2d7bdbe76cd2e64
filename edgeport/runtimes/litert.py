"""LiteRT runner: ai-edge-litert's Interpreter (XNNPACK applied by default) behind the Runner interface.

It undoes what the .tflite changes about the program's I/O, so parity compares like with like: signature
outputs come back keyed ``output_N`` sorted as strings (restored to numeric order); int64 inputs became
int32; static int8 models take and give int8 (quantized/dequantized with the tensor's scale/zero-point);
``--nhwc`` models take channel-last images (NCHW samples are transposed).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

import numpy as np


def _order_key(name: str):
    numbers = re.findall(r"\d+", name)
    return (int(numbers[-1]) if numbers else 0, name)


class LiteRTRunner:
    def __init__(self, path: Path, threads: int):
        from ai_edge_litert.interpreter import Interpreter

        self.threads = threads
        self.interpreter = Interpreter(model_path=str(path), num_threads=threads)
        self.runner = self.interpreter.get_signature_runner()
        self.inputs = sorted(self.runner.get_input_details().items(), key=lambda kv: _order_key(kv[0]))
        self.outputs = sorted(self.runner.get_output_details().items(), key=lambda kv: _order_key(kv[0]))

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        feed = {name: _to_runtime(array, detail) for (name, detail), array in zip(self.inputs, inputs)}
        result = self.runner(**feed)
        return [_from_runtime(result[name], detail) for name, detail in self.outputs]

    def io(self) -> dict:
        return {"inputs": [_describe(n, d) for n, d in self.inputs], "outputs": [_describe(n, d) for n, d in self.outputs]}


def _quant(detail) -> tuple[float, int] | None:
    scale, zero = detail.get("quantization", (0.0, 0))
    return (float(scale), int(zero)) if scale else None


def _to_runtime(array: np.ndarray, detail) -> np.ndarray:
    shape = tuple(detail["shape"])
    if array.ndim == 4 and tuple(array.shape) != shape and tuple(np.transpose(array, (0, 2, 3, 1)).shape) == shape:
        array = np.transpose(array, (0, 2, 3, 1))
    dtype = np.dtype(detail["dtype"])
    quant = _quant(detail)
    if quant and np.issubdtype(dtype, np.integer) and np.issubdtype(array.dtype, np.floating):
        info = np.iinfo(dtype)
        array = np.clip(np.round(array / quant[0] + quant[1]), info.min, info.max)
    return np.ascontiguousarray(array.astype(dtype))


def _from_runtime(array: np.ndarray, detail) -> np.ndarray:
    quant = _quant(detail)
    if quant and np.issubdtype(array.dtype, np.integer):
        return ((array.astype(np.float32) - quant[1]) * quant[0]).astype(np.float32)
    return array


def _describe(name: str, detail) -> dict:
    quant = _quant(detail)
    return {"name": name, "shape": [int(s) for s in detail["shape"]], "dtype": np.dtype(detail["dtype"]).name,
            "quantization": {"scale": quant[0], "zero_point": quant[1]} if quant else None}


def load(path: Path, threads: int = 1) -> LiteRTRunner:
    return LiteRTRunner(Path(path), threads)
