"""Issue 3 numbers, measured through edgeport's own TPU target code in one process:

1. torchax lowering + jax.export seconds per model (torch.export seconds beside it as the baseline);
2. libtpu AOT compile seconds per topology (the first compile of the run includes loading libtpu);
3. XLA-CPU latency of the serialized artifact vs PyTorch eager on the same input, same thread count (ratio);
4. estimated TPU latency per generation: edgeport's roofline and the compiler's own estimate (ESTIMATES: no
   TPU here; per device, per call, batch as exported).

Run: python bench/tpu.py [--topology v5e:1x1 ...] [--threads 1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MODELS = ["samples/models/tiny_cnn.py:build", "samples/models/text_encoder.py:build", "tests/models.py:cnn",
          "tests/models.py:transformer", "tests/models.py:two_io", "tests/models.py:matmul"]
TOPOLOGIES = ["v5e:1x1", "v5e:2x2", "v6e:1x1", "v4:2x2x1", "v5p:2x2x1", "tpu7x:2x2x1"]


def bench_model(spec: str, topologies: list[str], threads: int, tmp: Path) -> dict:
    from edgeport.core.program import export_program, signature_of
    from edgeport.targets.base import ConvertJob
    from edgeport.targets.tpu.target import TARGET
    from edgeport.sources import SourceOptions, load_model
    from edgeport.targets.tpu.runtime import JaxXlaRunner
    from edgeport.core.eager import EagerRunner, flatten_inputs, to_numpy
    from edgeport.validate.latency import measure

    loaded = load_model(SourceOptions(model=str(REPO / spec) if ".py:" in spec else spec))
    start = time.perf_counter()
    program = export_program(loaded.module, loaded.example_inputs)
    export_seconds = time.perf_counter() - start
    example = flatten_inputs(loaded.example_inputs)
    signature = signature_of(program, loaded.input_names)
    out_dir = tmp / spec.replace("/", "_").replace(":", "_") / "tpu"
    out_dir.mkdir(parents=True)
    job = ConvertJob(program, example, signature, "fp32", out_dir, {"tpu_topology": topologies})
    converted = TARGET.convert(job)
    sample = [to_numpy(x) for x in example]
    xla = JaxXlaRunner(converted.artifact.parent, threads)
    eager = EagerRunner(loaded.module, [i.dtype for i in signature.inputs], threads)
    latency = {}
    for _ in range(2):  # alternate so machine noise hits both alike; keep the second round
        latency = {"xla": measure(lambda: xla.run(sample), threads)["p50"],
                   "eager": measure(lambda: eager.run(sample), threads)["p50"]}
    return {"spec": spec, "export_s": export_seconds, "lower_export_s": converted.details["lower_export_seconds"],
            "compiles": converted.details["tpu_compile"], **latency}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--topology", action="append", default=None)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    topologies = args.topology or TOPOLOGIES
    with tempfile.TemporaryDirectory() as tmp_text:
        results = [bench_model(spec, topologies, args.threads, Path(tmp_text)) for spec in MODELS]
    print("## lowering and XLA-CPU latency (threads=%d)" % args.threads)
    print("| model | torch.export s | torchax lower + jax.export s | XLA-CPU p50 ms | eager p50 ms | XLA-CPU / eager |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['spec']} | {r['export_s']:.2f} | {r['lower_export_s']:.2f} | {r['xla']:.3f} | {r['eager']:.3f} "
              f"| {r['xla'] / r['eager']:.2f}x |")
    print("\n## libtpu AOT compile per topology: compile s; ESTIMATED TPU latency (roofline µs / compiler µs)")
    print("| model | " + " | ".join(topologies) + " |")
    print("|---|" + "---|" * len(topologies))
    for r in results:
        cells = []
        for c in r["compiles"]:
            if not c["ok"]:
                cells.append(f"failed: {c['error'][:60]}")
                continue
            compiler = c.get("compiler_est_seconds")
            cells.append(f"{c['compile_seconds']:.2f} s; {c['est_seconds'] * 1e6:.2f} / "
                         f"{compiler * 1e6 if compiler else float('nan'):.2f} µs ({c['sharding']}, "
                         f"{c['peak_bytes'] / 1024:.0f} KiB)")
        print(f"| {r['spec']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
