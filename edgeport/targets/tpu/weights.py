"""``weights.safetensors`` written and read without a copy of the weights in memory.

safetensors' own ``save_file`` builds each tensor's bytes in memory before writing (a second copy of a
2 GB embedding) and ``load_file`` reads the whole file into memory and copies it again into jax arrays:
together they set the TPU target's peak RSS (4.3x the fp32 weights on a 2.24 GB model, issue 21). Here
each array's own buffer goes to the file, and loading maps the file: the data section starts 64-byte
aligned and the largest tensors come first, so jax's CPU client aliases the mapped pages instead of
copying them (a TPU host copies them to the device as before). The file is standard safetensors: any
safetensors reader opens it.
"""

from __future__ import annotations

import json
import mmap
import os
from pathlib import Path

from edgeport.errors import load_json

ALIGN = 64   # what XLA's CPU client needs to alias a host buffer instead of copying it
# numpy dtype name -> safetensors dtype code: every code safetensors defines that a weight can have
# (a complex rotary table is a complex64 buffer; ml_dtypes names the bfloat16 and float8 kinds)
DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64", "complex64": "C64",
          "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2", "int64": "I64", "int32": "I32", "int16": "I16",
          "int8": "I8", "uint64": "U64", "uint32": "U32", "uint16": "U16", "uint8": "U8", "bool": "BOOL"}


def save(weights: dict, path: Path, tied: dict | None = None) -> None:
    """``weights`` (name -> numpy or jax array) as safetensors, largest first, streamed array by array.
    ``tied`` (other name -> name in ``weights``) goes to the header's ``__metadata__`` as ``{"tied": JSON}``
    (safetensors forbids two tensors over the same bytes, so a tied tensor is stored under one name and
    the programs take it once; the note tells a reader which other names it stands for)."""
    import numpy as np

    arrays = {name: np.asarray(value) for name, value in weights.items()}   # jax on CPU: a view, no copy
    order = sorted(arrays, key=lambda n: -arrays[n].nbytes)
    header, offset = ({"__metadata__": {"tied": json.dumps(tied, sort_keys=True)}} if tied else {}), 0
    for name in order:
        array = arrays[name]
        if array.dtype.name not in DTYPES:
            raise ValueError(f"weight {name}: dtype {array.dtype.name} has no safetensors code")
        header[name] = {"dtype": DTYPES[array.dtype.name], "shape": list(array.shape),
                        "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % ALIGN)   # safetensors allows trailing spaces in its JSON header
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for name in order:
            array = np.ascontiguousarray(arrays[name])
            if array.nbytes:
                f.write(memoryview(array.reshape(-1).view(np.uint8)))


def load(path: Path) -> dict:
    """name -> read-only numpy array over the mapped file (pages are read when used, never copied here)."""
    import ml_dtypes
    import numpy as np

    codes = {code: np.dtype(getattr(ml_dtypes, name, name)) for name, code in DTYPES.items()}
    with open(path, "rb") as f:
        file_size = os.fstat(f.fileno()).st_size
        size = int.from_bytes(f.read(8), "little")
        if size > file_size - 8:   # checked before reading: a header claiming 2^62 bytes is not allocated
            raise ValueError(f"{path}: header claims {size} bytes, the file has {file_size}; not safetensors")
        header = load_json(f.read(size), f"{path}: its header")
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    start = 8 + size
    weights = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end, dtype, shape = _entry(path, name, info, codes, file_size - start)
        array = np.frombuffer(mapped, dtype=dtype, count=(end - begin) // dtype.itemsize, offset=start + begin)
        weights[name] = array.reshape(shape)
    return weights


def _entry(path: Path, name: str, info, codes: dict, data_size: int) -> tuple:
    """(begin, end, dtype, shape) of one header entry, each checked against the file: a malformed header is
    a ValueError naming the entry, never an allocation or a read past the mapping."""
    import math

    try:
        begin, end = (int(v) for v in info["data_offsets"])
        dtype, shape = codes[info["dtype"]], [int(d) for d in info["shape"]]
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{path}: entry {name!r} is malformed; not safetensors") from None
    if not 0 <= begin <= end <= data_size or min(shape, default=0) < 0 \
            or math.prod(shape) * dtype.itemsize != end - begin:
        raise ValueError(f"{path}: entry {name!r} (offsets {begin}..{end}, shape {shape}) does not fit the "
                         f"file's {data_size} data bytes; not safetensors")
    return begin, end, dtype, shape
