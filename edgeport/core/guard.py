"""User code cannot end or duplicate a run: edgeport's exit code is 0 only when this process published a
passing report.

A model's ``build()`` (and the module it lives in) is the user's code, run inside edgeport. Three ways it
could otherwise change the outcome: ``os._exit(0)`` ends the process with 0 and no report (a green CI step
that proved nothing); ``os.fork()`` returns twice, and a child that returns into edgeport publishes a second
time; a non-daemon thread it leaves behind keeps the process from exiting. So, while user code runs
(:func:`user_code`), ``os._exit`` and ``os.fork`` raise instead (the caller reports that as bad input, exit
2); the process that started the run claims it (:func:`claim`) and a forked copy may not publish
(:func:`check_owner`); and the command line ends with :func:`exit_now`, which does not wait for stray threads.
"""

from __future__ import annotations

import contextlib
import os
import sys

_REAL_EXIT = os._exit
_REAL_FORK = os.fork
_OWNER: int | None = None


class UserCodeEscape(Exception):
    """User code tried to end or duplicate the process."""


def claim() -> None:
    """This process runs the command: only it may publish (a fork of it may not)."""
    global _OWNER
    _OWNER = os.getpid()


def check_owner(what: str = "publish") -> None:
    """A forked copy of the process that claimed the run ends here, non-zero, without publishing."""
    if _OWNER is not None and os.getpid() != _OWNER:
        print(f"edgeport: error: a forked copy of the run (pid {os.getpid()}) tried to {what}; refused",
              file=sys.stderr)
        _REAL_EXIT(2)


def _refuse_exit(code=0):
    raise UserCodeEscape(f"os._exit({code}) called: user code may not end edgeport's process")


def _refuse_fork():
    raise UserCodeEscape("os.fork() called: user code may not duplicate edgeport's process")


@contextlib.contextmanager
def user_code():
    """``os._exit`` and ``os.fork``/``os.forkpty`` raise while the user's code runs; restored after."""
    saved = os._exit, os.fork, getattr(os, "forkpty", None)
    os._exit, os.fork = _refuse_exit, _refuse_fork
    if saved[2] is not None:
        os.forkpty = _refuse_fork
    try:
        yield
    finally:
        os._exit, os.fork = saved[0], saved[1]
        if saved[2] is not None:
            os.forkpty = saved[2]


def exit_now(code: int) -> None:
    """End the process with ``code``: exit handlers run, output is flushed, but a non-daemon thread left by
    user code is not waited for (it would keep CI waiting until its timeout)."""
    import atexit

    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        _REAL_EXIT(code)
