"""Full int8 vs ``--fallback float`` on realistic models, LiteRT int8 and ONNX int8, every number from one run.

    python bench/fallback.py [--models text_encoder,mobilenet_v2,resnet50] [--calibration 16] [--samples 8]

Per model, two ``edgeport convert -t litert -t onnx -q int8 --fallback float`` runs (fresh processes):
  * ``default``: the default int8 budget (cosine >= 0.95, SNR >= 10 dB). A row that passes full int8 keeps no
    layer float: fallback = full int8 and the search costs nothing;
  * ``strict``: each target's int8 SNR budget set 2 dB above what its full int8 reached in the default run
    (and ``--fallback-max 50%``), so the search must run: how many layers it keeps float, what that buys and
    costs, and how long it takes — or how far it got.
Within a run the row records full int8 first (``quantization.search[0]``: its parity; size and p50 through
``size_vs_full_quantized`` / ``latency_vs_full_quantized``) and then the artifact the search ended with, so the two
columns of a line were measured side by side. Random inputs (calibration and parity), random weights (zoo.py):
the numbers say what the search does and costs, not what int8 does to a trained model's accuracy.
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

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHAPES = {"text_encoder": ((1, 16), "ids"), "mobilenet_v2": ((1, 3, 224, 224), "image"),
          "resnet50": ((1, 3, 224, 224), "image")}
TARGETS = ("litert", "onnx")


def calibration_file(model: str, count: int, where: Path) -> Path:
    shape, kind = SHAPES[model]
    rng = np.random.default_rng(7)
    data = rng.integers(0, 200, (count, *shape)) if kind == "ids" else rng.standard_normal((count, *shape)).astype(np.float32)
    path = where / f"{model}_calib.npz"
    np.savez(path, arr_0=data)
    return path


def convert(model: str, out: Path, calib: Path, samples: int, extra: list[str]) -> tuple[dict, float]:
    args = [sys.executable, "-m", "edgeport", "convert", f"{HERE / 'zoo.py'}:{model}", "-q", "int8", "--fallback",
            "float", "--calibration-data", str(calib), "--samples", str(samples), "--out", str(out), "--force"]
    args += [a for t in TARGETS for a in ("-t", t)] + extra
    start = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"{model}: edgeport exited {done.returncode}: {done.stderr[-2000:]}")
    return json.loads((out / "report.json").read_text()), wall


def lines_of(model: str, budget: str, report: dict) -> list[dict]:
    out = []
    for row in report["targets"]:
        if row["variant"] != "int8":
            continue
        q = row.get("quantization") or {}
        full = (q.get("search") or [{}])[0]
        p50 = (row.get("latency_ms") or {}).get("p50")
        size_ratio, latency_ratio = q.get("size_vs_full_quantized") or 1.0, q.get("latency_vs_full_quantized") or 1.0
        out.append({
            "model": model, "target": row["target"], "budget": budget, "status": row["status"],
            "threshold_db": (row.get("parity") or {}).get("budget", {}).get("snr_db_min"),
            "full_cos": full.get("cosine_min"), "full_snr": full.get("snr_db_min"),
            "full_size": row["size_bytes"] / size_ratio if row.get("size_bytes") else None,
            "full_p50": p50 / latency_ratio if p50 else None,
            "float": len(q.get("float_layers") or []), "layers": q.get("layers"),
            "cos": (row.get("parity") or {}).get("cosine_min"), "snr": (row.get("parity") or {}).get("snr_db_min"),
            "size": row.get("size_bytes"), "p50": p50,
            "search_s": q.get("seconds", 0.0), "float_names": [f["name"] for f in q.get("float_layers") or []],
        })
    return out


def strict_flags(lines: list[dict]) -> list[str]:
    budgets = [f"{line['target']}.int8.snr_db_min={line['full_snr'] + 2:.1f}" for line in lines
               if isinstance(line["full_snr"], (int, float))]
    return [a for b in budgets for a in ("--budget", b)] + ["--fallback-max", "50%"]


def fmt(value, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def table(lines: list[dict]) -> str:
    head = ("| model | target | budget | full int8 cos / SNR dB | size MB | p50 ms | fallback: float layers | "
            "cos / SNR dB | size MB | p50 ms | search s | row |")
    rows = [head, "|" + "---|" * 12]
    for x in lines:
        budget = "default" if x["budget"] == "default" else f"SNR ≥ {x['threshold_db']:.1f} dB"
        rows.append(f"| {x['model']} | {x['target']} | {budget} | {fmt(x['full_cos'], '.5f')} / {fmt(x['full_snr'], '.1f')} | "
                    f"{fmt(x['full_size'] and x['full_size'] / 1e6, '.2f')} | {fmt(x['full_p50'], '.2f')} | "
                    f"{x['float'] if x['layers'] is not None else 'none needed'}"
                    f"{' of ' + str(x['layers']) if x['layers'] is not None else ''} | "
                    f"{fmt(x['cos'], '.5f')} / {fmt(x['snr'], '.1f')} | {fmt(x['size'] and x['size'] / 1e6, '.2f')} | "
                    f"{fmt(x['p50'], '.2f')} | {fmt(x['search_s'], '.1f')} | {x['status']} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="text_encoder,mobilenet_v2,resnet50")
    parser.add_argument("--calibration", type=int, default=16)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--json", type=Path, help="also write every line as JSON here")
    args = parser.parse_args()
    lines: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="edgeport-bench-fallback-") as tmp:
        for model in args.models.split(","):
            calib = calibration_file(model, args.calibration, Path(tmp))
            report, wall = convert(model, Path(tmp) / f"{model}_default", calib, args.samples, [])
            default = lines_of(model, "default", report)
            print(f"{model}: default budget run {wall:.0f} s", flush=True)
            report, wall = convert(model, Path(tmp) / f"{model}_strict", calib, args.samples, strict_flags(default))
            lines += default + lines_of(model, "strict", report)
            print(f"{model}: strict budget run {wall:.0f} s", flush=True)
            print(table(lines), flush=True)
    if args.json:
        args.json.write_text(json.dumps(lines, indent=2) + "\n")


if __name__ == "__main__":
    main()
