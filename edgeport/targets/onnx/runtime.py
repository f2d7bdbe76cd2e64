"""onnxruntime runner (CPU execution provider) behind the Runner interface.

``intra_op_num_threads`` = ``--threads`` and one inter-op thread, so its latency is comparable with the
other runtimes at the same thread count. Inputs are fed by position (the ONNX graph keeps the program's
user-input order) and cast to the dtype the graph declares.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from edgeport.targets.runner import BaseRunner

_ORT_DTYPES = {
    "tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8, "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_,
}


class OnnxRunner(BaseRunner):
    name = "onnxruntime"

    def __init__(self, path: Path, threads: int):
        import onnxruntime as ort

        super().__init__(path, threads)
        self.path, self.feeds = Path(path), None
        self.session = ort.InferenceSession(str(path), session_options(threads), providers=["CPUExecutionProvider"])

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        self.feeds = feed_dict(self.session, inputs)   # the last sample: what speed_causes profiles
        return self.session.run(None, self.feeds)

    def speed_causes(self, details: dict) -> list[str]:
        """Time by op type from a short onnxruntime profile (:mod:`edgeport.targets.onnx.profile`)."""
        from edgeport.diagnostics import first_line
        from edgeport.targets.onnx.profile import speed_causes

        try:
            return speed_causes(self.path, session_options(self.threads), self.feeds,
                                (details.get("latency_ms") or {}).get("p50"))
        except Exception as exc:  # the artifact ran; only its profile could not be read
            return [f"could not profile the artifact: {first_line(exc)}"]

    def io(self) -> dict:
        return {"inputs": [_describe(i) for i in self.session.get_inputs()],
                "outputs": [_describe(o) for o in self.session.get_outputs()]}


def session_options(threads: int, prepack: bool = True):
    """``threads`` intra-op threads and one inter-op thread, so latency compares with the other runtimes at
    the same thread count; onnxruntime's own warnings off (errors still raise). ``prepack`` False: kernels
    read the weights where they are (a large float artifact's sessions share them, :mod:`.signatures`)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    if not prepack:
        options.add_session_config_entry("session.disable_prepacking", "1")
    return options


def feed_dict(session, inputs: Sequence[np.ndarray]) -> dict:
    """Positional numpy inputs -> ``{graph input name: array in the graph's dtype}``."""
    feeds = {}
    for meta, array in zip(session.get_inputs(), inputs):
        dtype = _ORT_DTYPES.get(meta.type)
        feeds[meta.name] = np.ascontiguousarray(array.astype(dtype) if dtype is not None else array)
    return feeds


def _describe(meta) -> dict:
    """Symbolic dims become -1 (their names listed in ``dynamic``), like a -1 in a LiteRT shape signature."""
    shape = [d if isinstance(d, int) else -1 for d in meta.shape]
    dtype = _ORT_DTYPES.get(meta.type)
    return {"name": meta.name, "shape": shape, "dtype": np.dtype(dtype).name if dtype else meta.type,
            "quantization": None, "dynamic": [d for d in meta.shape if not isinstance(d, int)]}


def load(path: Path, threads: int = 1) -> OnnxRunner:
    return OnnxRunner(Path(path), threads)
