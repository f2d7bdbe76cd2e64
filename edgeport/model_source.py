"""Turn a MODEL spec into an eager module and its example inputs.

Specs: ``path/file.py:callable``, ``package.module:callable``, ``program.pt2`` (a saved ExportedProgram),
``hf:<save_pretrained dir | hub id in the local cache>``. Model code runs only from the file or module the
user named; weights are never unpickled with ``weights_only=False``. Every bad spec becomes a one-line
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


def load_model(spec: str, inputs: list[InputSpec] | None = None, hf_task: str = "auto", seq_len: int = 16) -> LoadedModel:
    """Load MODEL per its spec; ``inputs`` (from --input) supply or override example inputs."""
    inputs = inputs or []
    if spec.startswith("hf:"):
        from edgeport.hf import load_hf_model

        return load_hf_model(spec, spec[3:], hf_task, seq_len, inputs)
    if spec.endswith(".pt2"):
        return _load_program(spec, inputs)
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
    return module


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
        example = example if isinstance(example, (tuple, list)) else (example,)
        if inputs:
            example = tuple(i.example() for i in inputs)
        if not all(isinstance(x, torch.Tensor) for x in example):
            raise UsageError(f"{spec}: example inputs must be tensors, got {[type(x).__name__ for x in example]}")
        return LoadedModel(spec, module, tuple(example))
    raise UsageError(f"{spec} must return an nn.Module or (nn.Module, example_inputs), got {type(made).__name__}")


def _load_program(spec: str, inputs: list[InputSpec]) -> LoadedModel:
    import torch

    path = Path(spec)
    if not path.is_file():
        raise UsageError(f"exported program not found: {spec}")
    try:
        program = torch.export.load(path)  # torch.export's own format; weights are not unpickled
    except Exception as exc:
        raise UsageError(f"cannot load {spec} as an ExportedProgram: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc
    if inputs:
        example = tuple(i.example() for i in inputs)
    elif program.example_inputs is not None:
        args, kwargs = program.example_inputs
        example = tuple(args) + tuple(kwargs.values())
    else:
        raise UsageError(f"{spec} carries no example inputs: pass --input NAME:SHAPE:DTYPE")
    return LoadedModel(spec, None, example, program=program)
