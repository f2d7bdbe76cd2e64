"""The run's progress: one callable, ``progress(step)``, handed from the CLI (or an API caller) down to the
targets. A target names its sub-steps ("lowering", "compile v5e:2x2"); :func:`scoped` puts the row in front
of them ("tpu fp32: compile v5e:2x2"); :class:`Clock` adds the time, once, where the lines are shown:
a conversion that takes minutes says what it is doing and for how long, on a terminal and in a CI log.
"""

from __future__ import annotations

import time
from typing import Callable

Progress = Callable[[str], None]


def quiet(_step: str) -> None:
    return None


def scoped(progress: Progress | None, prefix: str) -> Progress:
    """``progress`` with ``prefix: `` in front of every step (a no-op without a progress)."""
    if progress is None:
        return quiet
    return lambda step: progress(f"{prefix}: {step}")


class Clock:
    """Times the steps of one run: the elapsed time since the run started and how long the previous step
    took. Plain lines (a CI log) carry a UTC timestamp, no colour codes and one line per step."""

    def __init__(self, now: Callable[[], float] = time.monotonic):
        self.now = now
        self.start = now()
        self.step_start = self.start
        self.step = "starting"

    def begin(self, step: str) -> float:
        """A new step starts; returns how long the previous one took."""
        now = self.now()
        took, self.step, self.step_start = now - self.step_start, step, now
        return took

    def elapsed(self) -> float:
        return self.now() - self.start

    def line(self, step: str, took: float | None = None) -> str:
        """``edgeport: onnx fp32: serialization [+1m02s, 12:03:04Z; previous step 40.1s]``."""
        stamp = time.strftime("%H:%M:%SZ", time.gmtime())
        before = f"; previous step {duration(took)}" if took is not None and took >= 1.0 else ""
        return f"edgeport: {step} [+{duration(self.elapsed())}, {stamp}{before}]"

    def status(self) -> str:
        """The terminal's status line: the step and how long it has been running."""
        return f"{self.step} ({duration(self.now() - self.step_start)}, total {duration(self.elapsed())})"


def duration(seconds: float) -> str:
    """``3.2s``, ``1m02s``, ``1h04m``: short, fixed units, readable in a log."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"
