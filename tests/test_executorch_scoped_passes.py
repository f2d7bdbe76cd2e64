"""XNNPACK's passes that act only on batch norm, 1-D convolution, PReLU or a bilinear upsample are skipped on
the partitions without those ops (edgeport/targets/executorch/scoped_passes.py): each one re-traced every
partition of a language model for nothing. The ``.pte`` is the one ExecuTorch's own lowering writes, byte for
byte, for a model with every one of those ops (where the passes do act) and for one with none of them."""

import contextlib

import pytest
import torch

from edgeport.targets.executorch import lower as L
from edgeport.targets.executorch import scoped_passes


class Convs(torch.nn.Module):
    """conv2d + batch norm, PReLU, a bilinear upsample, conv1d + batch norm + ReLU, a concatenation of 6: the
    ops of most passes of the table."""

    def __init__(self):
        super().__init__()
        self.conv, self.norm, self.act = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.PReLU()
        self.conv1d, self.norm1d = torch.nn.Conv1d(8, 4, 3, padding=1), torch.nn.BatchNorm1d(4)

    def forward(self, x):
        y = torch.nn.functional.interpolate(self.act(self.norm(self.conv(x))), scale_factor=2, mode="bilinear")
        z = torch.relu(self.norm1d(self.conv1d(y.mean(dim=2))))
        return torch.cat([z * i for i in range(1, 7)], dim=1)


class Attention(torch.nn.Module):
    """A language model's ops: linears, a softmax, a residual add; and ``sdpa``: the same attention through
    ``scaled_dot_product_attention`` with a mask (the graph XNNPACK's SDPA pass matches)."""

    def __init__(self, sdpa: bool = False):
        super().__init__()
        self.q, self.k, self.out = torch.nn.Linear(32, 32), torch.nn.Linear(32, 32), torch.nn.Linear(32, 32)
        self.sdpa = sdpa

    def forward(self, x):
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


@pytest.mark.parametrize("model,sample,ran", [
    (Convs, torch.randn(1, 3, 8, 8), {"FuseBatchNormPass", "Conv1dUnsqueezePass", "ConvertToUpsampleBilinear2d",
                                         "FuseActivationPass", "DecomposeConcatenate"}),
    (Attention, torch.randn(1, 6, 32), set()),
    (lambda: Attention(sdpa=True), torch.randn(1, 6, 32), set()),   # decomposed: no pattern's every op
])
def test_inert_passes_are_skipped_and_the_pte_is_the_same(tmp_path, monkeypatch, model, sample, ran):
    """``ran``: the passes of the table given at least one partition (a partition without their ops skips them)."""
    torch.manual_seed(0)
    program = torch.export.export(batch_norm_stats(model()).eval(), (sample,))
    calls, inert = [], scoped_passes.inert
    monkeypatch.setattr(scoped_passes, "inert", lambda p, gm, patterns: calls.append((type(p).__name__, inert(p, gm, patterns)))
                        or calls[-1][1])
    L.save(L.lower({"forward": program}), tmp_path / "scoped.pte")
    assert {name for name, _ in calls} >= set(scoped_passes.ACTS_ON)   # every pass of the table is still XNNPACK's
    assert {name for name, skip in calls if not skip and name in scoped_passes.ACTS_ON} == ran
    monkeypatch.setattr(scoped_passes, "inert_passes_skipped", contextlib.nullcontext)
    L.save(L.lower({"forward": program}), tmp_path / "all.pte")
    assert (tmp_path / "scoped.pte").read_bytes() == (tmp_path / "all.pte").read_bytes()
