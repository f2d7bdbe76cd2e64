"""Hugging Face models as edgeport model sources (``hf:<dir or hub id>``).

Nothing is downloaded: a hub id resolves only from the local cache. A repository's own Python code
(``auto_map`` in its config) runs only with ``--trust-remote-code``: transformers would otherwise ask on
the terminal, under edgeport's progress line, and one "y" would run it. The model is called with keyword
inputs and returns a ``ModelOutput``; :mod:`edgeport.sources.flat_io` turns that into the plain
positional-in, tuple-out signature every target converts.
"""

from __future__ import annotations

from pathlib import Path

from edgeport.diagnostics import first_line
from edgeport.errors import UsageError
from edgeport.sources.spec import InputSpec, LoadedModel, SourceOptions

TASKS = {
    "base": "AutoModel",
    "feature-extraction": "AutoModel",
    "text-classification": "AutoModelForSequenceClassification",
    "causal-lm": "AutoModelForCausalLM",
    "masked-lm": "AutoModelForMaskedLM",
    "image-classification": "AutoModelForImageClassification",
}


def load_config(where: str, trust_remote_code: bool):
    """The model's config from a local directory or the local cache, never the network."""
    try:
        import transformers
    except ImportError as exc:
        raise UsageError("hf: models need transformers: pip install 'edgeport[hf]'") from exc
    from edgeport.sources.hf_declared import check_documents

    check_documents(where)
    try:
        config = transformers.AutoConfig.from_pretrained(where, local_files_only=True, trust_remote_code=trust_remote_code)
    except Exception as exc:
        kind = "directory" if Path(where).is_dir() else "hub id (looked only in the local cache; no network)"
        hint = " (it needs its own code: pass --trust-remote-code to allow it)" if _wants_remote_code(exc) else ""
        raise UsageError(f"cannot load Hugging Face config from {kind} {where!r}: {first_line(exc)}{hint}") from exc
    auto_map = getattr(config, "auto_map", None)
    if auto_map and not trust_remote_code:  # even with a built-in model_type: the repository asks for its code
        raise UsageError(f"{where!r}: its config names the repository's own code (auto_map: "
                         f"{', '.join(sorted(map(str, auto_map)))[:200]}); pass --trust-remote-code to allow it")
    return config


def _wants_remote_code(exc: BaseException) -> bool:
    return "trust_remote_code" in str(exc) or "custom code" in str(exc)


def load_pretrained(model_class, where: str, config, trust_remote_code: bool):
    """Only Auto classes can resolve to repository code; a concrete transformers class never does."""
    from edgeport.sources.hf_declared import check_declared

    check_declared(where, config, model_class)  # from config.json and the safetensors headers, before any allocation
    remote = {"trust_remote_code": trust_remote_code} if model_class.__name__.startswith("Auto") else {}
    try:
        return model_class.from_pretrained(where, config=config, local_files_only=True, attn_implementation="eager",
                                           **remote).eval()
    except Exception as exc:
        raise UsageError(f"cannot load {model_class.__name__} from {where!r}: {first_line(exc)}") from exc


def load_hf_model(spec: str, options: SourceOptions, inputs: list[InputSpec]) -> LoadedModel:
    import transformers

    from edgeport.sources.flat_io import forward_parameters, wrap

    where = spec[3:]
    config = load_config(where, options.trust_remote_code)
    if hasattr(config, "use_cache"):
        config.use_cache = False  # a KV cache object is not a tensor output
    model_class = model_class_for(transformers, config, options.hf_task)
    model = load_pretrained(model_class, where, config, options.trust_remote_code)
    inputs = inputs or default_inputs(config, options.seq_len, forward_parameters(model))
    return wrap(spec, model, {i.name: i.example(seed=0) for i in inputs})


def model_class_for(transformers, config, task: str):
    if task != "auto":
        if task not in TASKS:
            raise UsageError(f"unknown --hf-task {task!r}; known: auto, {', '.join(TASKS)}")
        return getattr(transformers, TASKS[task])
    for arch in getattr(config, "architectures", None) or []:
        if hasattr(transformers, arch):
            return getattr(transformers, arch)
    return transformers.AutoModel


def default_inputs(config, seq_len: int, parameters: tuple[str, ...] | list[str] = ()) -> list[InputSpec]:
    """Text models get token ids + attention mask; vision models get pixel values at the config's size.
    The model's ``forward`` decides when it names one and not the other: BEiT's config has a
    ``vocab_size`` (its masked-image-modeling codebook) but the model takes ``pixel_values``."""
    vision_only = "pixel_values" in parameters and "input_ids" not in parameters
    if getattr(config, "vocab_size", None) and not vision_only:
        return [InputSpec("input_ids", (1, seq_len), "int64", 0, config.vocab_size),
                InputSpec("attention_mask", (1, seq_len), "int64", 1, 2)]
    if hasattr(config, "image_size"):
        size = config.image_size if isinstance(config.image_size, int) else config.image_size[0]
        return [InputSpec("pixel_values", (1, getattr(config, "num_channels", 3), size, size), "float32")]
    raise UsageError("cannot guess inputs for this Hugging Face model: pass --input NAME:SHAPE:DTYPE")
