"""ONNX fp32 text generation over ``ONE_AT_A_TIME_ABOVE``: how the judge's runner holds the sessions, before and
after, on the same artifact in the same run.

- before: the tied head as torch.onnx exports it (``MatMul(x, Transpose(table))``: onnxruntime folds a transposed
  copy of the table into every session) and the runner of then: pre-packed sessions, one signature's at a time
  (each switch drops one and builds the other);
- after: the head as ``Gemm(x, table, transB=1)`` (:func:`edgeport.targets.onnx.tied_head.head_as_gemm`) and
  today's runner: every session live, pre-packing off, the weights read from the file's pages.

    python bench/onnx_sessions.py OUT/onnx/generate_fp32 --exported OUT/exported [--rounds 2 --threads 2]

The artifact is an fp32 ONNX generation artifact edgeport wrote (``large_generation.py run MODEL -t onnx``);
both forms are made beside it in ``--work`` (graphs rewritten, ``weights.data`` hard-linked: no copy). Each
mode runs in its own process what the judge runs on a row: two greedy generations (a 32-token prompt and a
3-token one, 8 new tokens each), the quality pass over ``exported/eval_windows.json`` (teacher-forced: one
prefill, then decode), and latency (prefill x3, decode x10, warm). Printed per mode: wall seconds of each part,
session builds, the process's peak Pss (sampled every 0.2 s), decode and prefill p50, and the largest logit
difference from the other mode.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np


def before_form(src: Path, dst: Path) -> None:
    """``dst``: the graphs with every Gemm(x, E, transB=1) on an initializer back to MatMul(x, Transpose(E))
    (Reshapes around it kept: they are free), as torch.onnx exported them before head_as_gemm."""
    import onnx
    from onnx import helper

    for path in src.glob("*.onnx"):
        model = onnx.load(str(path), load_external_data=False)
        inits = {t.name for t in model.graph.initializer}
        nodes = []
        for node in model.graph.node:
            if node.op_type == "Gemm" and node.input[1] in inits:
                nodes.append(helper.make_node("Transpose", [node.input[1]], [f"{node.name}_t"], perm=[1, 0]))
                node.op_type = "MatMul"
                del node.attribute[:]
                node.input[1] = f"{node.name}_t"
            nodes.append(node)
        del model.graph.node[:]
        model.graph.node.extend(nodes)
        onnx.save(model, str(dst / path.name))


def forms(artifact: Path, work: Path) -> dict[str, Path]:
    from edgeport.targets.onnx.tied_head import head_as_gemm

    out = {}
    for mode in ("before", "after"):
        folder = work / mode
        folder.mkdir(parents=True, exist_ok=True)
        for f in artifact.iterdir():
            if f.suffix != ".onnx" and f.is_file() and not (folder / f.name).exists():
                os.link(f, folder / f.name)
        if mode == "before":
            before_form(artifact, folder)
        else:
            for path in artifact.glob("*.onnx"):
                (folder / path.name).write_bytes(path.read_bytes())
                head_as_gemm(folder / path.name)
        out[mode] = folder
    return out


class PeakPss(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.peak, self.stop = 0, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.2):
            for line in open("/proc/self/smaps_rollup"):
                if line.startswith("Pss:"):
                    self.peak = max(self.peak, int(line.split()[1]) * 1024)


def judge_work(mode: str, folder: Path, exported: Path, threads: int, logits_out: Path) -> dict:
    """One mode, in this process: the judge's generation, quality and latency on ``folder``."""
    from edgeport.pipeline.tasks.text_generation import loop, quality
    from edgeport.pipeline.tasks.text_generation.layout import Layout, prefill_name
    from edgeport.targets.onnx import signatures

    if mode == "before":   # the runner of then: pre-packed, one session at a time over the threshold
        signatures._needs_packing = lambda graphs: True
    layout = Layout.from_json(json.loads((exported / "layout.json").read_text()))
    windows = json.loads((exported / quality.WINDOWS_FILE).read_text())
    builds, original = [0], signatures.OnnxSignatureRunner._build

    def counted(self, name):
        builds[0] += 1
        return original(self, name)

    signatures.OnnxSignatureRunner._build = counted
    peak = PeakPss()
    peak.start()
    parts, start = {}, time.perf_counter()
    runner = signatures.OnnxSignatureRunner(folder, threads)
    parts["load"] = time.perf_counter() - start
    mark = time.perf_counter()
    prompts = [list(range(100, 132)), [100, 101, 102]]
    generated = [loop.greedy(runner, layout, p, 8) for p in prompts]
    parts["generate"] = time.perf_counter() - mark
    mark = time.perf_counter()
    forced = np.concatenate([quality.teacher_forced(runner, layout, w, windows["context"]) for w in windows["windows"]])
    parts["quality"] = time.perf_counter() - mark
    mark = time.perf_counter()
    feeds = loop.timing_feeds(runner, layout, prompts[0])
    timed = {}
    for name, count in ((prefill_name(layout.prefill_lens[0]), 3), ("decode", 10)):
        runner.run(name, feeds[name])
        calls = []
        for _ in range(count):
            t = time.perf_counter()
            runner.run(name, feeds[name])
            calls.append((time.perf_counter() - t) * 1000)
        timed[name] = statistics.median(calls)
    parts["latency"] = time.perf_counter() - mark
    peak.stop.set()
    peak.join()
    np.savez(logits_out, forced=forced, **{f"generated{i}": g.logits for i, g in enumerate(generated)})
    return {"mode": mode, "seconds": {k: round(v, 1) for k, v in parts.items()},
            "total_s": round(time.perf_counter() - start, 1), "session_builds": builds[0],
            "peak_pss_gb": round(peak.peak / 1e9, 2), "p50_ms": {k: round(v, 1) for k, v in timed.items()},
            "tokens": [g.tokens for g in generated], "details": runner.details()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("artifact", type=Path)
    parser.add_argument("--exported", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/onnx-sessions"))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, folder = args.child
        print(json.dumps(judge_work(mode, Path(folder), args.exported, args.threads, args.work / f"{mode}.npz")))
        return
    folders = forms(args.artifact, args.work)
    results = []
    for _ in range(args.rounds):
        for mode in ("before", "after"):
            cmd = [sys.executable, __file__, str(args.artifact), "--exported", str(args.exported), "--work",
                   str(args.work), "--threads", str(args.threads), "--child", mode, str(folders[mode])]
            done = subprocess.run(cmd, capture_output=True, text=True, check=True)
            results.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(results[-1]), flush=True)
    with np.load(args.work / "before.npz") as a, np.load(args.work / "after.npz") as b:
        diff = max(float(np.abs(a[k] - b[k]).max()) for k in a.files)
    print(f"\nlargest logit difference between the modes: {diff:.3g}")
    print("| mode | load s | generate s | quality s | latency s | total s | session builds | peak Pss GB | prefill p50 ms | decode p50 ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        s, p = r["seconds"], r["p50_ms"]
        print(f"| {r['mode']} | {s['load']} | {s['generate']} | {s['quality']} | {s['latency']} | {r['total_s']} | "
              f"{r['session_builds']} | {r['peak_pss_gb']} | {next(v for k, v in p.items() if k != 'decode')} | {p['decode']} |")
    for mode in ("before", "after"):
        rows = [r["total_s"] for r in results if r["mode"] == mode]
        print(f"{mode}: median total {statistics.median(rows):.1f} s")
    b, a = (statistics.median([r["total_s"] for r in results if r["mode"] == m]) for m in ("before", "after"))
    print(f"after / before: {a / b:.2f}x the judge work's wall time")


if __name__ == "__main__":
    main()
