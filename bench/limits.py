"""What per-row limits cost, and a stuck row stopped while the others publish (issue 38).

    python bench/limits.py [--rounds 2] [--skip-demo] [--skip-stuck]

1. Isolation cost: ``make demo``'s command (tiny CNN -> LiteRT, TPU, ONNX with -q fp16/int8/bf16, latency on,
   ``--no-cache``), rows in the driver process (``--row-timeout none --row-memory none``: how edgeport ran
   before limits) vs each row in a worker process (the default, limits on), interleaved ``--rounds`` times in
   fresh processes on the same machine. Prints each wall time and the ratio worker / in-process (median).
2. A stuck row: the MLP test model on ONNX fp32 + int8 + dynamic-int8 with the test-only stall hook
   (``EDGEPORT_TEST_STALL``: int8 sleeps, dynamic-int8 allocates without end) and ``--row-timeout 40s
   --row-memory 1.5G``; prints the command and the verdict lines of its log.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMO = ["samples/models/tiny_cnn.py:build", "--target", "litert", "--target", "tpu", "--target", "onnx",
        "--quantize", "fp16", "--quantize", "int8", "--quantize", "bf16", "--force", "--no-cache"]
IN_PROCESS = ["--row-timeout", "none", "--row-memory", "none"]


def convert(args: list[str], env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "edgeport", "convert", *args], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    return time.perf_counter() - start, done


def isolation_cost(rounds: int, scratch: Path) -> None:
    walls = {"in-process": [], "worker": []}
    for round_ in range(rounds):
        for mode, extra in (("in-process", IN_PROCESS), ("worker", [])):
            seconds, done = convert([*DEMO, "--out", str(scratch / mode), *extra])
            walls[mode].append(seconds)
            print(f"round {round_ + 1} {mode:10s} exit {done.returncode} wall {seconds:7.1f} s", flush=True)
    base, isolated = statistics.median(walls["in-process"]), statistics.median(walls["worker"])
    print(f"make demo's command: in-process {base:.1f} s, worker per row {isolated:.1f} s (medians of {rounds}): "
          f"ratio {isolated / base:.2f}x, {(isolated - base) / 7:+.1f} s per converted row (7 rows)")


def stuck_row(scratch: Path) -> None:
    args = ["tests/models.py:mlp", "-t", "onnx", "-q", "int8", "-q", "dynamic-int8", "--no-latency", "--samples", "2",
            "--no-cache", "--row-timeout", "40s", "--row-memory", "1.5G", "--out", str(scratch / "stuck")]
    stall = "onnx/int8=sleep,onnx/dynamic-int8=grow"
    seconds, done = convert(args, {"EDGEPORT_TEST_STALL": stall})
    print(f"\nEDGEPORT_TEST_STALL={stall} edgeport convert {' '.join(args)}")
    for line in done.stdout.splitlines():
        if ": ok" in line or "failed —" in line or line.startswith(("onnx ", "PASSED", "FAILED")):
            print("  " + line)
    print(f"exit {done.returncode}, wall {seconds:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--skip-demo", action="store_true")
    parser.add_argument("--skip-stuck", action="store_true")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="edgeport-limits-") as folder:
        if not options.skip_demo:
            isolation_cost(options.rounds, Path(folder))
        if not options.skip_stuck:
            stuck_row(Path(folder))


if __name__ == "__main__":
    main()
