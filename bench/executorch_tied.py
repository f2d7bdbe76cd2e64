"""ExecuTorch fp32 text generation of a tied-head model: the table twice in the ``.pte`` (before) against once in
a ``.ptd`` beside it (after, :mod:`edgeport.targets.executorch.tied`), in the same run: artifact bytes (every
file), decode ms/token and tokens/s, token agreement. "before" is today's code with the tagging switched off.

    python bench/executorch_tied.py DIR --out OUT [--cache-len 256 --prefill-len 32 --gen-tokens 8 --samples 2 --threads 2]

DIR: a tied Hugging Face model (``python bench/large_generation.py build qwen3-vocab DIR``; qwen3-small and
larger need the memory lock). Each mode is one
``edgeport convert hf:DIR --task text-generation -t executorch --no-cache --no-localize`` in its own process
under the memory lock (``--no-lock``: not), before then after (``--rounds`` times). The decode number
compared is then measured in one process holding both artifacts, calling their ``decode`` in turn (``--calls``
each, threads as given): runs in separate processes on this shared 2-core machine differed by 3-5x from one
process to the next (load from other processes); in turn, both see the same load. The rows' own decode
ms/token are recorded too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

LOCK = "/tmp/bigmem.lock"


def convert(mode: str, argv: list[str]) -> None:
    """``edgeport convert argv`` in this process; ``before``: no tied table tagged (the old single ``.pte``)."""
    if mode == "before":
        from edgeport.targets.executorch import tied

        tied.tied_placeholders = lambda programs: set()
        tied._gathered_and_shared = lambda node: False
    from edgeport.cli import main

    sys.argv = ["edgeport", *argv]
    main()


def interleaved_decode(paths: dict, threads: int, calls: int) -> dict:
    """Decode ms per call of each artifact (``paths``: mode -> .pte), both loaded in one process and called in
    turn (before, after, before, ...), so that load from other processes falls on both alike: p50 and p90."""
    import time

    import numpy as np

    from edgeport.targets.executorch.generate import load

    runners = {mode: load(Path(p), threads) for mode, p in paths.items()}
    feeds = {}
    for mode, runner in runners.items():
        io = runner.io()["decode"]
        feeds[mode] = {i["name"]: np.zeros(i["shape"], i["dtype"]) for i in io["inputs"]}
        runner.run("decode", feeds[mode])   # XNNPACK packs the weights at the first call
    times = {mode: [] for mode in runners}
    for _ in range(calls):
        for mode, runner in runners.items():
            start = time.perf_counter()
            runner.run("decode", feeds[mode])
            times[mode].append(1000 * (time.perf_counter() - start))
    return {mode: {"p50_ms": float(np.median(t)), "p90_ms": float(np.percentile(t, 90)), "calls": calls}
            for mode, t in times.items()}


def row_facts(out: Path) -> dict:
    report = json.loads((out / "report.json").read_text())
    row = next(r for r in report["targets"] if r["target"] == "executorch" and r["variant"] == "fp32")
    gen = row.get("generation") or {}
    files = {f["path"]: f["size_bytes"] for f in row.get("files") or []}
    return {"status": row["status"], "files": files,
            "artifact_bytes": sum(n for p, n in files.items() if p.startswith("executorch/")),
            "decode_ms_per_token": gen.get("decode_ms_per_token"), "tokens_per_s": gen.get("tokens_per_s"),
            "prefill_ms": gen.get("prefill_ms"), "token_agreement": gen.get("token_agreement"),
            "convert_seconds": row.get("convert_seconds")}


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "_convert":
        return convert(sys.argv[2], sys.argv[3:])
    if len(sys.argv) > 2 and sys.argv[1] == "_time":
        return print(json.dumps(interleaved_decode(json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))))
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--out", required=True)
    parser.add_argument("--cache-len", type=int, default=256)
    parser.add_argument("--prefill-len", type=int, default=32)
    parser.add_argument("--gen-tokens", type=int, default=8)
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--calls", type=int, default=100, help="decode calls per artifact in the interleaved timing")
    parser.add_argument("--no-lock", action="store_true", help="a model well under 2 GB: no need to wait on the memory lock")
    args = parser.parse_args()
    results = {"before": [], "after": []}
    for i in range(args.rounds):
        for mode in results:
            out = Path(args.out) / f"{mode}-{i}"
            argv = ["convert", f"hf:{args.model}", "--task", "text-generation", "-t", "executorch", "--out", str(out),
                    "--force", "--no-cache", "--no-localize", "--cache-len", str(args.cache_len),
                    "--prefill-len", str(args.prefill_len), "--gen-tokens", str(args.gen_tokens),
                    "--samples", str(args.samples), "--threads", str(args.threads)]
            lock = [] if args.no_lock else ["flock", LOCK]
            done = subprocess.run([*lock, sys.executable, __file__, "_convert", mode, *argv], capture_output=True, text=True)
            facts = {"exit": done.returncode, **(row_facts(out) if (out / "report.json").exists() else {})}
            results[mode].append(facts)
            print(mode, i, json.dumps(facts), flush=True)
    paths = {mode: str(Path(args.out) / f"{mode}-0" / "executorch" / "generate_fp32.pte") for mode in results}
    lock = [] if args.no_lock else ["flock", LOCK]
    timed = subprocess.run([*lock, sys.executable, __file__, "_time", json.dumps(paths), str(args.threads), str(args.calls)],
                           capture_output=True, text=True)
    decode = json.loads(timed.stdout.strip().splitlines()[-1])
    summary = {mode: {"artifact_bytes": runs[0].get("artifact_bytes"), "decode_p50_ms": decode[mode]["p50_ms"],
                      "decode_p90_ms": decode[mode]["p90_ms"],
                      "row_decode_ms_per_token": statistics.median(r["decode_ms_per_token"] for r in runs)}
               for mode, runs in results.items()}
    b, a = summary["before"], summary["after"]
    summary["ratio_after_over_before"] = {k: round(a[k] / b[k], 4) for k in b}
    (Path(args.out) / "executorch_tied.json").write_text(json.dumps({"runs": results, "summary": summary}, indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
