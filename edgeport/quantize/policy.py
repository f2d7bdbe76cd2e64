"""``--fallback`` and ``--fallback-max``, checked before any work (bad values are exit 2)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from edgeport.errors import UsageError

MODES = ("float", "int8")   # int8: text generation only (GenerativeFallback.keeps)
DEFAULT_MAX = "25%"


@dataclass(frozen=True)
class FallbackPolicy:
    """What a quantized row that misses its budget may do. ``mode`` None: it fails, naming its most sensitive
    layers; "float": the most sensitive layers stay float until it passes or ``cap`` layers are float; "int8":
    the same search, the kept layers at int8 (a target's text-generation variants that declare it)."""

    mode: str | None = None
    share: float | None = 0.25       # of the quantizable layers, or
    count: int | None = None         # a fixed number of layers
    text: str = DEFAULT_MAX          # as the user wrote it, for messages

    def cap(self, layers: int) -> int:
        """How many layers may stay float; a share rounds up (25% of 6 layers is 2), and at least one."""
        if self.count is not None:
            return min(self.count, layers)
        return min(layers, max(1, math.ceil(self.share * layers - 1e-9)))


def parse_policy(mode: str | None, max_text: str | None) -> FallbackPolicy:
    if mode is not None and mode not in MODES:
        raise UsageError(f"--fallback {mode!r}: expected one of {', '.join(MODES)}")
    if max_text is not None and mode is None:
        raise UsageError("--fallback-max needs --fallback float (or int8)")
    text = (max_text or DEFAULT_MAX).strip()
    try:
        if text.endswith("%"):
            share = float(text[:-1])
            if not (math.isfinite(share) and 0 < share <= 100):
                raise ValueError
            return FallbackPolicy(mode, share / 100, None, text)
        count = int(text)
        if count < 1:
            raise ValueError
        return FallbackPolicy(mode, None, count, text)
    except ValueError:
        raise UsageError(f"--fallback-max {max_text!r}: expected a share of the quantizable layers like 25% "
                         "(above 0, at most 100%) or a number of layers >= 1") from None
