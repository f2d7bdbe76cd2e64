"""``validate DIR`` loads artifacts a stranger may have crafted: their first load and run happen in a child.

Why: the sha256 check catches an artifact changed since conversion, but DIR's manifest and report are the
stranger's too (change the bytes, then the recorded hash). A runtime's native loader trusts its file: a
`.pte` with two bytes changed aborts in ExecuTorch's loader (std::terminate from a log callback), which in
edgeport's own process would end the run with no report and the other rows lost. So every row's artifact
is first loaded (and, for forward artifacts, run on every sample) in one spawned child, row after row; a
row whose artifact kills the child fails with how, and is never loaded here; the child starts again for
the rows after it. An ordinary error is left to the judge in this process, which reports it as usual.
"""

from __future__ import annotations

import signal
from pathlib import Path

STARTED = "started"


def crashed_rows(items: list[tuple[str, Path]], samples: list | None, generative: bool) -> dict[int, str]:
    """{index: why} for the ``(target name, artifact)`` items whose first load or run killed the child.
    ``samples``: the forward inputs each artifact runs on (None: load only)."""
    import multiprocessing

    if not items or multiprocessing.current_process().daemon:
        return {}
    crashes, start = {}, 0
    while start < len(items):
        index, code = _child_run(items, start, samples, generative)
        if index is None or code is None or code >= 0:
            break
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
        crashes[index] = (f"the artifact crashed {items[index][0]}'s runtime ({name}) when loaded in a contained "
                          "process: not loaded here (a file crafted to crash a runtime's loader)")
        start = index + 1
    return crashes


def _child_run(items: list, start: int, samples: list | None, generative: bool) -> tuple[int | None, int | None]:
    """One child over ``items[start:]``: (the index it last started, its exit code)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_run, args=([(t, str(p)) for t, p in items], start, samples, generative, send),
                        daemon=True)
    child.start()
    send.close()
    last = None
    while True:
        try:
            last = receive.recv()
        except EOFError:
            break
    child.join()
    return last, child.exitcode


def _run(items: list, start: int, samples: list | None, generative: bool, send) -> None:
    """The child: each artifact loaded (and run on every sample), its index sent first."""
    import os

    from edgeport.targets.registry import get_target

    for index in range(start, len(items)):
        send.send(index)
        name, path = items[index]
        try:
            target = get_target(name)
            if generative:
                target.generation().load(Path(path), 1)
            else:
                runner = target.load_runner(Path(path), 1)
                for sample in samples or []:
                    runner.run(sample)
        except Exception:   # noqa: BLE001 - an ordinary error: the judge in the parent reports it
            continue
    os._exit(0)
