"""Run a program read from a file once in a child process before edgeport's own process runs it.

The operator allowlist refuses the kernels known to trust their arguments; a kernel bug nobody knows yet
would still take edgeport down with it (SIGSEGV, SIGABRT: no report, the CI step just dies). So the first
run of a file-loaded program happens in a spawned child under an address-space limit (RLIMIT_AS, from the
program's declared size plus a margin for the interpreter and torch), on EVERY input the reference will then
run here (the example, the seeded random samples, --data): a program whose branches (``torch.cond``) take
another path on another input cannot pass on one and crash on the next. A crash there is a one-line
UsageError (exit 2) and the program never runs here; an allocation past the limit is the same, and so is an
ordinary exception (an index out of range on an input: the program does not run on its own inputs).
"""

from __future__ import annotations

import signal

from edgeport.errors import UsageError

# address space a spawned child needs beyond the program's own memory: the interpreter, torch's libraries
# and thread stacks reserve several GB of virtual memory they never touch
MARGIN_BYTES = 8 << 30
OUT_OF_MEMORY_EXIT = 3
FAILED_EXIT = 4


def probe(path, inputs: list, memory_bytes: int, trust_pickle: bool = False, decompositions: str | None = None) -> None:
    """Load ``path`` and run it on each of ``inputs`` (flat tuples of tensors, in signature order)
    in a child limited to ``memory_bytes`` + the margin; refuse (UsageError) a program that crashes, exhausts
    it or raises there. ``decompositions``: the --decompositions file, imported in the child too (it
    registers the custom ops the program calls)."""
    import multiprocessing

    if multiprocessing.current_process().daemon:
        return  # a -j worker or fleet task may not start children: its driver already probed the program
    limit = int(memory_bytes) + MARGIN_BYTES
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_run, args=(str(path), [tuple(i) for i in inputs], trust_pickle, decompositions,
                                           limit, send), daemon=True)
    child.start()
    send.close()
    try:
        error = receive.recv()   # (input index, line) when the program raised; EOF when the child just ended
    except EOFError:
        error = None
    child.join()
    code = child.exitcode
    if code == FAILED_EXIT and error:
        where = f"on its reference input {error[0]} of {len(inputs)}" if error[0] else "when loaded"
        raise UsageError(f"{path}: the program fails {where} (run in a contained process): {error[1]}")
    if code is not None and code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
        raise UsageError(f"{path}: the program crashed PyTorch ({name}) while running the reference in a "
                         "contained process; refusing to run it here")
    if code == OUT_OF_MEMORY_EXIT:
        raise UsageError(f"{path}: the program needs more than {limit / 1e9:.1f} GB of address space to run "
                         "once (the pre-flight estimate plus margin); refusing to run it")


def _run(path: str, inputs: list, trust_pickle: bool, decompositions: str | None, limit: int, send) -> None:
    """The child: limit, load (checked again), run on every input; an ordinary error is sent (index, line)."""
    import os
    import resource

    from edgeport.diagnostics import first_line
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
        module, index = program.module(), 0
        with torch.no_grad():
            for index, values in enumerate(inputs, 1):
                module(*[v.clone() for v in values])
    except BaseException as exc:  # noqa: BLE001 - the parent reports it
        if out_of_memory(exc):
            os._exit(OUT_OF_MEMORY_EXIT)
        send.send((index, first_line(exc)))
        os._exit(FAILED_EXIT)
    os._exit(0)
