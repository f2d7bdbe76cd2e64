"""Which int8 a LiteRT ``--fallback int8`` keep should be (issue 37): the kept groups of an int4-block32 row scoped
to ai-edge-quantizer's dynamic int8 (channelwise int8 weights, activations quantized at run time, as LiteRT's
dynamic-int8 variant) or to weight-only int8 (the same weights, a DEQUANTIZE to fp32 and float compute, as
weight-int8), against the same groups kept float and nothing kept, all in one run. Each setting is a real
.tflite from the row's recipe (gen_fallback.GroupQuantizer, the search's own quantizer) run in the LiteRT
interpreter, teacher-forced over the eval windows the convert scored; the reference is the fp32 .tflite of the
same convert (4e-11 mean KLD from PyTorch on SmolLM2-135M, bench/LLM_QUALITY.md).

    python bench/litert_int8_keep.py DIR                 # DIR: a convert with a LiteRT int4-block32 row
    python bench/litert_int8_keep.py DIR --groups lm_head,layers.11.mlp

The kept groups default to the row's own (report.json ``quantization.float_layers``). Prints one line per
setting: mean/p99 KLD, same top-1 (vs the fp32 .tflite), size, and each ratio against "kept float".
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

SCHEMES = {"dynamic": "add_dynamic_config", "weight-only": "add_weight_only_config"}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", type=Path)
    ap.add_argument("--groups", help="comma-separated groups to keep (default: the row's kept groups)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    layout, ref = reference(args.dir, args.threads)
    report = json.loads((args.dir / "report.json").read_text())
    row = next(r for r in report["targets"] if r["target"] == "litert" and r["variant"] == "int4-block32")
    kept = args.groups.split(",") if args.groups else [g["name"] for g in row["quantization"]["float_layers"]]
    print(f"{args.dir}: kept groups {', '.join(kept)}; {sum(len(w) - ref.context for w in ref.windows)} tokens")
    rows = settings(args.dir, layout, ref, kept, args.threads)
    base = rows["kept float"]
    print("setting | mean KLD | p99 KLD | same top-1 | size | KLD vs kept float | size vs kept float | seconds")
    for name, r in rows.items():
        print(f"{name} | {r['kld_mean']:.4g} | {r['kld_p99']:.4g} | {100 * r['top1_agreement']:.1f}% | "
              f"{r['size'] / 1e6:.2f} MB | {r['kld_mean'] / base['kld_mean']:.3f}x | {r['size'] / base['size']:.3f}x | "
              f"{r['seconds']:.1f}")
    return 0


def reference(directory: Path, threads: int):
    """(layout, the convert's eval windows with the fp32 .tflite's teacher-forced logits)."""
    from edgeport.pipeline.tasks.text_generation.layout import EXPORTED_DIR, LAYOUT_FILE, Layout
    from edgeport.pipeline.tasks.text_generation.quality import saved_windows, teacher_forced
    from edgeport.targets.litert.generate import load

    layout = Layout.from_json(json.loads((directory / EXPORTED_DIR / LAYOUT_FILE).read_text()))
    ref = saved_windows(directory / EXPORTED_DIR, layout)
    runner = load(directory / "litert" / "generate_fp32.tflite", threads)
    ref.logits = [teacher_forced(runner, layout, w, ref.context) for w in ref.windows]
    ref.reference = "the fp32 .tflite"
    del runner
    return layout, ref


def settings(directory: Path, layout, ref, kept: list[str], threads: int) -> dict[str, dict]:
    """Every setting's quality and size: nothing kept, kept float, kept at each int8, every group at each int8."""
    from edgeport.targets.litert.generate import _prepare_fallback

    artifact = directory / "litert" / "generate_int4-block32.tflite"
    floats, int8 = _prepare_fallback(artifact, "int4-block32", threads), _prepare_fallback(artifact, "int4-block32",
                                                                                          threads, keep="int8")
    groups = list(floats.groups)
    unknown = [g for g in kept if g not in floats.groups]
    if unknown:
        raise SystemExit(f"not a group of this model: {', '.join(unknown)} (groups: {', '.join(groups)})")
    out = {}
    try:
        out["int4, nothing kept"] = measured(floats, groups, [], layout, ref)
        out["kept float"] = measured(floats, [g for g in groups if g not in kept], [], layout, ref)
        for scheme, method in SCHEMES.items():
            int8.int8_config = method
            out[f"kept int8 ({scheme})"] = measured(int8, [g for g in groups if g not in kept], kept, layout, ref)
        for scheme, method in SCHEMES.items():
            int8.int8_config = method
            out[f"every group int8 ({scheme})"] = measured(int8, [], groups, layout, ref)
    finally:
        floats.close()
        int8.close()
    return out


def measured(quantizer, quantized: list[str], kept: list[str], layout, ref) -> dict:
    from edgeport.pipeline.tasks.text_generation.quality import measure

    runner = quantizer.runner(quantized, kept)
    size = (quantizer.tmp / f"candidate_{quantizer.made}.tflite").stat().st_size
    start = time.perf_counter()
    try:
        return {**measure(runner, layout, ref), "size": size, "seconds": time.perf_counter() - start}
    finally:
        runner.close()


if __name__ == "__main__":
    raise SystemExit(main())
