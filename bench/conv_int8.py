"""Which convolutions does static int8 make slower than fp32 on LiteRT/XNNPACK? One conv per model, same run.

    python bench/conv_int8.py [--repeats 5]

Per conv shape (1-D tall kernels like a pitch CNN's 512x1 and 64x1, depthwise 3x3, ordinary 3x3, pointwise):
LiteRT fp32, static int8 (PT2E per-channel, as edgeport builds it), static int8 per-tensor, dynamic-range int8
(litert-torch's full_dynamic_recipe), each timed in the same process with 1 thread, p50 over ``--repeats``
rounds of 30 runs (median of rounds). Prints a table (ratios against fp32 of the same round).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

SHAPES = {  # name: (conv, input shape)
    "tall 512x1 cin1 s4": (lambda: nn.Conv2d(1, 64, (512, 1), (4, 1), (254, 0)), (1, 1, 1024, 1)),
    "3x3 cin1 c32": (lambda: nn.Conv2d(1, 32, 3, 1, 1), (1, 1, 64, 64)),
    "tall 512x1 cin4 s4": (lambda: nn.Conv2d(4, 64, (512, 1), (4, 1), (254, 0)), (1, 4, 1024, 1)),
    "tall 64x1 c64->16": (lambda: nn.Conv2d(64, 16, (64, 1), 1, (31, 0)), (1, 64, 128, 1)),
    "tall 64x1 c32->64": (lambda: nn.Conv2d(32, 64, (64, 1), 1, (31, 0)), (1, 32, 16, 1)),
    "conv1d k9 c64": (lambda: nn.Conv1d(64, 64, 9, padding=4), (1, 64, 256)),
    "depthwise 3x3 c96": (lambda: nn.Conv2d(96, 96, 3, 1, 1, groups=96), (1, 96, 56, 56)),
    "3x3 c32->64": (lambda: nn.Conv2d(32, 64, 3, 1, 1), (1, 32, 56, 56)),
    "pointwise c64->128": (lambda: nn.Conv2d(64, 128, 1), (1, 64, 56, 56)),
}


class One(nn.Module):
    def __init__(self, conv):
        super().__init__()
        self.conv = conv

    def forward(self, x):
        return torch.relu(self.conv(x))


def convert(module, x, variant: str, path: Path) -> Path:
    os.environ.setdefault("LITERT_TORCH_SHOW_PROGRESS", "n")
    import litert_torch

    config = None
    if variant == "dynamic":
        from litert_torch.generative.quantize import quant_recipes

        config = quant_recipes.full_dynamic_recipe()
    elif variant.startswith("static"):
        from litert_torch.quantize import pt2e_quantizer as pq, quant_config
        from torchao.quantization.pt2e import quantize_pt2e

        quantizer = pq.PT2EQuantizer().set_global(pq.get_symmetric_quantization_config(is_per_channel=variant == "static"))
        prepared = quantize_pt2e.prepare_pt2e(torch.export.export(module, (x,)).module(), quantizer)
        with torch.no_grad():
            for _ in range(8):
                prepared(torch.randn_like(x))
        module = quantize_pt2e.convert_pt2e(prepared, fold_quantize=False)
        config = quant_config.QuantConfig(pt2e_quantizer=quantizer)
    litert_torch.convert(module, (x,), quant_config=config).export(str(path))
    return path


def runner(path: Path):
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=str(path), num_threads=1)
    interp.allocate_tensors()
    detail = interp.get_input_details()[0]
    scale, zero = detail["quantization"]
    x = np.random.default_rng(0).standard_normal(detail["shape"]).astype(np.float32)
    feed = np.clip(np.round(x / scale + zero), -128, 127).astype(detail["dtype"]) if scale else x.astype(detail["dtype"])

    def run():
        interp.set_tensor(detail["index"], feed)
        interp.invoke()
    return run


def p50(run, n=30) -> float:
    for _ in range(3):
        run()
    times = []
    for _ in range(n):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    args = parser.parse_args()
    variants = ("fp32", "static", "static-per-tensor", "dynamic")
    print("| conv | fp32 ms | static int8 (per-channel) | static int8 (per-tensor) | dynamic-range int8 |\n|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.shapes.split(","):
            make, shape = SHAPES[name]
            torch.manual_seed(0)
            module, x = One(make()).eval(), torch.randn(shape)
            runs = {v: runner(convert(module, x, v, Path(tmp) / f"{v}.tflite")) for v in variants}
            rounds = [{v: p50(r) for v, r in runs.items()} for _ in range(args.repeats)]
            med = {v: statistics.median(r[v] for r in rounds) for v in variants}
            ratio = {v: statistics.median(r[v] / r["fp32"] for r in rounds) for v in variants}
            cells = [f"{med[v]:.3f} ms (×{ratio[v]:.2f})" for v in variants[1:]]
            print(f"| {name} | {med['fp32']:.3f} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
