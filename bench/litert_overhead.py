"""Issue 2 numbers: edgeport's own cost, measured against baselines in the same run.

1. `edgeport convert --target litert` wall time, minus its parity/latency phase (reported separately), vs a bare
   `litert_torch.convert(...)` + `.export()` of the same model in a fresh process (goal <= 1.10x).
2. `edgeport --help` start-up vs `python -c pass` (goal <= 0.3 s: nothing heavy imported at start-up).
3. LiteRT latency vs PyTorch eager on the bundled example models (from edgeport's own report).

Run: python bench/litert_overhead.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODELS = ["samples/models/tiny_cnn.py:build", "samples/models/text_encoder.py:build"]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "LITERT_TORCH_SHOW_PROGRESS": "n"}

RAW = """
import importlib.util, sys
import litert_torch
path, attr, out = sys.argv[1], sys.argv[2], sys.argv[3]
spec = importlib.util.spec_from_file_location("m", path); mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
module, args = getattr(mod, attr)()
litert_torch.convert(module.eval(), args).export(out)
"""


def wall(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=ENV, cwd=REPO, check=True, capture_output=True)
    return time.perf_counter() - start


def raw_convert(spec: str, tmp: Path) -> float:
    path, attr = spec.rsplit(":", 1)
    return wall([sys.executable, "-c", RAW, path, attr, str(tmp / "raw.tflite")])


def edgeport_convert(spec: str, tmp: Path) -> tuple[float, dict]:
    out = tmp / "ep"
    total = wall([sys.executable, "-m", "edgeport", "convert", spec, "-t", "litert", "--out", str(out), "--force"])
    report = json.loads((out / "report.json").read_text())
    validation = report["timings_s"].get("reference", 0) + sum(r.get("check_seconds") or 0 for r in report["targets"])
    return total - validation, report


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("## convert overhead (median of %d, fresh process each; edgeport minus its parity/latency phase)" % args.repeats)
    print("| model | raw litert_torch s | edgeport convert s | ratio | LiteRT p50 ms | eager p50 ms | eager/LiteRT |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp_text:
        tmp = Path(tmp_text)
        for spec in MODELS:
            raws, eps, report = [], [], None
            for _ in range(args.repeats):  # interleaved so machine noise hits both alike
                raws.append(raw_convert(spec, tmp))
                seconds, report = edgeport_convert(spec, tmp)
                eps.append(seconds)
            raw, ep = statistics.median(raws), statistics.median(eps)
            lite, eager = report["targets"][0]["latency_ms"]["p50"], report["reference"]["latency_ms"]["p50"]
            print(f"| {spec} | {raw:.2f} | {ep:.2f} | {ep / raw:.2f}x | {lite:.3f} | {eager:.3f} | {eager / lite:.2f}x |")
    base = [wall([sys.executable, "-c", "pass"]) for _ in range(10)]
    helps = [wall([sys.executable, "-m", "edgeport", "--help"]) for _ in range(10)]
    b, h = statistics.median(base), statistics.median(helps)
    print(f"\n## start-up\n`python -c pass` {b:.3f} s; `edgeport --help` {h:.3f} s; ratio {h / b:.1f}x; edgeport's own cost {h - b:.3f} s (goal <= 0.3 s)")


if __name__ == "__main__":
    main()
