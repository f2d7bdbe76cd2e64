"""ExecuTorch speed (issues 36 and 38): int8 keeps the convolutions XNNPACK's int8 kernel runs slower than fp32
float; a row's ``op_time`` is measured by ExecuTorch's profiler and its causes name the ops outside XNNPACK
with their time; an unrolled LSTM lowers as one XNNPACK partition, not one per cell; dynamically quantized
linears share one partition with the float ops around them. Tiny models, seconds each."""

import numpy as np
import torch
from torch import nn

import models


class PitchLike(nn.Module):
    """A conv over one input channel (a pitch CNN's first layer) then one over eight."""

    def __init__(self):
        super().__init__()
        self.first = nn.Conv2d(1, 8, (16, 1), (4, 1))
        self.second = nn.Conv2d(8, 8, (3, 1))

    def forward(self, x):
        return self.second(torch.relu(self.first(x)))


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 8, 2, batch_first=True)

    def forward(self, x):
        return self.lstm(x)[0]


def _job(module, args, float_layers=()):
    from edgeport.core.program import signature_of
    from edgeport.targets.base import ConvertJob

    program = torch.export.export(module, args)
    return ConvertJob(program, args, signature_of(program), "int8", None, float_layers=float_layers)


def test_int8_keeps_the_one_channel_conv_float_and_says_why():
    from edgeport.targets.executorch.quantize import quantized_program

    torch.manual_seed(0)
    job = _job(PitchLike().eval(), (torch.randn(1, 1, 64, 1),))
    quantized, on_purpose = quantized_program(job)
    convs = [n for n in quantized.graph.nodes if "conv" in str(n.target)]
    fed = ["dequantize" in str(getattr(n.args[1], "target", "")) for n in convs]
    assert fed == [False, True], fed   # first conv's weight stays float, the second's is int8
    assert [a["name"] for a in on_purpose] == ["first"] and "1 input channel" in on_purpose[0]["reason"]
    assert any("kept 1 conv(s) float" in n for n in job.notes)
    # a layer the user already keeps float is not listed again
    assert quantized_program(_job(PitchLike().eval(), (torch.randn(1, 1, 64, 1),), ("conv2d",)))[1] == []


def test_op_time_names_the_op_outside_xnnpack_with_its_time(tmp_path):
    """The cumsum XNNPACK leaves on the portable kernels is timed by ExecuTorch's profiler, and the cause says so."""
    from edgeport.targets.executorch.lower import lower, save
    from edgeport.targets.executorch.profile import causes
    from edgeport.targets.executorch.runtime import ExecuTorchRunner

    module, args = models.cumsum()
    path = tmp_path / "m.pte"
    save(lower({"forward": torch.export.export(module, args)}), path)
    runner = ExecuTorchRunner(path, 1)
    runner.run([args[0].numpy()])
    block = runner.details()["op_time"]
    assert set(block["portable"]) == {"cumsum.out"} and block["portable"]["cumsum.out"] > 0, block
    assert block["slowest"] and block["slowest"][0][0].startswith("Fully Connected"), block
    assert 0 < block["time_share"] < 1 and block["total_ms"] >= block["portable_ms"]
    text = causes({**block, "portable_ms": block["total_ms"] / 2})   # a visible share is always named, with ms
    assert text[0].startswith("ops outside XNNPACK (portable kernels) take") and "cumsum.out" in text[0]


def test_causes_name_converts_and_keep_quiet_below_one_percent():
    from edgeport.targets.executorch.profile import causes, summarize

    run = [("Method::execute", False, 10_000_000), ("native_call_index.Tensor_out", False, 50_000),
           ("Convolution (NHWC, QC8) IGEMM #1", True, 8_000_000), ("Convert (NC) #1", True, 1_000_000)]
    block = summarize([run, run])
    assert block["portable"] == {"index.Tensor_out": 0.05} and block["converts_ms"] == 1.0
    text = causes(block)
    assert not any("outside XNNPACK" in t for t in text), text   # 0.5% of the time
    assert any("quantize/dequantize converts" in t and "1.000 ms (10%)" in t for t in text)
    assert "Convolution (NHWC, QC8) IGEMM #1 8.000 ms (80%)" in text[-1]


def test_an_unrolled_lstm_lowers_as_one_partition(tmp_path):
    """Without the rewrite each cell's split/squeeze cut it out of XNNPACK: 2 layers x 6 steps were ~14 partitions."""
    from edgeport.targets.executorch.delegation import summary
    from edgeport.targets.executorch.lower import lower, save
    from edgeport.targets.executorch.runtime import ExecuTorchRunner

    torch.manual_seed(0)
    module, x = Recurrent().eval(), torch.randn(1, 6, 4)
    edge = lower({"forward": torch.export.export(module, (x,))})
    block = summary(edge)
    assert block["partitions"] == 1, block
    assert not any(k in op for op in block["portable_ops"] for k in ("split", "squeeze", "select")), block
    save(edge, tmp_path / "lstm.pte")
    out = ExecuTorchRunner(tmp_path / "lstm.pte", 1).run([x.numpy()])[0]
    np.testing.assert_allclose(out, module(x).detach().numpy(), atol=1e-5)


def test_provenance_chains_are_shared_not_deep_copied_while_lowering():
    """Every re-tracing pass deep-copied each node's whole ``from_node`` chain (27 of 117 s lowering a 6-layer
    SmolLM2); inside ``shared_provenance`` the new chain is a new list over the same ``NodeSource`` objects."""
    import torch.fx.traceback as fx_traceback

    from edgeport.core.provenance import shared_provenance

    graph = torch.fx.symbolic_trace(nn.ReLU()).graph
    node = next(iter(graph.nodes))
    node.meta["from_node"] = [fx_traceback.NodeSource(node, "earlier")]
    copied = fx_traceback.NodeSource(node, "outside")
    assert copied.from_node[0] is not node.meta["from_node"][0]   # torch's own behaviour: a deep copy
    with shared_provenance():
        shared = fx_traceback.NodeSource(node, "inside")
    assert shared.from_node[0] is node.meta["from_node"][0] and shared.from_node is not node.meta["from_node"]
    assert shared.from_node[0].pass_name == "earlier"
    assert fx_traceback.NodeSource(node, "after").from_node[0] is not node.meta["from_node"][0]   # restored


class Norms(nn.Module):
    """Linears around two RMSNorms (one without keepdim): each mean over the last dim cut XNNPACK's graph."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 16)
        self.weight = nn.Parameter(torch.rand(16) + 0.5)

    def forward(self, x):
        h = self.a(x)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
        h = h * torch.rsqrt(h.pow(2).mean(dim=2).unsqueeze(-1) + 1e-6)
        return self.b(h)


def test_a_norm_over_the_last_dim_stays_inside_xnnpack(tmp_path):
    """``mean(x, -1)`` becomes XNNPACK's global average pooling over a (rows, 1, last, 1) view: one partition."""
    from edgeport.targets.executorch.delegation import summary
    from edgeport.targets.executorch.lower import lower, save
    from edgeport.targets.executorch.runtime import ExecuTorchRunner

    torch.manual_seed(0)
    module, x = Norms().eval(), torch.randn(2, 5, 16)
    edge = lower({"forward": torch.export.export(module, (x,))})
    block = summary(edge)
    assert block["partitions"] == 1 and not any("mean" in op for op in block["portable_ops"]), block
    save(edge, tmp_path / "norms.pte")
    out = ExecuTorchRunner(tmp_path / "norms.pte", 1).run([x.numpy()])[0]
    np.testing.assert_allclose(out, module(x).detach().numpy(), atol=1e-5)


class QkvBlock(nn.Module):
    """Three projections of one normed input (one shared activation quantization when dynamically quantized),
    float ops between them, and an output projection: a transformer layer's linears in miniature."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(32, 32) for _ in range(4))

    def forward(self, x):
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return x + self.o(torch.relu(torch.sigmoid(self.q(h)) * self.k(h) + self.v(h)))


def test_dynamically_quantized_linears_share_one_partition_with_the_float_ops(tmp_path):
    """One XNNPACK partitioner takes the dynamically quantized linears and the float ops around them as one
    delegate (with the q/k/v group that shares one activation quantization moved ahead of the float ops that
    use it: 2 partitions without); the split way (quantized linears first, then float) cuts the block at every
    linear. The ``.pte`` computes what the split one did."""
    from edgeport.targets.executorch.delegation import summary
    from edgeport.targets.executorch.generate import dynamic_int8
    from edgeport.targets.executorch.lower import forget_lowered_graphs, lower, lowered, partitioners, save
    from edgeport.targets.executorch.runtime import ExecuTorchRunner

    torch.manual_seed(0)
    x = torch.randn(1, 6, 32)
    program = dynamic_int8(torch.export.export(QkvBlock().eval(), (), kwargs={"x": x}), {"x": x})
    try:
        split_edge = lowered({"forward": program}, None, partitioners(True, split=True))
        split = summary(split_edge)
        save(split_edge, tmp_path / "split.pte")
    finally:
        forget_lowered_graphs()
    edge = lower({"forward": program}, dynamic_quant=True)
    block = summary(edge)
    assert block["partitions"] == 1 and split["partitions"] >= 3, (block, split)
    assert block["flops_share"] == split["flops_share"] == 1.0
    save(edge, tmp_path / "qkv.pte")
    out, before = (ExecuTorchRunner(tmp_path / f, 1).run([x.numpy()])[0] for f in ("qkv.pte", "split.pte"))
    np.testing.assert_allclose(out, before, atol=1e-6)
    # XNNPACK quantizes activations per row, the PT2E program per tensor: close, not equal
    np.testing.assert_allclose(out, program.module()(x=x).detach().numpy(), atol=0.05)


def test_a_dependency_cycle_lowers_again_the_split_way(monkeypatch):
    """A lowering one partitioner refuses with a dependency cycle is lowered again with the dynamically
    quantized linears partitioned first; other errors, and float programs, are not retried."""
    import pytest

    from edgeport.targets.executorch import lower as module

    calls = []

    def lowered(programs, constants, partitioner, verify=False):
        calls.append(len(partitioner))
        if len(partitioner) == 1:
            raise AssertionError("Invalid partition, found dependency cycles")
        return "edge"

    monkeypatch.setattr(module, "lowered", lowered)
    assert module.edge_program({}, dynamic_quant=True) == "edge" and calls == [1, 2]
    calls.clear()
    with pytest.raises(AssertionError, match="cycles"):
        module.edge_program({}, dynamic_quant=False)
    assert calls == [1]
