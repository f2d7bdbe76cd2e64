"""Issue 35's 1B-class table on a 2-core host: the bf16 text-generation sweep compiled at two shallow depths
of the real shape (every width, vocab, cache and batch as the model's) and extrapolated in depth.

Why: one libtpu AOT compile of all 16 layers of Llama-3.2-1B's shape ran over 22 minutes here; a 2- and a
4-layer copy compile in minutes. A decoder's layers are identical, so per step FLOPs, bytes accessed, peak HBM,
the memory analysis' argument / output / aliased sizes and the compiler's own estimate are affine in the layer
count (temporaries are not quite: the check prints them): v(L) = v(b) + (L - b) * (v(b) - v(a)) / (b - a).
The extrapolation is checked in the same run: a third depth is compiled for real at a subset of batches and
compared with what the two shallow depths predict for it (the "check" lines: predicted / compiled). The table
is then :func:`edgeport.targets.tpu.costtable.cost_block` over the extrapolated compile rows, so every number
follows the product's own formula (roofline, list prices, HBM fit).

Run: python bench/tpu_depth.py [--shape llama-3.2-1b] [--depths 2,4] [--check-depth 8]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tpu_cost import BATCHES, SHAPES, TOPOLOGIES, print_block  # noqa: E402  (sets sys.path, PYTHONPATH)

import tiny_lm  # noqa: E402  (tests/, put on sys.path by tpu_cost)

AFFINE = ("flops", "bytes_accessed", "peak_bytes", "compiler_est_seconds", "argument_bytes", "output_bytes", "alias_bytes",
          "temp_bytes")
CHECK_BATCHES = [1, 8]
CHECK_TOPOLOGIES = ["v5e:1x1"]


def compile_rows(shape: str, layers: int, tmp: Path, batches: list[int], topologies: list[str],
                 prefill: int, cache: int) -> tuple[list[dict], float, int]:
    """The bf16 TPU row's sweep rows (program x batch x topology) for ``shape`` cut to ``layers`` layers,
    through edgeport's own export (transformers' generation capture) and TPU generative convert."""
    import transformers as T

    from edgeport.pipeline.tasks.text_generation.export import export_generation
    from edgeport.pipeline.tasks.text_generation.plan import GenerationPlan
    from edgeport.pipeline.tasks.text_generation.rows import rewritten_programs
    from edgeport.sources.spec import SourceOptions
    from edgeport.targets.base import GenerativeJob
    from edgeport.targets.tpu.generate import convert
    from edgeport.targets.tpu.target import TARGET

    config = T.LlamaConfig(max_position_embeddings=2048, **{**SHAPES[shape], "num_hidden_layers": layers},
                           **tiny_lm.SPECIAL)
    model = T.LlamaForCausalLM(config).eval()
    params = sum(p.numel() for p in model.parameters())
    model_dir = tiny_lm.save(model, tmp / f"{shape}_{layers}")
    del model
    plan = GenerationPlan((prefill,), cache, 4, "llama", [], [])
    exported = export_generation(SourceOptions(model=f"hf:{model_dir}"), plan, tmp / f"out_{layers}")
    programs, applied, _notes = rewritten_programs(TARGET, exported.programs, exported.samples)  # as the CLI does
    print(f"  [{layers} layers] rewrites: {', '.join(applied) or 'none'}", flush=True)
    job = GenerativeJob(programs, exported.samples, exported.layout.to_json(), "bf16",
                        tmp / f"out_{layers}" / "tpu", {"tpu_topology": topologies,
                                                        "tpu_batch": [",".join(map(str, batches))]},
                        progress=lambda step: print(f"  [{layers} layers] {step}", flush=True))
    start = time.perf_counter()
    converted = convert(job)
    seconds = time.perf_counter() - start
    rows = converted.details["tpu_cost"]["sweep"]
    failed = [r for r in rows if not r.get("ok")]
    if failed:
        raise SystemExit(f"{len(failed)} compiles failed at {layers} layers: {failed[0]}")
    return rows, seconds, params


def extrapolate(shallow: dict[int, list[dict]], layers: int) -> list[dict]:
    """Each compile row at ``layers`` layers from the same row at the two shallow depths (affine in depth);
    fits_hbm recomputed from the extrapolated peak."""
    (a, rows_a), (b, rows_b) = sorted(shallow.items())
    at_a = {(r["program"], r["batch"], r["topology"]): r for r in rows_a}
    out = []
    for row in rows_b:
        low = at_a[(row["program"], row["batch"], row["topology"])]
        new = dict(row, layers=layers, extrapolated_from=[a, b])
        for key in AFFINE:
            if row.get(key) is not None and low.get(key) is not None:
                new[key] = row[key] + (layers - b) * (row[key] - low[key]) / (b - a)
        new["fits_hbm"] = new["peak_bytes"] <= row["hbm_bytes_per_device"]
        out.append(new)
    return out


def check(predicted: list[dict], compiled: list[dict]) -> list[dict]:
    """predicted / compiled per affine quantity, at the rows the check depth compiled."""
    by_key = {(r["program"], r["batch"], r["topology"]): r for r in predicted}
    lines = []
    for row in compiled:
        guess = by_key[(row["program"], row["batch"], row["topology"])]
        lines.append({"program": row["program"], "batch": row["batch"], "topology": row["topology"],
                      **{k: guess[k] / row[k] for k in AFFINE if row.get(k) and guess.get(k) is not None}})
    return lines


def main() -> None:
    from edgeport.targets.tpu.costtable import cost_block

    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", choices=sorted(SHAPES), default="llama-3.2-1b")
    parser.add_argument("--depths", default="2,4")
    parser.add_argument("--check-depth", type=int, default=8, help="compiled for real at batches 1,8 on v5e:1x1; 0: no check")
    parser.add_argument("--prefill-len", type=int, default=32)
    parser.add_argument("--cache-len", type=int, default=512)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    full = SHAPES[args.shape]["num_hidden_layers"]
    saved = json.loads(args.json.read_text()) if args.json and args.json.is_file() else {}
    shallow = {int(k): v for k, v in (saved.get("shallow") or {}).items()}   # a rerun keeps the depths it has
    timings = {int(k): v for k, v in (saved.get("timings") or {}).items()}
    with tempfile.TemporaryDirectory(prefix="tpu-depth-") as tmp:
        for layers in (d for d in depths if d not in shallow):
            shallow[layers], timings[layers], _params = compile_rows(args.shape, layers, Path(tmp), BATCHES, TOPOLOGIES,
                                                                     args.prefill_len, args.cache_len)
            print(f"== {layers} layers: TPU bf16 convert + sweep {timings[layers]:.0f} s", flush=True)
            shutil.rmtree(Path(tmp) / f"{args.shape}_{layers}", ignore_errors=True)
            shutil.rmtree(Path(tmp) / f"out_{layers}", ignore_errors=True)
            if args.json:
                args.json.write_text(json.dumps({"shallow": shallow, "timings": timings}, default=str))
        shallow = {d: shallow[d] for d in depths}
        checked = []
        if args.check_depth:
            compiled, timings[args.check_depth], _p = compile_rows(args.shape, args.check_depth, Path(tmp), CHECK_BATCHES,
                                                                   CHECK_TOPOLOGIES, args.prefill_len, args.cache_len)
            checked = check(extrapolate(shallow, args.check_depth), compiled)
            for line in checked:
                print(f"check {args.check_depth} layers {line['program']:>10} b{line['batch']:<4} {line['topology']}: "
                      + "  ".join(f"{k} {v:.3f}" for k, v in line.items() if k in AFFINE), flush=True)
    rows = extrapolate(shallow, full)
    block = cost_block(rows, {}, generative=True)
    print(f"\n== {args.shape}: {full} layers extrapolated from {depths}; prefill {args.prefill_len}, cache {args.cache_len}; "
          f"compile wall per depth: {', '.join(f'{d}: {s:.0f} s' for d, s in timings.items())}")
    print_block(f"{args.shape} bf16 (extrapolated in depth)", block)
    if args.json:
        args.json.write_text(json.dumps({"shape": args.shape, "depths": depths, "layers": full, "timings": timings,
                                         "check": checked, "shallow": shallow, "rows": rows, "block": block},
                                        indent=1, default=str))


if __name__ == "__main__":
    main()
