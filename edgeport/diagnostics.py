"""How edgeport turns other people's failures into one readable line: an exception's summary, and the line
of the *user's* code that led there (not torch's, not a converter's, not ours).

One home for these so every message in a report reads the same way and none of them crashes on an empty
or multi-line exception text.
"""

from __future__ import annotations

import re
import traceback
from typing import Iterable

# CSI, OSC and two-byte escape sequences; then every other control character (C0/C1, bidi overrides, what
# XML 1.0 forbids), shown as \xNN / \uNNNN instead of acting on a terminal, a document or a reader
ANSI = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|[@-Z\\-_])")
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ufffe\uffff\ud800-\udfff]")
# lines exporters add around the real message; a summary made of them says nothing
BOILERPLATE = ("For more information", "from user code", "Set TORCH", "Next steps", "To fix", "Traceback",
               "The above exception", "During handling")
LIBRARY_PARTS = ("site-packages", "dist-packages", "/torch/", "/lib/python3", "<frozen", "/edgeport/", "<string>")


def clean(text: str) -> str:
    """Text without terminal escape sequences, every other control character made visible (``\\x07``);
    newlines and tabs kept. Model-provided text passes through this before any report or terminal."""
    return CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}",
                       ANSI.sub("", str(text)))


def message_lines(exc: BaseException) -> list[str]:
    """The exception's own lines, cleaned, blank and boilerplate lines dropped."""
    lines = [ln.strip() for ln in clean(str(exc)).splitlines()]
    return [ln for ln in lines if ln and not ln.startswith(BOILERPLATE)]


def first_line(exc: BaseException, limit: int = 500) -> str:
    """``Type: first meaningful line`` of an exception, capped; never raises on an empty message."""
    lines = message_lines(exc)
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")[:limit]


def summary(exc: BaseException, max_lines: int = 3, limit: int = 500) -> str:
    """A few meaningful lines joined with `` | ``: enough to tell two failures of one exporter apart."""
    lines = message_lines(exc)[:max_lines]
    return f"{type(exc).__name__}: {' | '.join(lines)}".rstrip(": ")[:limit]


def is_user_file(filename: str) -> bool:
    """A frame of the user's code: not a library, not the interpreter, not edgeport itself."""
    return bool(filename) and not any(part in filename for part in LIBRARY_PARTS)


def user_frame(exc: BaseException) -> str | None:
    """``file:line: code`` of the last user frame, from the traceback or, failing that, from a
    ``File "...", line N`` quoted in the message (torch.export quotes the user's frame there)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if is_user_file(f.filename)]
    if frames:
        return f"{frames[-1].filename}:{frames[-1].lineno}: {frames[-1].line}"
    return user_source(clean(str(exc)))


def user_source(stack_trace: str | None) -> str | None:
    """``file:line: code`` of the last user frame in a formatted stack trace (FX nodes keep one in
    ``node.meta["stack_trace"]``)."""
    frames = re.findall(r'File "([^"]+)", line (\d+), in [^\n]+\n\s*(.+)', stack_trace or "")
    user = [f for f in frames if is_user_file(f[0])]
    return f"{user[-1][0]}:{user[-1][1]}: {user[-1][2].strip()}" if user else None


def with_location(message: str, location: str | None) -> str:
    return f"{message} (at {location})" if location else message


def histogram(names: Iterable[str]) -> dict[str, int]:
    """``{name: count}``, most frequent first (ties by name): the op tables every target reports."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
