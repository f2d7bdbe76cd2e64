"""XNNPACK's passes that act only on batch norm, 1-D convolution, PReLU, a bilinear upsample and the like are
skipped on the partitions without those ops, and ExecuTorch's decomposition of a decomposed program with none
of the table's ops left is skipped (edgeport/targets/executorch/scoped_passes.py): each one re-traced every
partition or method of a language model for nothing. The ``.pte`` is the one ExecuTorch's own lowering writes,
byte for byte, for a model with every one of those ops (where the passes do act) and for ones with none."""

import contextlib

import pytest
import torch

from edgeport.targets.executorch import lower as L
from edgeport.targets.executorch import scoped_passes


class Convs(torch.nn.Module):
    """conv2d + batch norm, PReLU, a bilinear upsample, conv1d + batch norm + ReLU, a concatenation of 6, a pad,
    a copy to channels-last: the ops of most passes of the table."""

    def __init__(self):
        super().__init__()
        self.conv, self.norm, self.act = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.PReLU()
        self.conv1d, self.norm1d = torch.nn.Conv1d(8, 4, 3, padding=1), torch.nn.BatchNorm1d(4)

    def forward(self, x):
        y = torch.nn.functional.interpolate(self.act(self.norm(self.conv(x))), scale_factor=2, mode="bilinear")
        z = torch.relu(self.norm1d(self.conv1d(torch.nn.functional.pad(y.mean(dim=2), (1, 1)))))
        return torch.cat([z * i for i in range(1, 7)], dim=1), y.to(memory_format=torch.channels_last) * 2


class Attention(torch.nn.Module):
    """A language model's ops: linears, a softmax, a residual add; and ``sdpa``: the same attention through
    ``scaled_dot_product_attention`` with a mask (the graph XNNPACK's SDPA pass matches)."""

    def __init__(self, sdpa: bool = False):
        super().__init__()
        self.q, self.k, self.out = torch.nn.Linear(32, 32), torch.nn.Linear(32, 32), torch.nn.Linear(32, 32)
        self.sdpa = sdpa

    def forward(self, x):
        x = torch.cat([-x[..., 16:], x[..., :16]], dim=-1)   # a rotation's halves: a concatenation of two
        q, k = self.q(x), self.k(x)
        if self.sdpa:
            mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()
            return x + self.out(torch.nn.functional.scaled_dot_product_attention(q, k, x, attn_mask=mask))
        return x + self.out(torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ x)


def batch_norm_stats(model):
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 1.5)
    return model


class Annotated(Attention):
    """The attention with its projections annotated (``meta["custom"]``, which XNNPACK's custom-meta pass copies
    to their quantize/dequantize nodes)."""

    def forward(self, x):
        with torch.fx.traceback.annotate({"stage": "attention"}):
            return super().forward(x)


def exported(model, sample, dynamic: bool):
    """``model`` exported (an annotated one with its node meta kept, as annotations need), dynamically quantized
    when ``dynamic``."""
    from edgeport.targets.executorch.int8 import dynamic_int8

    with torch.fx.traceback.preserve_node_meta() if model is Annotated else contextlib.nullcontext():
        program = torch.export.export(batch_norm_stats(model()).eval(), (), kwargs={"x": sample})
    return dynamic_int8(program, {"x": sample}) if dynamic else program


def decompositions_run(monkeypatch) -> list:
    """The model's programs ExecuTorch decomposes from now on, one entry per ``run_decompositions`` that runs
    (not XNNPACK's pattern graphs, which hold no weights and are built once per process)."""
    runs, original = [], torch.export.ExportedProgram.run_decompositions

    def counted(self, *args, **kwargs):
        if self.state_dict or self.constants:
            runs.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", counted)
    return runs


@pytest.mark.parametrize("model,sample,dynamic,ran", [
    (Convs, torch.randn(1, 3, 8, 8), False, {
        "FuseBatchNormPass", "Conv1dUnsqueezePass", "ConvertToUpsampleBilinear2d", "FuseActivationPass",
        "DecomposeConcatenate", "InsertPadQDQPass", "DimOrderOpsRevertPass", "RemoveRedundantCopyPass"}),
    (Attention, torch.randn(1, 6, 32), False, set()),
    (lambda: Attention(sdpa=True), torch.randn(1, 6, 32), False, set()),   # decomposed: no pattern's every op
    (Attention, torch.randn(1, 6, 32), True, set()),                        # q/dq nodes, no custom meta
    (Annotated, torch.randn(1, 6, 32), True, {"PropagateCustomMetaPass"}),
])
def test_inert_passes_are_skipped_and_the_pte_is_the_same(tmp_path, monkeypatch, model, sample, dynamic, ran):
    """``ran``: the passes of the table given at least one partition (a partition without their ops skips them).
    Every model here has only ops XNNPACK takes where its partitioner checks them: the third decomposition,
    for the ops it refused, is skipped."""
    torch.manual_seed(0)
    program = exported(model, sample, dynamic)
    runs = decompositions_run(monkeypatch)
    calls, inert = [], scoped_passes.inert
    monkeypatch.setattr(scoped_passes, "inert", lambda p, gm, patterns: calls.append((type(p).__name__, inert(p, gm, patterns)))
                        or calls[-1][1])
    L.save(L.lower({"forward": program}, dynamic_quant=dynamic), tmp_path / "scoped.pte")
    assert {name for name, _ in calls} >= set(scoped_passes.ACTS_ON)   # every pass of the table is still XNNPACK's
    assert {name for name, skip in calls if not skip and name in scoped_passes.ACTS_ON} == ran
    scoped_runs = len(runs)
    monkeypatch.setattr(scoped_passes, "redundant_decompositions_skipped", contextlib.nullcontext)
    L.save(L.lower({"forward": program}, dynamic_quant=dynamic), tmp_path / "decomposed.pte")
    assert scoped_runs == len(runs) - scoped_runs - 1   # the third of each method's three
    monkeypatch.setattr(scoped_passes, "inert_passes_skipped", contextlib.nullcontext)
    L.save(L.lower({"forward": program}, dynamic_quant=dynamic), tmp_path / "all.pte")
    assert (tmp_path / "scoped.pte").read_bytes() == (tmp_path / "decomposed.pte").read_bytes()
    assert (tmp_path / "scoped.pte").read_bytes() == (tmp_path / "all.pte").read_bytes()
