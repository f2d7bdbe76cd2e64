"""What every runner is: a loaded artifact that takes and returns numpy arrays in the exported program's
flattened order, plus the few questions the pipeline may ask any runtime.

Defaults live here so the pipeline never has to ask ``hasattr``: a runtime that has nothing to add about
itself simply does not override them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from edgeport.diagnostics import first_line


class BaseRunner:
    """Subclasses set ``name`` (how ``--threads auto`` reports it) and implement ``__init__(path, threads)``,
    :meth:`run` and :meth:`io`."""

    name = "default"
    threads: int = 1

    def __init__(self, path: Path, threads: int):
        self.threads = threads

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        raise NotImplementedError

    @staticmethod
    def sample_layout(array: np.ndarray, shape: tuple) -> np.ndarray:
        """A tensor of the parity sample (as the model takes it) in the runtime's layout for ``shape``, e.g.
        channel-last; the default is the model's own layout."""
        return array

    def io(self) -> dict:
        """``{"inputs": [...], "outputs": [...]}`` as the runtime sees them (name, shape, dtype,
        quantization): the per-target part of manifest.json that apps read."""
        return {}

    def details(self) -> dict:
        """Extra report fields this runtime knows about the loaded artifact (e.g. ops left undelegated)."""
        return {}

    def why_slow(self, details: dict) -> str | None:
        """Why the artifact may be slower than PyTorch eager, when the runtime can tell."""
        return "; ".join(self.speed_causes(details)) or None

    def speed_causes(self, details: dict) -> list[str]:
        """What in the loaded artifact costs time (ops outside the accelerator, unrolled loops, time by op),
        read from the artifact: the causes a row slower than eager, or a quantized row slower than fp32,
        names. ``details`` holds the runtime's own fields and ``latency_ms`` (None when not timed)."""
        return []

    @classmethod
    def describe_error(cls, exc: BaseException) -> str:
        """The report's text for an artifact that converted but could not load or run here."""
        return f"artifact does not run in its runtime: {first_line(exc)}"
