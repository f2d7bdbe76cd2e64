"""A directory of ONNX graphs, one per signature (``prefill_<L>.onnx``, ``decode.onnx``), through
onnxruntime's CPU provider: ``intra_op_num_threads`` = threads, one inter-op thread. Outputs named
``present_*`` are returned under their role (``cache_*``), the name the next call's input has."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeport.targets.onnx.runtime import _ORT_DTYPES
from edgeport.targets.signature import SignatureRunner, cast_to, tensor

PRESENT = "present_"


def output_name(role: str) -> str:
    """The graph's name for an output role: ``cache_k_0`` -> ``present_k_0`` (logits stays logits)."""
    return PRESENT + role.removeprefix("cache_") if role.startswith("cache_") else role


def role_of(name: str) -> str:
    return "cache_" + name.removeprefix(PRESENT) if name.startswith(PRESENT) else name


class OnnxSignatureRunner(SignatureRunner):
    name = "onnxruntime"

    def __init__(self, path: Path, threads: int):
        import onnxruntime as ort

        from edgeport.targets.onnx.runtime import session_options

        super().__init__(path, threads)
        options = session_options(threads)
        graphs = sorted(Path(path).glob("*.onnx"))
        if not graphs:
            raise FileNotFoundError(f"no .onnx graphs in {path}")
        self.sessions = {g.stem: ort.InferenceSession(str(g), options, providers=["CPUExecutionProvider"]) for g in graphs}

    def signatures(self) -> list[str]:
        return sorted(self.sessions, key=lambda n: (n == "decode", len(n), n))

    def run(self, name: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        session = self.sessions[name]
        args = {i.name: cast_to(feeds[i.name], _ORT_DTYPES[i.type]) for i in session.get_inputs()}
        names = [o.name for o in session.get_outputs()]
        return {role_of(n): v for n, v in zip(names, session.run(names, args))}

    def io(self) -> dict[str, dict]:
        describe = lambda m, role=None: tensor(m.name, [d if isinstance(d, int) else -1 for d in m.shape],  # noqa: E731
                                               _ORT_DTYPES[m.type], role)
        return {name: {"inputs": [describe(i) for i in s.get_inputs()],
                       "outputs": [describe(o, role_of(o.name)) for o in s.get_outputs()]}
                for name, s in ((n, self.sessions[n]) for n in self.signatures())}
