"""The generative layout: what each signature takes and returns, by role, and how to feed it.

Written as ``DIR/exported/layout.json`` beside the flat programs and copied into manifest.json, it is the
one description the greedy loop, the judge, ``edgeport generate`` and an app all follow:

- ``prefill_<L>``: ``input_ids (1, L)``, ``position_ids (1, L)`` = 0..L-1, ``cache_len_<l>`` = 0 per layer
  (prefill creates the cache); returns ``logits (1, L, V)`` and the cache (``cache_k_<l>``, ``cache_v_<l>``
  of shape (1, kv_heads, C, head_dim), ``cache_len_<l>`` = L).
- ``decode``: ``input_ids (1, 1)``, ``position_ids (1, 1)`` = pos, the mask (``attention_mask`` or a
  family's variant of the name) (1, 1, 1, C) bool, True on slots 0..pos, and the whole cache; returns
  ``logits (1, 1, V)`` and the updated cache (``cache_len_<l>`` = pos + 1).
- ring caches (a sliding-window model with C above its window W, :mod:`.ring_cache`): a sliding layer's
  keys/values have W slots, its mask (1, 1, 1, W) is True on slots 0..min(pos, W - 1), and prefill takes
  ``prompt_len`` (the real prompt length) instead of ``cache_len_<l>``.

A prompt shorter than a prefill length is right-padded into it; the cache lengths are then set back to the
real length, so the padded slots are masked out and overwritten before they are ever attended.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

SCHEMA = "edgeport.generation/1"
LAYOUT_FILE = "layout.json"
EXPORTED_DIR = "exported"


@dataclass
class Layout:
    model: str
    architecture: str | None
    vocab_size: int
    num_layers: int
    cache_len: int
    prefill_lens: list[int]
    gen_tokens: int
    bos_token_id: int | None
    eos_token_ids: list[int]
    signatures: dict = field(default_factory=dict)   # name -> {"file", "inputs": [...], "outputs": [...]}
    cache: list = field(default_factory=list)        # [{"name", "layer", "kind", "shape", "dtype"}]
    schema: str = SCHEMA

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "Layout":
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def save(self, directory: Path) -> Path:
        path = directory / LAYOUT_FILE
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        return path

    @property
    def signature_names(self) -> list[str]:
        return [prefill_name(n) for n in self.prefill_lens] + ["decode"]

    def inputs(self, signature: str) -> list[dict]:
        return self.signatures[signature]["inputs"]

    def cache_names(self) -> list[str]:
        return [c["name"] for c in self.cache]

    def kv_cache_bytes(self) -> int:
        """Bytes of keys and values at the cache length (as the program holds them, before any runtime padding)."""
        return sum(int(np.prod(c["shape"])) * np.dtype(c["dtype"]).itemsize for c in self.cache if c["kind"] != "length")


def prefill_name(length: int) -> str:
    return f"prefill_{length}"


def is_mask(name: str) -> bool:
    return name.startswith("attention_mask")


def describe_tensor(name: str, value) -> dict:
    return {"name": name, "shape": [int(s) for s in value.shape], "dtype": str(value.dtype).removeprefix("torch.")}


def cache_entries(decode_inputs: list[dict]) -> list[dict]:
    kinds = {"k": "key", "v": "value", "len": "length"}
    out = []
    for entry in decode_inputs:
        parts = entry["name"].split("_")
        if parts[0] == "cache":
            out.append({**entry, "kind": kinds[parts[1]], "layer": int(parts[2])})
    return out


def prefill_feeds(layout: Layout, length: int, ids: list[int]) -> dict[str, np.ndarray]:
    """Feeds of ``prefill_<length>`` for ``ids`` right-padded to ``length`` (pad id 0: masked out later)."""
    padded = np.zeros((1, length), np.int64)
    padded[0, : len(ids)] = ids
    feeds = {}
    for entry in layout.inputs(prefill_name(length)):
        name = entry["name"]
        if name == "input_ids":
            feeds[name] = padded
        elif name == "position_ids":
            feeds[name] = np.arange(length, dtype=np.int64)[None]
        elif name.startswith("cache_len_"):
            feeds[name] = np.zeros((), np.int64)
        elif name == "prompt_len":  # ring caches: which prompt positions are real (see ring_cache)
            feeds[name] = np.array(len(ids), np.int64)
        elif is_mask(name):
            feeds[name] = prefill_mask(entry, length, layout.cache_len)
        else:
            raise ValueError(f"prefill input {name!r} has no known role")
    return feeds


def prefill_mask(entry: dict, length: int, cache_len: int) -> np.ndarray:
    """A prefill that takes a mask (eager attention): 2-D padding mask of ones, or a 4-D causal mask over
    the slots (row i attends slots 0..i)."""
    if len(entry["shape"]) == 2:
        return np.ones(entry["shape"], np.dtype(entry["dtype"]))
    return as_mask(np.tril(np.ones((length, cache_len), bool)), entry)


def as_mask(allowed: np.ndarray, entry: dict) -> np.ndarray:
    """A bool "may attend" pattern in the mask's own form: bool as is, float as an additive mask (0 where
    allowed, the dtype's lowest number elsewhere, as transformers builds it)."""
    dtype = np.dtype(entry["dtype"])
    if dtype == np.bool_:
        mask = allowed
    else:
        mask = np.where(allowed, 0.0, np.finfo(dtype).min).astype(dtype)
    return mask.reshape(entry["shape"])


def decode_feeds(layout: Layout, token: int, pos: int, cache: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Feeds of ``decode`` writing ``token`` at slot ``pos`` (attending to slots 0..pos)."""
    feeds = {}
    for entry in layout.inputs("decode"):
        name = entry["name"]
        if name == "input_ids":
            feeds[name] = np.array([[token]], np.int64)
        elif name == "position_ids":
            feeds[name] = np.array([[pos]], np.int64)
        elif is_mask(name):  # S slots: C, or a sliding layer's ring of W (all W real once pos >= W - 1)
            allowed = np.zeros(entry["shape"][-1], bool)
            allowed[: pos + 1] = True
            feeds[name] = as_mask(allowed, entry)
        elif name in cache:
            feeds[name] = cache[name]
        else:
            raise ValueError(f"decode input {name!r} has no known role")
    return feeds


def set_length(cache: dict[str, np.ndarray], length: int) -> dict[str, np.ndarray]:
    """The cache with every layer's write slot set to ``length`` (after a right-padded prefill)."""
    return {k: (np.full_like(v, length) if k.startswith("cache_len_") else v) for k, v in cache.items()}
