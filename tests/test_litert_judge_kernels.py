"""Which runtime judges a LiteRT generative artifact (edgeport/targets/litert/interpreter.py): a weight-only
int8 file (DEQUANTIZE ops on int8 weights) runs on TFLite's builtin kernels, because XNNPACK keeps a
dequantized and a packed fp32 copy of every weight; every other file runs on XNNPACK with its weight cache in
a file (packed once for every signature, mapped back). Both above a size a model of these tests never
reaches, so the tests lower the threshold; below it, the default Interpreter with XNNPACK, as before."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from edgeport.targets.litert import generate
from edgeport.targets.litert import interpreter as litert_interpreter
from edgeport.targets.litert.interpreter import CachedWeights, kernel_options, weight_only
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


@pytest.fixture
def large_model(monkeypatch):
    """Every file counts as large (the memory runtimes apply above 1 GiB of fp32 weights)."""
    monkeypatch.setattr(litert_interpreter, "MEMORY_RUNTIMES_ABOVE", 0)


def test_a_small_model_is_judged_as_an_app_runs_it_by_default(files):
    x = np.zeros((1, IN), np.float32)
    for variant in ("fp32", "weight-int8"):
        runner = LiteRTSignatureRunner(files[variant], 1)
        runner.run("serving_default", {k: x for k in runner.inputs["serving_default"]})   # XNNPACK applies at the first call
        assert runner.name == "interpreter" and "DELEGATE" in _nodes(runner), variant   # XNNPACK applied
        assert kernel_options(files[variant]) == {} and generate.judged_on(files[variant]) == {}


def test_only_the_weight_only_file_leaves_xnnpack(files, large_model):
    assert weight_only(files["weight-int8"]) is True
    assert weight_only(files["fp32"]) is False
    assert weight_only(files["dynamic-int8"]) is False
    assert kernel_options(files["fp32"]) == {} and kernel_options(files["dynamic-int8"]) == {}
    assert generate.judged_on(files["weight-int8"])["runtime_kernels"].startswith("TFLite builtin kernels")
    assert generate.judged_on(files["fp32"]) == {}


def _nodes(runner) -> list[str]:
    wrapper = getattr(runner.interpreter, "live_interpreter", runner.interpreter)._interpreter
    return [wrapper.NodeName(i) for i in range(wrapper.NumNodes())]


def _anon_kb() -> int:
    """Anonymous memory of this process, with glibc's free heap handed back first (a freed block reused by
    the next allocation would hide growth)."""
    import ctypes
    import gc

    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/smaps_rollup") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Anonymous:"))


def test_weight_int8_is_judged_without_xnnpack_and_without_its_copies(files, large_model):
    x = np.random.default_rng(0).standard_normal((1, IN)).astype(np.float32)
    name = "serving_default"
    before = _anon_kb()
    builtin = LiteRTSignatureRunner(files["weight-int8"], 1)
    got = next(iter(builtin.run(name, {k: x for k in builtin.inputs[name]}).values()))
    builtin_kb = _anon_kb() - before
    assert "DELEGATE" not in _nodes(builtin)
    assert builtin.name == "interpreter (builtin kernels, one signature at a time)"
    want = Head()(torch.from_numpy(x)).detach().numpy()
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


def test_other_files_run_on_xnnpack_with_its_weight_cache_in_a_file(files, large_model):
    x = np.random.default_rng(1).standard_normal((1, IN)).astype(np.float32)
    runner = LiteRTSignatureRunner(files["fp32"], 1)
    assert isinstance(runner.interpreter, CachedWeights) and runner.name.startswith("compiled_model")
    got = runner.run("serving_default", {k: x for k in runner.inputs["serving_default"]})
    again = runner.run("serving_default", {k: 2 * x for k in runner.inputs["serving_default"]})
    want = Head()(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(next(iter(got.values())), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(next(iter(again.values())), 2 * want, rtol=1e-4, atol=1e-4)   # buffers reused
    cache = Path(runner.interpreter.cache_file)
    assert cache.stat().st_size >= IN * OUT * 4   # XNNPACK packed the weights into the file (once)
    del runner
    import gc

    gc.collect()
    assert not cache.parent.exists()   # the temporary cache goes with the runner


def test_weight_int8_signatures_are_judged_one_at_a_time(tmp_path, large_model):
    """The builtin kernels dequantize a signature's weights at its first call and keep them: with prefill and
    decode alive that is 2x the fp32 weights. The judge keeps one signature's Interpreter at a time: the
    same outputs, alternating, with one signature's dequantized weights held."""
    import litert_torch

    torch.manual_seed(1)
    heads = {"prefill": Head().eval(), "decode": torch.nn.Sequential(torch.nn.Linear(IN, OUT, bias=False)).eval()}
    x = torch.randn(1, IN)
    fp32, int8 = tmp_path / "two.tflite", tmp_path / "two_int8.tflite"
    converter = litert_torch.signature("prefill", heads["prefill"], (x,))
    converter.signature("decode", heads["decode"], (x,)).convert().export(str(fp32))
    generate._quantize(fp32, int8, "weight-int8")
    runner = LiteRTSignatureRunner(int8, 1)
    before = _anon_kb()
    for name in ("prefill", "decode", "prefill", "decode"):
        got = next(iter(runner.run(name, {k: x.numpy() for k in runner.inputs[name]}).values()))
        want = heads[name](x).detach().numpy()
        assert float(np.dot(got.ravel(), want.ravel()) / np.linalg.norm(got) / np.linalg.norm(want)) > 0.999, name
        assert runner.interpreter.live == name
    held = _anon_kb() - before
    assert held < 1.5 * IN * OUT * 4 / 1024, held   # one signature's dequantized weights (8 MB), not both
