"""PT2E quantization's memory (edgeport/targets/_pt2e.py): the weights' quantization folded one weight and
one slice of channels at a time, the same constants torchao's own folding makes, int8 weights shared
between a model's methods, and no quantized module kept alive by a library cache."""

import gc
import weakref

import pytest
import torch

from edgeport.targets import _jax, _pt2e


class Mlp(torch.nn.Module):
    def __init__(self, width: int = 64, hidden: int = 256):
        super().__init__()
        self.up, self.down = torch.nn.Linear(width, hidden), torch.nn.Linear(hidden, width)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def quantizer(dynamic: bool):
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer, get_symmetric_quantization_config)

    return XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True, is_dynamic=dynamic))


def programs(model, *lengths):
    """One exported program per input length, all reading the model's own weights (as prefill and decode do)."""
    with torch.no_grad():
        return [torch.export.export(model.eval(), (torch.randn(n, model.up.in_features),), strict=False)
                for n in lengths]


@pytest.mark.parametrize("dynamic", [True, False], ids=["dynamic", "static"])
def test_folding_gives_torchaos_own_constants_graph_and_outputs(dynamic, monkeypatch):
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    torch.manual_seed(0)
    program, = programs(Mlp(), 4)
    sample = torch.randn(4, 64)
    with torch.no_grad(), _jax.cpu_tracing():   # the reference, under the conditions calibrated() sets
        prepared = prepare_pt2e(program.module(), quantizer(dynamic))
        prepared(sample)
        theirs = convert_pt2e(prepared)
        monkeypatch.setattr(_pt2e, "FOLD_CHUNK_BYTES", 1000)   # many slices per weight
        ours = _pt2e.calibrated(program.module(), quantizer(dynamic), [[sample]])
    a, b = dict(theirs.named_buffers()), dict(ours.named_buffers())
    assert a.keys() == b.keys() and any(t.dtype == torch.int8 for t in b.values())
    assert all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)
    assert str(theirs.graph) == str(ours.graph)
    assert torch.equal(theirs(sample), ours(sample))


class Convs(torch.nn.Module):
    """A transposed convolution's weights are quantized along axis 1 (its output channels)."""

    def __init__(self):
        super().__init__()
        self.conv, self.up = torch.nn.Conv2d(3, 8, 3), torch.nn.ConvTranspose2d(8, 4, 3, stride=2)
        self.depthwise = torch.nn.Conv2d(4, 4, 3, groups=4)

    def forward(self, x):
        return self.depthwise(torch.relu(self.up(torch.relu(self.conv(x)))))


def test_folding_convolutions_along_their_own_axis_gives_torchaos_constants(monkeypatch):
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    torch.manual_seed(0)
    x = torch.randn(1, 3, 16, 16)
    program = torch.export.export(Convs().eval(), (x,), strict=False)
    with torch.no_grad(), _jax.cpu_tracing():
        prepared = prepare_pt2e(program.module(), quantizer(False))
        prepared(x)
        theirs = convert_pt2e(prepared)
        monkeypatch.setattr(_pt2e, "FOLD_CHUNK_BYTES", 64)
        ours = _pt2e.calibrated(program.module(), quantizer(False), [[x]])
    a, b = dict(theirs.named_buffers()), dict(ours.named_buffers())
    assert a.keys() == b.keys() and sum(t.dtype == torch.int8 for t in b.values()) == 3
    assert all(torch.equal(a[k], b[k]) for k in a) and torch.equal(theirs(x), ours(x))


def test_an_accelerator_that_cannot_answer_does_not_fail_quantization(monkeypatch):
    """Importing torchax (a caller's code, another target, an earlier test) registers a ``jax`` device that
    says it is available and raises when asked for its stream; XNNPACK's quantizer traces its conv patterns
    with dynamo, which asks. Quantizing is CPU work and must not care."""
    def no_stream(*args, **kwargs):
        raise RuntimeError("PyTorch is not linked with support for jax devices")

    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_stream", no_stream)
    assert _jax.accelerator_cannot_answer()
    x = torch.randn(1, 3, 16, 16)
    program = torch.export.export(Convs().eval(), (x,), strict=False)
    ours = _pt2e.calibrated(program.module(), quantizer(False), [[x]])
    assert sum(t.dtype == torch.int8 for t in ours.buffers()) == 3
    assert torch.accelerator.is_available()                  # left as it was found


def test_fold_never_makes_a_float_temporary_the_size_of_a_weight(monkeypatch):
    """torchao's folder quantizes a weight in float temporaries of the weight's full size (a 0.6 GB tied
    embedding table as the head: about 3x that at once); here the largest allocation is the int8 result."""
    from torch.profiler import ProfilerActivity, profile
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    model = Mlp(width=1024, hidden=2048)        # 8 MB fp32 weights, 2 MB int8 each
    program, = programs(model, 2)
    with torch.no_grad(), _jax.cpu_tracing():
        prepared = prepare_pt2e(program.module(), quantizer(True))
        prepared(torch.randn(2, 1024))
        converted = convert_pt2e(prepared, fold_quantize=False)
    monkeypatch.setattr(_pt2e, "FOLD_CHUNK_BYTES", 256 << 10)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        _pt2e.fold_weight_quantization(converted)
    largest = max(e.cpu_memory_usage for e in prof.events())
    weight = model.up.weight
    assert weight.numel() <= largest < weight.nbytes / 2, largest     # int8 out, nothing float of that size
    assert any(t.dtype == torch.int8 and t.shape == weight.shape for t in converted.buffers())


def test_methods_share_their_int8_weights():
    torch.manual_seed(0)
    prefill, decode = programs(Mlp(), 8, 1)
    shared = {}
    with torch.no_grad():
        first = _pt2e.calibrated(prefill.module(), quantizer(True), [[torch.randn(8, 64)]], shared=shared)
        second = _pt2e.calibrated(decode.module(), quantizer(True), [[torch.randn(1, 64)]], shared=shared)
    storages = lambda m: {t.untyped_storage().data_ptr() for t in m.buffers() if t.dtype == torch.int8}  # noqa: E731
    assert len(storages(first)) == 2 and storages(first) == storages(second)
    alone = _pt2e.calibrated(decode.module(), quantizer(True), [[torch.randn(1, 64)]])
    assert storages(alone).isdisjoint(storages(first))                  # without the dict: its own copies
    assert all(torch.equal(a, b) for a, b in zip(second.buffers(), alone.buffers()))


def test_no_quantized_module_outlives_its_quantization():
    """torchao and torch cache a module's device by the module itself (functools.cache): every module PT2E
    saw stayed alive, with its weights, for the rest of the process."""
    program, = programs(Mlp(), 4)
    module = program.module()
    with torch.no_grad():
        converted = _pt2e.calibrated(module, quantizer(True), [[torch.randn(4, 64)]])
    seen = [weakref.ref(module), weakref.ref(converted)]
    del module, converted
    gc.collect()
    assert [ref() for ref in seen] == [None, None]
