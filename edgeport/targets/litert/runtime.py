"""LiteRT runner: ai-edge-litert's Interpreter (XNNPACK applied by default) behind the Runner interface.

It undoes what the .tflite changes about the program's I/O, so parity compares like with like: signature
outputs come back keyed ``output_N`` sorted as strings (restored to numeric order); int64 inputs became
int32; static int8 models take and give int8 (quantized/dequantized with the tensor's scale/zero-point);
``--nhwc`` models take channel-last images (NCHW samples are transposed).

Two ways to run the same file: the classic Interpreter (XNNPACK applied by default; its node list tells
which ops stayed outside the delegate) and the newer CompiledModel API on CPU. ``--threads auto`` times both.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

import numpy as np

from edgeport.diagnostics import first_line
from edgeport.targets.runner import BaseRunner


def _order_key(name: str):
    numbers = re.findall(r"\d+", name)
    return (int(numbers[-1]) if numbers else 0, name)


class LiteRTRunner(BaseRunner):
    name = "interpreter"

    @staticmethod
    def sample_layout(array: np.ndarray, shape: tuple) -> np.ndarray:
        return channel_last(array, shape)

    def __init__(self, path: Path, threads: int):
        from ai_edge_litert.interpreter import Interpreter

        super().__init__(path, threads)
        self.path = Path(path)
        self.interpreter = Interpreter(model_path=str(path), num_threads=threads)
        self.interpreter.allocate_tensors()  # applies XNNPACK now (lazily otherwise), so details() sees it
        self.runner = self.interpreter.get_signature_runner()
        self.inputs = sorted(self.runner.get_input_details().items(), key=lambda kv: _order_key(kv[0]))
        self.outputs = sorted(self.runner.get_output_details().items(), key=lambda kv: _order_key(kv[0]))

    def feeds(self, inputs: Sequence[np.ndarray]) -> dict:
        """Positional inputs -> the signature's ``{name: array}`` in the runtime's layout and dtype."""
        return {name: _to_runtime(array, detail) for (name, detail), array in zip(self.inputs, inputs)}

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        result = self.runner(**self.feeds(inputs))
        return [_from_runtime(result[name], detail) for name, detail in self.outputs]

    def io(self) -> dict:
        return {"inputs": [_describe(n, d) for n, d in self.inputs], "outputs": [_describe(n, d) for n, d in self.outputs]}

    def details(self) -> dict:
        """Report fields: the ops XNNPACK left to the plain CPU kernels (op -> count), and the loops the
        converter unrolled (:mod:`edgeport.targets.litert.loops`)."""
        from edgeport.targets.litert.loops import unrolled_loops

        loops = unrolled_loops(self.path)
        return {"not_delegated": not_delegated(self.interpreter), **({"unrolled": loops} if loops else {})}

    def speed_causes(self, details: dict) -> list[str]:
        from edgeport.targets.litert.loops import describe

        ops = details.get("not_delegated") or {}
        outside = ", ".join(f"{op} x{n}" for op, n in ops.items())
        return [c for c in (f"ops not delegated to XNNPACK (run on the reference CPU kernels): {outside}" if ops else None,
                            describe(details.get("unrolled") or [])) if c]

    @classmethod
    def describe_error(cls, exc: BaseException) -> str:
        """'converted but cannot run': name the ops the runtime refused (``(OP) failed to prepare``)."""
        refused = sorted(set(re.findall(r"\(([A-Z][A-Z0-9_]+)\) failed to (?:prepare|invoke)", str(exc))))
        what = f"runtime refuses op {', '.join(refused)}: " if refused else ""
        return f"artifact does not run in its runtime: {what}{first_line(exc)}"


def not_delegated(interpreter) -> dict[str, int]:
    """Ops of subgraph 0 that no delegate took, as ``{op: count}``.

    After delegation the node list holds the original nodes followed by one ``DELEGATE`` node per partition,
    and the execution plan is not exposed to Python. A node belongs to a partition when walking back from
    the partition's outputs reaches it before the partition's inputs; every other original node still runs
    on its own kernel.
    """
    wrapper = interpreter._interpreter
    names = [wrapper.NodeName(i) for i in range(wrapper.NumNodes())]
    delegates = [i for i, name in enumerate(names) if name == "DELEGATE"]
    originals = [i for i, name in enumerate(names) if name != "DELEGATE"]
    producer = {int(t): i for i in originals for t in wrapper.NodeOutputs(i)}
    taken: set[int] = set()
    for d in delegates:
        boundary = {int(t) for t in wrapper.NodeInputs(d)}
        frontier = [int(t) for t in wrapper.NodeOutputs(d)]
        while frontier:
            tensor = frontier.pop()
            node = producer.get(tensor)
            if tensor in boundary or node is None or node in taken:
                continue
            taken.add(node)
            frontier.extend(int(t) for t in wrapper.NodeInputs(node) if t != -1)
    counts: dict[str, int] = {}
    for i in originals:
        if i not in taken:
            counts[names[i]] = counts.get(names[i], 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


class CompiledModelRunner(LiteRTRunner):
    """The same artifact through LiteRT's CompiledModel API (CPU accelerator, XNNPACK inside).

    I/O conversion is the Interpreter runner's (its signature details carry the quantization the
    CompiledModel's details do not); only ``run`` goes through the compiled model's tensor buffers.
    """

    name = "compiled_model"

    def __init__(self, path: Path, threads: int):
        from ai_edge_litert.compiled_model import CompiledModel
        from ai_edge_litert.cpu_options import CpuOptions
        from ai_edge_litert.hardware_accelerator import HardwareAccelerator
        from ai_edge_litert.options import Options

        super().__init__(path, 1)
        self.threads = threads
        options = Options(hardware_accelerators=HardwareAccelerator.CPU, cpu_options=CpuOptions(num_threads=threads))
        self.model = CompiledModel.from_file(str(path), options=options)
        signature = next(iter(self.model.get_signature_list().values()))
        self.input_buffers = self.model.create_input_buffers(0)
        self.output_buffers = self.model.create_output_buffers(0)
        self.input_slots = [signature["inputs"].index(name) for name, _ in self.inputs]
        self.output_slots = [signature["outputs"].index(name) for name, _ in self.outputs]

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        for slot, (_, detail), array in zip(self.input_slots, self.inputs, inputs):
            self.input_buffers[slot].write(_to_runtime(array, detail))
        self.model.run_by_index(0, self.input_buffers, self.output_buffers)
        results = []
        for slot, (_, detail) in zip(self.output_slots, self.outputs):
            shape = tuple(int(s) for s in detail["shape"])
            flat = self.output_buffers[slot].read(int(np.prod(shape)), np.dtype(detail["dtype"]))
            results.append(_from_runtime(np.asarray(flat).reshape(shape).copy(), detail))
        return results


def _quant(detail) -> tuple[float, int] | None:
    scale, zero = detail.get("quantization", (0.0, 0))
    return (float(scale), int(zero)) if scale else None


def channel_last(array: np.ndarray, shape: tuple) -> np.ndarray:
    """NCHW -> NHWC when that is the artifact's layout (``--nhwc``); otherwise the array as the model takes it."""
    if array.ndim == 4 and tuple(array.shape) != tuple(shape) and np.transpose(array, (0, 2, 3, 1)).shape == tuple(shape):
        return np.transpose(array, (0, 2, 3, 1))
    return array


def _to_runtime(array: np.ndarray, detail) -> np.ndarray:
    array = channel_last(array, tuple(detail["shape"]))
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


def load_compiled(path: Path, threads: int = 1) -> CompiledModelRunner:
    return CompiledModelRunner(Path(path), threads)
