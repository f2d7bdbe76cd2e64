"""User code cannot end or duplicate a run: edgeport's exit code is 0 only when this process published a
passing report.

A model's ``build()`` (and the module it lives in) is the user's code, run inside edgeport. Three ways it
could otherwise change the outcome: ``os._exit(0)`` ends the process with 0 and no report (a green CI step
that proved nothing); ``os.fork()`` returns twice, and a child that returns into edgeport publishes a second
time; a non-daemon thread it leaves behind keeps the process from exiting. So, while user code runs
(:func:`user_code`), ``os._exit`` and ``os.fork`` raise instead (the caller reports that as bad input, exit
2); the process that started the run claims it (:func:`claim`) and a forked copy (a libc ``fork()``, out of
Python's reach) ends as soon as the user's code returns, before it touches the run's files or children, and
may never publish (:func:`check_owner`); and the command line ends with :func:`exit_now`, which does not wait for stray threads.
"""

from __future__ import annotations

import contextlib
import os
import sys

_REAL_EXIT = os._exit
_REAL_FORK = os.fork
_OWNER: int | None = None
_TERMINAL: int | None = None   # the stderr the command started with (library output may take fd 2 later)


class UserCodeEscape(Exception):
    """User code tried to end or duplicate the process."""


def claim() -> None:
    """This process runs the command: only it may publish (a fork of it may not)."""
    global _OWNER, _TERMINAL
    _OWNER = os.getpid()
    with contextlib.suppress(OSError):
        _TERMINAL = os.dup(2)


def check_owner(what: str = "publish") -> None:
    """A forked copy of the process that claimed the run ends here, non-zero, without publishing."""
    if _OWNER is not None and os.getpid() != _OWNER:
        message = f"edgeport: error: a forked copy of the run (pid {os.getpid()}) tried to {what}; refused\n"
        with contextlib.suppress(OSError):   # written at once: the exit below skips Python's own flushing
            os.write(_TERMINAL if _TERMINAL is not None else 2, message.encode())
        _REAL_EXIT(2)


def _refuse_exit(code=0):
    raise UserCodeEscape(f"os._exit({code}) called: user code may not end edgeport's process")


def _refuse_fork():
    raise UserCodeEscape("os.fork() called: user code may not duplicate edgeport's process")


# ``os`` re-exports them from the platform module (``posix``): both names are guarded
_EXITS = ((os, "_exit"), (sys.modules[os.name], "_exit"))
_FORKS = tuple((m, n) for m in (os, sys.modules[os.name]) for n in ("fork", "forkpty") if hasattr(m, n))


@contextlib.contextmanager
def refused(pairs, replacement):
    """Each (module, name) in ``pairs`` is ``replacement`` inside the block; restored after."""
    saved = [(m, n, getattr(m, n)) for m, n in pairs]
    for module, name, _ in saved:
        setattr(module, name, replacement)
    try:
        yield
    finally:
        for module, name, original in saved:
            setattr(module, name, original)


@contextlib.contextmanager
def user_code():
    """``os._exit`` and ``os.fork``/``os.forkpty`` (and their ``posix`` originals) raise while the user's
    code runs; restored after."""
    try:
        with refused(_EXITS, _refuse_exit), refused(_FORKS, _refuse_fork):
            yield
    finally:
        check_owner("go on past the model's code")   # a libc fork's child stops here, before it shares the run's files


def exit_now(code: int) -> None:
    """End the process with ``code``: exit handlers run, output is flushed, but a non-daemon thread left by
    user code is not waited for (it would keep CI waiting until its timeout)."""
    import atexit

    try:
        # an exit handler the user's code registered cannot end the process with its own code (nor print a
        # traceback over the verdict): _exit is refused while handlers run, a handler's error is one line
        with refused(_EXITS, _refuse_exit), _one_line_errors():
            atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        _REAL_EXIT(code)


@contextlib.contextmanager
def _one_line_errors():
    """Errors Python would print as "Exception ignored in ..." with a traceback, one line each instead."""
    def hook(unraisable):
        with contextlib.suppress(Exception):
            sys.stderr.write(f"edgeport: ignored at exit: {type(unraisable.exc_value).__name__}: {unraisable.exc_value}\n")

    saved, sys.unraisablehook = sys.unraisablehook, hook
    try:
        yield
    finally:
        sys.unraisablehook = saved
