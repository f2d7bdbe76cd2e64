"""What benchmarks measured about a target, kept apart from what the target does (:class:`Target`).

Each target package holds one data table, ``edgeport/targets/<name>/measured.toml``: the peak memory and
disk of a conversion as multiples of the model's fp32 weight bytes, which the pre-flight check
(:mod:`edgeport.core.memory`) reads to refuse a run that will not fit. The bench scripts that measure
them rewrite the numbers in place (:func:`update`, comments kept), so a new measurement is a data change,
not an edit of the target's code. A target without a table (a test's) gets the defaults below.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

FILE = "measured.toml"


@dataclass(frozen=True)
class Measured:
    # peak RSS of one `convert` / the model's fp32 weight bytes (bench/LARGE.md)
    memory_factor: float = 2.5
    # the same for a text-generation convert (bench/LARGE_GENERATION.md); None: the forward factor
    generation_memory_factor: float | None = None
    # variant -> its own text-generation factor, where a run with that variant peaks above the target's
    generation_variant_memory_factors: dict[str, float] = field(default_factory=dict, hash=False)
    # the fp32 artifact's bytes (every file) / fp32 weight bytes; a variant scales it by its precision
    disk_factor: float = 1.0
    # what a text-generation judge writes beside the artifacts while it runs / fp32 weight bytes
    generation_judge_disk_factor: float = 0.0


def table_path(target_name: str) -> Path:
    """``edgeport/targets/<target_name>/measured.toml`` (a target's package is named as the target)."""
    return Path(__file__).parent / target_name / FILE


@functools.cache
def measured(target_name: str) -> Measured:
    """The target's table (an unknown key is an error: a misspelled factor must not silently be a default)."""
    path = table_path(target_name)
    if not path.is_file():
        return Measured()
    data = tomllib.loads(path.read_text())
    known = {f.name for f in dataclasses.fields(Measured)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{path}: unknown measurement(s) {unknown}; known: {sorted(known)}")
    return Measured(**data)


def update(target_name: str, **values: float) -> Path:
    """For bench scripts: set top-level ``key = value`` lines of the target's table in place, keeping every
    comment (the measurement's provenance); a key not yet in the table is appended."""
    path = table_path(target_name)
    if not path.parent.is_dir():
        raise ValueError(f"no target package {path.parent}")
    known = {f.name for f in dataclasses.fields(Measured)}
    text = path.read_text() if path.is_file() else ""
    for key, value in values.items():
        if key not in known or isinstance(value, dict):
            raise ValueError(f"{key!r} is not a top-level measurement of {sorted(known)}")
        line = re.compile(rf"^{key} = [^#\n]*?(\s*#.*)?$", re.M)
        if line.search(text):
            text = line.sub(lambda m: f"{key} = {value:g}{m.group(1) or ''}", text, count=1)
        else:   # before the first [table]: a top-level key must come before them
            table = re.search(r"^\[", text, re.M)
            at = table.start() if table else len(text)
            head = text[:at] if not text[:at] or text[:at].endswith("\n") else text[:at] + "\n"
            text = f"{head}{key} = {value:g}\n{text[at:]}"
    path.write_text(text)
    measured.cache_clear()
    return path
