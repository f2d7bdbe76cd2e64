"""A KV-cache write at consecutive slots as one dynamic-update-slice (LiteRT's ``DYNAMIC_UPDATE_SLICE``).

Why: transformers' static cache writes the new keys/values with ``index_copy_(cache, seq_dim, start +
arange(T), new)``. litert-torch lowers that to ``STABLEHLO_SCATTER``, which XNNPACK does not take: each
layer's write runs in the reference kernel and splits the delegated graph around it, so edgeport's LiteRT
decode ran at a third of the speed of litert-torch's own Hugging Face path (``export_hf``), which writes its
cache with litert-torch's ``dynamic_update_slice`` op at ``input_pos`` (``export_hf/core/cache.py``).
When the index is provably ``start + arange(T)`` (read from the graph, not assumed) the write is exactly
that op, with ``start`` on the sequence axis and 0 elsewhere. Other index shapes (ring caches, a scatter
by arbitrary positions) are left alone.
"""

from __future__ import annotations

from edgeport.targets.rewrites.registry import node_rewrite

INDEX_COPY = ("aten.index_copy_.default", "aten.index_copy.default")
ARANGE = ("aten.arange.default", "aten.arange.start")
CASTS = ("aten.to.dtype", "aten.to.dtype_layout", "aten._to_copy.default")


def _arange_length(node) -> int | None:
    """T when ``node`` is ``arange(T)`` / ``arange(0, T)`` (step 1, constant), else None."""
    if getattr(node, "op", None) != "call_function" or str(node.target) not in ARANGE:
        return None
    bounds = node.args
    if str(node.target) == "aten.arange.start":
        if len(bounds) < 2 or bounds[0] != 0:
            return None
        bounds = bounds[1:]
    return bounds[0] if bounds and isinstance(bounds[0], int) else None


def consecutive_start(index):
    """The graph value ``start`` when ``index`` is ``arange(T) + start`` (either order), else None."""
    if getattr(index, "op", None) != "call_function" or str(index.target) != "aten.add.Tensor" or len(index.args) != 2:
        return None
    for ramp, start in (index.args, index.args[::-1]):
        if _arange_length(ramp) is None or not hasattr(start, "meta"):
            continue
        value = start.meta.get("val")
        if value is not None and value.dim() == 0 and not value.dtype.is_floating_point:
            return start
    return None


def _fits(node) -> bool:
    """Same rank, and nothing reads the cache tensor after the write (``index_copy_`` writes it in place:
    a later reader would see the write, which the functional replacement does not make)."""
    base, update = node.args[0].meta.get("val"), node.args[3].meta.get("val")
    if base is None or update is None or base.dim() != update.dim():
        return False
    later, seen = set(), False
    for other in node.graph.nodes:
        seen = seen or other is node
        if seen and other is not node:
            later.add(other)
    return not any(user in later for user in node.args[0].users)


@node_rewrite("kv_write_dynamic_update_slice", ops=INDEX_COPY,
              fixes="a KV-cache write at start + arange(T) lowers to STABLEHLO_SCATTER, which XNNPACK does not run")
def kv_write_dynamic_update_slice(_gm, node) -> bool:
    if consecutive_start(node.args[2]) is None or not _fits(node):
        return False
    node.target = write_block
    return True


def write_block(cache, dim: int, index, update):
    """``cache`` with ``update`` written at ``index[0]`` along ``dim`` (litert-torch's dynamic_update_slice).
    The start is read from the index, not from the length it was computed from: the graph increments
    that length in place (``add_``) before the write."""
    import torch

    from litert_torch.generative.custom_ops.dynamic_update_slice import dynamic_update_slice

    dim = dim % cache.dim()
    position = index[:1].reshape(()).to(torch.int32)
    zero = torch.zeros((), dtype=torch.int32)
    return dynamic_update_slice(cache, update, [position if d == dim else zero for d in range(cache.dim())])
