"""The inputs parity runs on: the example inputs, seeded random inputs like them, and real data (--data).

Caps, so a flag cannot make a run take minutes and gigabytes for nothing: ``--samples`` at most
``MAX_SAMPLES`` seeded random samples, and at most ``MAX_DATA_SAMPLES`` real ones from any source. A data
file is read only as far as the cap: ``.npy`` through a memory map, ``.npz`` members by their header and
then only the leading rows; the report's data block says how many samples were used of how many available.
Data files are never unpickled: an object array is bad input (exit 2), whichever flag named it.
"""

from __future__ import annotations

import zipfile
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from edgeport.diagnostics import first_line
from edgeport.errors import UsageError

# Why 1024: parity metrics are worst cases over samples, and seeded random samples are all drawn the same way:
# past a few hundred a new worst case is rare, while each sample costs a PyTorch run plus one run per
# artifact and is held in memory with its outputs (100,000 samples of a 1x8 input took 34 s and 741 MB).
# Real inputs (--data) find what random ones miss; more random ones do not.
MAX_SAMPLES = 1024
# Real samples: a generator may be endless and a data file may hold 100k samples; parity on more adds time,
# not confidence, and calibration ranges settle long before this.
MAX_DATA_SAMPLES = 256
MAX_CALLABLE_SAMPLES = MAX_DATA_SAMPLES


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


def check_sample_count(count: int) -> None:
    """``--samples`` must be 1..MAX_SAMPLES (exit 2 naming the cap)."""
    if count < 1:
        raise UsageError("--samples must be at least 1")
    if count > MAX_SAMPLES:
        raise UsageError(f"--samples {count}: at most {MAX_SAMPLES} (more random samples add time, not confidence; "
                         "use --data for real inputs)")


def make_samples(example: list[np.ndarray], count: int, seed: int = 0) -> list[list[np.ndarray]]:
    """``count`` input tuples: the example itself, then seeded random ones of the same kind."""
    check_sample_count(count)
    rng = np.random.default_rng(seed)
    samples = [list(example)]
    while len(samples) < count:
        samples.append([random_like(x, rng) for x in example])
    return samples


@dataclass
class DataSet:
    """Real samples read from a source, and how many it holds (None: a generator that had more than the cap)."""

    samples: list[list[np.ndarray]]
    kind: str
    available: int | None
    flag: str = "--data"

    def report(self, source: str) -> dict:
        """The report's ``data`` block: where from, how many used of how many available, and why."""
        used = len(self.samples)
        block = {"kind": self.kind, "source": source, "samples": used, "samples_used": used, "samples_available": self.available}
        if self.available is None or self.available > used:
            held = f"yields more than {MAX_DATA_SAMPLES}" if self.available is None else f"holds {self.available:,}"
            block["note"] = (f"{self.flag} {held} samples; the first {used} were used "
                             f"(at most {MAX_DATA_SAMPLES}: parity on more adds time, not confidence)")
        return block


def load_data(path_text: str, signature, flag: str = "--data") -> list[list[np.ndarray]]:
    """Real inputs, every sample checked against the model's inputs (count, shape, dtype; exit 2 naming the
    input): an ``.npz`` (keyed by input name or arr_N position; a leading sample axis allowed), a directory of
    ``.npz``/``.npy`` files (one sample each, or a leading sample axis), or ``file.py:fn`` whose ``fn()``
    returns an iterable of input tuples (arrays or tensors; a dict keyed by input name also works). ``flag``
    names the option in every message (``--data``, ``--calibration-data``)."""
    return read_data(path_text, signature, flag).samples


def load_data_with_kind(path_text: str, signature, flag: str = "--data") -> tuple[list[list[np.ndarray]], str]:
    """Like :func:`load_data`, plus the kind of source (``npz``, ``npy``, ``directory``, ``callable``) for the report."""
    data = read_data(path_text, signature, flag)
    return data.samples, data.kind


def read_data(path_text: str, signature, flag: str = "--data") -> DataSet:
    """Like :func:`load_data`, as a :class:`DataSet` (at most ``MAX_DATA_SAMPLES`` samples read)."""
    where, _, attr = path_text.rpartition(":")
    if where.endswith(".py") and attr:
        samples, more = _samples_from_callable(where, attr, signature, flag)
        return DataSet(samples, "callable", None if more else len(samples), flag)
    path = Path(path_text)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".npz", ".npy"))
        if not files:
            raise UsageError(f"{flag} directory {path} holds no .npz or .npy files")
        samples, available = [], 0
        for file in files:
            found, count = _samples_from_file(file, signature, flag, MAX_DATA_SAMPLES - len(samples))
            samples += found
            available += count
        return _some(DataSet(samples, "directory", available, flag), path_text)
    if not path.is_file():
        raise UsageError(f"{flag} not found: {path_text}")
    samples, available = _samples_from_file(path, signature, flag, MAX_DATA_SAMPLES)
    return _some(DataSet(samples, path.suffix.lstrip(".") or "file", available, flag), path_text)


def _some(data: DataSet, path_text: str) -> DataSet:
    """Real data that holds no sample judges nothing with it: bad input, not a quiet "0 real"."""
    if not data.samples:
        raise UsageError(f"{data.flag} {path_text} holds no samples")
    return data


def _samples_from_callable(where: str, attr: str, signature, flag: str) -> tuple[list[list[np.ndarray]], bool]:
    """The first ``MAX_DATA_SAMPLES`` items of ``fn()``, checked; and whether it had more."""
    from edgeport.sources.pyfile import import_file

    factory = getattr(import_file(where, what="--data file"), attr, None)
    if not callable(factory):
        raise UsageError(f"{flag} {where}:{attr}: no callable named {attr!r}")
    label = f"{Path(where).name}:{attr}"
    try:
        items = []
        for item in factory():
            items.append(item)
            if len(items) > MAX_DATA_SAMPLES:  # one past the cap: we know there are more without reading them
                break
    except (Exception, SystemExit) as exc:  # the user's code: a failure is bad input, reported in one line
        raise UsageError(f"{flag} {label}: calling {attr}() raised {first_line(exc)}") from exc
    if not items:
        raise UsageError(f"{flag} {label}: {attr}() yielded no samples")
    names = [i.name for i in signature.inputs]
    samples = []
    for n, item in enumerate(items[:MAX_DATA_SAMPLES]):
        if isinstance(item, dict):
            missing = [name for name in names if name not in item]
            if missing:
                raise UsageError(f"{flag} {label} sample {n}: no array for input {missing[0]!r} (keys {sorted(item)})")
            item = [item[name] for name in names]
        arrays = [_as_numpy(a) for a in (item if isinstance(item, (tuple, list)) else [item])]
        samples.append(_checked(arrays, signature, f"{label} sample {n}", flag))
    return samples, len(items) > MAX_DATA_SAMPLES


def _as_numpy(value) -> np.ndarray:
    if hasattr(value, "detach"):
        from edgeport.core.eager import to_numpy

        return to_numpy(value)
    return np.asarray(value)


@dataclass
class _Stored:
    """One array in a data file, known by its header and read only as far as asked (``head(None)``: all)."""

    shape: tuple[int, ...]
    dtype: np.dtype
    head: Callable[[int | None], np.ndarray]


def _samples_from_file(path: Path, signature, flag: str, cap: int) -> tuple[list[list[np.ndarray]], int]:
    """At most ``cap`` samples of one ``.npy``/``.npz`` file, and how many it holds."""
    try:
        with _stored_arrays(path, signature, flag) as arrays:
            _check_count(arrays, signature, path.name, flag)
            if not all(len(a.shape) == len(i.shape) + 1 for a, i in zip(arrays, signature.inputs)):  # one sample
                heads, available = ([[a.head(None)] for a in arrays] if cap > 0 else []), 1
            else:
                sizes = {a.shape[0] for a in arrays}
                if len(sizes) > 1:
                    raise UsageError(f"{flag} {path.name}: the arrays hold different numbers of samples {sorted(sizes)}")
                available = sizes.pop()
                heads = [a.head(min(cap, available)) for a in arrays] if cap > 0 else []
    except READ_ERRORS as exc:  # a truncated or corrupt file is bad input
        if isinstance(exc, ValueError) and "pickle" in str(exc):  # numpy's hint would be to unpickle it: no
            raise _object_array(path, "it", flag) from exc
        raise UsageError(f"cannot read {flag} file {path}: {type(exc).__name__}: {exc}") from exc
    count = min(cap, available) if heads else 0
    label = path.name if available == 1 else f"{path.name} sample {{}}"
    return [_checked([h[n] for h in heads], signature, label.format(n), flag) for n in range(count)], available


READ_ERRORS = (ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile, zlib.error)


@contextmanager
def _stored_arrays(path: Path, signature, flag: str):
    """The file's arrays in input order, nothing read past their headers yet (closed on exit)."""
    if path.suffix == ".npy":
        try:
            mapped = np.load(path, mmap_mode="r", allow_pickle=False)
        except ValueError as exc:
            if "object" in str(exc).lower():
                raise _object_array(path, "its array", flag) from exc
            raise
        yield [_Stored(mapped.shape, mapped.dtype, lambda n: np.array(mapped if n is None else mapped[:n]))]
        return
    loaded = np.load(path, allow_pickle=False)
    if isinstance(loaded, np.ndarray):  # not a zip: an .npy under another name
        yield [_Stored(loaded.shape, loaded.dtype, lambda n: loaded if n is None else loaded[:n])]
        return
    with loaded:
        yield [_npz_member(loaded, key, path, flag) for key in _ordered_keys(loaded.files, signature, path, flag)]


def _object_array(path: Path, what: str, flag: str) -> UsageError:
    return UsageError(f"{flag} {path.name}: {what} holds Python objects or pickled data (or is no .npy/.npz file); "
                      "edgeport never unpickles data files: save numeric arrays with numpy.save/savez")


_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def _npz_member(npz, key: str, path: Path, flag: str) -> _Stored:
    """An ``.npz`` member by its header; ``head(n)`` decompresses only the first n rows of a C-order array."""
    member = f"{key}.npy"
    with npz.zip.open(member) as f:
        reader = _HEADER_READERS.get(np.lib.format.read_magic(f))
        if reader is None:  # a header version without a public reader: read the member whole
            whole = npz[key]
            return _Stored(whole.shape, whole.dtype, lambda n: whole if n is None else whole[:n])
        shape, fortran, dtype = reader(f)
    if dtype.hasobject:
        raise _object_array(path, f"array {key!r}", flag)

    def head(n: int | None) -> np.ndarray:
        if n is None or fortran or not shape:
            whole = npz[key]
            return whole if n is None else whole[:n]
        rows = min(n, shape[0])
        with npz.zip.open(member) as f:
            np.lib.format.read_magic(f)
            reader(f)
            count = rows * int(np.prod(shape[1:], dtype=np.int64))
            return np.frombuffer(f.read(count * dtype.itemsize), dtype, count).reshape((rows, *shape[1:])).copy()

    return _Stored(tuple(shape), dtype, head)


def _check_count(arrays: list, signature, label: str, flag: str) -> None:
    names = [i.name for i in signature.inputs]
    if len(arrays) < len(names):
        raise UsageError(f"{flag} {label}: {len(arrays)} arrays for {len(names)} model inputs; no array for input {names[len(arrays)]!r}")
    if len(arrays) > len(names):
        raise UsageError(f"{flag} {label}: {len(arrays)} arrays for {len(names)} model inputs {names}")


def _checked(sample: list[np.ndarray], signature, label: str, flag: str) -> list[np.ndarray]:
    """Shape (a -1 dim in the signature matches any size) and dtype kind must match; then cast exactly."""
    _check_count(sample, signature, label, flag)
    for array, info in zip(sample, signature.inputs):
        expected = tuple(info.shape)
        if len(array.shape) != len(expected) or any(e not in (-1, a) for a, e in zip(array.shape, expected)):
            raise UsageError(f"{flag} {label}: input {info.name!r} has shape {list(array.shape)}, model expects {list(expected)}")
        if np.dtype(array.dtype).kind != np.dtype(_np_dtype(info.dtype)).kind:
            raise UsageError(f"{flag} {label}: input {info.name!r} has dtype {array.dtype}, model expects {info.dtype}")
    return [a.astype(_np_dtype(i.dtype)) for a, i in zip(sample, signature.inputs)]


def _ordered_keys(files: list[str], signature, path: Path, flag: str) -> list[str]:
    names = [i.name for i in signature.inputs]
    positional = [f"arr_{i}" for i in range(len(names))]
    for keys in (names, positional):
        if all(n in files for n in keys):
            unknown = [f for f in files if f not in keys]
            if unknown:  # a typo'd key would be silently left out of what the run judges
                raise UsageError(f"{flag} {path.name}: array {unknown[0]!r} is no input of the model "
                                 f"(inputs: {', '.join(keys)})")
            return keys
    missing = [n for n in names if n not in files]
    raise UsageError(f"{flag} {path.name}: no array for input {missing[0]!r}: arrays {files} match neither input names {names} nor arr_0..arr_{len(names) - 1}")


def _np_dtype(dtype: str):
    return np.float32 if dtype == "bfloat16" else np.dtype(dtype)
