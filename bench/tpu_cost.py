"""Issues 35 and 38 numbers: the --tpu-batch sweep's cost table and what it costs to compile, in one run.

1. CNN (tests/models.py:cnn and samples/models/tiny_cnn.py), through the TPU target's own code: the row's
   convert (3 topologies) timed, then the batch sweep two ways in the same run — BEFORE: one compile child per
   batch (a Python start + libtpu load each) and batch 1 compiled again; AFTER (edgeport's sweep): every batch x
   topology in one child, batch 1 reused from the row's compiles. Prints the ratio and the compile share.
2. A small Llama shape built from a config (random weights, saved locally; nothing downloads) through the CLI:
   -q bf16 --tpu-batch 1,8,32,128 on v5e/v6e/v5p, the tpu_cost table with H100/A100 rows.
3. The roofline formula on a published TPU serving result's shape, as a ratio (see PUBLISHED).

Run: python bench/tpu_cost.py [--skip-llm]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))  # compile children
sys.path.insert(0, str(REPO / "tests"))

TOPOLOGIES = ["v5e:1x1", "v6e:1x1", "v5p:2x2x1"]
BATCHES = [1, 8, 32, 128]
# AI-Hypercomputer/jetstream-pytorch, benchmarks/summary.md (row dated 2024-04-24): Llama 3 8B on TPU v5e-8,
# bfloat16, batch 128, cache length 2048, max input 1024, max output 1024: 8249 tokens/s.
PUBLISHED = {"model": "Llama 3 8B", "chip": "v5e", "chips": 8, "batch": 128, "cache": 2048, "tokens_per_s": 8249.0,
             "source": "AI-Hypercomputer/jetstream-pytorch benchmarks/summary.md (2024-04-24)",
             "params": 8.03e9, "layers": 32, "kv_heads": 8, "head_dim": 128}


def cnn_compile(spec: str, tmp: Path) -> dict:
    from edgeport.core.program import export_program, signature_of
    from edgeport.core.eager import flatten_inputs
    from edgeport.sources import SourceOptions, load_model
    from edgeport.targets.base import ConvertJob
    from edgeport.targets.tpu.aot import CompileInput, compile_for_topologies, parse_topology
    from edgeport.targets.tpu.costtable import cost_block
    from edgeport.targets.tpu.sweep import batched_export, sweep
    from edgeport.targets.tpu.lowering import lower_program
    from edgeport.targets.tpu.target import TARGET, _weight_avals

    loaded = load_model(SourceOptions(model=str(REPO / spec)))
    program = export_program(loaded.module, loaded.example_inputs)
    example = flatten_inputs(loaded.example_inputs)
    signature = signature_of(program, loaded.input_names)
    out = tmp / spec.replace("/", "_").replace(":", "_") / "tpu"
    out.mkdir(parents=True)
    start = time.perf_counter()
    converted = TARGET.convert(ConvertJob(program, example, signature, "fp32", out, {"tpu_topology": TOPOLOGIES}))
    convert_s = time.perf_counter() - start
    compiles = converted.details["tpu_compile"]
    lowered = lower_program(program, "fp32", [i.name for i in signature.inputs], tuple(example))
    topologies = [parse_topology(t) for t in TOPOLOGIES]
    start = time.perf_counter()
    for batch in BATCHES:  # BEFORE: a child per batch, batch 1 compiled again
        serialized, avals = batched_export(lowered.fn, _weight_avals(lowered.weights), lowered.compile_avals, batch, "highest")
        compile_for_topologies(topologies, CompileInput(serialized, tuple(avals)), tmp / f"before_{batch}")
    before_s = time.perf_counter() - start
    start = time.perf_counter()
    rows = sweep([{"name": "forward", "fn": lowered.fn, "weight_avals": _weight_avals(lowered.weights),
                   "input_avals": lowered.compile_avals}], topologies, BATCHES, "highest", known=compiles)
    after_s = time.perf_counter() - start
    return {"spec": spec, "convert_s": convert_s, "row_compile_s": sum(c["compile_seconds"] or 0 for c in compiles),
            "before_s": before_s, "after_s": after_s, "block": cost_block(rows, {}, generative=False)}


# Llama shapes built from a config (random weights: the table depends on shapes, not values)
SHAPES = {
    "small": dict(vocab_size=32000, hidden_size=512, intermediate_size=1536, num_hidden_layers=4,
                  num_attention_heads=8, num_key_value_heads=2, tie_word_embeddings=False),
    # Llama-3.2-1B's config.json: 1.24 B parameters
    "llama-3.2-1b": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=64, tie_word_embeddings=True,
                         rope_theta=500000.0),
}


def small_llama(tmp: Path, shape: str = "small") -> dict:
    import tiny_lm
    import transformers as T

    config = T.LlamaConfig(max_position_embeddings=2048, **SHAPES[shape], **tiny_lm.SPECIAL)
    model = T.LlamaForCausalLM(config).eval()
    params = sum(p.numel() for p in model.parameters())
    model_dir = tiny_lm.save(model, tmp / "llama")
    out = tmp / "llama_out"
    args = [sys.executable, "-m", "edgeport", "convert", f"hf:{model_dir}", "--task", "text-generation", "-t", "tpu",
            "-q", "bf16", "--prefill-len", "32", "--cache-len", "512", "--gen-tokens", "4", "--samples", "2",
            "--no-latency", "--no-cache", "--tpu-batch", ",".join(map(str, BATCHES)), "--out", str(out)]
    args += [a for t in TOPOLOGIES for a in ("--tpu-topology", t)]
    start = time.perf_counter()
    result = subprocess.run(args, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - start
    if result.returncode not in (0, 1):
        raise SystemExit(result.stderr[-3000:])
    report = json.loads((out / "report.json").read_text())
    rows = {r["variant"]: r for r in report["targets"]}
    return {"params": params, "wall_s": wall, "rows": rows}


def published_ratio() -> dict:
    """The roofline formula on the published shape (weights sharded over the chips, as a tensor-parallel server
    does; KV cache at the full cache length): estimate / published."""
    from edgeport.targets.tpu.aot import GENERATIONS
    from edgeport.targets.tpu.cost import roofline

    p, gen = PUBLISHED, GENERATIONS[PUBLISHED["chip"]]
    kv = p["batch"] * p["cache"] * p["layers"] * 2 * p["kv_heads"] * p["head_dim"] * 2
    seconds, bound = roofline(2 * p["params"] * p["batch"], 2 * p["params"] + kv,
                              gen.peak_flops * p["chips"], gen.hbm_bytes_per_s * p["chips"])
    estimate = p["batch"] / seconds
    return {**p, "estimate": estimate, "bound": bound, "ratio": estimate / p["tokens_per_s"]}


def print_block(title: str, block: dict) -> None:
    print(f"\n{title} ({block['unit']})")
    print(f"{'hardware':10} {'batch':>5} {'fits':>5} {'bound':>14} {'per s (slice)':>14} {'per s/chip':>11} "
          f"{'prefill/s':>11} {'$/1M':>10} {'GB moved':>9} {'GB compiler':>11} basis")
    for e in block["rows"]:
        if not e.get("ok"):
            print(f"{e['hardware']:10} {e['batch']:>5} compile failed: {e.get('error')}")
            continue
        money = f"{e['usd_per_million']:.4g}" if e.get("usd_per_million") is not None else "–"
        prefill = f"{e['prefill_tokens_per_s']:.4g}" if e.get("prefill_tokens_per_s") else "–"
        print(f"{e['hardware']:10} {e['batch']:>5} {('yes' if e['fits'] else 'NO'):>5} {e['bound']:>14} "
              f"{e['tokens_per_s']:>14.4g} {e['tokens_per_s_per_chip']:>11.4g} {prefill:>11} {money:>10} "
              f"{e.get('bytes_moved', e['bytes_accessed']) / 1e9:>9.3g} {e['bytes_accessed'] / 1e9:>11.3g} "
              f"{e['estimate']}{'  BEST' if e.get('best') else ''}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-llm", action="store_true")
    parser.add_argument("--llm-shape", choices=sorted(SHAPES), default="small")
    parser.add_argument("--cnn", action="append", default=None,
                        help="CNN specs (default tests/models.py:cnn and samples/models/tiny_cnn.py:build); 'none' for none")
    args = parser.parse_args()
    cnns = [c for c in (args.cnn or ["tests/models.py:cnn", "samples/models/tiny_cnn.py:build"]) if c != "none"]
    with tempfile.TemporaryDirectory(prefix="tpu-cost-") as tmp:
        for spec in cnns:
            r = cnn_compile(spec, Path(tmp))
            print(f"\n== {spec}: row convert {r['convert_s']:.1f} s (its 3 compiles {r['row_compile_s']:.1f} s, "
                  f"{r['row_compile_s'] / r['convert_s']:.0%} of it); sweep {BATCHES} x {len(TOPOLOGIES)} topologies: "
                  f"before {r['before_s']:.1f} s, after {r['after_s']:.1f} s, ratio before/after {r['before_s'] / r['after_s']:.2f}x")
            print_block(spec, r["block"])
        if not args.skip_llm:
            r = small_llama(Path(tmp), args.llm_shape)
            row = r["rows"]["bf16"]
            block = row["tpu_cost"]
            print(f"\n== {args.llm_shape} Llama ({r['params'] / 1e6:.0f}M params, cache 512, prefill 32): CLI wall {r['wall_s']:.0f} s, "
                  f"bf16 row convert {row['convert_seconds']:.0f} s, sweep compiles {block['sweep_compile_seconds']:.0f} s")
            print_block("small Llama bf16", block)
    p = published_ratio()
    print(f"\n== published: {p['model']} on {p['chips']}x {p['chip']}, batch {p['batch']}: {p['tokens_per_s']:.0f} tokens/s "
          f"({p['source']}); roofline estimate {p['estimate']:.0f} tokens/s ({p['bound']}-bound): estimate/published "
          f"{p['ratio']:.2f}x")


if __name__ == "__main__":
    main()
