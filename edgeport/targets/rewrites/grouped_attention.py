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

Masked scores take the dtype's lowest value rather than ``-inf`` (a row with every slot masked gives a
uniform row instead of NaN; no row the generation loop feeds is fully masked).
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
def grouped_query_attention(_gm, node) -> bool:
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
    node.target = grouped_sdpa
    node.args = (query, key, value, mask)
    node.kwargs = {"scale": node.kwargs.get("scale")}
    return True


def grouped_sdpa(query, key, value, mask=None, *, scale=None):
    """softmax(q k^T * scale + mask) v with q's heads grouped onto k/v's heads (see the module docstring)."""
    import torch

    b, heads, t, d = query.shape
    kv, s = key.shape[1], key.shape[2]
    g = heads // kv
    scale = d ** -0.5 if scale is None else scale
    scores = torch.matmul(query.reshape(b, kv, g * t, d), key.transpose(-1, -2)) * scale
    scores = scores.reshape(b, kv, g, t, s)
    if mask is not None:
        mask = _grouped_mask(mask, kv, g)
        if mask.dtype == torch.bool:
            scores = torch.where(mask, scores, torch.finfo(scores.dtype).min)
        else:
            scores = scores + mask
    weights = torch.softmax(scores, dim=-1).reshape(b, kv, g * t, s)
    return torch.matmul(weights, value).reshape(b, heads, t, value.shape[-1])


def _grouped_mask(mask, kv: int, g: int):
    """A mask broadcastable to ``(B, H, T, S)`` as one broadcastable to ``(B, KV, G, T, S)``."""
    while mask.dim() < 4:
        mask = mask.unsqueeze(0)
    if mask.shape[1] == 1:
        return mask.unsqueeze(2)
    return mask.reshape(mask.shape[0], kv, g, mask.shape[2], mask.shape[3])
