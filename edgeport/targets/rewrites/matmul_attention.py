"""Attention as plain matmuls on the cache as stored: no repeated kv heads, no scaled copy of the keys.

Why (ExecuTorch, bench/GENERATION.md "ExecuTorch decode"): ExecuTorch decomposes SDPA into its math form
before XNNPACK partitions the graph, and on a decode step that form runs mostly on the portable kernels:
transformers' ``repeat_kv`` (``expand``) of the whole key and value caches, ``mul.Scalar`` of the whole
(transposed, repeated) key cache by ``sqrt(scale)``, an ``expand_copy`` of it again, and a fully-masked-row
guard (``eq``/``logical_not``/``any``/``where``) on the scores: per layer and per token, several copies of
the cache in single-threaded loops, and each layer's delegated graph cut into pieces around them.

Same math here, every op one XNNPACK takes: the query heads grouped onto their kv head (``(B, H, T, D) ->
(B, KV, G*T, D)``, the order ``repeat_kv`` uses; G = 1 for multi-head attention), the scale applied to the
query (T rows) rather than to the keys (all C slots), ``q @ k^T`` against the keys as the cache stores
them, one additive mask shared by every layer, softmax, ``@ v``. A constant mask that masks every slot past
n (a prefill from an empty cache) lets attention read the first n slots (:func:`.masks.live_slots`).
Masked scores take the dtype's lowest value rather than ``-inf``: a row with every slot masked gives a
uniform row instead of SDPA's zeros; no row the generation loop feeds is fully masked.
"""

from __future__ import annotations

from edgeport.targets.rewrites.grouped_attention import SDPA, _plain, repeated_heads, retarget
from edgeport.targets.rewrites.registry import node_rewrite


@node_rewrite("attention_matmul", ops=(SDPA,),
              fixes="SDPA's decomposition repeats, scales and copies the whole KV cache per layer every step, "
                    "on the portable kernels")
def attention_matmul(gm, node) -> bool:
    if not _plain(node):
        return False
    query, key, value = node.args[:3]
    mask = node.args[3] if len(node.args) > 3 else node.kwargs.get("attn_mask")
    found_k, found_v = repeated_heads(key), repeated_heads(value)
    if found_k is not None and found_v is not None and found_k[1] == found_v[1]:
        key, value = found_k[0], found_v[0]
    heads, kv_heads = query.meta["val"].shape[1], key.meta["val"].shape[1]
    if key.meta["val"].dim() != 4 or heads % kv_heads or (kv_heads != heads and not node.kwargs.get("enable_gqa")
                                                          and key is node.args[1]):
        return False
    return retarget(gm, node, matmul_sdpa, query, key, value, mask)


def matmul_sdpa(query, key, value, mask=None, *, scale=None, keep=None):
    """softmax((q * scale) k^T + mask) v with q's heads grouped onto k/v's heads, over the first ``keep``
    slots when given (see the module docstring). ``mask`` is additive (float) or None."""
    import torch

    b, heads, t, d = query.shape
    if keep is not None:
        key, value = key[:, :, :keep], value[:, :, :keep]
        mask = None if mask is None else mask[..., :keep]
    kv, slots = key.shape[1], key.shape[2]
    g = heads // kv
    scale = torch.tensor(d ** -0.5 if scale is None else scale, dtype=query.dtype)
    # 3-D bmm on views: matmul's broadcasting would materialize (expand_copy) the keys and values again
    q = (query.reshape(b, kv, g * t, d) * scale).reshape(b * kv, g * t, d)
    scores = torch.bmm(q, key.reshape(b * kv, slots, d).transpose(1, 2)).reshape(b, kv, g * t, slots)
    if mask is not None:
        scores = scores + grouped_mask(mask, kv, g, t)
    weights = torch.softmax(scores, dim=-1).reshape(b * kv, g * t, slots)
    out = torch.bmm(weights, value.reshape(b * kv, slots, value.shape[-1]))
    return out.reshape(b, heads, t, value.shape[-1])


def grouped_mask(mask, kv: int, g: int, t: int):
    """A mask broadcastable to ``(B, H, T, S)`` as one broadcastable to ``(B, KV, G*T, S)`` (rows in the
    grouped query's order), with no ``expand`` where the rows are already there (ExecuTorch keeps even a
    same-shape expand as an ``expand_copy`` on the portable kernels)."""
    import torch

    while mask.dim() < 4:
        mask = mask.unsqueeze(0)
    if mask.shape[2] != t:
        mask = mask.expand(mask.shape[0], mask.shape[1], t, mask.shape[3])
    if mask.shape[1] == 1:
        return torch.cat([mask] * g, dim=2) if g > 1 else mask
    return mask.reshape(mask.shape[0], kv, g * t, mask.shape[3])
