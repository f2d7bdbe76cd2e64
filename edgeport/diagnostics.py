"""How edgeport turns other people's failures into one readable line: an exception's summary, and the line
of the *user's* code that led there (not torch's, not a converter's, not ours).

One home for these so every message in a report reads the same way and none of them crashes on an empty
or multi-line exception text.
"""

from __future__ import annotations

import os
import re
import traceback
from typing import Iterable

# CSI, OSC and two-byte escape sequences; then every other control character (C0/C1, bidi overrides, what
# XML 1.0 forbids), shown as \xNN / \uNNNN instead of acting on a terminal, a document or a reader
ANSI = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|[@-Z\\-_])")
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ufffe\uffff\ud800-\udfff]")
# lines exporters add around the real message; a summary made of them says nothing
BOILERPLATE = ("For more information", "from user code", "Set TORCH", "Next steps", "To fix", "Traceback",
               "The above exception", "During handling", "- Create an issue", "- Create an error report")
# where a message turns into the FX node's stack (the location, see user_frame) or, in torch.onnx's
# ConversionError, into a copy of its cause's text (summary reads the cause itself)
STACK_STARTS = ("Original traceback", "## Exception summary", "Use tlparse", "(Refer to the full stack trace")
TRAILERS = (" Next steps:",)           # boilerplate torch.onnx appends to a meaningful line
LIBRARY_PARTS = ("site-packages", "dist-packages", "/torch/", "/lib/python3", "<frozen", "<string>")
NOT_MODEL_CODE = ("/torch/", "<frozen", "<string>")
# edgeport's own files, by location: a path merely containing "edgeport" (a venv under ~/.cache/edgeport,
# a user's checkout named so) is not ours
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def clean(text: str) -> str:
    """Text without terminal escape sequences, every other control character made visible (``\\x07``);
    newlines and tabs kept. Model-provided text passes through this before any report or terminal."""
    return CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}",
                       ANSI.sub("", str(text)))


def message_lines(exc: BaseException) -> list[str]:
    """The exception's own lines, cleaned, up to any stack it quotes; blank and boilerplate lines dropped."""
    lines = []
    for line in clean(str(exc)).splitlines():
        line = line.strip()
        if line.startswith(STACK_STARTS):
            break
        for trailer in TRAILERS:
            line = line.split(trailer)[0].rstrip()
        if line and not line.startswith(BOILERPLATE):
            lines.append(line)
    return lines


def chain(exc: BaseException) -> list[BaseException]:
    """The exception and the ones it was raised ``from``, outermost first (cycles cut)."""
    found = [exc]
    while found[-1].__cause__ is not None and found[-1].__cause__ not in found:
        found.append(found[-1].__cause__)
    return found


def first_line(exc: BaseException, limit: int = 500) -> str:
    """``Type: first meaningful line`` of an exception, capped; never raises on an empty message."""
    lines = message_lines(exc)
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")[:limit]


def summary(exc: BaseException, max_lines: int = 3, limit: int = 700) -> str:
    """A few meaningful lines joined with `` | ``: enough to tell two failures of one exporter apart. An
    exporter that wraps the real failure (torch.onnx's ``ConversionError``: "step 2/3 ... Next steps")
    gives its first line, then the root cause's lines, which say what actually broke."""
    root = chain(exc)[-1]
    lines = message_lines(exc)[:1 if root is not exc else max_lines]
    text = f"{type(exc).__name__}: {' | '.join(lines)}".rstrip(": ")
    cause = message_lines(root)[:max_lines]
    if root is not exc and cause and cause[0] not in text:
        text += f" — caused by {type(root).__name__}: {' | '.join(cause)}"
    return text[:limit]


def is_user_file(filename: str) -> bool:
    """A frame of the user's code: not a library, not the interpreter, not edgeport itself."""
    return bool(filename) and not filename.startswith(PACKAGE_DIR) and not any(p in filename for p in LIBRARY_PARTS)


def user_frame(exc: BaseException) -> str | None:
    """``file:line: code`` of the last user frame: from the tracebacks of the exception and its causes,
    else from a ``File "...", line N`` quoted in their messages (torch.export and torch.onnx quote the
    model's frames there), else the model's own line when the model is a library's (a transformers model
    quoted in an FX stack: the line the user would look at, even if it is not in their files)."""
    exceptions = chain(exc)
    for one in exceptions:
        frames = [f for f in traceback.extract_tb(one.__traceback__) if is_user_file(f.filename)]
        if frames:
            return f"{frames[-1].filename}:{frames[-1].lineno}: {frames[-1].line}"
    quoted = [clean(str(one)) for one in exceptions]
    return (next(filter(None, map(user_source, quoted)), None)
            or next(filter(None, (user_source(text, is_model_file) for text in quoted)), None))


def is_model_file(filename: str) -> bool:
    """A frame of model code a library ships (transformers' modeling files), not torch's or ours."""
    return bool(filename) and not filename.startswith(PACKAGE_DIR) and not any(p in filename for p in NOT_MODEL_CODE)


def user_source(stack_trace: str | None, keep=is_user_file) -> str | None:
    """``file:line: code`` of the last user frame in a formatted stack trace (FX nodes keep one in
    ``node.meta["stack_trace"]``); a library's file is named from its package down."""
    frames = re.findall(r'File "([^"]+)", line (\d+), in [^\n]+\n\s*(.+)', stack_trace or "")
    user = [f for f in frames if keep(f[0])]
    if not user:
        return None
    path = re.split(r"(?:site|dist)-packages/", user[-1][0])[-1]
    return f"{path}:{user[-1][1]}: {user[-1][2].strip()}"


def with_location(message: str, location: str | None) -> str:
    return f"{message} (at {location})" if location else message


def histogram(names: Iterable[str]) -> dict[str, int]:
    """``{name: count}``, most frequent first (ties by name): the op tables every target reports."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
