"""jax process settings shared by the targets whose converters run jax (TPU's torchax lowering, LiteRT's
litert-torch lowering): one place, so no target imports another for a process setting."""

from __future__ import annotations

import contextlib
import os

# Environment variables edgeport set in its own process; worker subprocesses get them removed again.
ENV_SET_HERE: set[str] = set()


def prefer_cpu_backend() -> None:
    """Keep edgeport's own process on jax's CPU backend (parity runs the CPU lowering; TPU compiles use a
    compile-only topology). Without this, jax's first use probes libtpu for a local TPU: slow, noisy,
    and a lock other processes may hold. A serving process calling :func:`load` is left alone."""
    import jax
    from jax._src import xla_bridge

    if not xla_bridge.backends_are_initialized():
        jax.config.update("jax_platforms", "cpu")


def libtpu_compile_env() -> None:
    """libtpu as a compile-only library: no metadata-server query (it can hang off-cloud), a local worker
    name (else it logs an error per process), and no exclusive lock (the lock is for owning real chips;
    compile-only processes in parallel, e.g. CI workers, would otherwise refuse each other)."""
    for key, value in (("TPU_SKIP_MDS_QUERY", "1"), ("TPU_WORKER_HOSTNAMES", "localhost"),
                       ("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")):
        if key not in os.environ:
            os.environ[key] = value
            ENV_SET_HERE.add(key)


def keep_torch_accelerator_honest() -> None:
    """Importing torchax registers a ``jax`` device module in PyTorch's PrivateUse1 slot with no PyTorch
    support behind it: from then on ``torch.accelerator.is_available()`` says True and asking it for a
    stream raises, so every later dynamo trace in this process fails ("PyTorch is not linked with support
    for jax devices"): ``torch.export`` of a model with ``torch.cond``, ExecuTorch's XNNPACK passes, the
    next model of an API caller or a fleet worker. When the accelerator cannot answer, it is reported
    absent for the rest of the process (there is none: the TPU target's jax work runs on jax's CPU
    backend or in compile-only children); a real accelerator that answers is left alone."""
    import torch

    if accelerator_cannot_answer():
        torch.accelerator.is_available = lambda: False


def accelerator_cannot_answer() -> bool:
    """True when PyTorch says an accelerator is available but cannot give its current stream (torchax's
    ``jax`` device module; see :func:`keep_torch_accelerator_honest`)."""
    import torch

    if not torch.accelerator.is_available():
        return False
    try:
        torch.accelerator.current_stream()
    except RuntimeError:
        return True
    return False


@contextlib.contextmanager
def cpu_tracing():
    """XNNPACK's passes and its quantizer's pattern matching trace graphs with dynamo, which asks
    ``torch.accelerator`` for the current stream whenever it says an accelerator is available. A library that registers a device module for
    PyTorch's PrivateUse1 slot without PyTorch support behind it (torchax registers ``jax`` when imported,
    e.g. by the caller's own code; the TPU target undoes it: :func:`keep_torch_accelerator_honest`) makes that
    question fail, and with it every lowering ("PyTorch is not linked with support for jax devices").
    Lowering and quantizing are CPU work: while they run, an accelerator that cannot answer counts as absent."""
    import torch

    if not accelerator_cannot_answer():
        yield
        return
    saved = torch.accelerator.is_available
    torch.accelerator.is_available = lambda: False
    try:
        yield
    finally:
        torch.accelerator.is_available = saved
