"""``edgeport`` CLI runs for the tests without paying the imports each time.

Most of the suite's CLI calls (``conftest.run_cli``) are there for what a user sees: the exit code, stderr,
the terminal lines. A fresh ``python -m edgeport`` spends 2-5 CPU-seconds importing torch, its export
machinery, onnxruntime and transformers before it reads its arguments, and the suite makes a few hundred such
calls on two cores. Here one server process per test worker imports those libraries once (and runs
nothing: no thread pool, no model), then forks a child per call. The child is a new process like a real
run: its own pid and session, the call's cwd, environment, argv and stdin/stdout/stderr (files, so the
terminal checks see a non-terminal as in CI), ``python -m edgeport`` run by ``runpy`` so ``__main__`` and
the program name are what ``-m`` gives, the atexit hooks run at the end, and a timeout kills its whole
process group. Only the imports are shared.

A call falls back to a real subprocess when its environment changes a variable read while those libraries
import (``IMPORT_TIME_ENV``), or when the test asks for one (``fresh=True``: tests about what start-up imports).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

# What every edgeport run that touches a model imports: torch and its export machinery, numpy, ONNX's
# exporter and runtime, transformers' top level; ``edgeport`` first, as in a real run (it sets environment
# defaults torch reads when imported). Not the target converters that register ops or devices with torch when
# imported: a run that does not ask for them must not have them.
PRELOAD = ("edgeport", "numpy", "torch", "torch.export", "torch._dynamo", "torch.fx.experimental.symbolic_shapes",
           "onnxruntime", "onnxscript", "torch.onnx", "transformers", "rich.console", "typer", "jsonschema",
           "edgeport.cli")
# A run for these targets imports their converters too: the server for such a run has them loaded already.
# litert_torch imports jax: the server first keeps jax on its CPU backend, as edgeport does before its own
# jax work (targets/_jax.prefer_cpu_backend); preloaded without that, a forked LiteRT conversion hung
# initialising a TPU backend. Never torchax: edgeport exports before it is imported, and a loaded torchax
# registers its device with torch.
TARGET_PRELOAD = {"litert": ("ai_edge_litert.interpreter", "litert_torch"),
                  "executorch": ("executorch.exir", "executorch.runtime")}
JAX_USERS = ("litert_torch",)
DEFAULT_TARGET = "litert"   # edgeport's, when convert/check get no -t
# Environment read while those libraries import: a call that changes one of these gets a real subprocess.
IMPORT_TIME_ENV = ("TORCH", "PYTORCH", "OMP_", "MKL", "KMP_", "OPENBLAS", "ORT_", "HF_", "TRANSFORMERS",
                   "PYTHON", "LD_", "CUDA", "JAX_", "XLA_", "TF_", "TOKENIZERS")


def preload_for(args: list[str]) -> tuple[str, ...]:
    """The targets (of TARGET_PRELOAD) a CLI call converts or checks for: the extra modules its server loads."""
    if not args or args[0] not in ("convert", "check"):
        return ()
    named = [args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-t", "--target")]
    named += [a.split("=", 1)[1] for a in args if a.startswith("--target=")]
    return tuple(sorted(set(named or [DEFAULT_TARGET]) & set(TARGET_PRELOAD)))


def _serve(proto_in: int, proto_out: int, targets: tuple[str, ...]) -> None:
    """A server started as its own interpreter: the shared imports, then the targets' own, then the loop."""
    _load(PRELOAD)
    _read_torchlib_once()
    _export_once()
    _load(tuple(m for t in targets for m in TARGET_PRELOAD[t]))
    _loop(proto_in, proto_out)


def _load(modules: tuple[str, ...]) -> None:
    import importlib

    for name in modules:
        if name in JAX_USERS and os.environ.get("EDGEPORT_TEST_NO_JAX_PRELOAD") != "1":
            from edgeport.targets._jax import prefer_cpu_backend

            prefer_cpu_backend()
        elif name in JAX_USERS:
            continue
        importlib.import_module(name)


def _loop(proto_in: int, proto_out: int) -> None:
    """One JSON request per line on ``proto_in``; for each, fork, answer the child's pid, wait for it, answer
    its exit code. A ``serve`` request forks a server for more targets instead: it inherits these imports,
    loads its targets' modules and answers on its own pair of FIFOs (:meth:`Server.forked`)."""
    reader = os.fdopen(proto_in, "r")
    writer = os.fdopen(proto_out, "w", buffering=1)
    writer.write("ready\n")
    for line in reader:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0 and "serve" in request:
            reader.close()
            writer.close()
            _load(tuple(m for t in request["serve"] for m in TARGET_PRELOAD[t]))
            requests = os.open(request["requests"], os.O_RDONLY)   # the client opens them in the same order
            _loop(requests, os.open(request["answers"], os.O_WRONLY))
            os._exit(0)
        if pid == 0:
            os.close(proto_in)
            os.close(proto_out)
            _child(request)
        writer.write(f"{pid}\n")
        if "serve" in request:
            continue
        _, status, usage = os.wait4(pid, 0)
        writer.write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_utime + usage.ru_stime:.3f}\n")


def _read_torchlib_once() -> None:
    """torch.onnx's op table, read here once (pure Python, ~1.5 s with its imports) and kept by edgeport's
    exporter (targets/onnx/exporter.py) for every forked run, as a long-lived edgeport process keeps it."""
    from onnxscript._framework_apis import torch_2_5

    from edgeport.targets.onnx.exporter import remember_torchlib_ops

    remember_torchlib_ops()
    torch_2_5.get_torchlib_ops()


def _export_once() -> None:
    """One ``torch.export`` (and its decompositions) of a throwaway module before any fork. A process's first
    export pays ~1.5 CPU-s of one-time set-up inside torch (dynamo's and the fake-tensor machinery's lazy
    initialisation), about half of a small model's whole run; every forked run would pay it again. A
    long-lived edgeport process (the library API, a fleet worker) pays it once, as the children do now.
    Nothing of edgeport runs here, and no converter is imported."""
    import torch

    class Warm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear, self.conv = torch.nn.Linear(4, 4), torch.nn.Conv2d(2, 2, 3)

        def forward(self, x, image):
            return torch.relu(self.linear(x)).softmax(-1), self.conv(image).mean()

    with torch.no_grad():
        torch.export.export(Warm().eval(), (torch.randn(2, 4), torch.randn(1, 2, 5, 5))).run_decompositions()


def _child(request: dict) -> None:
    """In the forked child: become the requested run, run ``python -m edgeport``, exit with its code."""
    import atexit
    import runpy
    import traceback

    os.setsid()
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], os.O_WRONLY | os.O_TRUNC),
                            (2, request["stderr"], os.O_WRONLY | os.O_TRUNC)):
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    sys.stdin = sys.__stdin__ = open(0, "r", closefd=False)
    sys.stdout = sys.__stdout__ = open(1, "w", closefd=False)
    sys.stderr = sys.__stderr__ = open(2, "w", buffering=1, closefd=False)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[0] = os.getcwd()   # what `python -m` puts first (PYTHONPATH is the server's: Server.serves)
    sys.argv = ["edgeport", *request["args"]]
    code = 0
    try:
        runpy.run_module("edgeport", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except BaseException:   # as the interpreter would: the traceback on stderr, exit 1
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def _exit_code(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


CHILD_CPU = 0.0   # CPU seconds of every run this process's servers forked, finished so far


class Server:
    """A per-worker server (one per set of preloaded targets); started on first use, stopped at exit."""

    def __init__(self, env: dict, targets: tuple[str, ...] = ()):
        self.env = dict(env)
        to_server, self._requests = os.pipe()
        self._answers, from_server = os.pipe()
        self.log = Path(tempfile.gettempdir(), f"edgeport-prewarmed-{os.getpid()}-{'-'.join(targets)}.log")
        log = open(self.log, "w")
        code = f"import sys; sys.path[0] = {str(Path(__file__).resolve().parents[1])!r}; " \
               f"from tests.prewarmed import _serve; _serve({to_server}, {from_server}, {targets!r})"
        self.proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=(to_server, from_server), env=self.env,
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        os.close(to_server)
        os.close(from_server)
        log.close()
        self._buffer = b""
        if self._line(600) != "ready":
            raise RuntimeError("the prewarmed edgeport server did not start")

    @classmethod
    def forked(cls, base: "Server", targets: tuple[str, ...]) -> "Server":
        """A server for ``targets`` forked from ``base`` (same environment): it pays only its targets' imports,
        not the shared ones again (~8 CPU-s per server, several servers per test worker)."""
        self = cls.__new__(cls)
        self.env, self._buffer = dict(base.env), b""
        fifos = Path(tempfile.mkdtemp(prefix="edgeport-prewarmed-"))
        requests, answers = fifos / "requests", fifos / "answers"
        os.mkfifo(requests)
        os.mkfifo(answers)
        self.log = base.log   # a forked server writes where its base does
        os.write(base._requests, (json.dumps({"serve": list(targets), "requests": str(requests),
                                              "answers": str(answers)}) + "\n").encode())
        self.proc = _Forked(int(base._line(60)))
        self._requests = os.open(requests, os.O_WRONLY)
        self._answers = os.open(answers, os.O_RDONLY)
        for fifo in (requests, answers):
            fifo.unlink()
        fifos.rmdir()
        if self._line(600) != "ready":
            raise RuntimeError("the prewarmed edgeport server did not start")
        return self

    def serves(self, env: dict) -> bool:
        """Whether a call with ``env`` would import the libraries as this server did."""
        keys = {k for k in set(env) | set(self.env) if k.startswith(IMPORT_TIME_ENV)}   # PYTHONPATH too: sitecustomize
        return self.proc.poll() is None and all(env.get(k) == self.env.get(k) for k in keys)

    def run(self, args: list[str], cwd: Path | None, env: dict, timeout: float) -> subprocess.CompletedProcess:
        with tempfile.TemporaryDirectory(prefix="edgeport-cli-") as tmp:
            out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
            out.touch()
            err.touch()
            request = {"args": args, "cwd": str(cwd or os.getcwd()), "env": env, "stdout": str(out), "stderr": str(err)}
            os.write(self._requests, (json.dumps(request) + "\n").encode())
            pid = int(self._line(60))
            try:
                code = self._exit_line(timeout)
            except subprocess.TimeoutExpired:
                self._kill(pid)
                raise subprocess.TimeoutExpired(["edgeport", *args], timeout,
                                                out.read_text(errors="replace"), err.read_text(errors="replace"))
            return subprocess.CompletedProcess(["edgeport", *args], code, out.read_text(errors="replace"),
                                               err.read_text(errors="replace"))

    def _kill(self, pid: int) -> None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._exit_line(60)   # the server reaps it and answers its code

    def _exit_line(self, timeout: float) -> int:
        """The child's exit code; its CPU seconds (and its children's) go to :data:`CHILD_CPU`, which the
        per-test CPU log (conftest, ``EDGEPORT_TEST_CPU_LOG``) reads: the server's children are not this
        process's."""
        global CHILD_CPU
        code, cpu = self._line(timeout).split()
        CHILD_CPU += float(cpu)
        return int(code)

    def _line(self, timeout: float) -> str:
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([self._answers], [], [], timeout)
            if not ready:
                raise subprocess.TimeoutExpired("edgeport", timeout)
            chunk = os.read(self._answers, 4096)
            if not chunk:
                raise RuntimeError("the prewarmed edgeport server exited")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    def stop(self) -> None:
        os.close(self._requests)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        if self.proc.returncode == 0:   # the imports' own noise; kept when the server failed
            self.log.unlink(missing_ok=True)


class _Forked:
    """A forked server's process, as much of ``Popen`` as :class:`Server` uses. Its parent is the base server,
    which does not reap it: exited means gone or a zombie."""

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    def poll(self):
        try:
            state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            state = "Z"
        if state in ("Z", "X"):
            self.returncode = 0
        return self.returncode

    def wait(self, timeout: float):
        import time

        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("prewarmed server", timeout)
            time.sleep(0.05)
        return self.returncode

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
