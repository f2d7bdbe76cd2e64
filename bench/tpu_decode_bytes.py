"""Issue 35: where libtpu's "bytes accessed" for a decode step goes, on a small shape of the real width.

Builds Llama-3.2-1B's width (hidden 2048, 32 heads / 8 kv heads, head_dim 64, intermediate 8192) with few
layers and a small vocabulary (random weights, nothing downloads), exports it through edgeport (the TPU
target's rewrites, the bf16 lowering), lowers decode at each batch as the sweep does (``jax.vmap``) and
compiles it for v5e:1x1 in this process. Prints per batch: the cost analysis' bytes accessed and how much of
it is writes, the memory analysis' sizes (arguments, outputs, aliased, temporaries), the bytes a step moves
(:func:`edgeport.targets.tpu.cost.traffic_bytes`) against weights + batch x KV cache from the shapes, and
the compiled program's largest ops by operand + result bytes (``--top``), each marked when its result lives
on-chip (memory space S(n) in the HLO layout: VMEM staging).

Run: python bench/tpu_decode_bytes.py [--layers 1] [--vocab 4096] [--batches 1,8,32] [--cache-len 512]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tpu_cost import SHAPES  # noqa: E402  (sets sys.path for edgeport and tests/)

import tiny_lm  # noqa: E402

ITEMSIZE = {"bf16": 2, "f32": 4, "s32": 4, "u32": 4, "pred": 1, "f16": 2, "s8": 1, "u8": 1}
ARRAY = re.compile(r"\b(bf16|f32|s32|u32|pred|f16|s8|u8)\[([0-9,]*)\](\{[^}]*\})?")
OP = re.compile(r"^(?:ROOT )?%(\S+) = (\(.*?\)|\S+) ([a-z\-]+)\((.*?)\)")
FREE = ("parameter", "constant", "bitcast", "get-tuple-element", "tuple", "copy-done", "slice-done")


def decode_program(layers: int, vocab: int, cache: int, tmp: Path):
    """(lowered decode, its input names) of the 1B-width model, as the TPU target's bf16 row lowers it."""
    import transformers as T

    from edgeport.pipeline.tasks.text_generation.export import export_generation
    from edgeport.pipeline.tasks.text_generation.plan import GenerationPlan
    from edgeport.pipeline.tasks.text_generation.rows import rewritten_programs
    from edgeport.sources.spec import SourceOptions
    from edgeport.targets.tpu.generate import cache_inputs
    from edgeport.targets.tpu.lowering import lower_program
    from edgeport.targets.tpu.target import TARGET

    shape = {**SHAPES["llama-3.2-1b"], "num_hidden_layers": layers, "vocab_size": vocab}
    model = T.LlamaForCausalLM(T.LlamaConfig(max_position_embeddings=2048, **shape, **tiny_lm.SPECIAL)).eval()
    model_dir = tiny_lm.save(model, tmp / "model")
    exported = export_generation(SourceOptions(model=f"hf:{model_dir}"), GenerationPlan((32,), cache, 4, "llama", [], []),
                                 tmp / "export")
    programs, applied, _notes = rewritten_programs(TARGET, exported.programs, exported.samples)
    sample = exported.samples["decode"]
    lowered = lower_program(programs["decode"], "bf16", list(sample), tuple(sample.values()), {}, cache_inputs(sample))
    return lowered, list(sample), applied


def hlo_ops(text: str) -> list[tuple[int, str, str, bool]]:
    """(operand + result bytes, opcode, result type, result on-chip) per op of the compiled entry computation."""
    body = text[text.index("\nENTRY"):]
    body = body[:body.index("\n}")]
    shapes, ops = {}, []
    for line in body.splitlines()[1:]:
        match = OP.match(line.strip())
        if not match:
            continue
        name, typ, opcode, args = match.groups()
        shapes[name] = typ
        if opcode not in FREE:
            counted = _bytes(typ) + sum(_bytes(shapes.get(a, "")) for a in re.findall(r"%([\w.\-]+)", args))
            ops.append((counted, opcode, typ, bool(re.search(r"S\(\d+\)", typ))))
    return ops


def _bytes(typ: str) -> int:
    total = 0
    for kind, dims, _layout in ARRAY.findall(typ):
        count = 1
        for d in filter(None, dims.split(",")):
            count *= int(d)
        total += count * ITEMSIZE[kind]
    return total


def main() -> None:
    from edgeport.targets._jax import libtpu_compile_env, prefer_cpu_backend

    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--cache-len", type=int, default=512)
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--top", type=int, default=8)
    args = parser.parse_args()
    prefer_cpu_backend()
    libtpu_compile_env()
    import jax

    with tempfile.TemporaryDirectory(prefix="tpu-bytes-") as tmp, jax.enable_x64(False):
        lowered, names, applied = decode_program(args.layers, args.vocab, args.cache_len, Path(tmp))
        report(lowered, names, applied, [int(b) for b in args.batches.split(",")], args.top)


def report(lowered, names: list[str], applied: list[str], batches: list[int], top: int) -> None:
    from edgeport.targets.tpu.aot import parse_topology
    from edgeport.targets.tpu.aot_child import _compile
    from edgeport.targets.tpu.cost import traffic_bytes
    from edgeport.targets.tpu.generate import cache_inputs
    from edgeport.targets.tpu.sweep import batched_export
    from edgeport.targets.tpu.target import _weight_avals

    weights = _weight_avals(lowered.weights)
    weight_bytes = sum(a.size * a.dtype.itemsize for a in weights.values())
    caches = cache_inputs(dict.fromkeys(names))
    kv = sum(a.size * a.dtype.itemsize for n, a in zip(names, lowered.compile_avals) if n in caches and a.ndim == 4)
    donate = tuple(i for i, n in enumerate(names) if n in caches)
    print(f"rewrites {applied}; weights {weight_bytes / 1e6:.1f} MB, KV cache {kv / 1e6:.3f} MB per sequence "
          f"({', '.join(sorted({str(a.dtype) for n, a in zip(names, lowered.compile_avals) if n in caches}))})")
    for batch in batches:
        serialized, avals = batched_export(lowered.fn, weights, lowered.compile_avals, batch, "default")
        compiled, _sharding, _devices = _compile(parse_topology("v5e:1x1"), serialized, avals, donate)
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        memory = compiled.memory_analysis()
        row = {"argument_bytes": memory.argument_size_in_bytes, "output_bytes": memory.output_size_in_bytes,
               "alias_bytes": memory.alias_size_in_bytes, "temp_bytes": memory.temp_size_in_bytes,
               "bytes_accessed": cost["bytes accessed"]}
        moved, _basis = traffic_bytes(row)
        mb = {k: f"{v / 1e6:.2f}" for k, v in row.items()}
        print(f"\nbatch {batch}: bytes accessed {cost['bytes accessed'] / 1e6:.1f} MB (writes {cost.get('bytes accessedout{}', 0) / 1e6:.1f}), "
              f"flops {cost['flops']:.4g}; memory analysis MB {mb}; bytes moved {moved / 1e6:.1f} MB; weights + batch x KV "
              f"{(weight_bytes + batch * kv) / 1e6:.1f} MB; accessed / moved {cost['bytes accessed'] / moved:.2f}x")
        for counted, opcode, typ, on_chip in sorted(hlo_ops(compiled.as_text()), reverse=True)[:top]:
            print(f"  {counted / 1e6:9.2f} MB  {opcode:12} {'on-chip' if on_chip else 'HBM    '}  {typ[:90]}")


if __name__ == "__main__":
    main()
