"""Rows of one ``edgeport convert`` in worker processes, after the shared export (no Ray: one machine).

Why it is shaped like this:
- One process per row, so a converter that crashes the interpreter (a segfault, an abort in C++) fails
  its row only; the others and the run go on.
- Processes come from a fork server that imported torch once, before any torch work ran (forking a process
  that already ran torch's thread pools, or jax, is unsafe). It is started at the beginning of the run, so
  its imports overlap loading and exporting the model; a row then starts in ~0.1 s instead of paying the
  torch import again.
- Timing needs the machine to itself: a worker's latency measurement (and ``--threads auto`` sweep) waits
  until no other row is converting and no other worker is timing (:func:`edgeport.validate.latency.set_gate`).
  Conversions run side by side; the timings run one at a time after them, as in a sequential run.
- Each task is :func:`edgeport.pipeline.jobs.run_job`, the same function a fleet's Ray task runs.
- A task past its limits (``spec["limits"]``: seconds, memory of its process tree) is killed with
  everything it started, and fails with the step it was in and what it had used
  (:mod:`edgeport.pipeline.limits`); time spent waiting for the timing gate does not count.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import secrets
import sys
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

# What every row imports before its converter: torch and its export stack (~5 s more than torch alone,
# paid once here instead of in every worker). No converter library: some start threads or pick a
# backend when imported, which a fork must not inherit.
PRELOAD = ["torch", "torch.export", "torch._dynamo", "torch.fx.experimental.symbolic_shapes", "sympy", "numpy",
           "edgeport.sources.pt2_archive", "edgeport.targets.rewrites", "edgeport.pipeline.jobs", "edgeport.pipeline.row"]
POLL_SECONDS = 1.0


def default_jobs() -> int:
    """One worker per two cores. Measured on 2 cores (bench/FLEET.md): a libtpu compile already keeps both
    busy (174% CPU in one process), so rows side by side gained nothing on MobileNetV2 and cost tiny models
    their duplicated imports (-j 2 took 1.05x the raw paths vs 0.74x for -j 1). With 4+ cores,
    conversions (LiteRT's is single-threaded) and per-topology compiles do overlap."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // 2)


def context():
    """The fork server's context (started on first use, importing :data:`PRELOAD` once)."""
    from multiprocessing import forkserver

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    with _socket_without_a_file():
        forkserver.ensure_running()
    return ctx


@contextlib.contextmanager
def _socket_without_a_file():
    """The fork server listens on a Unix socket that multiprocessing names in a folder it makes in the temp
    dir: a file outside ``--out`` (a run writes nothing there), and a path too long for AF_UNIX when the temp
    dir is deep. On Linux, the abstract namespace gives it a name with no file and no length problem."""
    from multiprocessing import connection

    if not sys.platform.startswith("linux"):
        yield
        return
    original = connection.arbitrary_address
    connection.arbitrary_address = lambda family: (f"\0edgeport-fork-{os.getpid()}-{secrets.token_hex(8)}"
                                                   if family == "AF_UNIX" else original(family))
    try:
        yield
    finally:
        connection.arbitrary_address = original


def prewarm() -> None:
    """Start the fork server now, so its imports overlap the driver's own work."""
    context()


def wait_ready() -> None:
    """Block until the fork server has finished importing (a no-op child starts only then): called before
    the driver times PyTorch, so the server's imports do not share the CPU with that measurement."""
    process = context().Process(target=_noop)
    process.start()
    process.join()


def _noop() -> None:
    return None


class PipeGate:
    """The worker's side of the timing gate: ask the driver, wait for its go, tell it when done."""

    def __init__(self, conn):
        self.conn, self.waited = conn, 0.0

    def acquire(self) -> None:
        import time

        start = time.perf_counter()
        self.conn.send(("want", None))
        self.conn.recv()
        self.waited += time.perf_counter() - start

    def release(self) -> None:
        self.conn.send(("release", None))


def _child(spec: dict, conn, gate: bool, env: dict) -> None:
    from edgeport.core.scratch import follow_environment
    from edgeport.diagnostics import first_line
    from edgeport.errors import CANCELLED
    from edgeport.pipeline.jobs import run_job, test_crash, test_stall
    from edgeport.validate import latency

    os.environ.clear()  # the driver's environment now, not the fork server's from when it started
    os.environ.update(env)
    follow_environment()  # and its scratch folder (edgeport.core.scratch)
    test_crash(f"{spec['target']}/{spec['variant']}")
    test_stall(f"{spec['target']}/{spec['variant']}", lambda step: conn.send(("step", step)))
    waiting = PipeGate(conn) if gate else None
    latency.set_gate(waiting)
    try:
        row = run_job(spec, lambda step: conn.send(("step", step)))
        if waiting is not None and row.get("check_seconds"):  # time spent waiting for the gate is not checking
            row["check_seconds"] = round(max(0.0, row["check_seconds"] - waiting.waited), 3)
        conn.send(("done", row))
    except CANCELLED:
        raise  # a cancel is not the row's failure
    except BaseException as exc:  # the row fails; the driver reports it
        conn.send(("error", first_line(exc)))
    finally:
        conn.close()


@dataclass
class Worker:
    index: int
    process: object
    conn: object
    waiting: bool = False       # asked for the timing gate, not given it yet
    timing: bool = False        # holds the gate
    result: dict | None = field(default=None)
    limits: dict = field(default_factory=dict)   # {"seconds", "memory", "where"}: None = no limit
    started: float = 0.0        # time.monotonic() at start
    waited: float = 0.0         # seconds spent waiting for the timing gate (not the row's own time)
    wait_since: float | None = None
    stage: str | None = None    # the last step the task named
    peak: int = 0               # highest Pss of its process tree seen
    sampled: float = 0.0

    def elapsed(self, now: float) -> float:
        return now - self.started - self.waited - (now - self.wait_since if self.wait_since else 0.0)


def run_all(specs: list[dict], jobs: int, on_event: Callable[[int, str, object], None], gate: bool = True,
            results: list | None = None, stages: dict | None = None) -> list:
    """Run every spec (at most ``jobs`` converting at once); ``on_event(i, kind, payload)`` hears
    ``start``, ``step`` (a row's step, as its progress names it), ``done`` (row JSON) and ``error`` (one
    line). Returns results in spec order: the row JSON, an error string for a task whose process failed or
    died, or ``{"stopped": message, "limit": {...}}`` for one killed past its limits. ``results`` and
    ``stages`` (index -> (step, seconds) of a running task), when given, are filled as tasks go: what a
    cancelled run (SIGTERM) can still publish."""
    import time

    ctx = context()
    results = results if results is not None else [None] * len(specs)
    stages = stages if stages is not None else {}
    queue, running = deque(range(len(specs))), {}
    try:
        while queue or running:
            # at -j 1 a worker waiting to time its artifact keeps its slot: one worker (one copy of the
            # program) at a time, as the pre-flight estimate assumes; with more, conversions overlap
            while queue and sum(1 for w in running.values() if not w.waiting or jobs == 1) < jobs:
                i = queue.popleft()
                running[i] = _start(ctx, i, specs[i], gate)
                on_event(i, "start", None)
            _grant(running, queue if jobs > 1 else ())
            _poll(running, results, on_event)
            _watch(running, results, on_event, time.monotonic())
    finally:  # interrupted (Ctrl-C, SIGTERM): no worker, nor what it started, outlives the run
        from edgeport.pipeline.limits import kill_tree

        stages.update({i: (w.stage, w.elapsed(time.monotonic())) for i, w in running.items()})
        for worker in running.values():
            kill_tree(worker.process.pid)
    return results


def _start(ctx, i: int, spec: dict, gate: bool) -> Worker:
    import time

    parent, child = ctx.Pipe()
    process = ctx.Process(target=_child, args=(spec, child, gate, dict(os.environ)))
    process.start()
    child.close()
    return Worker(i, process, parent, limits=spec.get("limits") or {}, started=time.monotonic())


def _watch(running: dict, results: list, on_event, now: float) -> None:
    """Sample each running task's process tree (every SAMPLE_SECONDS); kill one past its limits and fail it."""
    from edgeport.pipeline.limits import SAMPLE_SECONDS, kill_tree, past_limit, stopped_message, tree_pss

    for worker in list(running.values()):
        if now - worker.sampled >= SAMPLE_SECONDS:
            worker.sampled, worker.peak = now, max(worker.peak, tree_pss(worker.process.pid))
        seconds = worker.elapsed(now)
        kind = past_limit(worker.limits, seconds, worker.peak)
        if kind is None:
            continue
        kill_tree(worker.process.pid)
        stage = worker.stage.split(": ", 1)[-1] if worker.stage else None
        limit = {"kind": kind, **{k: worker.limits.get(k) for k in ("seconds", "memory")}, "stage": stage,
                 "seconds_used": round(seconds, 1), "peak_memory_bytes": worker.peak}
        _finish(worker, running, results, on_event, "stopped",
                {"stopped": stopped_message(kind, worker.limits, stage, seconds, worker.peak), "limit": limit})


def _grant(running: dict, queue: deque) -> None:
    """Give the gate to one waiting worker when nothing else is converting or timing, and nothing waits to start."""
    if queue or any(w.timing for w in running.values()):
        return
    waiting = [w for w in running.values() if w.waiting]
    if waiting and len(waiting) == len(running):
        import time

        first = min(waiting, key=lambda w: w.index)
        first.waiting, first.timing = False, True
        first.waited += time.monotonic() - first.wait_since if first.wait_since else 0.0
        first.wait_since = None
        first.conn.send(("go", None))


def _poll(running: dict, results: list, on_event) -> None:
    from multiprocessing.connection import wait

    handles = {w.conn: w for w in running.values()} | {w.process.sentinel: w for w in running.values()}
    for ready in wait(list(handles), timeout=POLL_SECONDS):
        worker = handles[ready]
        if worker.index not in running:
            continue
        if ready is worker.conn:
            _message(worker, running, results, on_event)
        elif not _drain(worker, running, results, on_event):
            _finish(worker, running, results, on_event, "error", _death(worker.process))


def _message(worker: Worker, running: dict, results: list, on_event) -> None:
    try:
        kind, payload = worker.conn.recv()
    except (EOFError, OSError):
        worker.process.join(5)
        _finish(worker, running, results, on_event, "error", _death(worker.process))
        return
    if kind == "want":
        import time

        worker.waiting, worker.wait_since = True, time.monotonic()
    elif kind == "release":
        worker.timing = False
    elif kind == "step":
        worker.stage = str(payload)
        on_event(worker.index, "step", payload)
    else:
        _finish(worker, running, results, on_event, kind, payload)


def _drain(worker: Worker, running: dict, results: list, on_event) -> bool:
    """The process ended: take a result it sent just before (True), if any."""
    while worker.index in running and worker.conn.poll():
        _message(worker, running, results, on_event)
    return worker.index not in running


def _finish(worker: Worker, running: dict, results: list, on_event, kind: str, payload) -> None:
    running.pop(worker.index, None)
    if isinstance(payload, dict) and kind == "done" and worker.peak:
        payload.setdefault("peak_memory_bytes", worker.peak)   # the row's process tree, sampled
    results[worker.index] = payload
    worker.conn.close()
    worker.process.join(10)
    on_event(worker.index, kind, payload)


def _death(process) -> str:
    process.join(5)
    code = process.exitcode
    if code is not None and code < 0:
        import signal

        return f"worker process killed by {signal.Signals(-code).name}"
    return f"worker process exited with code {code} before returning its row"


def row_workers(opts, the_plan) -> tuple[int, bool]:
    """(worker processes, whether rows run in them): rows go to workers at ``-j`` > 1, or one by one in a
    worker while a row limit applies (a task whose rows run apart only when asked keeps them in this
    process, bounded, unless ``--jobs`` is given)."""
    jobs_of = the_plan.task.jobs
    if jobs_of is None or not (jobs_of.by_default or opts.jobs):
        return 1, False
    jobs = row_jobs(opts, the_plan)
    by_limits = (jobs_of.by_default and the_plan.limits.any_active() and row_jobs(opts, the_plan, 0) > 0
                 and not opts.source.decompositions)   # a worker cannot load a program's custom ops
    return jobs, jobs > 1 or by_limits


def row_jobs(opts, the_plan, least: int = 1) -> int:
    """Worker processes for the rows: one per two cores (or ``--jobs``; see workers.default_jobs), never
    more than there are rows to convert (nor fewer than ``least``). At 1 the rows still run in a worker,
    one after another, while a row limit applies (:mod:`edgeport.pipeline.limits`); with no limit, in
    this process."""
    installed = [t for t, _v in the_plan.rows if not t.missing_requirements()]
    return max(least, min(opts.jobs or default_jobs(), len(installed)))
