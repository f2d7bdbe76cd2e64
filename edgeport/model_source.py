"""Turn a MODEL spec into an eager module and its example inputs.

Specs: ``path/file.py:callable``, ``package.module:callable``, ``program.pt2`` (a saved ExportedProgram),
``hf:<save_pretrained dir | hub id in the local cache>``. Model code runs only from the file or module the
user named; a ``.pt2`` is inspected first and nothing in it is unpickled beyond torch's weights-only loader
unless the user passed ``--trust-pickle`` (:mod:`edgeport.sources.pt2_archive`). Every bad spec becomes a one-line
:class:`UsageError` (exit 2).
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgeport.errors import UsageError

DTYPES = {
    "float32": "float32", "fp32": "float32", "float": "float32",
    "float16": "float16", "fp16": "float16", "half": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "int64": "int64", "long": "int64", "int32": "int32", "int": "int32",
    "int8": "int8", "uint8": "uint8", "bool": "bool",
}


@dataclass(frozen=True)
class InputSpec:
    """One ``--input NAME:SHAPE:DTYPE[:LOW..HIGH]`` flag: shape, dtype and value range of an example input."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    low: float | None = None
    high: float | None = None

    def example(self, seed: int = 0):
        import torch

        gen = torch.Generator().manual_seed(seed)
        dtype = getattr(torch, self.dtype)
        if self.dtype == "bool":
            return torch.randint(0, 2, self.shape, generator=gen).bool()
        if dtype.is_floating_point:
            x = torch.randn(self.shape, generator=gen)
            if self.low is not None and self.high is not None:
                x = torch.rand(self.shape, generator=gen) * (self.high - self.low) + self.low
            return x.to(dtype)
        low = int(self.low) if self.low is not None else 0
        high = int(self.high) if self.high is not None else 2
        return torch.randint(low, high, self.shape, generator=gen, dtype=dtype)


def parse_input_spec(text: str) -> InputSpec:
    """Parse ``x:1x3x224x224:float32`` (optionally ``:0..1000`` for the value range)."""
    parts = text.split(":")
    if len(parts) not in (3, 4) or not parts[0]:
        raise UsageError(f"bad --input {text!r}: expected NAME:SHAPE:DTYPE, e.g. x:1x3x224x224:float32")
    name, shape_text, dtype_text = parts[:3]
    if not re.fullmatch(r"\d+(x\d+)*", shape_text):
        raise UsageError(f"bad shape {shape_text!r} in --input {text!r}: expected sizes joined by 'x', e.g. 1x3x224x224")
    dtype = DTYPES.get(dtype_text.lower())
    if dtype is None:
        raise UsageError(f"unknown dtype {dtype_text!r} in --input {text!r}; known: {', '.join(sorted(set(DTYPES.values())))}")
    low = high = None
    if len(parts) == 4:
        match = re.fullmatch(r"(-?[\d.]+)\.\.(-?[\d.]+)", parts[3])
        if not match:
            raise UsageError(f"bad range {parts[3]!r} in --input {text!r}: expected LOW..HIGH, e.g. 0..1000")
        low, high = float(match[1]), float(match[2])
    return InputSpec(name, tuple(int(s) for s in shape_text.split("x")), dtype, low, high)


@dataclass
class LoadedModel:
    """What every later stage starts from: the eager module (or None for a .pt2), the example inputs, and
    the already-exported program when the user handed us one."""

    spec: str
    module: Any
    example_inputs: tuple
    program: Any = None
    input_names: tuple[str, ...] | None = None


def load_model(spec: str, inputs: list[InputSpec] | None = None, hf_task: str = "auto", seq_len: int = 16,
               trust_pickle: bool = False) -> LoadedModel:
    """Load MODEL per its spec; ``inputs`` (from --input) supply or override example inputs."""
    inputs = inputs or []
    if spec.startswith("hf:"):
        from edgeport.hf import load_hf_model

        return load_hf_model(spec, spec[3:], hf_task, seq_len, inputs)
    if spec.endswith(".pt2"):
        return _load_program(spec, inputs, trust_pickle)
    if ":" not in spec:
        raise UsageError(f"bad MODEL {spec!r}: expected file.py:callable, package.module:callable, model.pt2 or hf:<dir>")
    where, _, attr = spec.rpartition(":")
    module = _import_file(where) if where.endswith(".py") else _import_module(where)
    factory = getattr(module, attr, None)
    if factory is None:
        raise UsageError(f"{where} has no attribute {attr!r}")
    if not callable(factory):
        raise UsageError(f"{where}:{attr} is not callable")
    try:
        made = factory()
    except Exception as exc:  # the user's code: any failure is bad input, reported in one line
        raise UsageError(f"calling {attr}() from {where} raised {type(exc).__name__}: {exc}") from exc
    return _from_factory_result(spec, made, inputs)


def _import_file(path_text: str):
    path = Path(path_text)
    if not path.is_file():
        raise UsageError(f"model file not found: {path_text}")
    loaded = already_imported(path)
    if loaded is not None:
        return loaded
    name = f"edgeport_user_{abs(hash(path.resolve()))}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.path.insert(0, str(path.resolve().parent))  # so the user's file can import its siblings
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        raise UsageError(f"importing {path_text} raised {type(exc).__name__}: {exc}") from exc
    finally:
        sys.path.remove(str(path.resolve().parent))
    sys.modules[name] = module
    return module


def already_imported(path: Path):
    """The module this process already imported from ``path``, if any. Executing a model file twice in one
    process (a notebook, a test suite, a second convert) would register its ``torch.library`` custom ops a
    second time; torch then keeps kernels of the first, now unreferenced definition (seen: segfaults)."""
    resolved = path.resolve()
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if file and Path(file).resolve() == resolved:
            return module
    return None


def _import_module(name: str):
    if "." not in sys.path and "" not in sys.path:
        sys.path.insert(0, "")  # like `python -m`: modules in the working directory resolve
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise UsageError(f"no module named {exc.name!r} (from MODEL {name!r})") from exc
    except Exception as exc:
        raise UsageError(f"importing {name} raised {type(exc).__name__}: {exc}") from exc


def _from_factory_result(spec: str, made, inputs: list[InputSpec]) -> LoadedModel:
    import torch

    if isinstance(made, torch.nn.Module):
        if not inputs:
            raise UsageError(f"{spec} returned an nn.Module without example inputs: pass --input NAME:SHAPE:DTYPE")
        return LoadedModel(spec, made, tuple(i.example() for i in inputs), input_names=tuple(i.name for i in inputs))
    if isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], torch.nn.Module):
        module, example = made
        if inputs:
            example = tuple(i.example() for i in inputs)
        if isinstance(example, torch.Tensor):
            example = (example,)
        if not isinstance(example, (tuple, list, dict)):
            raise UsageError(f"{spec}: example inputs must be a tensor, a tuple or a dict, got {type(example).__name__}")
        return _flat_io(spec, module, example)
    raise UsageError(f"{spec} must return an nn.Module or (nn.Module, example_inputs), got {type(made).__name__}")


def _flat_io(spec: str, module, example) -> LoadedModel:
    """Plain tensors in and a flat tuple out stay as they are. Anything else (dict inputs, ``None`` or
    non-tensor arguments, dict/ModelOutput results) is wrapped by :class:`FlatIO`, so every target sees
    positional tensors in the model's own signature order and outputs in pytree order; no converter
    or runtime ever gets to choose an order (jax.jit sorts dict keys, LiteRT sorts output names)."""
    import torch

    args, kwargs = (tuple(example), {}) if isinstance(example, (tuple, list)) else ((), dict(example))
    plain_in = not kwargs and all(isinstance(x, torch.Tensor) for x in args)
    if plain_in:
        try:
            with torch.no_grad():
                out = module.eval()(*args)
        except Exception:  # torch.export will report it with the user's line
            return LoadedModel(spec, module, args)
        if isinstance(out, torch.Tensor) or (type(out) is tuple and all(isinstance(o, torch.Tensor) for o in out)):
            return LoadedModel(spec, module, args)
    adapter, tensors, names = flat_io(module, args, kwargs)
    if not tensors:
        raise UsageError(f"{spec}: the example inputs hold no tensors")
    return LoadedModel(spec, adapter, tensors, input_names=names)


def flat_io(module, args: tuple, kwargs: dict):
    """(adapter, example tensors, input names): keyword inputs sorted by the model's forward signature."""
    import inspect

    import torch
    from torch.utils._pytree import tree_flatten_with_path, tree_unflatten

    try:
        params = list(inspect.signature(module.forward).parameters)
    except (TypeError, ValueError):
        params = []
    position = {name: i for i, name in enumerate(params)}
    kwargs = dict(sorted(kwargs.items(), key=lambda kv: position.get(kv[0], len(params))))
    with_paths, spec = tree_flatten_with_path((tuple(args), kwargs))
    leaves = [leaf for _, leaf in with_paths]
    slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    names = tuple(_leaf_name(with_paths[i][0], params) for i in slots)
    constants = [None if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
    adapter = _flat_io_class()(module, constants, slots, spec)
    return adapter, tuple(leaves[i] for i in slots), _unique(names)


def _leaf_name(path, params: list[str]) -> str:
    keys = [str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k)))) for k in path]
    if keys and keys[0] == "0" and len(keys) > 1 and keys[1].isdigit() and int(keys[1]) < len(params):
        keys = [params[int(keys[1])], *keys[2:]]  # a positional argument: its parameter name
    else:
        keys = keys[1:]
    return "_".join(keys) or "input"


def _unique(names: tuple[str, ...]) -> tuple[str, ...]:
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}_{seen[name] - 1}")
    return tuple(out)


def _flat_io_class():
    import torch

    class FlatIO(torch.nn.Module):
        """Positional tensors in (non-tensor arguments such as ``None`` kept as constants), the model's
        outputs flattened by pytree (dict, ModelOutput, nested tuples) out."""

        def __init__(self, model, constants, slots, spec):
            super().__init__()
            self.model = model
            self.constants, self.slots, self.spec = constants, slots, spec

        def forward(self, *tensors):
            from torch.utils._pytree import tree_unflatten

            from edgeport.runtimes.torch_eager import flatten_outputs

            leaves = list(self.constants)
            for slot, tensor in zip(self.slots, tensors):
                leaves[slot] = tensor
            args, kwargs = tree_unflatten(leaves, self.spec)
            return tuple(flatten_outputs(self.model(*args, **kwargs)))

    return FlatIO


def _load_program(spec: str, inputs: list[InputSpec], trust_pickle: bool = False) -> LoadedModel:
    from edgeport.sources.pt2_archive import load_exported_program

    path = Path(spec)
    if not path.is_file():
        raise UsageError(f"exported program not found: {spec}")
    program = load_exported_program(path, trust_pickle)  # inspected first: nothing hidden in it runs
    if inputs:
        example = tuple(i.example() for i in inputs)
    elif program.example_inputs is not None:
        args, kwargs = program.example_inputs
        example = tuple(args) + tuple(kwargs.values())
    else:
        raise UsageError(f"{spec} carries no example inputs: pass --input NAME:SHAPE:DTYPE")
    return LoadedModel(spec, None, example, program=program)
