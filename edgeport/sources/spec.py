"""What a model source is asked for and what it hands back: ``--input`` specs, the source options and the
loaded model. Plain data, no torch at import: the CLI builds these before anything heavy loads."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
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
class SourceOptions:
    """Where the model comes from and how it is traced (everything before the one export)."""

    model: str
    inputs: tuple[str, ...] = ()          # --input NAME:SHAPE:DTYPE[:LOW..HIGH]
    hf_task: str = "auto"
    seq_len: int = 16
    dynamic: tuple[str, ...] = ()         # dims the one export keeps symbolic ("batch")
    decompositions: str | None = None
    trust_pickle: bool = False            # a .pt2 may unpickle objects (runs code from the archive)
    trust_remote_code: bool = False       # hf: may run the repository's own Python code


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
    notes: list[str] = field(default_factory=list)
