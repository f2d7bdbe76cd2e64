"""Time to artifact (issue 36): where a text-generation conversion's wall time goes, and edgeport's ExecuTorch row
against the anchor's own exporter on the same model in the same run.

    python bench/convert_time.py stages OUT...            # a finished run's time per stage (report.json) vs 15 min
    python bench/convert_time.py anchor MODEL_DIR --optimum-site DIR [--qlinear 8da4w] [--cache-len 256]

``stages`` reads each OUT's report.json: load, export, PyTorch reference, then each row's conversion and judge
(``convert_seconds``, ``check_seconds``), their sum and the goal's 900 s. ``anchor`` times, one after the
other in fresh processes, optimum-executorch's ``main_export`` (recipe ``xnnpack``, ``max_seq_len`` = the cache;
with ``--qlinear 8da4w`` its int4 linears) and ``edgeport convert -t executorch`` of the same directory (fp32, or
``-q int4-block32`` beside ``--qlinear``), and prints wall and CPU seconds of each and edgeport's ratio. The
anchor's total is load + export + lowering + write; edgeport's also proves the artifact (PyTorch reference,
parity, quality), so the report's own ``convert_seconds`` of the row is printed beside its total. optimum-executorch
pins an older transformers, so it is installed beside the venv, not into it:
``pip install --no-deps -t DIR optimum-executorch 'optimum~=2.0.0' pytorch-tokenizers``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

GOAL_S = 900  # issue 36: a 1B-class LLM on all four targets, fp32 + one quantized variant each, in 15 minutes
ANCHOR = """
import sys
from optimum.exporters.executorch import main_export
kwargs = {"max_seq_len": int(sys.argv[3])}
if sys.argv[4]:
    kwargs["qlinear"] = sys.argv[4]
main_export(sys.argv[1], "text-generation", "xnnpack", sys.argv[2], **kwargs)
"""


def timed(cmd: list[str], env: dict | None = None) -> dict:
    """Wall and CPU seconds (user + system of the whole child tree) of one command, and its exit code."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "exit": proc.returncode, "tail": proc.stdout[-1500:]}


def anchor(args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [args.optimum_site, os.environ.get("PYTHONPATH")]))}
    theirs = timed([sys.executable, "-c", ANCHOR, args.model, str(out / "optimum"), str(args.cache_len),
                    args.qlinear or ""], env)
    pte = out / "optimum" / "model.pte"
    theirs["pte_bytes"] = pte.stat().st_size if pte.exists() else None
    variant = ["-q", "int4-block32"] if args.qlinear else []
    ours = timed([sys.executable, "-m", "edgeport", "convert", f"hf:{args.model}", "--task", "text-generation",
                  "-t", "executorch", *variant, "--cache-len", str(args.cache_len), "--prefill-len", "32",
                  "--out", str(out / "edgeport"), "--force", "--no-cache", "--no-latency", "--no-localize"])
    report = out / "edgeport" / "report.json"
    rows = json.loads(report.read_text())["targets"] if report.exists() else []
    ours["rows"] = {r["variant"]: {"convert_s": r.get("convert_seconds"), "check_s": r.get("check_seconds"),
                                   "status": r["status"], "bytes": r.get("size_bytes")} for r in rows}
    result = {"model": args.model, "cache_len": args.cache_len, "qlinear": args.qlinear,
              "optimum_executorch": theirs, "edgeport": ours}
    (out / "convert_time.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items()}, indent=1)[:4000])
    print(f"edgeport / optimum-executorch: wall {ours['wall_s'] / theirs['wall_s']:.2f}x, "
          f"cpu {ours['cpu_s'] / theirs['cpu_s']:.2f}x")


def stages(outs: list[Path]) -> None:
    print("| run | load s | export s | reference s | row | convert s | judge s |\n|---|---:|---:|---:|---|---:|---:|")
    for out in outs:
        report = json.loads((out / "report.json").read_text())
        t = report.get("timings_s", {})
        total = sum(t.values())
        head = f"| {out.name} | {t.get('load', 0):.0f} | {t.get('export', 0):.0f} | {t.get('reference', 0):.0f}"
        for row in report["targets"]:
            convert, check = row.get("convert_seconds") or 0, row.get("check_seconds") or 0
            total += convert + check
            print(f"{head} | {row['target']} {row['variant']} ({row['status']}) | {convert:.0f} | {check:.0f} |")
            head = "| | | |"
        print(f"| **sum** | | | | | **{total:.0f} s = {total / GOAL_S:.2f}x the {GOAL_S} s goal** | |")


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("stages")
    s.add_argument("outs", nargs="+", type=Path)
    a = sub.add_parser("anchor")
    a.add_argument("model")
    a.add_argument("--optimum-site", required=True, help="a directory with optimum-executorch installed (see above)")
    a.add_argument("--qlinear", choices=["8da4w"], help="the anchor's int4 linears; edgeport's row is int4-block32")
    a.add_argument("--cache-len", type=int, default=256)
    a.add_argument("--out", default="convert-time")
    args = parser.parse_args()
    stages(args.outs) if args.cmd == "stages" else anchor(args)


if __name__ == "__main__":
    main()
