"""File-descriptor redirection: the one way edgeport keeps other libraries' output off the terminal.

Converters, runtimes and compilers print progress, warnings and C++ logs straight to file descriptors 1
and 2, below anything Python's ``sys.stdout`` or ``logging`` can intercept. Redirecting at the fd level
sends all of it to a log file (the run's log in DIR, or an artifact's own log), so the terminal carries
edgeport's lines only, and the text is still there when a failure needs quoting.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

from edgeport.core.replace import unlinked_for_append
from edgeport.core.scratch import scratch_file


class Captured:
    """What was written while redirected; readable during and after the redirection."""

    def __init__(self, path: Path, keep: bool):
        self.path, self.keep, self._text = path, keep, None

    def text(self) -> str:
        if self._text is not None:
            return self._text
        try:
            return self.path.read_text(errors="replace")
        except OSError:
            return ""

    def close(self) -> None:
        """A temporary capture keeps its text in memory and removes its file; a log keeps its file
        (removed only if nothing was written, so empty logs do not litter DIR)."""
        self._text = self.text()
        if not self.keep or (self.path.exists() and self.path.stat().st_size == 0):
            self.path.unlink(missing_ok=True)


@contextlib.contextmanager
def redirected(log_path: Path | None = None, fds: tuple[int, ...] = (1, 2)):
    """Send ``fds`` to ``log_path`` (appended) or, with no path, to a temporary capture. Nests: each
    level restores what it found."""
    sys.stdout.flush()
    sys.stderr.flush()
    if log_path is None:
        log_path, keep = scratch_file(suffix=".log"), False
    else:
        keep = True
        unlinked_for_append(log_path)  # a link there is replaced, never appended through
    captured = Captured(Path(log_path), keep)
    try:
        saved = [os.dup(fd) for fd in fds]
        with open(log_path, "a") as log:
            for fd in fds:
                os.dup2(log.fileno(), fd)
            try:
                yield captured
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                for fd, copy in zip(fds, saved):
                    os.dup2(copy, fd)
                    os.close(copy)
    finally:  # a temporary capture is removed however the block ends (a failure, a cancel)
        captured.close()


def terminal_stream(fd: int = 2):
    """A text stream on what ``fd`` is *now* (the terminal, before any redirection), for edgeport's own
    progress and messages while library output goes to a log."""
    return os.fdopen(os.dup(fd), "w", buffering=1)


@contextlib.contextmanager
def timed(timings: dict, name: str):
    """Wall seconds of the block, into ``timings[name]`` (the report's ``timings_s``)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[name] = round(time.perf_counter() - start, 3)


def edgeport_root() -> str | None:
    """The directory a child interpreter needs on PYTHONPATH to import this edgeport, or None when its own
    environment finds it already (an installed package, or a PYTHONPATH that names it). A checkout run from
    its own directory is found through the parent's working directory, which a child started elsewhere lacks."""
    import edgeport

    root = str(Path(edgeport.__file__).resolve().parents[1])
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if any(Path(p).resolve() == Path(root) for p in paths) or "site-packages" in root:
        return None
    return root


def child_env(env: dict | None = None) -> dict:
    """``env`` (default: this process's) for a ``python -m edgeport...`` child: edgeport's root first on
    PYTHONPATH when the child would not find it otherwise (:func:`edgeport_root`)."""
    env = dict(os.environ if env is None else env)
    root = edgeport_root()
    if root:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return env
