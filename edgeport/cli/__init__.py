"""edgeport's command line: a thin Typer layer over :mod:`edgeport.api` (parse flags, call, print)."""

from __future__ import annotations

import sys

from edgeport.cli import commands, fleet, generate, tools  # noqa: F401  (registers the commands)
from edgeport.cli.app import app, usage_line
from edgeport.errors import UsageError


def main() -> None:
    try:
        app()
    except UsageError as exc:  # raised outside a command's own handling
        print(usage_line(str(exc)), file=sys.stderr)
        sys.exit(2)


__all__ = ["app", "main"]
