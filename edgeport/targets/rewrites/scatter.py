"""``scatter_add`` converts to a STABLEHLO_SCATTER the LiteRT runtime cannot run: a one-hot compare + sum."""

from __future__ import annotations

from edgeport.targets.rewrites.registry import rewrite


def _scatter_shapes_fit(node) -> bool:
    """The one-hot form needs index and base to agree on every dim but ``dim``."""
    base, dim, index = (node.args[i].meta.get("val") if hasattr(node.args[i], "meta") else node.args[i] for i in range(3))
    if base is None or index is None:
        return False
    dim = dim % base.dim()
    return all(index.shape[i] == base.shape[i] for i in range(base.dim()) if i != dim)


@rewrite("scatter_add_onehot", ops=("aten.scatter_add.default",), when=_scatter_shapes_fit,
         fixes="scatter_add converts to STABLEHLO_SCATTER, which the runtime cannot run: one-hot compare + sum")
def scatter_add_onehot(base, dim, index, src):
    """``scatter_add`` as base + sum over a one-hot mask (compare + where + sum: no scatter op).
    Memory grows as index.numel() * base.size(dim): meant for post-processing sizes, not embeddings."""
    import torch

    dim = dim % base.dim()
    src = src[tuple(slice(0, s) for s in index.shape)]
    positions = torch.arange(base.shape[dim], dtype=index.dtype)
    hits = index.unsqueeze(-1) == positions                           # (..., m at dim, ..., n)
    added = torch.where(hits, src.unsqueeze(-1), torch.zeros((), dtype=src.dtype)).sum(dim)
    # no transpose of the index: LiteRT folds expand + transpose into a BROADCAST_TO that cannot run
    return base + added.movedim(-1, dim)
