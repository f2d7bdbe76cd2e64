"""Per-layer caches for sliding-window models: a ring of W slots per sliding layer, C slots per global one.

transformers' StaticSlidingWindowLayer holds min(window, C) slots and chooses "write in place" or "roll the
window" with a Python int while tracing, so the decode program it exports only ever writes in place and a
``--cache-len`` above the window would write out of range. Here the model's own forward runs on a cache
whose every update is tensor-driven, and the two programs are exported from a small module around it:

- decode writes the new key/value of a sliding layer into slot ``pos % W`` (a one-hot select: no scatter,
  no data-dependent control flow), a global layer's into slot ``pos``. Keys are stored after RoPE, so the
  order of the slots does not matter to softmax: each mask input (``attention_mask_<type>`` as the model
  names its masks, shape (1, 1, 1, S) with S = W or C) is True on slots 0..min(pos, S - 1): before a ring
  fills, the slots written so far; after, all W slots, which then hold positions pos-W+1..pos, exactly
  transformers' window (a key is seen when key_pos > pos - W).
- ``prefill_<L>`` attends within the prompt (causal; sliding layers also within the window), writes the
  prompt into the global slots 0..L-1, and fills each ring slot s with the latest real prompt position p
  with p % W == s. Which positions are real comes from the ``prompt_len`` input: a right-padded prompt
  must not push its real tokens out of the ring with padding.

The programs are flat from the start (named tensors in, ``{name: tensor}`` out, nothing mutated in place),
with the names :mod:`.flat` gives the transformers-exported ones: ``cache_k_<l>``, ``cache_v_<l>``,
``cache_len_<l>`` (tokens written so far), so the layout, the loop and every converter read them the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from edgeport.errors import UsageError

RING_TYPES = {"full_attention": False, "sliding_attention": True}  # the layer types this cache can hold


@dataclass(frozen=True)
class CachePlan:
    slots: list[int]            # per layer: W (a ring) or C
    ring: list[bool]            # per layer: is a ring buffer
    layer_types: list[str]      # per layer: the model's attention type (its mask key)
    cache_len: int

    @property
    def window(self) -> int:
        return min(s for s, r in zip(self.slots, self.ring) if r)


def static_layers(model, cache_len: int) -> list:
    """transformers' own StaticCache layers for the config: which layers slide, and their windows."""
    from transformers import StaticCache

    return StaticCache(config=model.config, max_cache_len=cache_len).layers


def needs_ring(model, cache_len: int) -> bool:
    """A sliding layer whose window is shorter than the cache: the static export would write out of range."""
    return any(getattr(layer, "is_sliding", False) and layer.max_cache_len < cache_len
               for layer in static_layers(model, cache_len))


def cache_plan(model, cache_len: int) -> CachePlan:
    """The per-layer cache, or exit 2 naming what a ring cannot hold: a sliding layer that is not plain
    sliding-window attention (chunked attention, say: its mask is not a window), or sliding layers with
    different windows (the model passes one mask for all of them)."""
    from transformers.cache_utils import get_layer_types_and_kwargs

    layers = static_layers(model, cache_len)
    types = get_layer_types_and_kwargs(model.config.get_text_config(decoder=True))[0]
    for index, (layer, kind) in enumerate(zip(layers, types)):
        if kind not in RING_TYPES or not hasattr(layer, "max_cache_len"):
            raise UsageError(f"--cache-len {cache_len} exceeds a sliding attention window, and layer {index} is "
                             f"'{kind}' attention, which a window-sized ring cache cannot hold; use --cache-len "
                             f"{min(getattr(x, 'max_cache_len', cache_len) for x in layers)} or less")
    ring = [bool(getattr(layer, "is_sliding", False)) for layer in layers]
    slots = [int(layer.max_cache_len) for layer in layers]
    windows = sorted({s for s, r in zip(slots, ring) if r})
    if len(windows) > 1:
        raise UsageError(f"--cache-len {cache_len} exceeds sliding attention windows of different sizes "
                         f"({', '.join(map(str, windows))}) in one model, which share one mask; use --cache-len "
                         f"{windows[0]} or less")
    return CachePlan(slots, ring, list(types), cache_len)


def ring_sources(prompt_len: torch.Tensor, slots: int, length: int) -> torch.Tensor:
    """For each ring slot s, the prompt position it keeps after a prefill: the latest real p < prompt_len
    with p % W == s (0 when there is none: the slot is masked until decode writes it). Only non-negative
    operands reach ``%``, whose rounding on negatives differs between runtimes."""
    last = prompt_len.reshape(1) - 1
    slot = torch.arange(slots, dtype=last.dtype)
    source = last - (last - slot + slots) % slots
    return source.clamp(0, length - 1)


class RingLayer:
    """One layer's cache while the export traces: ``keys``/``values`` (1, heads, slots, dim) and ``length``
    (tokens written so far) in, the updated ones kept for the outputs. Duck-types transformers' cache
    layer (the model only calls ``update`` and reads ``is_sliding``)."""

    is_compileable = True
    is_initialized = True

    def __init__(self, slots: int, ring: bool, keys=None, values=None, length=None, prompt_len=None):
        self.slots, self.is_sliding = slots, ring
        self.keys, self.values, self.length, self.prompt_len = keys, values, length, prompt_len

    def update(self, key_states, value_states, *args, **kwargs):
        if self.prompt_len is not None:
            return self._prefill(key_states, value_states)
        return self._decode(key_states, value_states)

    def _decode(self, key_states, value_states):
        slot = self.length % self.slots if self.is_sliding else self.length
        hit = (torch.arange(self.slots) == slot).view(1, 1, self.slots, 1)
        self.keys = torch.where(hit, key_states.to(self.keys.dtype), self.keys)
        self.values = torch.where(hit, value_states.to(self.values.dtype), self.values)
        self.length = self.length + 1
        return self.keys, self.values

    def _prefill(self, key_states, value_states):
        length = key_states.shape[-2]
        if self.is_sliding:
            source = ring_sources(self.prompt_len, self.slots, length)
            self.keys, self.values = key_states.index_select(2, source), value_states.index_select(2, source)
        else:
            pad = (0, 0, 0, self.slots - length)
            self.keys = torch.nn.functional.pad(key_states, pad)
            self.values = torch.nn.functional.pad(value_states, pad)
        self.length = self.prompt_len.clone()
        return key_states, value_states

    def get_seq_length(self):
        return self.length

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.slots, 0
