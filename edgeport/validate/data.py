"""The inputs parity runs on: the example inputs, seeded random inputs like them, and real data (--data)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeport.diagnostics import first_line
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


MAX_CALLABLE_SAMPLES = 256  # a generator may be endless: parity on more samples adds time, not confidence


def load_data(path_text: str, signature) -> list[list[np.ndarray]]:
    """Real inputs, every sample checked against the model's inputs (count, shape, dtype; exit 2 naming the
    input): an ``.npz`` (keyed by input name or arr_N position; a leading sample axis allowed), a directory of
    ``.npz``/``.npy`` files (one sample each, or a leading sample axis), or ``file.py:fn`` whose ``fn()``
    returns an iterable of input tuples (arrays or tensors; a dict keyed by input name also works)."""
    return load_data_with_kind(path_text, signature)[0]


def load_data_with_kind(path_text: str, signature) -> tuple[list[list[np.ndarray]], str]:
    """Like :func:`load_data`, plus the kind of source (``npz``, ``npy``, ``directory``, ``callable``) for the report."""
    where, _, attr = path_text.rpartition(":")
    if where.endswith(".py") and attr:
        return _samples_from_callable(where, attr, signature), "callable"
    path = Path(path_text)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".npz", ".npy"))
        if not files:
            raise UsageError(f"--data directory {path} holds no .npz or .npy files")
        return [s for f in files for s in _samples_from_file(f, signature)], "directory"
    if not path.is_file():
        raise UsageError(f"--data not found: {path_text}")
    return _samples_from_file(path, signature), path.suffix.lstrip(".") or "file"


def _samples_from_callable(where: str, attr: str, signature) -> list[list[np.ndarray]]:
    from edgeport.sources.pyfile import import_file

    factory = getattr(import_file(where, what="--data file"), attr, None)
    if not callable(factory):
        raise UsageError(f"--data {where}:{attr}: no callable named {attr!r}")
    label = f"{Path(where).name}:{attr}"
    try:
        items = []
        for item in factory():
            items.append(item)
            if len(items) >= MAX_CALLABLE_SAMPLES:
                break
    except Exception as exc:  # the user's code: a failure is bad input, reported in one line
        raise UsageError(f"--data {label}: calling {attr}() raised {first_line(exc)}") from exc
    if not items:
        raise UsageError(f"--data {label}: {attr}() yielded no samples")
    names = [i.name for i in signature.inputs]
    samples = []
    for n, item in enumerate(items):
        if isinstance(item, dict):
            missing = [name for name in names if name not in item]
            if missing:
                raise UsageError(f"--data {label} sample {n}: no array for input {missing[0]!r} (keys {sorted(item)})")
            item = [item[name] for name in names]
        arrays = [_as_numpy(a) for a in (item if isinstance(item, (tuple, list)) else [item])]
        samples.append(_checked(arrays, signature, f"{label} sample {n}"))
    return samples


def _as_numpy(value) -> np.ndarray:
    if hasattr(value, "detach"):
        from edgeport.runtimes.torch_eager import to_numpy

        return to_numpy(value)
    return np.asarray(value)


def _samples_from_file(path: Path, signature) -> list[list[np.ndarray]]:
    try:
        loaded = np.load(path, allow_pickle=False)
    except Exception as exc:
        raise UsageError(f"cannot read --data file {path}: {exc}") from exc
    arrays = [loaded] if isinstance(loaded, np.ndarray) else _ordered(loaded, signature, path)
    _check_count(arrays, signature, path.name)
    batched = all(a.ndim == len(i.shape) + 1 for a, i in zip(arrays, signature.inputs))
    groups = [list(t) for t in zip(*arrays)] if batched else [arrays]
    return [_checked(sample, signature, path.name) for sample in groups]


def _check_count(arrays: list, signature, label: str) -> None:
    names = [i.name for i in signature.inputs]
    if len(arrays) < len(names):
        raise UsageError(f"--data {label}: {len(arrays)} arrays for {len(names)} model inputs; no array for input {names[len(arrays)]!r}")
    if len(arrays) > len(names):
        raise UsageError(f"--data {label}: {len(arrays)} arrays for {len(names)} model inputs {names}")


def _checked(sample: list[np.ndarray], signature, label: str) -> list[np.ndarray]:
    """Shape (a -1 dim in the signature matches any size) and dtype kind must match; then cast exactly."""
    _check_count(sample, signature, label)
    for array, info in zip(sample, signature.inputs):
        expected = tuple(info.shape)
        if len(array.shape) != len(expected) or any(e not in (-1, a) for a, e in zip(array.shape, expected)):
            raise UsageError(f"--data {label}: input {info.name!r} has shape {list(array.shape)}, model expects {list(expected)}")
        if np.dtype(array.dtype).kind != np.dtype(_np_dtype(info.dtype)).kind:
            raise UsageError(f"--data {label}: input {info.name!r} has dtype {array.dtype}, model expects {info.dtype}")
    return [a.astype(_np_dtype(i.dtype)) for a, i in zip(sample, signature.inputs)]


def _ordered(npz, signature, path: Path) -> list[np.ndarray]:
    names = [i.name for i in signature.inputs]
    if all(n in npz.files for n in names):
        return [npz[n] for n in names]
    positional = [f"arr_{i}" for i in range(len(names))]
    if all(n in npz.files for n in positional):
        return [npz[n] for n in positional]
    missing = [n for n in names if n not in npz.files]
    raise UsageError(f"--data {path.name}: no array for input {missing[0]!r}: arrays {npz.files} match neither input names {names} nor arr_0..arr_{len(names) - 1}")


def _np_dtype(dtype: str):
    return np.float32 if dtype == "bfloat16" else np.dtype(dtype)
