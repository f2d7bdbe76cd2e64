"""Do quantized variants pay off? Size and p50 of every quantized row against its own fp32 row (same target,
same run, same threads) and against PyTorch eager, parity, and the share of weights / FLOPs the artifact
really quantizes (issue 20). Writes bench/QUANT_PAYOFF.md.

    python bench/quant_payoff.py [--models pitch_cnn,speaker_lstm,transformer] [--repeats 3] [--threads 1]

Per model (bench/payoff_models.py: trained a few hundred steps on synthetic data, weights cached in
bench/results/payoff/): one ``edgeport convert -t litert -t onnx -q dynamic-int8 -q int8`` with calibration
and parity data drawn from the training distribution, then ``--repeats - 1`` ``edgeport validate`` runs of
the same directory (judged again: fresh latency, no conversion). The machine is shared, so each ratio is the
median over the repeats of the ratio measured within one run — never a ratio of numbers from two runs.
TPU has no int8 variant (fp32/bf16 only), so it is left out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results" / "payoff"
MODELS = ("pitch_cnn", "speaker_lstm", "transformer")
INPUT = {"pitch_cnn": "audio", "speaker_lstm": "mels", "transformer": "frames"}
VARIANTS = ("dynamic-int8", "int8")


def data_files(model: str) -> tuple[Path, Path]:
    sys.path.insert(0, str(HERE))
    import payoff_models

    calib, val = RESULTS / f"{model}_calib.npz", RESULTS / f"{model}_val.npz"
    RESULTS.mkdir(parents=True, exist_ok=True)
    np.savez(calib, **{INPUT[model]: payoff_models.inputs(model, 32, 11).numpy()})
    np.savez(val, **{INPUT[model]: payoff_models.inputs(model, 8, 12).numpy()})
    return calib, val


def edgeport(*args: str) -> tuple[dict, float]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "edgeport", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": f"{ROOT}:{HERE}"})
    if done.returncode not in (0, 1):
        raise SystemExit(f"edgeport {args[0]} exited {done.returncode}: {done.stderr[-3000:]}")
    out = Path(args[args.index("--out") + 1] if "--out" in args else args[1])
    return json.loads((out / "report.json").read_text()), time.perf_counter() - start


def eager_p50(model: str, threads: int) -> float:
    """PyTorch eager p50 of the model, measured here (edgeport's own reference timing read 38 ms for a model
    this loop times at 1.2 ms on the shared machine; see QUANT_PAYOFF.md)."""
    import torch

    import payoff_models

    torch.set_num_threads(threads)
    module, args = getattr(payoff_models, f"build_{model}")()
    with torch.no_grad():
        for _ in range(3):
            module(*args)
        times = []
        for _ in range(30):
            start = time.perf_counter()
            module(*args)
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def runs_of(model: str, repeats: int, threads: int) -> list[dict]:
    calib, val = data_files(model)
    out = RESULTS / model
    report, wall = edgeport("convert", f"{HERE / 'payoff_models.py'}:build_{model}", "-t", "litert", "-t", "onnx",
                            *[a for v in VARIANTS for a in ("-q", v)], "--calibration-data", str(calib), "--data",
                            str(val), "--threads", str(threads), "--jobs", "1", "--force", "--out", str(out))
    print(f"{model}: converted in {wall:.0f} s", flush=True)
    reports = [report]
    report["bench_eager_p50"] = eager_p50(model, threads)
    for _ in range(repeats - 1):
        reports.append(edgeport("validate", str(out), "--threads", str(threads), "--data", str(val))[0])
        reports[-1]["bench_eager_p50"] = eager_p50(model, threads)
    return reports


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def lines_of(model: str, reports: list[dict]) -> list[dict]:
    lines = []
    for i, row in enumerate(reports[0]["targets"]):
        rows = [r["targets"][i] for r in reports]
        eager = [r["bench_eager_p50"] for r in reports]
        p50 = [(x.get("latency_ms") or {}).get("p50") for x in rows]
        q = rows[-1].get("quantization") or {}
        lines.append({"model": model, "target": row["target"], "variant": row["variant"], "status": rows[-1]["status"],
                      "size_bytes": row.get("size_bytes"), "p50_ms": median(p50),
                      "size_ratio": q.get("size_ratio"),
                      "latency_ratio": median([(x.get("quantization") or {}).get("latency_ratio") for x in rows]),
                      "vs_eager": median([p / e if p and e else None for p, e in zip(p50, eager)]),
                      "cosine_min": (rows[-1].get("parity") or {}).get("cosine_min"),
                      "snr_db_min": (rows[-1].get("parity") or {}).get("snr_db_min"),
                      "weight_share": q.get("weight_share"), "flops_share": q.get("flops_share"),
                      "flags": q.get("flags") or [], "causes": q.get("causes") or [],
                      "float_layers": [f["name"] for f in q.get("float_layers") or []],
                      "on_purpose": q.get("float_on_purpose") or [],
                      "eager_p50_ms": median(eager), "p50_runs": p50})
    return lines


def fmt(value, spec=".2f"):
    return "–" if value is None else format(value, spec)


def table(lines: list[dict]) -> list[str]:
    out = ["| model | target | variant | status | size KiB | size ×fp32 | p50 ms | p50 ×fp32 | p50 ×eager | cosine min "
           "| SNR dB | weights int | FLOPs int |", "|" + "---|" * 13]
    for x in lines:
        out.append(f"| {x['model']} | {x['target']} | {x['variant']} | {x['status']} | {fmt((x['size_bytes'] or 0) / 1024, '.0f')} "
                   f"| {fmt(x['size_ratio'])} | {fmt(x['p50_ms'], '.3f')} | {fmt(x['latency_ratio'])} | {fmt(x['vs_eager'])} "
                   f"| {fmt(x['cosine_min'], '.4f')} | {fmt(x['snr_db_min'], '.1f')} | {fmt(x['weight_share'], '.0%')} "
                   f"| {fmt(x['flops_share'], '.0%')} |")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--render", action="store_true", help="only render bench/results/payoff/payoff.json again")
    args = parser.parse_args()
    lines = json.loads((RESULTS / "payoff.json").read_text()) if args.render else []
    for model in [] if args.render else args.models.split(","):
        lines += lines_of(model, runs_of(model, args.repeats, args.threads))
        (RESULTS / "payoff.json").write_text(json.dumps(lines, indent=1))
    text = "\n".join(table(lines) + [""] + findings(lines))
    print(text)
    (RESULTS / "QUANT_PAYOFF.generated.md").write_text(text + "\n")
    return 0


def findings(lines: list[dict]) -> list[str]:
    """What each row's report said: flags (does not pay off, with causes), float ops, layers kept float on purpose."""
    out = []
    for x in lines:
        label = f"{x['model']} {x['target']} {x['variant']}"
        out += [f"- **{label}**: {flag}" for flag in x["flags"]]
        if x["variant"] != "fp32" and not x["flags"] and x["causes"]:
            out.append(f"- {label} (pays off; still float): {'; '.join(x['causes'])}")
        out += [f"- {label}: kept float on purpose: {f['name']} ({f['reason']})" for f in x.get("on_purpose") or []]
    return out


if __name__ == "__main__":
    sys.exit(main())
