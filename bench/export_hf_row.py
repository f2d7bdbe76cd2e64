"""The export_hf row of bench/generation.py: the same model through litert-torch's own Hugging Face path
(``litert_torch.generative.export_hf``, fp32: ``quantization_recipe="none"``), its ``.tflite`` driven by
ai_edge_litert's Interpreter the way LiteRT-LM drives it (``prefill_<L>`` then ``decode``; tokens, input_pos,
an additive float mask and the ``kv_cache_*`` tensors fed back), timed like edgeport's artifacts and checked
token-exact against the same greedy reference.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

NEG = np.float32(-np.inf)


class ExportHfRunner:
    """prefill/decode over export_hf's signatures (caches passed in and out by name)."""

    def __init__(self, path: Path, threads: int):
        from ai_edge_litert.interpreter import Interpreter

        self.interpreter = Interpreter(model_path=str(path), num_threads=threads)
        self.threads = threads
        self.decode = self.interpreter.get_signature_runner("decode")
        inputs = self.decode.get_input_details()
        self.cache_len = int(inputs["mask"]["shape"][-1])
        self.kv = {k: v["shape"] for k, v in inputs.items() if k.startswith("kv_cache")}
        names = self.interpreter.get_signature_list()
        self.lens = sorted(int(n.split("_")[1]) for n in names if n.startswith("prefill_"))

    def fresh(self) -> dict:
        return {k: np.zeros(shape, np.float32) for k, shape in self.kv.items()}

    def prefill_feeds(self, ids: list[int], cache: dict) -> tuple[str, dict]:
        length = next(n for n in self.lens if n >= len(ids))
        tokens = np.zeros((1, length), np.int32)
        tokens[0, :len(ids)] = ids
        mask = np.full((1, 1, length, self.cache_len), NEG, np.float32)
        for i in range(length):
            mask[0, 0, i, :i + 1] = 0
        return f"prefill_{length}", {"tokens": tokens, "input_pos": np.arange(length, dtype=np.int32), "mask": mask, **cache}

    def decode_feeds(self, token: int, pos: int, cache: dict) -> dict:
        mask = np.full((1, 1, 1, self.cache_len), NEG, np.float32)
        mask[0, 0, 0, :pos + 1] = 0
        return {"tokens": np.array([[token]], np.int32), "input_pos": np.array([pos], np.int32), "mask": mask, **cache}

    def run(self, name: str, feeds: dict) -> dict:
        return self.interpreter.get_signature_runner(name)(**feeds)

    def greedy(self, prompt: list[int], new_tokens: int) -> list[int]:
        name, feeds = self.prefill_feeds(prompt[:-1], self.fresh())
        out = self.run(name, feeds)
        cache = {k: out[k] for k in self.kv}
        token, pos, tokens = prompt[-1], len(prompt) - 1, []
        for _ in range(new_tokens):
            out = self.run("decode", self.decode_feeds(token, pos, cache))
            cache = {k: out[k] for k in self.kv}
            token, pos = int(np.argmax(out["logits"][0, -1])), pos + 1
            tokens.append(token)
        return tokens

    def latency(self, prompt: list[int]) -> dict:
        from edgeport.pipeline.tasks.text_generation.reference import latency_block
        from edgeport.validate.latency import measure

        prefill = {}
        for length in self.lens:
            name, feeds = self.prefill_feeds(prompt[:length], self.fresh())
            prefill[str(length)] = measure(lambda n=name, f=feeds: self.run(n, f), self.threads, budget_seconds=0.5)["p50"]
        feeds = self.decode_feeds(prompt[0], self.lens[-1], self.fresh())
        decode = measure(lambda: self.run("decode", feeds), self.threads, budget_seconds=0.5)
        return latency_block(prefill, decode, self.threads)


def export(model_dir: Path, out: Path, lens, cache_len: int) -> tuple[Path, float]:
    """(fp32 model.tflite, seconds of export_hf's export; its import is not counted)."""
    from litert_torch.generative.export_hf import export as export_hf

    start = time.perf_counter()
    export_hf.export(str(model_dir), str(out), prefill_lengths=list(lens), cache_length=cache_len,
                     quantization_recipe="none", keep_temporary_files=True)
    return next(out.rglob("model.tflite")), time.perf_counter() - start
