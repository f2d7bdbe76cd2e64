"""GGUF checkpoints as a model source (``model.gguf`` or ``gguf:DIR/model.gguf``): what teams ship to phones is
often a llama.cpp checkpoint, and transformers reads it.

- Plan time (before any work): :func:`describe` reads the file's metadata only (gguf's reader maps the file,
  nothing is dequantized): its architecture, its own quantization type (``general.file_type``, e.g. Q4_1, else
  the most common weight type) and the config transformers derives from it. An architecture transformers cannot
  load from GGUF is one line, exit 2, naming it.
- Run time: :func:`materialize` loads the model through transformers (``from_pretrained(dir, gguf_file=...)``:
  every weight is dequantized to float32), copies its state dict into a plain model of the same config
  (transformers refuses ``save_pretrained`` of a GGUF-loaded model) and saves it with the GGUF's own tokenizer
  into the run's scratch folder, as an ``hf:`` directory every task and target already reads. The weights the
  artifacts start from are the GGUF's dequantized values; the report says so (``model.gguf``).

GGUF is not pickle: nothing here runs code from the file.
"""

from __future__ import annotations

import functools
from collections import Counter
from pathlib import Path

from edgeport.diagnostics import first_line
from edgeport.errors import UsageError

PREFIX = "gguf:"
SUFFIX = ".gguf"


def is_gguf(spec: str) -> bool:
    return spec.startswith(PREFIX) or (spec.lower().endswith(SUFFIX) and not spec.startswith("hf:"))


def gguf_path(spec: str) -> Path:
    path = Path(spec.removeprefix(PREFIX))
    if not path.is_file():
        raise UsageError(f"GGUF file not found: {path}")
    return path


def as_hf_source(opts, progress):
    """``opts`` with a GGUF source replaced by its materialized ``hf:`` directory (in the run's scratch folder,
    removed before the output is published); ``opts.source.gguf`` keeps what the report says about the file."""
    from dataclasses import replace

    from edgeport.core.scratch import scratch_dir

    if not is_gguf(opts.source.model):
        return opts
    info = {k: v for k, v in describe(opts.source.model).items() if k != "config"}
    progress(f"dequantizing {info['file']} ({info['quantization']}) to float32")
    dest = materialize(opts.source.model, scratch_dir("gguf-source-"))
    return replace(opts, source=replace(opts.source, model=f"hf:{dest}", gguf=info))


@functools.lru_cache(maxsize=4)
def describe(spec: str) -> dict:
    """``{"spec", "file", "architecture", "quantization", "tensor_types", "config"}`` from the metadata alone."""
    path = gguf_path(spec)
    try:
        import gguf
    except ImportError as exc:
        raise UsageError("GGUF sources need the gguf and accelerate packages: pip install 'edgeport[hf]'") from exc
    try:
        reader = gguf.GGUFReader(str(path))
        arch = str(field_value(reader, "general.architecture") or "unknown")
        types = Counter(gguf.GGMLQuantizationType(int(t.tensor_type)).name for t in reader.tensors)
    except Exception as exc:
        raise UsageError(f"cannot read GGUF file {path}: {first_line(exc)}") from exc
    config = gguf_config(path, arch)
    from edgeport.core.proc import redirected

    with redirected():   # importing the model class wakes torchao's loader chatter: not the terminal's
        check_declared(path, config, sum(int(t.n_elements) for t in reader.tensors))
    return {"spec": spec, "file": path.name, "architecture": arch, "quantization": file_type(gguf, reader, types),
            "tensor_types": dict(types), "config": config,
            "weights": "the GGUF's weights dequantized to float32 by transformers"}


def check_declared(path: Path, config: dict, held: int) -> None:
    """The GGUF held to what its metadata declares before transformers dequantizes it: a few-KB file whose
    metadata implies billions of parameters it does not carry would be materialised in full first (a 70 KB
    file with ``feed_forward_length = 16e6`` took 19 GB and the OOM killer). Same check as an ``hf:`` directory's
    (:func:`edgeport.sources.hf_declared.check_implied`), with the tensors' element counts as what it holds."""
    import transformers

    from edgeport.sources.hf_declared import check_implied

    names = config.get("architectures") or []
    model_class = getattr(transformers, names[0], None) if names and isinstance(names[0], str) else None
    try:
        settings = transformers.AutoConfig.for_model(**config)
    except Exception:  # noqa: BLE001 - transformers read this config from the file a moment ago
        return
    check_implied(f"{path.name}: its metadata", "its tensors", settings, model_class, held)


def field_value(reader, key: str):
    field = reader.fields.get(key)
    if field is None or not field.data:
        return None
    part = field.parts[field.data[0]]
    try:
        return bytes(part).decode("utf-8") if field.types and field.types[0].name == "STRING" else part.tolist()[0]
    except Exception:
        return None


def file_type(gguf, reader, types: Counter) -> str:
    """The file's own quantization (``general.file_type``: ``MOSTLY_Q4_1`` -> ``Q4_1``), else the most common
    type among its tensors that are not float (the norms stay F32 in every GGUF)."""
    value = field_value(reader, "general.file_type")
    try:
        return gguf.LlamaFileType(int(value)).name.removeprefix("MOSTLY_")
    except (TypeError, ValueError):
        quantized = Counter({k: v for k, v in types.items() if k not in ("F32", "F16", "BF16")})
        return (quantized or types).most_common(1)[0][0] if types else "unknown"


def gguf_config(path: Path, arch: str) -> dict:
    """The config transformers derives from the GGUF's metadata (UsageError naming an architecture it cannot load)."""
    import transformers

    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    if arch not in GGUF_SUPPORTED_ARCHITECTURES and arch.replace("moe", "_moe") not in GGUF_SUPPORTED_ARCHITECTURES:
        raise UsageError(f"{path.name}: transformers cannot load GGUF architecture {arch!r} "
                         f"(it loads: {', '.join(sorted(GGUF_SUPPORTED_ARCHITECTURES))})")
    try:
        config = transformers.AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True)
    except Exception as exc:
        raise UsageError(f"{path.name}: transformers cannot load GGUF architecture {arch!r}: {first_line(exc)}") from exc
    out = config.to_dict()
    if not out.get("architectures"):
        out["architectures"] = [causal_class(config.model_type)]
    return out


def causal_class(model_type: str) -> str | None:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)


def materialize(spec: str, dest: Path) -> Path:
    """The GGUF as a plain Hugging Face directory at ``dest`` (float32 safetensors, config, the GGUF's tokenizer)."""
    import torch
    import transformers

    path = gguf_path(spec)
    where, name = str(path.parent), path.name
    try:
        loaded = transformers.AutoModelForCausalLM.from_pretrained(where, gguf_file=name, dtype=torch.float32,
                                                                    local_files_only=True)
        tokenizer = transformers.AutoTokenizer.from_pretrained(where, gguf_file=name, local_files_only=True)
    except Exception as exc:
        raise UsageError(f"cannot load GGUF {path}: {first_line(exc)}") from exc
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.architectures = [type(loaded).__name__]
    plain = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict())
    del loaded
    dest.mkdir(parents=True, exist_ok=True)
    plain.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    return dest
