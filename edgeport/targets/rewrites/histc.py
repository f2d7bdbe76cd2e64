"""``aten.histc`` has no lowering in the converters (Hugging Face MoE layers count tokens per expert with it)."""

from __future__ import annotations

from edgeport.targets.rewrites.registry import rewrite


@rewrite("histc_onehot", ops=("aten.histc.default",),
         fixes="aten.histc has no lowering (MoE token counts): compare-with-bin + sum")
def histc_onehot(x, bins=100, min=0, max=0):
    """``torch.histc`` as compare-with-bin-index + sum. Same binning as ATen: bin = floor((x-lo)/(hi-lo)*bins),
    x == hi lands in the last bin, values outside [lo, hi] are dropped; lo == hi means the data's range."""
    import torch

    flat = x.reshape(-1).float()
    if min == max:
        lo, hi = flat.min(), flat.max()
        same = hi == lo
        lo, hi = torch.where(same, lo - 1, lo), torch.where(same, hi + 1, hi)
    else:
        lo, hi = torch.tensor(float(min)), torch.tensor(float(max))
    inside = (flat >= lo) & (flat <= hi)
    index = torch.floor((flat - lo) / (hi - lo) * bins).clamp(0, bins - 1).to(torch.int32)
    hits = (index.unsqueeze(-1) == torch.arange(bins, dtype=torch.int32)) & inside.unsqueeze(-1)
    return hits.to(x.dtype).sum(0)
