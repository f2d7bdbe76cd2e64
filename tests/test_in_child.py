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


def _resident_kib(name: str) -> int:
    """Resident KiB of this process's mappings of files called ``name`` (/proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5:
                inside = line.rstrip().endswith("/" + name)
            elif inside and line.startswith("Rss:"):
                total += int(head[1])
    return total


def test_idle_weights_mapped_from_a_file_leave_memory_while_the_child_works_and_read_back(tmp_path):
    """The LiteRT export_hf child reads the model's own files; the parent's mapped copy of the same weights
    (the programs') is paged out meanwhile and faults back in, unchanged, when read again."""
    import torch
    from safetensors.torch import load_file, save_file

    save_file({"w": torch.randn(4096, 1024)}, tmp_path / "weights.safetensors")   # 16 MiB
    weights = load_file(tmp_path / "weights.safetensors")["w"]       # mapped from the file, as a model's are
    total = float(weights.sum())
    assert _resident_kib("weights.safetensors") > 15 * 1024
    assert in_child(os.getpid, idle=[weights, weights[:8]]) != os.getpid()
    assert _resident_kib("weights.safetensors") < 1024
    assert float(weights.sum()) == total
