"""The inputs parity runs on: the example inputs, seeded random inputs like them, and real data (--data)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeport.errors import UsageError


def random_like(example: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random array with the example's shape, dtype and range (ints keep [min, max]; floats mean/std)."""
    if example.dtype == np.bool_:
        return rng.integers(0, 2, example.shape).astype(bool)
    if np.issubdtype(example.dtype, np.integer):
        low, high = (int(example.min()), int(example.max())) if example.size else (0, 1)
        return rng.integers(low, high + 1, example.shape).astype(example.dtype)
    mean = float(example.mean()) if example.size else 0.0
    std = float(example.std()) if example.size > 1 else 1.0
    return (rng.standard_normal(example.shape) * (std or 1.0) + mean).astype(example.dtype)


def make_samples(example: list[np.ndarray], count: int, seed: int = 0) -> list[list[np.ndarray]]:
    """``count`` input tuples: the example itself, then seeded random ones of the same kind."""
    rng = np.random.default_rng(seed)
    samples = [list(example)]
    while len(samples) < count:
        samples.append([random_like(x, rng) for x in example])
    return samples


def load_data(path_text: str, signature) -> list[list[np.ndarray]]:
    """Real inputs from an ``.npz`` (keyed by input name or arr_N position; a leading sample axis allowed)
    or a directory of ``.npz``/``.npy`` files (one sample each)."""
    path = Path(path_text)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".npz", ".npy"))
        if not files:
            raise UsageError(f"--data directory {path} holds no .npz or .npy files")
        return [s for f in files for s in _samples_from_file(f, signature)]
    if not path.is_file():
        raise UsageError(f"--data not found: {path_text}")
    return _samples_from_file(path, signature)


def _samples_from_file(path: Path, signature) -> list[list[np.ndarray]]:
    try:
        loaded = np.load(path, allow_pickle=False)
    except Exception as exc:
        raise UsageError(f"cannot read --data file {path}: {exc}") from exc
    arrays = [loaded] if isinstance(loaded, np.ndarray) else _ordered(loaded, signature, path)
    if len(arrays) != len(signature.inputs):
        raise UsageError(f"--data {path.name}: {len(arrays)} arrays for {len(signature.inputs)} model inputs")
    batched = all(a.ndim == len(i.shape) + 1 for a, i in zip(arrays, signature.inputs))
    groups = [list(t) for t in zip(*arrays)] if batched else [arrays]
    for sample in groups:
        for array, info in zip(sample, signature.inputs):
            if tuple(array.shape) != tuple(info.shape):
                raise UsageError(f"--data {path.name}: input {info.name!r} has shape {list(array.shape)}, model expects {list(info.shape)}")
            if np.dtype(array.dtype).kind != np.dtype(_np_dtype(info.dtype)).kind:
                raise UsageError(f"--data {path.name}: input {info.name!r} has dtype {array.dtype}, model expects {info.dtype}")
    return [[a.astype(_np_dtype(i.dtype)) for a, i in zip(s, signature.inputs)] for s in groups]


def _ordered(npz, signature, path: Path) -> list[np.ndarray]:
    names = [i.name for i in signature.inputs]
    if all(n in npz.files for n in names):
        return [npz[n] for n in names]
    positional = [f"arr_{i}" for i in range(len(names))]
    if all(n in npz.files for n in positional):
        return [npz[n] for n in positional]
    raise UsageError(f"--data {path.name}: arrays {npz.files} match neither input names {names} nor arr_0..arr_{len(names) - 1}")


def _np_dtype(dtype: str):
    return np.float32 if dtype == "bfloat16" else np.dtype(dtype)
