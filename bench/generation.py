"""Generative decode and prefill speed per target vs PyTorch eager (static cache), against the machine's
memory-bandwidth bound, all measured in one run.

    python bench/generation.py [--layers 6 --hidden 384 --vocab 8192 --cache-len 256 --prefill-len 32 --prefill-len 128]

A random-init Llama (untied head; small but not tiny: ~15M parameters by default) is saved, exported once
with edgeport's generative path, converted fp32 for every target, and checked token-exact on one prompt.
Then at 1 thread and at all cores: prefill ms per prefill length and decode ms/token (p50 of single calls,
each signature timed alone on realistic feeds) for PyTorch eager (the model's own forward with a
StaticCache, as generate calls it) and for each artifact in its runtime, plus litert-torch's own
``export_hf`` path on the same model (``litert export_hf``; bench/export_hf_row.py) when the litert-lm extra
is installed: the anchor edgeport's own LiteRT lowering is compared with.

The bound: a decode step reads every weight once (the embedding table excepted: one row) plus the KV cache
(a static cache attends over all its slots, masked). tokens/s can not exceed bandwidth / those bytes;
bandwidth is measured here as the best of several large numpy copies (read + write bytes / time).
TPU runs its artifact's CPU lowering through XLA, which sizes its own thread pool (same number in both
thread rows).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]


def memory_bandwidth(megabytes: int = 512, repeats: int = 5) -> float:
    """Bytes/s of a large copy (each byte read once and written once), best of ``repeats``."""
    import numpy as np

    src = np.ones(megabytes * 2**20 // 8, np.float64)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return 2 * src.nbytes / best


def build_model(args, where: Path):
    import torch
    import transformers as T

    torch.manual_seed(0)
    config = T.LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.hidden * 8 // 3,
                           num_hidden_layers=args.layers, num_attention_heads=args.hidden // 64,
                           num_key_value_heads=max(1, args.hidden // 128), max_position_embeddings=args.cache_len,
                           tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    T.LlamaForCausalLM(config).eval().save_pretrained(where)
    word_tokenizer(args.vocab).save_pretrained(where)  # export_hf loads the model's tokenizer
    return config


def word_tokenizer(vocab: int):
    """A word-level tokenizer over the whole vocabulary ("w3" -> 3), built offline with `tokenizers`."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, vocab)}}
    tok = Tokenizer(models.WordLevel(words, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>")


def convert_all(exported, out: Path) -> dict:
    from edgeport.targets.base import GenerativeJob
    from edgeport.targets.registry import all_targets

    artifacts = {}
    for target in all_targets():
        support = target.generation()
        if support is None or target.missing_requirements():
            continue
        (out / target.name).mkdir(parents=True, exist_ok=True)
        job = GenerativeJob(exported.programs, exported.samples, exported.layout.to_json(), "fp32", out / target.name,
                            artifact_only=True)
        start = time.perf_counter()
        artifacts[target.name] = (support, support.convert(job).artifact, time.perf_counter() - start)
    return artifacts


def bytes_per_token(model, layout) -> int:
    embedding = model.get_input_embeddings().weight
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return weights - embedding.numel() * embedding.element_size() + embedding.shape[1] * embedding.element_size() \
        + layout.kv_cache_bytes()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--cache-len", type=int, default=256)
    parser.add_argument("--prefill-len", type=int, action="append")
    args = parser.parse_args()
    lens = tuple(sorted(args.prefill_len or [32, 128]))
    from edgeport.core.proc import redirected

    with tempfile.TemporaryDirectory() as tmp, redirected(Path(tmp) / "noise.log"):
        rows, facts = run(args, lens, Path(tmp))
    print_table(rows, facts)


def run(args, lens, tmp: Path):
    import torch

    from edgeport.pipeline.tasks.text_generation.export import export_generation
    from edgeport.pipeline.tasks.text_generation.judge import artifact_latency
    from edgeport.pipeline.tasks.text_generation.loop import greedy
    from edgeport.pipeline.tasks.text_generation.reference import eager_latency, generate_reference
    from edgeport.sources.spec import SourceOptions

    build_model(args, tmp / "model")
    plan = SimpleNamespace(prefill_lens=lens, cache_len=args.cache_len, gen_tokens=8, architecture="LlamaForCausalLM")
    start = time.perf_counter()
    exported = export_generation(SourceOptions(model=f"hf:{tmp / 'model'}"), plan, tmp / "out")
    facts = {"export_s": time.perf_counter() - start, "bandwidth": memory_bandwidth(),
             "params": sum(p.numel() for p in exported.model.parameters()),
             "bytes_per_token": bytes_per_token(exported.model, exported.layout), "convert_s": {}, "exact": {}}
    artifacts = convert_all(exported, tmp / "out")
    export_hf = export_hf_artifact(tmp, lens, args.cache_len, facts)
    prompt = [int(t) for t in torch.randint(3, args.vocab, (lens[-1],), generator=torch.Generator().manual_seed(1))]
    reference = generate_reference(exported.model, [prompt[: lens[0] - 3]], 8, args.cache_len)[0]
    rows = []
    for threads in dict.fromkeys([1, os.cpu_count() or 1]):
        rows.append(("PyTorch eager", threads, eager_latency(exported.model, exported.layout, threads)))
        for name, (support, path, seconds) in artifacts.items():
            runner = support.load(path, threads)
            facts["convert_s"][name] = seconds
            facts["exact"][name] = greedy(runner, exported.layout, prompt[: lens[0] - 3], 8).tokens == reference.tokens
            rows.append((name, threads, artifact_latency(runner, exported.layout, prompt)[0]))
        if export_hf is not None:
            from export_hf_row import ExportHfRunner

            runner = ExportHfRunner(export_hf, threads)
            facts["exact"]["export_hf"] = runner.greedy(prompt[: lens[0] - 3], 8) == reference.tokens
            rows.append(("litert export_hf", threads, runner.latency(prompt)))
    return rows, facts


def export_hf_artifact(tmp: Path, lens, cache_len: int, facts: dict) -> Path | None:
    """litert-torch's own HF path on the same model (needs the litert-lm extra: it imports tensorflow)."""
    import importlib.util

    if importlib.util.find_spec("tensorflow") is None:
        facts["export_hf"] = "not installed: pip install 'edgeport[litert-lm]'"
        return None
    from export_hf_row import export

    try:
        path, facts["convert_s"]["export_hf"] = export(tmp / "model", tmp / "export_hf", lens, cache_len)
    except Exception as exc:  # export_hf refusing the model leaves the other rows
        facts["export_hf"] = f"export_hf failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return None
    return path


def print_table(rows, facts) -> None:
    bound = facts["bandwidth"] / facts["bytes_per_token"]
    print(f"model: Llama, {facts['params'] / 1e6:.1f}M params; decode reads {facts['bytes_per_token'] / 2**20:.1f} MiB/token "
          f"(weights + KV cache); measured copy bandwidth {facts['bandwidth'] / 1e9:.1f} GB/s -> bound {bound:.0f} tokens/s")
    print(f"export {facts['export_s']:.1f} s; convert s: " + ", ".join(f"{k} {v:.1f}" for k, v in facts["convert_s"].items())
          + "; token-exact vs generate: " + ", ".join(f"{k} {v}" for k, v in facts["exact"].items())
          + (f"; {facts['export_hf']}" if facts.get("export_hf") else ""))
    eager = {threads: block for name, threads, block in rows if name == "PyTorch eager"}
    lens = list(rows[0][2]["prefill_ms"])
    print(f"| runtime | threads | " + " | ".join(f"prefill {n} ms" for n in lens)
          + " | decode ms/token | tokens/s | vs eager decode | vs eager prefill " + lens[-1] + " | % of bandwidth bound |")
    print("|" + "---|" * (len(lens) + 7))
    for name, threads, block in rows:
        base = eager[threads]
        print(f"| {name} | {threads} | " + " | ".join(f"{block['prefill_ms'][n]:.2f}" for n in lens)
              + f" | {block['decode_ms_per_token']:.3f} | {block['tokens_per_s']:.0f}"
              + f" | {base['decode_ms_per_token'] / block['decode_ms_per_token']:.2f}x"
              + f" | {base['prefill_ms'][lens[-1]] / block['prefill_ms'][lens[-1]]:.2f}x"
              + f" | {100 * block['tokens_per_s'] / bound:.0f}% |")


if __name__ == "__main__":
    main()
