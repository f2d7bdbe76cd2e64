"""What ExecuTorch's precision search (``--fallback float`` on text generation, issue 37) costs per candidate on a
SmolLM2-135M-shaped llama: 30 blocks, hidden 576, MLP 1536, 9 heads on 3 kv heads, vocabulary 49152, head tied
to the embedding; random weights built from the config (the timing depends on shapes, not values; nothing is
downloaded). Prefill 32, cache 128, one thread, as bench/llm_quality.py's conversions.

    python bench/executorch_search_cost.py [-q int4-block32] [-q dynamic-int8] [--tokens 64]

Per variant: the search's quantizer prepared on the rewritten programs, then teacher-forced through a candidate
(:mod:`edgeport.targets.executorch.gen_fallback`): no group quantized (the fp32 programs in PyTorch: the baseline),
one group quantized (a sensitivity step, 32 tokens), a second group (its weights quantized already), every group
(a search step, ``--tokens``). Times are ratios to the baseline over the same tokens, and seconds.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]


def programs(folder: Path):
    import torch
    import transformers

    from edgeport.pipeline.tasks.text_generation.export import export_generation
    from edgeport.pipeline.tasks.text_generation.rows import rewritten_programs
    from edgeport.sources.spec import SourceOptions
    from edgeport.targets.registry import get_target

    config = transformers.LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                      num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True,
                                      max_position_embeddings=2048, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).eval().save_pretrained(folder / "model")
    plan = SimpleNamespace(prefill_lens=(32,), cache_len=128, gen_tokens=8, architecture="LlamaForCausalLM")
    exported = export_generation(SourceOptions(model=f"hf:{folder / 'model'}"), plan, folder / "run")
    rewritten = rewritten_programs(get_target("executorch"), exported.programs, exported.samples)[0]
    return exported.layout, SimpleNamespace(programs=rewritten, samples=exported.samples)


def timed(quantizer, layout, groups, window) -> float:
    from edgeport.pipeline.tasks.text_generation.quality import teacher_forced

    start = time.perf_counter()
    runner = quantizer.runner(groups)
    teacher_forced(runner, layout, window, 32)
    runner.close()
    return time.perf_counter() - start


def main() -> int:
    import numpy as np

    from edgeport.targets.executorch.gen_fallback import prepare
    from edgeport.targets.executorch.generate import convert

    ap = argparse.ArgumentParser()
    ap.add_argument("-q", "--quantize", action="append", default=[])
    ap.add_argument("--tokens", type=int, default=64)
    args = ap.parse_args()
    rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # noqa: E731
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        layout, job = programs(Path(tmp))
        print(f"export + rewrites: {time.perf_counter() - start:.1f} s, peak RSS {rss():.0f} MiB", flush=True)
        ids = [int(i) for i in np.random.default_rng(0).integers(0, 49152, 33 + args.tokens)]
        short, whole = ids[:32 + 33], ids[:32 + args.tokens + 1]
        for variant in args.quantize or ["int4-block32", "dynamic-int8"]:
            quantizer = prepare(Path(tmp) / "unused.pte", variant, 1, SimpleNamespace(**vars(job)), convert)
            base_short, base = timed(quantizer, layout, [], short), timed(quantizer, layout, [], whole)
            print(f"{variant}: {len(quantizer.groups)} groups; fp32 programs: {base_short:.1f} s (32 tokens), "
                  f"{base:.1f} s ({args.tokens} tokens)", flush=True)
            for label, groups, window, baseline in (
                    ("one group (sensitivity, 32 tokens)", ["model.layers.11.mlp"], short, base_short),
                    ("another group (sensitivity, 32 tokens)", ["model.layers.12.mlp"], short, base_short),
                    (f"every group (a search step, {args.tokens} tokens)", list(quantizer.groups), whole, base)):
                seconds = timed(quantizer, layout, groups, window)
                print(f"  {label}: {seconds:.1f} s = {seconds / baseline:.1f}x fp32, peak RSS {rss():.0f} MiB", flush=True)
            quantizer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
