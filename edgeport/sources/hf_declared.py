"""An ``hf:`` directory held to what its files declare, before transformers builds the module.

transformers materialises every parameter the config implies (random-initialising those the weight files
lack) before anything could weigh it: a few-KB folder with ``intermediate_size = 16e6`` or
``num_hidden_layers = 20000`` costs gigabytes and minutes before the pre-flight check. So, from
``config.json`` and the safetensors headers alone (no tensor read): the parameters the config implies
against the elements the files hold. The count is the model class's own, built on the meta device (no
memory) with one and with two layers and extrapolated to the config's layer count (so 20,000 layers cost
two tiny builds), exact for every architecture whose layers repeat; a config the meta build refuses falls
back to a decoder formula (embeddings + per layer attention and MLP). A config implying far more than the
files hold (more than :data:`SLACK` times) is exit 2, as is one whose implied fp32 weights exceed the
memory this machine has.
"""

from __future__ import annotations

import math
from pathlib import Path

from edgeport.errors import UsageError, load_json

SLACK = 4
ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
            "F8_E4M3": 1, "F8_E5M2": 1, "C64": 8, "U16": 2, "U32": 4, "U64": 8}


def check_declared(where: str, config, model_class=None) -> None:
    """Refuse (UsageError) a local ``hf:`` directory whose config implies far more parameters than its
    safetensors files hold, or more fp32 weight bytes than this machine has memory."""
    folder = Path(where)
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if files:
        held = sum(_header_elements(f) for f in files)
        check_implied(f"hf:{where}: config.json", "its safetensors files", config, model_class, held)


def check_implied(label: str, files: str, config, model_class, held: int) -> None:
    """Refuse (UsageError) a config implying more than :data:`SLACK` x the ``held`` elements its ``files``
    hold, or more fp32 weight bytes than this machine has memory (``label`` names the config)."""
    from edgeport.core.memory import available_memory

    implied = (meta_parameters(model_class, config) if model_class is not None else None) or implied_parameters(config)
    if implied is None:
        return
    if implied > SLACK * max(held, 1):
        raise UsageError(f"{label} implies about {implied:,} parameters but {files} hold {held:,}; refusing to "
                         "build it (the missing ones would be made up)")
    if 4 * implied > available_memory():
        raise UsageError(f"{label} implies {4 * implied / 1e9:.1f} GB of fp32 weights, more than the "
                         f"{available_memory() / 1e9:.1f} GB available; refusing to build it")


def meta_parameters(model_class, config) -> int | None:
    """Parameters of ``model_class`` at ``config``, from meta-device builds at one and two layers; None when
    the config names no layer count or the meta build fails (the real build will say why)."""
    layers = getattr(config, "num_hidden_layers", None)
    if not isinstance(layers, int) or layers < 1:
        return None
    try:
        one, two = (_meta_count(model_class, config, n) for n in (1, 2))
    except Exception:  # noqa: BLE001 - a config the class refuses: the formula, then the real build, judge it
        return None
    return one + (layers - 1) * max(two - one, 0)


def _meta_count(model_class, config, layers: int) -> int:
    import copy

    import torch

    small = copy.deepcopy(config)
    for key, value in list(vars(small).items()):   # per-layer lists (layer_types, ...) cut to the new count
        if isinstance(value, list) and len(value) == config.num_hidden_layers:
            setattr(small, key, value[:layers])
    small.num_hidden_layers = layers
    with torch.device("meta"):
        model = (model_class.from_config(small, trust_remote_code=False) if model_class.__name__.startswith("Auto")
                 else model_class._from_config(small))
    return sum(p.numel() for p in model.parameters())


def implied_parameters(config) -> int | None:
    """Embedding + layers x (attention 4h^2 + MLP 3hI) of a decoder config, or None if it names none."""
    hidden, layers = getattr(config, "hidden_size", None), getattr(config, "num_hidden_layers", None)
    inner = getattr(config, "intermediate_size", None) or (4 * hidden if isinstance(hidden, int) else None)
    vocab = getattr(config, "vocab_size", None) or 0
    if not all(isinstance(v, int) and v >= 0 for v in (hidden, layers, inner, vocab)):
        return None
    return vocab * hidden + layers * (4 * hidden * hidden + 3 * hidden * inner)


def _header_elements(path: Path) -> int:
    """Elements of every tensor a safetensors header declares (the header only, length checked first)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        length = int.from_bytes(f.read(8), "little")
        if length > size - 8:
            raise UsageError(f"{path}: header claims {length} bytes, the file has {size}; not safetensors")
        try:
            header = load_json(f.read(length), f"{path}: its header")
        except ValueError:
            raise UsageError(f"{path}: its header is not JSON; not safetensors") from None
    total = 0
    for name, info in header.items() if isinstance(header, dict) else ():
        if name != "__metadata__" and isinstance(info, dict) and isinstance(info.get("shape"), list):
            total += math.prod(int(d) for d in info["shape"] if isinstance(d, int))
    return total


def check_documents(where: str) -> None:
    """Every ``*.json`` of a local ``hf:`` directory (config, generation config, tokenizer files, weight
    index) parsed once through the depth-bounded reader before transformers parses it with the interpreter's
    recursion limit (which a library may have raised: a C stack overflow): nested too deep is exit 2 naming
    the file. Other faults are left for transformers to report."""
    directory = Path(where)
    if not directory.is_dir():
        return  # a hub id: the user's own local cache
    for path in sorted(directory.glob("*.json")):
        try:
            load_json(path.read_bytes(), str(path))
        except (OSError, ValueError):
            continue
