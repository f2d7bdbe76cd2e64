"""Issue 6 number: `--threads auto` picks a runner within 5% of the best an exhaustive sweep finds.

For each bundled example model: `edgeport convert -t litert -t onnx --threads auto` records its pick (a short
sweep). Then, in this same run, every (runner, threads) the target offers is measured properly (several
interleaved rounds, the median of each candidate's p50s) and the pick's p50 is compared with the best one.
Ratio = pick p50 / best p50 (1.00 = auto found the best; goal <= 1.05).

Run: python bench/threads_auto.py [--rounds 3] [--seconds 1.0]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
MODELS = ["samples/models/tiny_cnn.py:build", "samples/models/text_encoder.py:build"]
TARGETS = ["litert", "onnx"]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "LITERT_TORCH_SHOW_PROGRESS": "n"}


def example_inputs(spec: str) -> list:
    path, attr = spec.rsplit(":", 1)
    module_spec = importlib.util.spec_from_file_location("bench_model", REPO / path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    _, args = getattr(module, attr)()
    return [a.numpy() for a in args]


def exhaustive(target, artifact: Path, sample: list, rounds: int, seconds: float) -> dict[str, float]:
    """Median over interleaved rounds of each candidate's p50 (interleaving spreads machine noise evenly)."""
    from edgeport.validate.autotune import max_threads
    from edgeport.validate.latency import measure

    configs = target.runner_configs(max_threads())
    runners = {c.label: target.load_config(artifact, c) for c in configs}
    p50s: dict[str, list[float]] = {label: [] for label in runners}
    for _ in range(rounds):
        for label, runner in runners.items():
            p50s[label].append(measure(lambda: runner.run(sample), runner.threads, budget_seconds=seconds)["p50"])
    return {label: statistics.median(values) for label, values in p50s.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    from edgeport.targets.registry import get_target

    print(f"cores: {os.cpu_count()}")
    print(f"{'model':<38} {'target':<7} {'auto pick':<18} {'best (exhaustive)':<18} {'pick p50':>9} {'best p50':>9} {'ratio':>6}")
    worst = 1.0
    for spec in MODELS:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "out"
            targets = [a for t in TARGETS for a in ("-t", t)]
            subprocess.run([sys.executable, "-m", "edgeport", "convert", spec, *targets, "--threads", "auto",
                            "--out", str(out)], env=ENV, cwd=REPO, check=True, capture_output=True)
            report = json.loads((out / "report.json").read_text())
            sample = example_inputs(spec)
            for row in report["targets"]:
                choice = row["runner_choice"]
                pick = f"{choice['runner']}/{choice['threads']}"
                sweep = exhaustive(get_target(row["target"]), out / row["artifact"], sample, args.rounds, args.seconds)
                best = min(sweep, key=sweep.get)
                ratio = sweep[pick] / sweep[best]
                worst = max(worst, ratio)
                print(f"{spec:<38} {row['target']:<7} {pick:<18} {best:<18} {sweep[pick]:>9.4f} {sweep[best]:>9.4f} {ratio:>6.3f}")
                print(f"{'':<38} {'':<7} exhaustive p50s (ms): " + ", ".join(f"{k} {v:.4f}" for k, v in sweep.items()))
    print(f"worst pick/best ratio: {worst:.3f} (goal <= 1.05) -> {'OK' if worst <= 1.05 else 'OVER'}")


if __name__ == "__main__":
    main()
