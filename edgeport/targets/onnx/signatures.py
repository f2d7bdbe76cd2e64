"""A directory of ONNX graphs, one per signature (``prefill_<L>.onnx``, ``decode.onnx``), through
onnxruntime's CPU provider: ``intra_op_num_threads`` = threads, one inter-op thread. Outputs named
``present_*`` are returned under their role (``cache_*``), the name the next call's input has.

By default each session pre-packs its own copy of the MatMul weights (onnxruntime's Python API has no shared
pre-packed container), so two live sessions hold the weights twice: judging Qwen3-0.6B (2.38 GB fp32) peaked
at 2.55x its weights with both, 1.62x with one (bench/LARGE_GENERATION.md, sixth session). Over
``signature.ONE_AT_A_TIME_ABOVE`` bytes of graphs and weights the runner does not pay that:

- float graphs (fp32, fp16: no quantized kernel) are run **without pre-packing**, every session live. Their
  weights are then read from the weights file's pages, which onnxruntime maps once for all the sessions,
  and nothing is copied per session (the tied head reads the table as stored, :mod:`.tied_head`). That is
  what an app short of memory runs; the cost is prefill (a GEMM packs its weights at each call): measured on
  a 2-layer Llama-3.2-1B shape, decode 54 vs 54 ms, prefill of 32 208 vs 145 ms pre-packed;
- quantized graphs keep pre-packing (``MatMulNBits`` without it dequantizes at each call: 60x slower) and
  one signature's session at a time (:class:`~edgeport.targets.signature.PerSignature`, as ExecuTorch's
  methods and LiteRT's builtin-kernel Interpreters): switching signatures drops the other session and
  builds this one (about 5 s at 0.6B; latency is timed on warm sessions).

Either way the row says so (``runtime_sessions``, from :meth:`OnnxSignatureRunner.details`). Smaller
artifacts keep every session, pre-packed, as an app would."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeport.targets.onnx.runtime import _ORT_DTYPES
from edgeport.targets.onnx.share import INTEGER_OPS
from edgeport.targets.signature import PerSignature, SignatureRunner, cast_to, one_at_a_time, tensor

PRESENT = "present_"
ONE_SESSION = ("one signature's onnxruntime session at a time: each session pre-packs its own copy of the "
               "weights (bench/LARGE_GENERATION.md)")
UNPACKED = ("every signature's onnxruntime session live over one copy of the weights: pre-packing off, so the "
            "sessions read the weights file's pages (each would pre-pack its own copy); prefill runs slower "
            "than pre-packed (bench/LARGE_GENERATION.md)")
# ops whose onnxruntime kernels need their weights pre-packed to be fast: the integer ops and MatMulNBits (which
# dequantizes per call without)
PACKED_KERNELS = (*INTEGER_OPS, "MatMulNBits")


def output_name(role: str) -> str:
    """The graph's name for an output role: ``cache_k_0`` -> ``present_k_0`` (logits stays logits)."""
    return PRESENT + role.removeprefix("cache_") if role.startswith("cache_") else role


def role_of(name: str) -> str:
    return "cache_" + name.removeprefix(PRESENT) if name.startswith(PRESENT) else name



class OnnxSignatureRunner(SignatureRunner):
    name = "onnxruntime"

    def __init__(self, path: Path, threads: int):
        super().__init__(path, threads)
        self.graphs = {g.stem: g for g in sorted(Path(path).glob("*.onnx"))}
        if not self.graphs:
            raise FileNotFoundError(f"no .onnx graphs in {path}")
        large = one_at_a_time(path)   # see the module docstring
        self.prepack = not large or _needs_packing(self.graphs.values())
        self.one_session = large and self.prepack
        self.described = {}
        self.session = PerSignature(self._build, self.one_session)   # name -> its session, built on first use
        self.sessions = self.session.live
        for name in ([] if self.one_session else self.graphs):
            self.session(name)

    def _build(self, name: str):
        import onnxruntime as ort

        from edgeport.targets.onnx.runtime import session_options

        session = ort.InferenceSession(str(self.graphs[name]), session_options(self.threads, self.prepack),
                                       providers=["CPUExecutionProvider"])
        self.described[name] = _describe(session)
        return session

    def signatures(self) -> list[str]:
        return sorted(self.graphs, key=lambda n: (n == "decode", len(n), n))

    def run(self, name: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        session = self.session(name)
        args = {i.name: cast_to(feeds[i.name], _ORT_DTYPES[i.type]) for i in session.get_inputs()}
        names = [o.name for o in session.get_outputs()]
        return {role_of(n): v for n, v in zip(names, session.run(names, args))}

    def details(self) -> dict:
        """``runtime_sessions`` when this runner kept one session at a time (its judge switched sessions; an app
        that keeps both pays the weights twice) or ran without pre-packing (its prefill is slower than packed)."""
        note = ONE_SESSION if self.one_session else None if self.prepack else UNPACKED
        return {"runtime_sessions": note} if note else {}

    def io(self) -> dict[str, dict]:
        """Each signature's inputs and outputs, read when its session was built (with :attr:`one_session`,
        listing them builds only the sessions not built yet, one at a time)."""
        for name in self.signatures():
            if name not in self.described:
                self.session(name)
        return {name: self.described[name] for name in self.signatures()}


def _describe(session) -> dict:
    describe = lambda m, role=None: tensor(m.name, [d if isinstance(d, int) else -1 for d in m.shape],  # noqa: E731
                                           _ORT_DTYPES[m.type], role)
    return {"inputs": [describe(i) for i in session.get_inputs()],
            "outputs": [describe(o, role_of(o.name)) for o in session.get_outputs()]}


def _needs_packing(graphs) -> bool:
    """Some graph runs a kernel of :data:`PACKED_KERNELS` (read without the weights)."""
    import onnx

    return any(node.op_type in PACKED_KERNELS
               for path in graphs for node in onnx.load(str(path), load_external_data=False).graph.node)
