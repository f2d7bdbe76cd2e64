"""Run a program read from a file once in a child process before edgeport's own process runs it.

The operator allowlist refuses the kernels known to trust their arguments; a kernel bug nobody knows yet
would still take edgeport down with it (SIGSEGV, SIGABRT: no report, the CI step just dies). So the first
run of a file-loaded program, on its example inputs, happens in a spawned child under an address-space
limit (RLIMIT_AS, from the pre-flight estimate plus a margin for the interpreter and torch): a crash there
is a one-line UsageError (exit 2) and the program never runs here; an allocation past the limit is the
same. A child that raises an ordinary exception says nothing: the run in this process reports it as usual.
"""

from __future__ import annotations

import signal

from edgeport.errors import UsageError

# address space a spawned child needs beyond the program's own memory: the interpreter, torch's libraries
# and thread stacks reserve several GB of virtual memory they never touch
MARGIN_BYTES = 8 << 30
OUT_OF_MEMORY_EXIT = 3


def probe(path, example: tuple, trust_pickle: bool, decompositions: str | None, memory_bytes: int) -> None:
    """Load ``path`` and run it on ``example`` in a child limited to ``memory_bytes`` + the margin; refuse
    (UsageError) a program that crashes or exhausts it there. ``decompositions``: the --decompositions file,
    imported in the child too (it registers the custom ops the program calls)."""
    import multiprocessing

    if multiprocessing.current_process().daemon:
        return  # a -j worker or fleet task may not start children: its driver already probed the program
    limit = int(memory_bytes) + MARGIN_BYTES
    child = multiprocessing.get_context("spawn").Process(
        target=_run, args=(str(path), tuple(example), trust_pickle, decompositions, limit), daemon=True)
    child.start()
    child.join()
    code = child.exitcode
    if code is not None and code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
        raise UsageError(f"{path}: the program crashed PyTorch ({name}) while running the reference in a "
                         "contained process; refusing to run it here")
    if code == OUT_OF_MEMORY_EXIT:
        raise UsageError(f"{path}: the program needs more than {limit / 1e9:.1f} GB of address space to run "
                         "once (the pre-flight estimate plus margin); refusing to run it")


def _run(path: str, example: tuple, trust_pickle: bool, decompositions: str | None, limit: int) -> None:
    """The child: limit, load (checked again), run once. Ordinary errors exit 0 (reported by the real run)."""
    import os
    import resource

    from edgeport.errors import out_of_memory

    try:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ValueError, OSError):
        pass  # a lower hard limit is already set: keep it
    try:
        import torch

        from edgeport.sources.program_policy import user_namespaces
        from edgeport.sources.pt2_archive import load_exported_program

        program = load_exported_program(path, trust_pickle, user_namespaces(decompositions))
        with torch.no_grad():
            program.module()(*example)
    except BaseException as exc:  # noqa: BLE001 - the parent reports what this run would say
        os._exit(OUT_OF_MEMORY_EXIT if out_of_memory(exc) else 0)
    os._exit(0)
