"""``sort``/``argsort`` lower to a comparator on int64 that converters reject: a stable rank computed
with compares and sums instead (topk for long rows)."""

from __future__ import annotations

from edgeport.targets.rewrites.registry import node_rewrite, swap_to

RANK_SORT_MAX = 2048   # above this, the n x n comparison of sort_by_rank costs too much: topk instead


def sort_by_rank(x, dim=-1, descending=False, stable=None):
    """``sort`` without a sort op: each element's rank is the count of elements that go before it (ties by
    position, i.e. a stable sort), and the inverse permutation comes from a rank == position mask. Exact
    and stable on every backend; O(n^2) compares, so rows longer than RANK_SORT_MAX use topk(k = n)
    (TFLite TOPK_V2: int32 indices; ties may then come out in another order)."""
    import torch

    n = x.shape[dim]
    if n > RANK_SORT_MAX:
        values, indices = torch.topk(x if descending else -x, n, dim=dim, largest=True, sorted=True)
        return (values if descending else -values), indices.to(torch.int64)
    v = x.movedim(dim, -1)
    mine, other = v.unsqueeze(-1), v.unsqueeze(-2)                    # x_i down, x_j across
    position = torch.arange(n, dtype=torch.int32)
    goes_first = (other > mine) if descending else (other < mine)
    tie_first = (other == mine) & (position.unsqueeze(0) < position.unsqueeze(-1))
    rank = (goes_first | tie_first).to(torch.int32).sum(-1)          # (..., n)
    at_rank = rank.unsqueeze(-1) == position                          # (..., i, r)
    order = (at_rank.to(torch.int32) * position.unsqueeze(-1)).sum(-2)  # index i holding rank r
    values = torch.where(at_rank, v.unsqueeze(-1), torch.zeros((), dtype=v.dtype)).sum(-2).to(v.dtype)
    return values.movedim(-1, dim), order.to(torch.int64).movedim(-1, dim)


def sort_stable_by_rank(x, *, stable=None, dim=-1, descending=False):
    return sort_by_rank(x, dim, descending)


def argsort_by_rank(x, dim=-1, descending=False, stable=None):
    return sort_by_rank(x, dim, descending)[1]


def argsort_stable_by_rank(x, *, stable=None, dim=-1, descending=False):
    return sort_by_rank(x, dim, descending)[1]



SORTS = {"aten.sort.default": sort_by_rank, "aten.sort.stable": sort_stable_by_rank,
         "aten.argsort.default": argsort_by_rank, "aten.argsort.stable": argsort_stable_by_rank}


@node_rewrite("sort_by_rank", ops=tuple(SORTS),
              fixes="sort/argsort lower to an int64 comparator the converter rejects: stable rank by compare + count")
def sort_by_rank_pass(gm, node) -> bool:
    return swap_to(SORTS[str(node.target)])(gm, node)
