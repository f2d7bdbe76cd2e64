"""Issue 13's numbers, all in one run on this machine (writes bench/FLEET.md):

    python bench/fleet.py [--rerun-model bench/zoo.py:mobilenet_v2] [--skip rerun,multi,fleet]

1. rerun: a model with TPU compiles converted cold (empty cache) for litert, onnx and tpu, then again
   unchanged (same cache), then again with --reuse-verdict: rerun wall ÷ cold wall (goal ≤ 0.15).
2. multi: bench/multi_target.py's cold 3-target convert ÷ the three raw paths, rows one after another
   (-j 1, edgeport before this change) and in worker processes (-j 2) (goal ≤ 0.5 with workers).
3. fleet: 8 small models x 3 targets as one `edgeport fleet` on a local Ray instance vs `edgeport convert`
   of each model one after another, both cold, same run (goal ≤ 0.7); peak RSS of each whole process tree.

Every timing is a fresh process's wall seconds (imports paid, as a user pays them). Ray must be importable
(`pip install 'edgeport[fleet]'`, or on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from multi_target import table_lines, timed_child  # noqa: E402
from multi_target import run as run_multi  # noqa: E402

TARGETS = ("-t", "litert", "-t", "onnx", "-t", "tpu")
FLEET_MODELS = [
    ("tiny_cnn", "samples/models/tiny_cnn.py:build"), ("text_encoder", "samples/models/text_encoder.py:build"),
    ("cnn", "tests/models.py:cnn"), ("mlp", "tests/models.py:mlp"), ("transformer", "tests/models.py:transformer"),
    ("two_io", "tests/models.py:two_io"), ("matmul", "tests/models.py:matmul"), ("small_cnn", "bench/zoo.py:small_cnn"),
]


def convert(spec: str, out: Path, cache: Path, *flags: str, timeout: float = 1800) -> dict:
    argv = [sys.executable, "-m", "edgeport", "convert", spec, *TARGETS, "--out", str(out), "--force", *flags]
    wall, rc, tail, peak = timed_child(argv, timeout, {"EDGEPORT_CACHE": str(cache)})
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").is_file() else {}
    return {"wall": wall, "rc": rc, "peak_rss": peak, "error": None if rc in (0, 1) else tail,
            "rows": {f"{r['target']} {r['variant']}": (r["status"], r.get("cache")) for r in report.get("targets", [])}}


def rerun(model: str, work: Path) -> dict:
    cache = work / "cache"
    cold = convert(model, work / "cold", cache, "--no-latency")
    warm = convert(model, work / "warm", cache, "--no-latency")
    verdict = convert(model, work / "verdict", cache, "--no-latency", "--reuse-verdict")
    return {"model": model, "cold": cold, "warm": warm, "verdict": verdict,
            "ratio": warm["wall"] / cold["wall"], "verdict_ratio": verdict["wall"] / cold["wall"]}


def fleet_vs_sequential(work: Path) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    (work / "fleet.toml").write_text(fleet_toml())
    sequential = [convert(str(ROOT / spec), work / "seq" / name, work / "seq-cache", "--no-latency", "--samples", "4")
                  for name, spec in FLEET_MODELS]
    argv = [sys.executable, "-m", "edgeport", "fleet", str(work / "fleet.toml"), "--out", str(work / "fleet-out")]
    wall, rc, tail, peak = timed_child(argv, 3600, {"EDGEPORT_CACHE": str(work / "fleet-cache")})
    fleet = json.loads((work / "fleet-out" / "fleet.json").read_text()) if (work / "fleet-out" / "fleet.json").is_file() else {}
    seq_wall = sum(s["wall"] for s in sequential)
    return {"models": len(FLEET_MODELS), "sequential_wall": seq_wall, "sequential_peak_rss": max(s["peak_rss"] for s in sequential),
            "sequential_rows": {n: s["rows"] for (n, _), s in zip(FLEET_MODELS, sequential)},
            "fleet_wall": wall, "fleet_rc": rc, "fleet_error": None if rc in (0, 1) else tail, "fleet_peak_rss": peak,
            "fleet_rows": {m["name"]: {f"{r['target']} {r['variant']}": r["status"] for r in m["rows"]}
                           for m in fleet.get("models", [])},
            "ratio": wall / seq_wall}


def fleet_toml() -> str:
    lines = ['[defaults]', 'targets = ["litert", "onnx", "tpu"]', "samples = 4", "latency = false", ""]
    for name, spec in FLEET_MODELS:
        lines += ["[[model]]", f'name = "{name}"', f'spec = "{ROOT / spec}"', ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rerun-model", default="bench/zoo.py:mobilenet_v2")
    parser.add_argument("--multi-models", default="samples/models/tiny_cnn.py:build,samples/models/text_encoder.py:build,"
                                                  "bench/zoo.py:mobilenet_v2")
    parser.add_argument("--skip", default="")
    ns = parser.parse_args()
    skip, results = set(ns.skip.split(",")), {"started": time.strftime("%Y-%m-%d %H:%M")}
    with tempfile.TemporaryDirectory(prefix="edgeport-fleet-bench-") as tmp:
        results["load"] = {"start": os.getloadavg()[0]}
        if "rerun" not in skip:
            results["rerun"] = rerun(ns.rerun_model, Path(tmp) / "rerun")
            results["load"]["after rerun"] = os.getloadavg()[0]
            print(json.dumps(results["rerun"], default=str), flush=True)
        if "multi" not in skip:
            results["multi"] = run_multi([m for m in ns.multi_models.split(",") if m], [1, 2], 1800)
            results["load"]["after multi"] = os.getloadavg()[0]
        if "fleet" not in skip:
            results["fleet"] = fleet_vs_sequential(Path(tmp) / "fleet")
            results["load"]["after fleet"] = os.getloadavg()[0]
            print(json.dumps(results["fleet"], default=str), flush=True)
    (HERE / "fleet.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    write_md(results)


def loads(results: dict) -> str:
    return ", ".join(f"{k} {v:.1f}" for k, v in (results.get("load") or {}).items()) or "not recorded"


def write_md(results: dict) -> None:
    mib = lambda v: f"{v / 2**20:.0f} MiB"  # noqa: E731
    lines = ["# Cache, worker processes and fleet (issue 13)", "",
             f"Generated by `python bench/fleet.py` ({results['started']}), raw numbers in bench/fleet.json. "
             "2 cores shared with other jobs: absolute seconds are noisy; each ratio compares runs of the same "
             f"bench run. 1-minute load average (this bench included): {loads(results)}.", ""]
    if "rerun" in results:
        r = results["rerun"]
        lines += ["## 1. Rerun of an unchanged model (litert + onnx + tpu, 3 TPU topologies, --no-latency)", "",
                  "| run | wall s | peak RSS | rows (status, cache) |", "|---|---|---|---|"]
        for name in ("cold", "warm", "verdict"):
            lines.append(f"| {name} | {r[name]['wall']:.1f} | {mib(r[name]['peak_rss'])} | {r[name]['rows']} |")
        lines += ["", f"{r['model']}: rerun ÷ cold = **{r['ratio']:.3f}** (goal ≤ 0.15); with --reuse-verdict "
                      f"**{r['verdict_ratio']:.3f}**.", ""]
    if "multi" in results:
        lines += ["## 2. Cold 3-target convert ÷ the three raw paths", ""] + table_lines(results["multi"])[4:] + [""]
    if "fleet" in results:
        f = results["fleet"]
        lines += [f"## 3. Fleet of {f['models']} models x 3 targets: local Ray vs `edgeport convert` per model", "",
                  "| | wall s | peak RSS (whole process tree) |", "|---|---|---|",
                  f"| `edgeport convert` x {f['models']}, one after another | {f['sequential_wall']:.1f} | {mib(f['sequential_peak_rss'])} |",
                  f"| `edgeport fleet` (local Ray) | {f['fleet_wall']:.1f} | {mib(f['fleet_peak_rss'])} |", "",
                  f"fleet ÷ sequential = **{f['ratio']:.2f}** (goal ≤ 0.7). Row statuses: fleet {f['fleet_rows']}; "
                  f"sequential {f['sequential_rows']}.", ""]
    text = "\n".join(lines)
    print(text)
    (HERE / "FLEET.md").write_text(text)


if __name__ == "__main__":
    main()
