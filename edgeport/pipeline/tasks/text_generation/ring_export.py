"""Export ``prefill_<L>`` and ``decode`` with per-layer ring caches (see :mod:`.ring_cache` for the design).

The model's own forward does all the work; :class:`RingLM` only builds its cache from named tensors, hands
it the attention masks in the form the model takes them (a ``{layer type: mask}`` dict or one tensor, bool
for SDPA or an additive float mask for eager attention, as transformers' own generate passed them while
capturing), and returns ``{"logits", "cache_k_<l>", "cache_v_<l>", "cache_len_<l>"}``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

from edgeport.errors import UsageError
from edgeport.pipeline.tasks.text_generation.ring_cache import CachePlan, RingLayer, cache_plan


@dataclass(frozen=True)
class MaskStyle:
    keys: tuple[str, ...] | None    # the model's mask dict keys (layer types) that carry a mask, or None: one tensor
    dtype: torch.dtype              # bool (SDPA) or a float dtype (an additive mask)
    unmasked: tuple[str, ...] = ()  # dict keys the model leaves None (passed on as None)

    def input_name(self, key: str | None) -> str:
        return "attention_mask" if key is None else f"attention_mask_{key}"


def mask_style(decode_mask, plan: CachePlan) -> MaskStyle:
    """The form of the decode mask transformers' generate passed (captured), checked against the layers."""
    if isinstance(decode_mask, dict):
        keys = tuple(k for k, v in decode_mask.items() if v is not None)
        masks = [decode_mask[k] for k in keys]
        if not set(keys) <= set(plan.layer_types) or not masks:
            raise UsageError(f"this model's attention masks ({', '.join(decode_mask)}) do not match its layer "
                             f"types ({', '.join(sorted(set(plan.layer_types)))}): a ring cache cannot feed them")
        return MaskStyle(keys, masks[0].dtype, tuple(k for k, v in decode_mask.items() if v is None))
    if isinstance(decode_mask, torch.Tensor) and len(set(plan.ring)) == 1:
        return MaskStyle(None, decode_mask.dtype)
    raise UsageError("this model builds its attention masks inside its forward (no 4-D decode mask to feed): "
                     "a ring cache's slot order cannot reach them; use a --cache-len within the sliding window")


def as_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.bool:
        return allowed
    return torch.where(allowed, torch.zeros((), dtype=dtype), torch.full((), torch.finfo(dtype).min, dtype=dtype))


class RingLM(torch.nn.Module):
    """The causal LM as one flat signature: prefill when ``prefill_len`` is set, else decode."""

    def __init__(self, model, plan: CachePlan, style: MaskStyle, prefill_len: int | None = None):
        super().__init__()
        self.model, self.plan, self.style, self.prefill_len = model, plan, style, prefill_len
        params = inspect.signature(model.forward).parameters
        self.cache_arg = "cache" if "cache" in params else "past_key_values"
        self.training = False

    def forward(self, **kw):
        from transformers.cache_utils import Cache

        layers = [RingLayer(slots, ring, kw.get(f"cache_k_{i}"), kw.get(f"cache_v_{i}"), kw.get(f"cache_len_{i}"),
                            kw.get("prompt_len"))
                  for i, (slots, ring) in enumerate(zip(self.plan.slots, self.plan.ring))]
        masks = self.prefill_masks() if self.prefill_len else self.decode_masks(kw)
        out = self.model(input_ids=kw["input_ids"], position_ids=kw["position_ids"], attention_mask=masks,
                         use_cache=True, **{self.cache_arg: Cache(layers=layers)})
        result = {"logits": out.logits}
        for i, layer in enumerate(layers):
            result.update({f"cache_k_{i}": layer.keys, f"cache_v_{i}": layer.values, f"cache_len_{i}": layer.length})
        return result

    def decode_masks(self, kw: dict):
        if self.style.keys is None:
            return kw[self.style.input_name(None)]
        return {key: kw[self.style.input_name(key)] for key in self.style.keys} | dict.fromkeys(self.style.unmasked)

    def prefill_masks(self):
        """Causal within the prompt; sliding layers also within the window (key_pos > pos - W, as
        transformers' sliding_window_overlay). Constants: the prompt length is the signature's."""
        length = self.prefill_len
        row, col = torch.arange(length).view(length, 1), torch.arange(length).view(1, length)
        causal = col <= row
        allowed = {"full_attention": causal, "sliding_attention": causal & (col > row - self.plan.window)}
        if self.style.keys is None:
            kind = "sliding_attention" if self.plan.ring[0] else "full_attention"
            return as_mask(allowed[kind], self.style.dtype).view(1, 1, length, length)
        return ({key: as_mask(allowed[key], self.style.dtype).view(1, 1, length, length) for key in self.style.keys}
                | dict.fromkeys(self.style.unmasked))


def prefill_sample(model, length: int) -> dict:
    low = min(3, model.config.vocab_size - 1)
    ids = torch.randint(low, model.config.vocab_size, (1, length), generator=torch.Generator().manual_seed(1))
    return {"input_ids": ids, "position_ids": torch.arange(length).view(1, length),
            "prompt_len": torch.tensor(length, dtype=torch.long)}


def decode_sample(module: RingLM, prefill: dict, prefilled: dict) -> dict:
    """Decode's example inputs: the token after the sample prompt, at slot pos, on the cache prefill left."""
    pos = int(prefill["prompt_len"])
    sample = {"input_ids": prefilled["logits"][:, -1:].argmax(-1), "position_ids": torch.tensor([[pos]])}
    keys = module.style.keys or (None,)
    for key in keys:
        kind = key or ("sliding_attention" if module.plan.ring[0] else "full_attention")
        slots = module.plan.window if kind == "sliding_attention" else module.plan.cache_len
        allowed = torch.arange(slots) <= pos
        sample[module.style.input_name(key)] = as_mask(allowed, module.style.dtype).view(1, 1, 1, slots)
    for name, value in prefilled.items():
        if name.startswith("cache_"):
            sample[name] = value.detach().clone()
    return sample


def export_ring(model, lens, cache_len: int, decode_mask) -> dict:
    """signature -> (flat ExportedProgram, its sample kwargs), prefill per length then decode.
    ``decode_mask`` is the attention mask transformers' generate passed to decode while capturing."""
    plan = cache_plan(model, cache_len)
    style = mask_style(decode_mask, plan)
    flat = {}
    with torch.no_grad():
        for length in lens:
            module = RingLM(model, plan, style, length)
            sample = prefill_sample(model, length)
            flat[f"prefill_{length}"] = (_export(module, sample), sample)
        prefilled = module(**sample)
        decoder = RingLM(model, plan, style)
        sample = decode_sample(decoder, flat[f"prefill_{lens[-1]}"][1], prefilled)
        flat["decode"] = (_export(decoder, sample), sample)
    return flat


def _export(module: torch.nn.Module, sample: dict):
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)
        return torch.export.export(module, (), kwargs={k: v.clone() for k, v in sample.items()}, strict=False)
