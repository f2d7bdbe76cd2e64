"""Hugging Face models as edgeport model sources (``hf:<dir or hub id>``).

A raw HF model takes keyword arguments, optional ``None`` inputs and returns a ``ModelOutput``; converters
want positional tensors in and a tuple of tensors out. :class:`TensorIO` is that adapter, so every target
sees the same plain signature. Nothing is downloaded: a hub id resolves only from the local cache.
"""

from __future__ import annotations

from pathlib import Path

from edgeport.errors import UsageError
from edgeport.model_source import InputSpec, LoadedModel

TASKS = {
    "base": "AutoModel",
    "feature-extraction": "AutoModel",
    "text-classification": "AutoModelForSequenceClassification",
    "causal-lm": "AutoModelForCausalLM",
    "masked-lm": "AutoModelForMaskedLM",
    "image-classification": "AutoModelForImageClassification",
}


def _adapter_class():
    import torch

    class TensorIO(torch.nn.Module):
        """Positional tensors in (in ``names`` order), the tensor fields of the ModelOutput out, as a tuple."""

        def __init__(self, model, names):
            super().__init__()
            self.model = model
            self.names = tuple(names)

        def forward(self, *args):
            out = self.model(**dict(zip(self.names, args)), return_dict=True)
            return tuple(v for v in out.to_tuple() if isinstance(v, torch.Tensor))

    return TensorIO


def load_hf_model(spec: str, where: str, task: str, seq_len: int, inputs: list[InputSpec]) -> LoadedModel:
    try:
        import transformers
    except ImportError as exc:
        raise UsageError("hf: models need transformers: pip install 'edgeport[hf]'") from exc
    local = Path(where).is_dir()
    try:
        config = transformers.AutoConfig.from_pretrained(where, local_files_only=True)
    except Exception as exc:
        kind = "directory" if local else "hub id (looked only in the local cache; no network)"
        raise UsageError(f"cannot load Hugging Face config from {kind} {where!r}: {str(exc).splitlines()[0]}") from exc
    if hasattr(config, "use_cache"):
        config.use_cache = False  # a KV cache object is not a tensor output
    model_class = _model_class(transformers, config, task)
    try:
        model = model_class.from_pretrained(where, config=config, local_files_only=True, attn_implementation="eager")
    except Exception as exc:
        raise UsageError(f"cannot load {model_class.__name__} from {where!r}: {str(exc).splitlines()[0]}") from exc
    model.eval()
    if not inputs:
        inputs = default_inputs(config, seq_len)
    names = [i.name for i in inputs]
    example = tuple(i.example(seed=0) for i in inputs)
    return LoadedModel(spec, _adapter_class()(model, names), example, input_names=tuple(names))


def _model_class(transformers, config, task: str):
    if task != "auto":
        if task not in TASKS:
            raise UsageError(f"unknown --hf-task {task!r}; known: auto, {', '.join(TASKS)}")
        return getattr(transformers, TASKS[task])
    for arch in getattr(config, "architectures", None) or []:
        if hasattr(transformers, arch):
            return getattr(transformers, arch)
    return transformers.AutoModel


def default_inputs(config, seq_len: int) -> list[InputSpec]:
    """Text models get token ids + attention mask; vision models get pixel values at the config's size."""
    if hasattr(config, "vocab_size") and config.vocab_size:
        return [InputSpec("input_ids", (1, seq_len), "int64", 0, config.vocab_size),
                InputSpec("attention_mask", (1, seq_len), "int64", 1, 2)]
    if hasattr(config, "image_size"):
        size = config.image_size if isinstance(config.image_size, int) else config.image_size[0]
        return [InputSpec("pixel_values", (1, getattr(config, "num_channels", 3), size, size), "float32")]
    raise UsageError("cannot guess inputs for this Hugging Face model: pass --input NAME:SHAPE:DTYPE")
