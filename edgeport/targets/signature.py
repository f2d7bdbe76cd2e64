"""What every generative runner is: one loaded artifact with several named signatures (``prefill_<L>``,
``decode``), each called with named numpy arrays and answering with named numpy arrays.

Names are the roles the generative layout defines (``input_ids``, ``position_ids``, ``attention_mask``,
``cache_k_<l>``, ``cache_v_<l>``, ``cache_len_<l>``; outputs ``logits`` and the same cache names), whatever
the artifact calls them: a runner maps its runtime's names (ONNX's ``present_*`` outputs) and dtypes (int64
ids narrowed to int32) to the roles, so the greedy loop and the judge never branch on a target.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


class SignatureRunner:
    """Subclasses implement ``__init__(path, threads)``, :meth:`signatures`, :meth:`run` and :meth:`io`."""

    name = "default"
    threads: int = 1
    # True: prefill feeds also carry ``prompt_len`` (the real tokens of the right-padded prompt), for an
    # artifact whose prefill returns no logits and answers the last real token's itself (export_hf's .tflite)
    takes_prompt_len: bool = False

    def __init__(self, path: Path, threads: int):
        self.threads = threads

    def signatures(self) -> list[str]:
        raise NotImplementedError

    def run(self, name: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def io(self) -> dict[str, dict]:
        """``{signature: {"inputs": [...], "outputs": [...]}}`` as the runtime sees them (name, shape, dtype,
        quantization; an output also names the ``role`` it plays, so an app knows which output feeds which
        input on the next call): the per-artifact part of manifest.json's ``generation`` section."""
        return {}

    def details(self) -> dict:
        """Extra row fields on how this runner ran the artifact, where that differs from how an app would
        (``runtime_sessions``: one signature's runtime state at a time, :class:`PerSignature`)."""
        return {}


# bytes of an artifact above which a runner whose runtime holds weights per signature keeps one signature's
# runtime state at a time (:class:`PerSignature`): a 1B-class model, whose second copy costs gigabytes
ONE_AT_A_TIME_ABOVE = 1 << 30


def artifact_bytes(path: Path) -> int:
    """Bytes of an artifact: a file, or a directory's files (graphs beside their external weights)."""
    path = Path(path)
    return path.stat().st_size if path.is_file() else sum(f.stat().st_size for f in path.iterdir() if f.is_file())


def one_at_a_time(path: Path, above: int | None = None) -> bool:
    """The artifact at ``path`` is larger than ``above`` (default :data:`ONE_AT_A_TIME_ABOVE`, read at call time)."""
    return artifact_bytes(path) > (ONE_AT_A_TIME_ABOVE if above is None else above)


class PerSignature:
    """What a runtime builds per signature (an onnxruntime session, an ExecuTorch method, an Interpreter), built
    by ``build(name)`` on first use and kept in :attr:`live`. Each of those runtimes holds its own copy of the
    weights per signature (pre-packed, packed by XNNPACK, or dequantized), so with ``one`` set only the last
    one used stays alive: building another first drops it and gives its memory back
    (:func:`~edgeport.core.memory.release`), so the two copies never coexist. Without ``one`` every signature's
    stays, as an app keeps them. A switch rebuilds (seconds at 1B); latency is timed on warm ones."""

    def __init__(self, build, one: bool):
        self.build, self.one, self.live = build, one, {}

    def __call__(self, name: str):
        if name not in self.live:
            if self.one and self.live:
                from edgeport.core.memory import release

                self.live.clear()
                release()
            self.live[name] = self.build(name)
        return self.live[name]


def cast_to(array: np.ndarray, dtype, shape=None) -> np.ndarray:
    """A feed in the dtype (and, for scalars/reshapes, the shape) the runtime declares."""
    out = np.asarray(array).astype(np.dtype(dtype), copy=False)
    if shape is not None and tuple(out.shape) != tuple(shape) and out.size == int(np.prod(shape)):
        out = out.reshape(tuple(shape))
    return np.asarray(out, order="C")  # not ascontiguousarray: it turns a 0-d scalar into shape (1,)


def tensor(name: str, shape, dtype, role: str | None = None) -> dict:
    """One manifest entry for a runtime tensor."""
    entry = {"name": name, "shape": [int(s) for s in shape], "dtype": np.dtype(dtype).name, "quantization": None}
    if role is not None:
        entry["role"] = role
    return entry
