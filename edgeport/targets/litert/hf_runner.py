"""export_hf's ``.tflite`` (litert-torch's Hugging Face path) driven by ai_edge_litert's Interpreter, the way
LiteRT-LM drives it, and spoken to in the generative layout's roles so the one greedy loop, the judge and
``edgeport generate`` run it like any other artifact.

Its signatures are not edgeport's: ``prefill_<L>(tokens, input_pos, mask, kv_cache_k_<i>, kv_cache_v_<i>)``
returns the updated caches, ``decode`` takes the same inputs for one token and returns ``logits`` and the
caches; ``mask`` is an additive float mask over the whole cache (0 on slots a position attends, float32's
lowest number elsewhere: the one convention of every float mask edgeport feeds, so an app fills any float
``attention_mask`` role alike; softmax gives those slots 0 as for -inf), and the caches are opaque state in
export_hf's own layout (its value cache is stored transposed), passed back by name. The loop says the
prompt's real length n as ``prompt_len`` (:attr:`takes_prompt_len`):

- edgeport's export (:mod:`edgeport.targets.litert.hf_prefill`) gives the prefill a ``logits`` output
  (1, 1, V): the row of the highest ``input_pos``. The prompt goes in right-padded, its padding rows
  repeating the last real position n - 1, so one prefill call answers the first token;
- export_hf's stock prefill (no logits: the ``--litertlm`` bundle's, or a family whose prefill module the hook
  does not reach) takes the first n - 1 tokens and the last goes through one decode step, whose logits are the
  prompt's last position's (what LiteRT-LM and the Android sample's GenerationLoop do for such a prefill).

Either way the row's prefill latency is the time to the first token.
"""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np

from edgeport.targets.signature import SignatureRunner, tensor

NEG = np.finfo(np.float32).min   # layout.as_mask's masked value
KV = "kv_cache_"


def signature_inputs(path: Path, outputs: bool = False) -> dict[str, list[str]]:
    """signature -> input (``outputs``: output) names, read from the flatbuffer's signature defs (no
    interpreter, no copy)."""
    from ai_edge_litert import schema_py_generated as schema

    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        model, sig = schema.Model.GetRootAs(mapped, 0), None
        out = {}
        for i in range(model.SignatureDefsLength()):
            sig = model.SignatureDefs(i)
            get, count = (sig.Outputs, sig.OutputsLength) if outputs else (sig.Inputs, sig.InputsLength)
            out[sig.SignatureKey().decode()] = [get(j).Name().decode() for j in range(count())]
        del model, sig
    return out


def is_export_hf(path: Path) -> bool:
    """export_hf's signatures (``tokens``, ``input_pos``, ``kv_cache_*``), not edgeport's roles."""
    decode = signature_inputs(path).get("decode", [])
    return "tokens" in decode and any(n.startswith(KV) for n in decode)


def prefill_has_logits(path: Path) -> bool:
    """export_hf's prefill answers the last real token's logits (edgeport's export, :mod:`.hf_prefill`)."""
    return any(n.startswith("prefill_") and "logits" in names for n, names in signature_inputs(path, outputs=True).items())


def role(name: str) -> str:
    """``kv_cache_k_3`` -> ``cache_k_3`` (the layout's role)."""
    return name.removeprefix("kv_")


class ExportHfRunner(SignatureRunner):
    """prefill/decode over export_hf's signatures; :meth:`run` answers in the layout's roles, and
    :meth:`fresh`, :meth:`prefill_feeds`, :meth:`decode_feeds` and :meth:`raw` drive the signatures as
    they are (bench/generation.py times them bare)."""

    name = "interpreter"
    takes_prompt_len = True

    def __init__(self, path: Path, threads: int):
        from edgeport.targets.litert.interpreter import interpreter

        super().__init__(path, threads)
        self.interpreter = interpreter(path, threads)   # XNNPACK's weight cache, or builtin kernels (see there)
        self.name = self.interpreter.runner_name
        self.runners = {n: self.interpreter.get_signature_runner(n) for n in self.interpreter.get_signature_list()}
        inputs = self.runners["decode"].get_input_details()
        self.cache_len = int(inputs["mask"]["shape"][-1])
        self.kv = {k: tuple(v["shape"]) for k, v in inputs.items() if k.startswith(KV)}
        self.lens = sorted(int(n.split("_")[1]) for n in self.runners if n.startswith("prefill_"))
        self.layers = sorted({int(k.rsplit("_", 1)[1]) for k in self.kv})
        self.prefill_logits = prefill_has_logits(path)

    def signatures(self) -> list[str]:
        return list(self.runners)

    def fresh(self) -> dict:
        return {k: np.zeros(shape, np.float32) for k, shape in self.kv.items()}

    def prefill_feeds(self, ids: list[int], cache: dict, length: int | None = None) -> tuple[str, dict]:
        """(signature, feeds) writing ``ids`` at slots 0.. (right-padded into ``length``, default the
        smallest prefill that holds them); row i of the mask attends slots 0..i. A prefill with logits
        answers its highest position's row, so its padding rows repeat the last real position."""
        length = length or next(n for n in self.lens if n >= len(ids))
        tokens = np.zeros((1, length), np.int32)
        tokens[0, :len(ids)] = ids
        positions = np.arange(length, dtype=np.int32)
        if self.prefill_logits:
            positions = np.minimum(positions, max(len(ids), 1) - 1)
        allowed = np.tril(np.ones((length, self.cache_len), bool))
        mask = np.where(allowed, np.float32(0), NEG).astype(np.float32)[None, None]
        return f"prefill_{length}", {"tokens": tokens, "input_pos": positions, "mask": mask, **cache}

    def decode_feeds(self, token: int, pos: int, cache: dict) -> dict:
        mask = np.full((1, 1, 1, self.cache_len), NEG, np.float32)
        mask[0, 0, 0, :pos + 1] = 0
        return {"tokens": np.array([[token]], np.int32), "input_pos": np.array([pos], np.int32), "mask": mask, **cache}

    def raw(self, name: str, feeds: dict) -> dict:
        return self.runners[name](**feeds)

    def run(self, name: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One layout-role call (see the module docstring): ``decode`` as is; ``prefill_<L>`` of the
        first ``prompt_len`` tokens (all L without it): one call when the prefill has logits, else export_hf's
        prefill of all but the last plus one decode step."""
        if name == "decode":
            pos = int(np.asarray(feeds["position_ids"]).reshape(-1)[0])
            token = int(np.asarray(feeds["input_ids"]).reshape(-1)[0])
            cache = {k: feeds[role(k)] for k in self.kv}
            return self._answer(self.raw("decode", self.decode_feeds(token, pos, cache)), pos + 1)
        length = int(name.removeprefix("prefill_"))
        ids = [int(t) for t in np.asarray(feeds["input_ids"]).reshape(-1)]
        real = int(np.asarray(feeds.get("prompt_len", length)).reshape(-1)[0])
        cache = self.fresh()
        if self.prefill_logits:
            return self._answer(self.raw(*self.prefill_feeds(ids[:real], cache, length)), real)
        if real > 1:
            signature, prefill = self.prefill_feeds(ids[:real - 1], cache, length)
            out = self.raw(signature, prefill)
            cache = {k: out[k] for k in self.kv}
        return self._answer(self.raw("decode", self.decode_feeds(ids[real - 1], real - 1, cache)), real)

    def _answer(self, out: dict, filled: int) -> dict:
        """The last position's logits (1, 1, V), the caches under their roles, and each layer's fill."""
        answer = {"logits": np.asarray(out["logits"])}
        answer.update({role(k): np.asarray(out[k]) for k in self.kv})
        answer.update({f"cache_len_{layer}": np.array(filled, np.int32) for layer in self.layers})
        return answer

    def io(self) -> dict[str, dict]:
        """The signatures as they are (an app drives these names); each tensor names the layout role it plays."""
        roles = {"tokens": "input_ids", "input_pos": "position_ids", "mask": "attention_mask"}   # float: additive
        out = {}
        for name, runner in self.runners.items():
            describe = lambda k, d: tensor(k, d["shape"], d["dtype"], roles.get(k) or role(k))  # noqa: E731
            out[name] = {"inputs": [describe(k, d) for k, d in runner.get_input_details().items()],
                         "outputs": [describe(k, d) for k, d in runner.get_output_details().items()]}
        return out
