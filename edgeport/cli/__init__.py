"""edgeport's command line: a thin Typer layer over :mod:`edgeport.api` (parse flags, call, print)."""

from __future__ import annotations

import sys

from edgeport.cli import commands, fleet, generate, tools  # noqa: F401  (registers the commands)
from edgeport.cli.app import app, usage_line
from edgeport.errors import Terminated, UsageError


def main() -> None:
    """Run the command and end the process with its code, explicitly: a stray non-daemon thread left by user
    code must not keep edgeport from exiting, and a fork of this process must not publish
    (:mod:`edgeport.core.guard`)."""
    import signal

    from edgeport.core.guard import claim, exit_now

    signal.signal(signal.SIGTERM, _terminated)
    claim()
    code = 1
    try:
        app()
        code = 0
    except UsageError as exc:  # raised outside a command's own handling
        print(usage_line(str(exc)), file=sys.stderr)
        code = 2
    except Terminated as exc:   # a run with finished rows published them (incomplete) and returned instead
        print("edgeport: stopped by a signal before any row finished; nothing written to the output", file=sys.stderr)
        code = exc.exit_code
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else _message(exc.code))
    exit_now(code)


def _message(text) -> int:
    print(text, file=sys.stderr)
    return 1


def _terminated(signum, _frame) -> None:
    """SIGTERM (a CI job cancelled or timed out, ``timeout``, ``kill``) unwinds as :class:`Terminated`, so the
    run's staging directory is removed on the way out instead of staying beside ``--out`` until a later run
    finds it stale (14 GB for a 1B model stopped mid-conversion); the exit code is the shell's for a signal.
    A step inside native code stops when it returns to Python."""
    raise Terminated(signum)


__all__ = ["app", "main"]
