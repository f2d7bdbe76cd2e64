"""The two kinds of failure the CLI maps to exit codes (README, "Exit codes": 2 = bad input, 1 = conversion/parity)."""


class UsageError(Exception):
    """Bad usage or bad input: the CLI prints the message as one line and exits 2."""


class Terminated(BaseException):
    """The process was asked to stop (SIGTERM: a cancelled or timed-out CI job). Not an ``Exception`` nor a
    ``SystemExit``, so no handler of a model's own failures reports it as bad input: it unwinds to the CLI,
    and the run's staging directory is removed on the way (``pipeline.run.convert``)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.exit_code = 128 + signum


# A cancel (Ctrl-C, SIGTERM): a handler that reports any failure of a step as that step's result re-raises
# these, so a cancelled run stops instead of carrying on with the step marked failed.
CANCELLED = (KeyboardInterrupt, Terminated)


class ExportFailed(Exception):
    """torch.export refused the model: every target fails with this message (exit 1)."""


# How deep a document (JSON or TOML) may nest below the caller's own frames (Python's default recursion limit).
JSON_DEPTH = 1000
# Frames the parsers spend per level: the C JSON scanner one, tomllib up to three (a key, a value, an inline
# table). tomllib is pure Python (3.11 calls Python from Python without the C stack), so its limit is set to
# JSON_DEPTH levels' frames even above the interpreter's; the C parser's is only ever lowered.
_FRAMES = {"json": (1, 16), "json-prefix": (1, 16), "toml": (3, 16)}


class NestedTooDeep(UsageError, RecursionError):
    """A document nested deeper than JSON_DEPTH levels: bad input (exit 2) naming the file. Also a
    ``RecursionError``, so a reader that treats any unreadable file as absent (the store's entries) still does."""


def load_document(raw, what: str = "a document", kind: str = "json"):
    """The one parser for documents edgeport reads from input (``kind`` "json": text or bytes; "toml": text;
    "json-prefix": the JSON value a text starts with, as ``(value, end)``, e.g. in a model's answer):
    a too-deep document is ``NestedTooDeep`` naming ``what``, never a crash. On Python 3.11 the C JSON parser
    counts its depth against the interpreter's recursion limit, and a library may raise that limit for its own
    recursive walks (LiteRT's converter tools set 100,000 when imported, i.e. after any LiteRT conversion in
    the process): a document 200,000 brackets deep then overflows the C stack, a segfault, before the limit
    is reached. The limit is held at the caller's depth + JSON_DEPTH levels' frames while parsing. Decoding
    errors (``ValueError``, ``tomllib.TOMLDecodeError``, ``UnicodeDecodeError``) are the caller's to word."""
    import sys

    if kind == "toml":
        import tomllib

        parse = tomllib.loads
    else:
        import json

        parse = json.loads if kind == "json" else json.JSONDecoder().raw_decode
    per_level, slack = _FRAMES[kind]
    saved, bound = sys.getrecursionlimit(), _stack_depth() + per_level * JSON_DEPTH + slack
    sys.setrecursionlimit(bound if kind == "toml" else min(saved, bound))  # never raised for the C parser
    try:
        return parse(raw)
    except RecursionError:
        raise NestedTooDeep(f"{what}: nested deeper than {JSON_DEPTH} levels") from None
    finally:
        sys.setrecursionlimit(saved)


def load_json(raw, what: str = "a JSON document"):
    """``json.loads`` for files edgeport did not write (a DIR, an archive, the cache), through load_document."""
    return load_document(raw, what, "json")


def load_toml(text: str, what: str = "a TOML document") -> dict:
    """``tomllib.loads`` for files a user supplied (edgeport.toml, pyproject.toml, fleet.toml, --checks)."""
    return load_document(text, what, "toml")


def _stack_depth() -> int:
    import sys

    frame, depth = sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    return depth


def json_object(raw, what: str) -> dict:
    """``raw`` (text or bytes) parsed as a JSON object; anything else is bad input naming ``what``."""
    try:
        data = load_json(raw, what)
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"{what} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{what} is not a JSON object")
    return data


OUT_OF_MEMORY = ("DefaultCPUAllocator: can't allocate", "not enough memory", "std::bad_alloc", "Cannot allocate memory")


def out_of_memory(exc: BaseException) -> bool:
    """An allocation the machine could not give (torch's CPU allocator, numpy, Python): caused by what the
    model or program asks for, so bad input to report in one line, not a bug of edgeport's."""
    return isinstance(exc, MemoryError) or any(text in str(exc) for text in OUT_OF_MEMORY)
