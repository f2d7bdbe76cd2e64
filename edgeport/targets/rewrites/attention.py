"""A broadcast that a transpose later reads, as an explicit concatenation.

Why: multi-query attention (ONE kv head: Gemma-2B, Gemma-3-1B, Falcon, StarCoder) repeats the single
key/value head over the query heads with ``unsqueeze -> expand -> reshape`` (transformers' ``repeat_kv``),
and attention then transposes the keys. The TFLite converter (litert-converter 0.5, under litert-torch
0.10) folds ``transpose(broadcast_in_dim(x))`` into one broadcast with a permuted dimension map, and its
broadcast legalization drops the permutation: the keys come out as ``RESHAPE [..,S,D] -> [..,D,S]`` +
``BROADCAST_TO``, i.e. reshaped instead of transposed. The StableHLO litert-torch emits is right; the
``.tflite`` is wrong with and without XNNPACK. On a random tiny model it looks like a ~3e-3 precision
loss (near-uniform attention hides wrong scores); on a trained-looking one the tokens diverge.
Two or more kv heads happen to escape it (the rank-5 reshape between expand and transpose blocks the fold).

A ``cat`` of the tensor with itself along each broadcast dimension is the same values, and the converter
keeps the transpose after a concatenation: exact. It costs what ``BROADCAST_TO`` costs (both materialize
the repeated tensor). Only expands whose result reaches a transpose (directly, through views, or as an
attention input, which the attention lowering transposes) are rewritten, and attention with
``enable_gqa`` (transformers' SDPA path when there is no mask: Gemma-3's global layers in prefill) gets
its kv heads repeated the same way before litert-torch's lowering broadcasts them.
"""

from __future__ import annotations

from edgeport.targets.rewrites.registry import node_rewrite

VIEWS = {"aten.reshape.default", "aten.view.default", "aten._unsafe_view.default", "aten.unsqueeze.default",
         "aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default", "aten.clone.default",
         "aten.contiguous.default", "aten.alias.default", "aten.expand.default", "aten.slice.Tensor",
         "aten.select.int"}
TRANSPOSING = {"aten.permute.default", "aten.transpose.int", "aten.t.default", "aten.swapaxes.default",
               "aten.scaled_dot_product_attention.default"}


ONE_CONCAT_MAX = 16  # up to this many copies in one CONCATENATION; more by doubling (log2 n concats)


def expand_by_concat(x, size, *, implicit=False):
    """``x.expand(size)`` as concatenations of ``x`` with itself (same values, no broadcast op)."""
    import torch

    size = list(size)
    x = x.reshape([1] * (len(size) - x.dim()) + list(x.shape))
    for dim, (have, want) in enumerate(zip(x.shape, size)):
        if have != 1 or want in (-1, 1):
            continue
        if want <= ONE_CONCAT_MAX:
            x = torch.cat([x] * int(want), dim)
            continue
        while x.shape[dim] < want:
            x = torch.cat([x, x], dim)
        x = x.narrow(dim, 0, int(want))
    return x


def broadcasts(node) -> bool:
    """True when the expand repeats a size-1 dimension (not a no-op expand)."""
    source = node.args[0].meta.get("val")
    if source is None:
        return False
    size = list(node.args[1])
    have = [1] * (len(size) - source.dim()) + list(source.shape)
    return any(h == 1 and w not in (-1, 1) for h, w in zip(have, size))


def reaches_transpose(node, depth: int = 8) -> bool:
    """Whether ``node``'s value reaches a transpose through view-like ops (a bounded walk)."""
    for user in node.users:
        name = str(user.target)
        if name in TRANSPOSING:
            return True
        if depth and name in VIEWS and reaches_transpose(user, depth - 1):
            return True
    return False


def repeat_heads(x, rep: int):
    """``(B, Hkv, S, D) -> (B, Hkv * rep, S, D)``, each kv head repeated ``rep`` times in place (what
    ``enable_gqa`` and ``repeat_kv`` mean), by concatenation."""
    b, heads, s, d = x.shape
    return expand_by_concat(x.unsqueeze(2), [b, heads, rep, s, d]).reshape(b, heads * rep, s, d)


def sdpa_with_explicit_heads(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
                             enable_gqa=False):
    """SDPA with ``enable_gqa``: the kv heads repeated explicitly, so litert-torch's own head broadcast
    (which hits the same fold) is never emitted."""
    import torch

    rep = query.shape[-3] // key.shape[-3]
    if enable_gqa and rep > 1:
        key, value = repeat_heads(key, rep), repeat_heads(value, rep)
    return torch.ops.aten.scaled_dot_product_attention.default(query, key, value, attn_mask, dropout_p, is_causal,
                                                               scale=scale)


SDPA = "aten.scaled_dot_product_attention.default"


@node_rewrite("expand_before_transpose", ops=("aten.expand.default", SDPA),
              fixes="one kv head (multi-query attention): the converter folds the key transpose into the head "
                    "broadcast and loses it (wrong logits); the broadcast becomes a concatenation")
def expand_before_transpose(_gm, node) -> bool:
    if str(node.target) == SDPA:
        if not node.kwargs.get("enable_gqa"):
            return False
        node.target = sdpa_with_explicit_heads
        return True
    if not broadcasts(node) or not reaches_transpose(node):
        return False
    node.target = expand_by_concat
    return True
