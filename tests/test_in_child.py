"""core.memory.in_child: a step run in a spawned process (what it leaves behind goes with the process)."""

from __future__ import annotations

import os

import pytest

from edgeport.core.memory import in_child


def test_runs_in_another_process_and_returns_its_value():
    assert in_child(os.getpid) != os.getpid()
    assert in_child(divmod, 7, 2) == (3, 1)


def test_its_exception_is_raised_here():
    with pytest.raises(ValueError, match="invalid literal"):
        in_child(int, "not a number")


def _pid_from_a_daemon(queue):
    queue.put((os.getpid(), in_child(os.getpid)))


def test_a_daemonic_process_runs_it_itself():
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    daemon = ctx.Process(target=_pid_from_a_daemon, args=(queue,), daemon=True)
    daemon.start()
    own, ran_in = queue.get(timeout=120)
    daemon.join(timeout=60)
    assert own == ran_in
