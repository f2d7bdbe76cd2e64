"""The Typer app and what its commands share: option definitions, the progress line, error handling, and
the flags targets declare for themselves (built from the registry, so no command names a target).

Start-up imports nothing heavy (no torch, no converters): ``edgeport --help`` stays fast.
"""

from __future__ import annotations

import functools
import inspect
import os
from pathlib import Path
from typing import List, Optional

import typer

from edgeport.core.replace import unlinked_for_append
from edgeport.errors import UsageError
from edgeport.targets.registry import TARGET_MODULES

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help=f"Export a PyTorch model once, convert it for each target ({', '.join(TARGET_MODULES)}), "
                       "and prove every artifact.")

# Options shared by several commands: one definition, so their flags and help cannot drift apart.
THREADS_OPTION = typer.Option("1", "--threads", help="threads for every runtime and the PyTorch reference; 'auto': pick each target's runner and thread count by a short sweep")
SAMPLES_OPTION = typer.Option(8, "--samples", help="parity samples: the example inputs + seeded random ones")
SEED_OPTION = typer.Option(0, "--seed", help="seed of the random parity samples")
DATA_OPTION = typer.Option(None, "--data", help="real inputs: file.npz, a directory of .npz/.npy, or file.py:make_inputs")
NO_LATENCY_OPTION = typer.Option(False, "--no-latency", help="skip latency measurement")
CONFIG_OPTION = typer.Option(None, "--config", help="edgeport.toml (default: ./edgeport.toml or [tool.edgeport] in ./pyproject.toml)")
BUDGET_OPTION = typer.Option([], "--budget", help="parity budget override [TARGET.][VARIANT.]KEY=VALUE")
SEQ_LEN_OPTION = typer.Option(16, "--seq-len", help="hf: text models' example sequence length")
BASELINE_OPTION = typer.Option(None, "--baseline", help="earlier report.json: mark regressions, exit 1 on one")
TRUST_PICKLE_OPTION = typer.Option(False, "--trust-pickle", help="let a .pt2 unpickle objects (runs code stored in the archive: only for files you trust)")
TRUST_REMOTE_CODE_OPTION = typer.Option(False, "--trust-remote-code", help="hf: let the model directory's own Python code run (only for repositories you trust)")
DECOMPOSITIONS_OPTION = typer.Option(None, "--decompositions", help="file.py defining DECOMPOSITIONS = {'ns::op': fn} for custom ops (names the namespaces a .pt2 may call)")
MODEL_ARGUMENT = typer.Argument(..., help="file.py:callable, package.module:callable, program.pt2 or hf:<dir|hub id>")


def usage_line(message: str) -> str:
    """Bad input as the one line users see: control characters out, first line only."""
    from edgeport.diagnostics import clean

    lines = clean(str(message)).strip().splitlines()
    return f"edgeport: error: {lines[0] if lines else 'bad input'}"


def fail_usage(message: str) -> None:
    """Bad input: one line on stderr, exit 2, never a traceback."""
    typer.echo(usage_line(message), err=True)
    raise typer.Exit(2)


def parse_threads(text: str) -> int | str:
    """--threads N or --threads auto; anything else is bad input (exit 2, before any heavy work)."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        fail_usage(f"--threads must be a number >= 1 or 'auto', got {text!r}")
    return value


def with_progress(work):
    """Run ``work(progress)`` under a Rich status line on the terminal's stderr (conversions redirect fds 1
    and 2 into the run's log, so both consoles hold their own copy of the terminal); usage errors become one
    line + exit 2, our own bugs one line + exit 1."""
    from rich.console import Console

    from edgeport.core.proc import terminal_stream

    from edgeport.core.progress import Clock

    console = Console(file=terminal_stream(2), stderr=True)
    steps = Console(file=terminal_stream(1), highlight=False, soft_wrap=True)
    clock = Clock()
    try:
        with console.status(Ticking(clock)) as status:
            return work(lambda message: show_step(console, steps, status, clock, message))
    except UsageError as exc:
        fail_usage(str(exc))
    except SystemExit as exc:  # edgeport never calls sys.exit while working: the model's or data's code did
        fail_usage(f"user code (the model, its build function or --data) called sys.exit({exc.code!r}); "
                   "nothing was judged, so this run is not a pass")
    except Exception as exc:  # a bug of ours, not bad input: one line unless asked for the traceback
        if os.environ.get("EDGEPORT_DEBUG"):
            raise
        from edgeport.diagnostics import first_line
        from edgeport.errors import out_of_memory

        if out_of_memory(exc):  # what the model or program asked for: bad input (--max-memory bounds the plan)
            fail_usage(f"the model asked for more memory than this machine gives: {first_line(exc)}")

        typer.echo(f"edgeport: internal error: {first_line(exc)} (EDGEPORT_DEBUG=1 shows the traceback)", err=True)
        raise typer.Exit(1)


def native_output_to(log: Path) -> None:
    """From now on, what native code writes to fds 1/2 goes to the run's log, while edgeport's own lines
    (sys.stdout/sys.stderr) keep the terminal. Runtimes print from destructors at interpreter exit (LiteRT's
    CompiledModel: "DestroyAccelerator"), after edgeport's last line; this keeps that out of the CI log."""
    import sys

    if not log.parent.is_dir():
        return
    sys.stdout.flush()
    sys.stderr.flush()
    sys.stdout = os.fdopen(os.dup(1), "w", buffering=1)
    sys.stderr = os.fdopen(os.dup(2), "w", buffering=1)
    unlinked_for_append(log)  # a link there is replaced, never appended through
    target = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(target, 1)
    os.dup2(target, 2)
    os.close(target)


def show_step(console, steps, status, clock, message: str) -> None:
    """On a terminal the status line changes (the step and its running time, redrawn by Rich); in a CI log
    (no terminal, no spinner) each step is one plain line on stdout with the elapsed time and a UTC
    timestamp, beside the summary it leads to (stderr stays for errors)."""
    took = clock.begin(str(message))
    status.update(Ticking(clock))
    if not console.is_terminal:
        steps.print(escape(clock.line(str(message), took)))


class Ticking:
    """The status line's text, rendered again on every refresh so the step's time keeps counting."""

    def __init__(self, clock):
        self.clock = clock

    def __rich__(self):
        from rich.text import Text

        from edgeport.diagnostics import clean

        return Text(clean(self.clock.status()), style="bold")


def escape(text: str) -> str:
    from rich.markup import escape as rich_escape

    from edgeport.diagnostics import clean

    return rich_escape(clean(str(text)))


def with_target_options(command):
    """Add every registered target's own options (``TargetOption``) to ``command``'s flags; the command
    receives them as one ``target_options`` dict keyed by option key."""
    from edgeport.targets.registry import all_options

    options = all_options()
    params = [p for p in inspect.signature(command).parameters.values() if p.name != "target_options"]
    extra = [inspect.Parameter(o.key, inspect.Parameter.KEYWORD_ONLY, annotation=_annotation(o),
                               default=typer.Option(o.default, f"--{o.flag}", help=o.help)) for o in options]

    @functools.wraps(command)
    def wrapper(**kwargs):
        values = {o.key: list(kwargs.pop(o.key)) if o.multiple else kwargs.pop(o.key) for o in options}
        return command(**kwargs, target_options=values)

    wrapper.__signature__ = inspect.Signature(params + extra)
    return wrapper


def _annotation(option):
    if option.kind is bool:
        return bool
    return List[str] if option.multiple else Optional[str]
