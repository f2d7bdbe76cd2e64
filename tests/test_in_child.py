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
