"""The parity sample: one set of inputs and PyTorch reference outputs written next to a target's artifacts,
so any runtime outside Python (a browser, a phone) can check itself against PyTorch without edgeport.

Layout: ``DIR/<target>/parity_sample/index.json`` plus one raw little-endian file per tensor. Tensors are in
the artifact's runtime shapes and dtypes (int64 -> int32; a runtime's own layout, e.g. channel-last, through
its runner's ``sample_layout``) so an app feeds them as they are; a tensor the artifact quantizes stays float32 and the app applies the scale/zero-point
that manifest.json gives for it (one sample then serves every variant of the target).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from edgeport.errors import load_json

SCHEMA = "edgeport.parity_sample/1"
DIRNAME = "parity_sample"


Layout = Callable[[np.ndarray, tuple], np.ndarray]   # (array as the model takes it, runtime shape) -> array


def write_parity_sample(target_dir: Path, io: dict, variant: str, inputs: Sequence[np.ndarray],
                        outputs: Sequence[np.ndarray], layout: Layout | None = None) -> Path:
    """Write the sample in ``io``'s runtime form (``Runner.io()``, ``layout``: the runner's
    ``sample_layout``); returns the index path."""
    folder = target_dir / DIRNAME
    folder.mkdir(parents=True, exist_ok=True)
    layout = layout or (lambda array, shape: array)
    index = {"schema": SCHEMA, "variant": variant,
             "inputs": [_write(folder, f"input_{i}", a, d, layout) for i, (a, d) in enumerate(zip(inputs, io["inputs"]))],
             "outputs": [_write(folder, f"output_{i}", a, d, layout)
                         for i, (a, d) in enumerate(zip(outputs, io["outputs"]))]}
    path = folder / "index.json"
    path.write_text(json.dumps(index, indent=2) + "\n")
    return path


def fits(index_path: Path, io: dict) -> bool:
    """Whether an artifact can be fed this sample as it is (same shapes; same dtypes or quantized float)."""
    index = load_json(index_path.read_text(), str(index_path))
    pairs = list(zip(index["inputs"], io["inputs"])) + list(zip(index["outputs"], io["outputs"]))
    same_count = len(index["inputs"]) == len(io["inputs"]) and len(index["outputs"]) == len(io["outputs"])
    return same_count and all(s["shape"] == d["shape"] and s["dtype"] == _sample_dtype(d).name for s, d in pairs)


def read_parity_sample(index_path: Path) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Inputs and reference outputs as numpy arrays (what the tests and other tools compare with)."""
    index = load_json(index_path.read_text(), str(index_path))
    folder = index_path.parent

    def load(entry):
        data = np.fromfile(folder / entry["file"], dtype=np.dtype(entry["dtype"]).newbyteorder("<"))
        return data.reshape(entry["shape"])

    return [load(e) for e in index["inputs"]], [load(e) for e in index["outputs"]]


def _sample_dtype(detail: dict) -> np.dtype:
    return np.dtype(np.float32) if detail.get("quantization") else np.dtype(detail["dtype"])


def _write(folder: Path, stem: str, array: np.ndarray, detail: dict, layout: Layout) -> dict:
    array = np.asarray(layout(np.asarray(array), tuple(detail["shape"])))
    array = np.ascontiguousarray(array.astype(_sample_dtype(detail).newbyteorder("<")))
    file = f"{stem}.bin"
    (folder / file).write_bytes(array.tobytes())
    return {"name": detail["name"], "file": file, "shape": [int(s) for s in array.shape],
            "dtype": _sample_dtype(detail).name}

