"""What a model source is asked for and what it hands back: ``--input`` specs, the source options and the
loaded model. Plain data, no torch at import: the CLI builds these before anything heavy loads."""

from __future__ import annotations

import math
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
    # a GGUF source once materialized as an hf: directory: the user's spec, the file's quantization type
    # (edgeport.sources.gguf); reports name the GGUF, not the run's scratch copy
    gguf: dict | None = field(default=None, compare=False, hash=False)


@dataclass(frozen=True)
class InputSpec:
    """One ``--input NAME:SHAPE:DTYPE[:LOW..HIGH]`` flag: shape, dtype and value range of an example input
    (integers drawn from [LOW, HIGH), floats uniform in [LOW, HIGH))."""

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


# Bytes per element of each --input dtype (no numpy/torch import needed to size a declared shape).
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int8": 1, "uint8": 1, "bool": 1}
# Why 4 GiB: an example input is held several times over (the tensor, its numpy copy, --samples random
# copies, the reference run's activations), and no model an edge runtime takes has an input near this size
# (a 4K RGB float32 frame is 95 MiB); a declared shape above it is a typo, and allocating it first would only
# die in the allocator or swap the machine.
MAX_INPUT_BYTES = 4 * 2**30
# Value bounds a LOW..HIGH range must respect: integers [LOW, HIGH) as torch.randint draws them (HIGH is
# exclusive, like a vocabulary size), floats within the dtype's finite range.
INT_BOUNDS = {"int64": (-2**63, 2**63 - 1), "int32": (-2**31, 2**31), "int8": (-128, 128), "uint8": (0, 256)}
FLOAT_MAX = {"float32": 3.4028234663852886e38, "float16": 65504.0, "bfloat16": 3.3895313892515355e38}


def parse_input_spec(text: str) -> InputSpec:
    """Parse ``x:1x3x224x224:float32`` (optionally ``:0..1000`` for the value range). Everything is checked
    before anything is allocated: shape, dtype, the size the input would need, and the range."""
    parts = text.split(":")
    if len(parts) not in (3, 4) or not parts[0]:
        raise UsageError(f"bad --input {text!r}: expected NAME:SHAPE:DTYPE, e.g. x:1x3x224x224:float32")
    name, shape_text, dtype_text = parts[:3]
    if not re.fullmatch(r"\d+(x\d+)*", shape_text):
        raise UsageError(f"bad shape {shape_text!r} in --input {text!r}: expected sizes joined by 'x', e.g. 1x3x224x224")
    dtype = DTYPES.get(dtype_text.lower())
    if dtype is None:
        raise UsageError(f"unknown dtype {dtype_text!r} in --input {text!r}; known: {', '.join(sorted(set(DTYPES.values())))}")
    shape = tuple(int(s) for s in shape_text.split("x"))
    if 0 in shape:  # an empty tensor has nothing to convert or compare: a typo, not a model input
        raise UsageError(f"bad shape {shape_text!r} in --input {text!r}: every size must be at least 1")
    numel = 1
    for size in shape:
        numel *= size
    if numel * ITEMSIZE[dtype] > MAX_INPUT_BYTES:
        raise UsageError(f"input {name} would need {numel * ITEMSIZE[dtype] / 2**30:,.1f} GiB ({shape_text} {dtype}); "
                         f"the limit is {MAX_INPUT_BYTES // 2**30} GiB per input: check --input {text!r}")
    low, high = _parse_range(parts[3], dtype, text) if len(parts) == 4 else (None, None)
    return InputSpec(name, shape, dtype, low, high)


def _parse_range(range_text: str, dtype: str, text: str) -> tuple[float, float]:
    """``LOW..HIGH`` for ``dtype``: finite numbers, whole for integer dtypes, LOW below HIGH, inside the dtype."""
    low_text, sep, high_text = range_text.partition("..")
    try:
        low, high = float(low_text), float(high_text)
    except ValueError:
        low = high = math.nan
    if not sep or not (math.isfinite(low) and math.isfinite(high)):
        raise UsageError(f"bad range {range_text!r} in --input {text!r}: expected LOW..HIGH with two numbers, e.g. 0..1000")
    if dtype == "bool":
        raise UsageError(f"bad range {range_text!r} in --input {text!r}: a bool input takes no range")
    if dtype in INT_BOUNDS:
        lowest, past_highest = INT_BOUNDS[dtype]
        if low != int(low) or high != int(high):
            raise UsageError(f"bad range {range_text!r} in --input {text!r}: {dtype} bounds must be whole numbers")
        if low >= high:
            raise UsageError(f"bad range {range_text!r} in --input {text!r}: LOW must be below HIGH (integers are drawn from [LOW, HIGH))")
        if low < lowest or high > past_highest:
            raise UsageError(f"bad range {range_text!r} in --input {text!r}: {dtype} values are drawn from [{lowest}, {past_highest})")
    else:
        if low > high:
            raise UsageError(f"bad range {range_text!r} in --input {text!r}: LOW must not be above HIGH")
        if max(abs(low), abs(high)) > FLOAT_MAX[dtype]:
            raise UsageError(f"bad range {range_text!r} in --input {text!r}: beyond the largest {dtype} ({FLOAT_MAX[dtype]:.4g})")
    return low, high


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
    # a program read from a file: (inputs, memory bytes) -> None, its first run on every reference input in a
    # contained child (edgeport.sources.contained.probe); the reference runs here only after it passed
    first_run: Any = None
