"""``max(x, dim)`` over a 4-D tensor (the softmax of attention with sinks, gpt-oss:
``logits - logits.max(dim=-1, keepdim=True).values``): ExecuTorch's XNNPACK partitioner takes every 4-D
``max.dim`` whose indices go unused, then its lowering stops on "amax.default only supports dim == 2 or
dim == 3" (it compares the dim as written, -1); written as 3, it lowers to a max pooling whose results were
wrong on this shape (max_rel_err 1.9, measured). The same max over a 2-D view (the reduced dim last, every
other dim flattened) is not partitioned: ExecuTorch's portable max kernel runs it, exactly."""

from __future__ import annotations

from edgeport.targets.rewrites.registry import rewrite


def _four_d(node) -> bool:
    value = getattr(node.args[0], "meta", {}).get("val")
    return value is not None and value.dim() == 4


@rewrite("max_dim_2d", ops=("aten.max.dim",), when=_four_d,
         fixes="a 4-D max over the last dim (attention sinks) fails ExecuTorch's XNNPACK lowering: "
               "'amax.default only supports dim == 2 or dim == 3'")
def max_dim_2d(x, dim, keepdim=False):
    """``torch.max(x, dim)`` (values, indices) taken over a 2-D view: the same elements compared, the
    same first index of the max."""
    import torch

    d = dim % x.dim()
    moved = x.movedim(d, -1)
    values, indices = torch.max(moved.reshape(-1, moved.shape[-1]), 1)
    values, indices = (t.reshape(moved.shape[:-1]).unsqueeze(-1).movedim(-1, d) for t in (values, indices))
    if not keepdim:
        values, indices = values.squeeze(d), indices.squeeze(d)
    return values, indices
