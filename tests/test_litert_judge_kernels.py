"""Which kernels judge a LiteRT generative artifact: a weight-only int8 file (DEQUANTIZE ops on int8 weights)
runs on TFLite's builtin kernels, because XNNPACK keeps a dequantized and a packed fp32 copy of every weight
(edgeport/targets/litert/interpreter.py); every other file keeps XNNPACK."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgeport.targets.litert import generate
from edgeport.targets.litert.interpreter import kernel_options, weight_only
from edgeport.targets.litert.signatures import LiteRTSignatureRunner

IN, OUT = 1024, 2048   # 8 MB of fp32 weights: XNNPACK's copies are easy to tell from the builtin kernels'


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(IN, OUT, bias=False)

    def forward(self, x):
        return self.proj(x)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    import litert_torch

    where = tmp_path_factory.mktemp("judge")
    fp32 = where / "fp32.tflite"
    litert_torch.convert(Head().eval(), (torch.randn(1, IN),)).export(str(fp32))
    out = {"fp32": fp32}
    for variant in ("weight-int8", "dynamic-int8"):
        out[variant] = where / f"{variant}.tflite"
        generate._quantize(fp32, out[variant], variant)
    return out


def test_only_the_weight_only_file_leaves_xnnpack(files):
    assert weight_only(files["weight-int8"]) is True
    assert weight_only(files["fp32"]) is False
    assert weight_only(files["dynamic-int8"]) is False
    assert kernel_options(files["fp32"]) == {} and kernel_options(files["dynamic-int8"]) == {}
    assert generate.judged_on(files["weight-int8"])["runtime_kernels"].startswith("TFLite builtin kernels")
    assert generate.judged_on(files["fp32"]) == {}


def _nodes(runner) -> list[str]:
    wrapper = runner.interpreter._interpreter
    return [wrapper.NodeName(i) for i in range(wrapper.NumNodes())]


def _anon_kb() -> int:
    with open("/proc/self/smaps_rollup") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Anonymous:"))


def test_weight_int8_is_judged_without_xnnpack_and_without_its_copies(files):
    x = np.random.default_rng(0).standard_normal((1, IN)).astype(np.float32)
    name = "serving_default"
    before = _anon_kb()
    builtin = LiteRTSignatureRunner(files["weight-int8"], 1)
    got = next(iter(builtin.run(name, {k: x for k in builtin.inputs[name]}).values()))
    builtin_kb = _anon_kb() - before
    assert "DELEGATE" not in _nodes(builtin)
    fp32 = LiteRTSignatureRunner(files["fp32"], 1)
    want = next(iter(fp32.run(name, {k: x for k in fp32.inputs[name]}).values()))
    assert "DELEGATE" in _nodes(fp32)   # fp32 keeps XNNPACK (applied at the first call)
    cos = float(np.dot(got.ravel(), want.ravel()) / np.linalg.norm(got) / np.linalg.norm(want))
    assert cos > 0.999
    # builtin: the weights dequantized once (8 MB); XNNPACK on the same file holds >= 2x that
    assert builtin_kb < 1.5 * IN * OUT * 4 / 1024, builtin_kb
    from ai_edge_litert.interpreter import Interpreter

    before = _anon_kb()
    xnn = Interpreter(model_path=str(files["weight-int8"]), num_threads=1)
    runner = xnn.get_signature_runner(name)
    runner(**{k: x for k in runner.get_input_details()})
    assert _anon_kb() - before > 1.5 * IN * OUT * 4 / 1024   # what the builtin kernels avoid (can fail if XNNPACK changes)
