"""Grouped-query attention without repeating the kv heads: the query heads are grouped onto their kv head.

Why: transformers' SDPA path repeats each kv head over its query heads (``repeat_kv``: unsqueeze -> expand
-> reshape, or ``enable_gqa``) before attention, so a decode step materializes the whole cache ``heads /
kv_heads`` times per layer and per token; LiteRT then runs those copies (``CONCATENATION`` after
``expand_before_transpose``, or ``BROADCAST_TO``) outside any fused kernel. litert-torch's own Hugging Face
path instead folds the query heads onto the kv heads (``export_hf/core/attention.py``). Same math here:
query ``(B, H, T, D) -> (B, KV, G*T, D)`` (head ``h = kv * G + g``, the order ``repeat_kv`` uses), one
matmul per kv head against the cache as it is, the mask broadcast over the group, softmax, one matmul
against the values. With one kv head (multi-query attention) there is no broadcast left for the converter
to fold into the key transpose (see :mod:`.attention`), so this is also exact there.

How the attention is written for LiteRT's CPU path (XNNPACK), each measured on bench/generation.py's
model (bench/GENERATION.md, "Attention written for XNNPACK"):

- The scores are litert-torch's ``bmm_4d`` (``BATCH_MATMUL`` with ``adj_y``: the keys as the cache stores
  them, ``(S, D)``); ``q @ k.transpose`` became a ``TRANSPOSE`` of each layer's whole key cache per step.
- A bool mask becomes ONE additive float mask (0 / the dtype's lowest value) shared by every layer that
  reads it, added to the scores; ``where(mask, scores, min)`` per layer lowered to ``SELECT_V2``, which
  XNNPACK does not take: each layer's select ran in the reference kernel and split the delegated graph
  in two. Masked scores take the dtype's lowest value rather than ``-inf`` (a row with every slot masked
  gives a uniform row instead of NaN; no row the generation loop feeds is fully masked).
- A constant mask (a prefill from an empty cache: row i attends slots 0..i) that masks every slot past n
  for every row lets attention read only the first n slots (:func:`.masks.live_slots`): prefill attends
  T slots instead of the whole cache. A mask fed as an input (decode) keeps every slot.
"""

from __future__ import annotations

from edgeport.targets.rewrites.registry import node_rewrite

SDPA = "aten.scaled_dot_product_attention.default"
UNSQUEEZE, EXPAND = "aten.unsqueeze.default", "aten.expand.default"
RESHAPES = ("aten.reshape.default", "aten.view.default", "aten._unsafe_view.default")


def repeated_heads(node):
    """``(source kv tensor node, repeats)`` when ``node`` is ``repeat_kv(source)``, else None."""
    if getattr(node, "op", None) != "call_function" or str(node.target) not in RESHAPES:
        return None
    expand = node.args[0]
    if getattr(expand, "op", None) != "call_function" or str(expand.target) != EXPAND:
        return None
    unsqueeze = expand.args[0]
    if getattr(unsqueeze, "op", None) != "call_function" or str(unsqueeze.target) != UNSQUEEZE \
            or unsqueeze.args[1] != 2:
        return None
    source = unsqueeze.args[0].meta.get("val")
    size = list(expand.args[1])
    if source is None or source.dim() != 4 or len(size) != 5 or not isinstance(size[2], int):
        return None
    return unsqueeze.args[0], size[2]


def _plain(node) -> bool:
    """No dropout, not is_causal (the mask says everything), 4-D query."""
    args = list(node.args) + [None] * 6
    dropout = node.kwargs.get("dropout_p", args[4] or 0.0)
    causal = node.kwargs.get("is_causal", args[5] or False)
    query = node.args[0].meta.get("val")
    return not dropout and not causal and query is not None and query.dim() == 4


@node_rewrite("grouped_query_attention", ops=(SDPA,),
              fixes="grouped/multi-query attention repeats the whole KV cache per query head every step")
def grouped_query_attention(gm, node) -> bool:
    return _group(gm, node, grouped_sdpa)


@node_rewrite("grouped_query_attention_matmul", ops=(SDPA,),
              fixes="grouped/multi-query attention repeats the whole KV cache per query head every step (TPU: "
                    "the repeated cache was a temporary in HBM, written and read per layer and per step)")
def grouped_query_attention_matmul(gm, node) -> bool:
    """The same grouping with plain ``torch.matmul`` (no LiteRT op), for targets that lower aten themselves."""
    return _group(gm, node, grouped_sdpa_matmul)


def _group(gm, node, fn) -> bool:
    if not _plain(node):
        return False
    query, key, value = node.args[:3]
    mask = node.args[3] if len(node.args) > 3 else node.kwargs.get("attn_mask")
    heads = node.args[0].meta["val"].shape[1]
    if node.kwargs.get("enable_gqa"):
        kv_heads = key.meta["val"].shape[1]
        if heads % kv_heads or kv_heads == heads:
            return False
    else:
        found_k, found_v = repeated_heads(key), repeated_heads(value)
        if found_k is None or found_v is None or found_k[1] != found_v[1] or found_k[1] == 1:
            return False
        key, value = found_k[0], found_v[0]
    return retarget(gm, node, fn, query, key, value, mask)


def retarget(gm, node, fn, query, key, value, mask) -> bool:
    """``node`` becomes ``fn(query, key, value, mask, scale=, keep=)``: the mask additive and shared by the
    layers, ``keep`` the cache slots it can leave unmasked (None without a mask)."""
    from edgeport.targets.rewrites.masks import live_slots, shared_additive

    keep = None
    if mask is not None:
        keep = live_slots(gm, mask, key.meta["val"].shape[2])
        mask = shared_additive(gm, mask, query.meta["val"].dtype)
    node.target = fn
    node.args = (query, key, value, mask)
    node.kwargs = {"scale": node.kwargs.get("scale"), "keep": keep}
    return True


def grouped_sdpa(query, key, value, mask=None, *, scale=None, keep=None):
    """softmax(q k^T * scale + mask) v with q's heads grouped onto k/v's heads, over the first ``keep``
    slots when given (see the module docstring). ``mask`` is additive (float)."""
    from litert_torch.generative.custom_ops.bmm_4d import bmm_4d

    return _grouped(query, key, value, mask, scale, keep, bmm_4d)


def grouped_sdpa_matmul(query, key, value, mask=None, *, scale=None, keep=None):
    """:func:`grouped_sdpa` with the scores as ``q @ k^T`` (XLA reads the transposed cache in the dot)."""
    return _grouped(query, key, value, mask, scale, keep, lambda q, k: q @ k.transpose(-1, -2))


def _grouped(query, key, value, mask, scale, keep, scores_of):
    import torch

    b, heads, t, d = query.shape
    if keep is not None:
        key, value = key[:, :, :keep], value[:, :, :keep]
        mask = None if mask is None else mask[..., :keep]
    kv = key.shape[1]
    g = heads // kv
    scale = d ** -0.5 if scale is None else scale
    scores = scores_of(query.reshape(b, kv, g * t, d), key) * scale
    if mask is not None:
        scores = scores + _flat_mask(mask, kv, g, t)
    weights = torch.softmax(scores, dim=-1)
    return torch.matmul(weights, value).reshape(b, heads, t, value.shape[-1])


def _flat_mask(mask, kv: int, g: int, t: int):
    """A mask broadcastable to ``(B, H, T, S)`` as one broadcastable to ``(B, KV, G*T, S)``: rows in the
    grouped query's order (group-major), so a shared mask is repeated G times along the rows (4-D, no
    rank-5 broadcast)."""
    import torch

    while mask.dim() < 4:
        mask = mask.unsqueeze(0)
    mask = mask.expand(mask.shape[0], mask.shape[1], t, mask.shape[3])
    if mask.shape[1] == 1:
        return torch.cat([mask] * g, dim=2) if g > 1 else mask
    return mask.reshape(mask.shape[0], kv, g * t, mask.shape[3])
