"""Generative decode and prefill speed per target vs PyTorch eager (static cache), against the machine's
memory-bandwidth bound, all measured in one run.

    python bench/generation.py [--layers 6 --hidden 384 --vocab 8192 --cache-len 256 --prefill-len 32 --prefill-len 128]
                               [--peaky] [--targets litert,onnx,export_hf] [--threads 1] [--edgeport-lowering]

A random-init Llama (untied head; small but not tiny: ~15M parameters by default) is saved, exported once
with edgeport's generative path, converted fp32 for every target, and checked token-exact on one prompt.
Then at 1 thread and at all cores: prefill ms per prefill length and decode ms/token (p50 of single calls,
each signature timed alone on realistic feeds) for PyTorch eager (the model's own forward with a
StaticCache, as generate calls it) and for each artifact in its runtime. Each artifact is built as a pipeline
row builds it (the target's rewrites, then its converter). LiteRT rows are named by the path that lowered
them (``litert [export_hf]`` when the litert-lm extra is installed: ``--litert-lowering auto`` routes a Hugging
Face causal LM through litert-torch's export_hf; ``[edgeport]`` otherwise, or with ``--edgeport-lowering`` as an
extra row set); LiteRT's dynamic-int8 and int4-block32 variants are quantized from that row's fp32 .tflite
(size, speed, token agreement with ``generate``). A routed row's prefill is one call of export_hf's prefill
as edgeport exports it (edgeport/targets/litert/hf_prefill.py: it returns the last real token's logits), so
it is the time to the first token, as every row's; ``litert export_hf (bare signatures)`` (``export_hf`` in
``--targets``) times the same file's ``prefill_<L>`` and ``decode`` as LiteRT-LM calls them, no second export. ``--peaky`` gives the model decisive
logits (tests/tiny_lm.py ``peaky``): on the random-init model the top logits are near-ties, so any quantizer
flips the first token and its agreement says nothing about the quantizer.

``decode CPU ms`` / ``prefill L CPU ms`` (every prefill length): p50 of the call's process CPU time
at 1 thread. On a shared, overloaded machine
wall-clock p50s swing with whatever else runs; the CPU time a step costs does not, so same-run ratios of
that column are the steadier comparison.

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
    model = T.LlamaForCausalLM(config).eval()
    if getattr(args, "peaky", False):
        decisive(model)
    model.save_pretrained(where)
    word_tokenizer(args.vocab).save_pretrained(where)  # export_hf loads the model's tokenizer
    return config


EMBED_SCALE = 10.0


def decisive(model) -> None:
    """Decisive greedy choices: the embedding scaled by EMBED_SCALE, so the residual stream is the fed
    token's embedding plus what the (unchanged, normalized-input) layers add, and lm_head = tests/tiny_lm.py
    ``peaky`` (a scaled, permuted copy of the embedding): the next token is a fixed permutation of the
    current one by a wide margin. Without the scaling, this model's layers outweigh the embedding and the
    top-2 logits stay ~4% of the logits' spread apart, which int4-block32 flips at the first token."""
    import torch

    from tiny_lm import peaky

    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(EMBED_SCALE)
    peaky(model)


def word_tokenizer(vocab: int):
    """A word-level tokenizer over the whole vocabulary ("w3" -> 3), built offline with `tokenizers`."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, vocab)}}
    tok = Tokenizer(models.WordLevel(words, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>")


QUANTIZED = {"litert": ("dynamic-int8", "int4-block32")}  # item 5 of issue 18: sizes, speed, token agreement


def convert_all(exported, out: Path, facts: dict, only=None, lowerings=("auto",)) -> dict:
    """Each target's fp32 artifact built the way a pipeline row builds it (the target's rewrites on every
    signature's program, then its converter), plus the quantized variants in QUANTIZED (``only``: these
    target names). LiteRT once per ``--litert-lowering`` in ``lowerings`` (auto: export_hf when installed,
    edgeport's own lowering otherwise); its rows are named by the path that built them."""
    from edgeport.pipeline.tasks.text_generation.rows import rewritten_programs
    from edgeport.targets.base import GenerativeJob
    from edgeport.targets.registry import all_targets

    artifacts = {}
    for target in all_targets():
        support = target.generation()
        if support is None or target.missing_requirements() or (only and target.name not in only):
            continue
        start = time.perf_counter()
        programs, applied, _ = rewritten_programs(target, exported.programs, exported.samples)
        facts["rewrites"][target.name] = applied
        for lowering in (lowerings if target.name == "litert" else (None,)):
            where = out / (target.name if lowering in (None, "auto") else f"{target.name}-{lowering}")
            where.mkdir(parents=True, exist_ok=True)
            options = {"litert_lowering": lowering} if lowering else {}
            for variant in ("fp32", *QUANTIZED.get(target.name, ())):
                job = GenerativeJob(programs, exported.samples, exported.layout.to_json(), variant, where, options,
                                    artifact_only=True)
                converted = support.convert(job)
                by = converted.details.get("built_by")
                name = (target.name if variant == "fp32" else f"{target.name} {variant}") + (f" [{by}]" if lowering else "")
                if lowering and variant == "fp32":
                    facts["lowering"][name] = converted.details.get("lowering_reason")
                artifacts[name] = (support, converted.artifact, time.perf_counter() - start)
                start = time.perf_counter()
    return artifacts


def size_mb(path: Path) -> float:
    files = [path] if path.is_file() else [f for f in path.rglob("*") if f.is_file()]
    return sum(f.stat().st_size for f in files) / 2**20


def agreement(got: list[int], expected: list[int]) -> float:
    """Share of the reference's tokens reproduced before the first divergence (the judge's token_agreement)."""
    matched = next((i for i, (a, b) in enumerate(zip(expected, got)) if a != b), min(len(got), len(expected)))
    return matched / len(expected)


def cpu_ms(call, runs: int = 30) -> float:
    """p50 CPU time of one call (process time: what the step costs, whatever else shares the cores)."""
    times = []
    for _ in range(runs + 2):
        start = time.process_time()
        call()
        times.append(time.process_time() - start)
    return 1000 * sorted(times[2:])[runs // 2]


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
    parser.add_argument("--gen-tokens", type=int, default=16, help="greedy tokens checked against generate")
    parser.add_argument("--peaky", action="store_true",
                        help="decisive logits (lm_head = a scaled, permuted copy of the embedding, tests/tiny_lm.py "
                             "peaky): token agreement then measures the quantizer, not random near-ties")
    parser.add_argument("--targets", help="comma-separated target names (and export_hf) to run; default all")
    parser.add_argument("--threads", type=int, action="append", help="thread counts to time (default 1 and all cores)")
    parser.add_argument("--edgeport-lowering", action="store_true",
                        help="also build LiteRT with --litert-lowering edgeport (edgeport's own lowering) beside the routed rows")
    args = parser.parse_args()
    lens = tuple(sorted(args.prefill_len or [32, 128]))
    from edgeport.core.proc import redirected

    with tempfile.TemporaryDirectory() as tmp, redirected(Path(tmp) / "noise.log"):
        rows, facts = run(args, lens, Path(tmp))
    print_table(rows, facts, args.peaky)


def run(args, lens, tmp: Path):
    import torch

    from edgeport.pipeline.tasks.text_generation.export import export_generation
    from edgeport.pipeline.tasks.text_generation.judge import artifact_latency
    from edgeport.pipeline.tasks.text_generation.loop import greedy, timing_feeds
    from edgeport.pipeline.tasks.text_generation.reference import eager_latency, generate_reference
    from edgeport.sources.spec import SourceOptions

    build_model(args, tmp / "model")
    plan = SimpleNamespace(prefill_lens=lens, cache_len=args.cache_len, gen_tokens=args.gen_tokens, architecture="LlamaForCausalLM")
    start = time.perf_counter()
    exported = export_generation(SourceOptions(model=f"hf:{tmp / 'model'}"), plan, tmp / "out")
    facts = {"export_s": time.perf_counter() - start, "bandwidth": memory_bandwidth(),
             "params": sum(p.numel() for p in exported.model.parameters()),
             "bytes_per_token": bytes_per_token(exported.model, exported.layout), "convert_s": {}, "exact": {},
             "rewrites": {}, "lowering": {}}
    only = set(args.targets.split(",")) if args.targets else None
    artifacts = convert_all(exported, tmp / "out", facts, only, ("auto", *(("edgeport",) if args.edgeport_lowering else ())))
    export_hf = export_hf_artifact(artifacts, facts) if not only or "export_hf" in only else None
    prompt = [int(t) for t in torch.randint(3, args.vocab, (lens[-1],), generator=torch.Generator().manual_seed(1))]
    reference = generate_reference(exported.model, [prompt[: lens[0] - 3]], args.gen_tokens, args.cache_len)[0]
    rows = []
    for threads in dict.fromkeys(args.threads or [1, os.cpu_count() or 1]):
        block = eager_latency(exported.model, exported.layout, threads)
        if threads == 1:
            block["cpu_decode_ms"] = eager_cpu_ms(exported.model, exported.layout, "decode", lens[0])
            block["cpu_prefill_ms"] = {n: eager_cpu_ms(exported.model, exported.layout, "prefill", n, PREFILL_RUNS) for n in lens}
        rows.append(("PyTorch eager", threads, block))
        for name, (support, path, seconds) in artifacts.items():
            runner = support.load(path, threads)
            facts["convert_s"][name] = seconds
            tokens = greedy(runner, exported.layout, prompt[: lens[0] - 3], args.gen_tokens).tokens
            facts["exact"][name] = agreement(tokens, reference.tokens)
            block, _ = artifact_latency(runner, exported.layout, prompt)
            feeds = timing_feeds(runner, exported.layout, prompt)
            if threads == 1:
                block["cpu_decode_ms"] = cpu_ms(lambda: runner.run("decode", feeds["decode"]))
                block["cpu_prefill_ms"] = {n: cpu_ms(lambda s=f"prefill_{n}": runner.run(s, feeds[s]), PREFILL_RUNS) for n in lens}
            rows.append((name, threads, {**block, "size_mb": size_mb(path)}))
        if export_hf is not None:
            rows.append(("litert export_hf (bare signatures)", threads, anchor_block(export_hf, threads, prompt, lens)))
    return rows, facts


PREFILL_RUNS = 12  # a prefill call costs ~5x a decode step


def eager_cpu_ms(model, layout, signature: str, length: int, runs: int = 30) -> float:
    """CPU-time p50 of eager's ``signature`` call ("prefill" of ``length`` tokens, or "decode"), each run on
    a fresh copy of the captured call (made untimed)."""
    import copy

    import torch

    from edgeport.pipeline.tasks.text_generation.export import capture

    torch.set_num_threads(1)
    module, kwargs = capture(model, length, layout.cache_len)[signature]
    calls = [copy.deepcopy(kwargs) for _ in range(runs + 2)]
    with torch.no_grad():
        return cpu_ms(lambda: module(**calls.pop()), runs)


def anchor_block(path: Path, threads: int, prompt: list[int], lens) -> dict:
    """export_hf's ``.tflite`` timed on its own signatures, as LiteRT-LM calls them: ``prefill_<L>`` of L
    tokens (no logits: the routed row's prefill adds the first decode step) and one ``decode`` step."""
    from edgeport.pipeline.tasks.text_generation.reference import latency_block
    from edgeport.targets.litert.hf_runner import ExportHfRunner
    from edgeport.validate.latency import measure

    runner = ExportHfRunner(path, threads)
    prefill, calls = {}, {}
    for length in runner.lens:
        calls[length] = runner.prefill_feeds(prompt[:length], runner.fresh())
        prefill[str(length)] = measure(lambda c=calls[length]: runner.raw(*c), threads, budget_seconds=0.5)["p50"]
    feeds = runner.decode_feeds(prompt[0], runner.lens[-1], runner.fresh())
    decode = measure(lambda: runner.raw("decode", feeds), threads, budget_seconds=0.5)
    block = {**latency_block(prefill, decode, threads), "size_mb": size_mb(path)}
    if threads == 1:
        block["cpu_decode_ms"] = cpu_ms(lambda: runner.raw("decode", feeds))
        block["cpu_prefill_ms"] = {n: cpu_ms(lambda c=calls[n]: runner.raw(*c), PREFILL_RUNS) for n in lens}
    return block


def export_hf_artifact(artifacts: dict, facts: dict) -> Path | None:
    """The routed LiteRT row's .tflite when export_hf built it (one export serves the row and the anchor)."""
    from edgeport.targets.litert.hf_runner import is_export_hf

    path = next((p for name, (_, p, _) in artifacts.items() if name.startswith("litert [") and is_export_hf(p)), None)
    if path is None:
        facts["export_hf"] = "no export_hf artifact: " + "; ".join(f"{k}: {v}" for k, v in facts["lowering"].items())
    return path


def print_table(rows, facts, peaky: bool = False) -> None:
    bound = facts["bandwidth"] / facts["bytes_per_token"]
    print(f"model: {'peaky ' if peaky else ''}Llama, {facts['params'] / 1e6:.1f}M params; decode reads {facts['bytes_per_token'] / 2**20:.1f} MiB/token "
          f"(weights + KV cache); measured copy bandwidth {facts['bandwidth'] / 1e9:.1f} GB/s -> bound {bound:.0f} tokens/s")
    print(f"export {facts['export_s']:.1f} s; convert s: " + ", ".join(f"{k} {v:.1f}" for k, v in facts["convert_s"].items())
          + "; token agreement vs generate: " + ", ".join(f"{k} {v:.2f}" for k, v in facts["exact"].items())
          + "; rewrites: " + ", ".join(f"{k} {'+'.join(v) or '-'}" for k, v in facts["rewrites"].items())
          + (f"; {facts['export_hf']}" if facts.get("export_hf") else ""))
    print("LiteRT lowering: " + "; ".join(f"{k}: {v}" for k, v in facts["lowering"].items()))
    eager = {threads: block for name, threads, block in rows if name == "PyTorch eager"}
    lens = list(rows[0][2]["prefill_ms"])
    print("| runtime | threads | size MiB | " + " | ".join(f"prefill {n} ms" for n in lens)
          + " | decode ms/token | tokens/s | vs eager decode | vs eager prefill " + lens[-1]
          + " | % of bandwidth bound | decode CPU ms | vs eager CPU | "
          + " | ".join(f"prefill {n} CPU ms | vs eager CPU" for n in lens) + " |")
    print("|" + "---|" * (3 * len(lens) + 10))
    for name, threads, block in rows:
        base = eager[threads]
        cpu, pre = block.get("cpu_decode_ms"), block.get("cpu_prefill_ms")
        print(f"| {name} | {threads} | " + (f"{block['size_mb']:.1f}" if "size_mb" in block else "-") + " | "
              + " | ".join(f"{block['prefill_ms'][n]:.2f}" for n in lens)
              + f" | {block['decode_ms_per_token']:.3f} | {block['tokens_per_s']:.0f}"
              + f" | {base['decode_ms_per_token'] / block['decode_ms_per_token']:.2f}x"
              + f" | {base['prefill_ms'][lens[-1]] / block['prefill_ms'][lens[-1]]:.2f}x"
              + f" | {100 * block['tokens_per_s'] / bound:.0f}%"
              + (f" | {cpu:.2f} | {base['cpu_decode_ms'] / cpu:.2f}x" if cpu else " | - | -")
              + "".join(f" | {pre[int(n)]:.2f} | {base['cpu_prefill_ms'][int(n)] / pre[int(n)]:.2f}x" if pre else " | - | -"
                        for n in lens) + " |")


if __name__ == "__main__":
    main()
