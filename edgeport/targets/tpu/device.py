"""TPU hosts only: run the model on a real TPU, always in a subprocess, never in edgeport's own process.

Why a subprocess: torch_tpu can hang (a metadata fetch without ``TPU_SKIP_MDS_QUERY=1`` waited > 10 min),
abort the whole process (a forced init without a TPU raises SIGABRT), and loads libtpu into every later
``import torch``. So the main process only *detects* a TPU from the operating system's view (PCI vendor,
accelerator device files), and a worker (``python -m edgeport.targets.tpu.device``) does the TPU work with a
timeout, reading samples from and writing outputs to ``.npz`` files (no pickles cross the boundary).

Engines in the worker:
- ``jax``: the TPU target's artifact (``DIR/tpu/<variant>/``) through :func:`edgeport.targets.tpu.runtime.load`
  on jax's default backend, which is the TPU on a TPU host;
- ``torch_tpu``: the exported program through ``torch.compile(backend="tpu")`` (Google's TorchTPU).

``EDGEPORT_TPU_FAKE_DEVICE=cpu`` makes the worker's device check answer "cpu" (eager backend, jax on CPU)
so the whole subprocess path (spawn, environment, files, timeout, parity) is tested on hosts without a TPU.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from edgeport.core.scratch import scratch
from edgeport.errors import CANCELLED

GOOGLE_PCI_VENDOR = "0x1ae0"
FAKE_DEVICE_ENV = "EDGEPORT_TPU_FAKE_DEVICE"
DEFAULT_TIMEOUT = 900


def tpu_host_status() -> dict:
    """Is there a TPU on this host? Read from sysfs/devfs only: importing torch_tpu (or letting jax
    initialize libtpu) to find out is exactly what can hang or abort the process."""
    evidence = []
    for vendor in Path("/sys/bus/pci/devices").glob("*/vendor"):
        try:
            if vendor.read_text().strip() == GOOGLE_PCI_VENDOR:
                evidence.append(f"PCI device {vendor.parent.name} (Google)")
        except OSError:
            continue
    evidence += [f"device {p}" for p in sorted(Path("/dev").glob("accel[0-9]*"))]
    if os.environ.get(FAKE_DEVICE_ENV):
        evidence.append(f"{FAKE_DEVICE_ENV}={os.environ[FAKE_DEVICE_ENV]} (test hook)")
    return {"tpu_present": bool(evidence), "evidence": evidence or ["no Google PCI device, no /dev/accel*"]}


def worker_env(extra: dict | None = None) -> dict:
    """The worker's environment: no metadata-server query (the hang), torch_tpu loaded only where asked,
    and without the compile-only libtpu settings edgeport's own process made (a worker owns the chips)."""
    from edgeport.core.proc import child_env
    from edgeport.targets._jax import ENV_SET_HERE

    inherited = {k: v for k, v in os.environ.items() if k not in ENV_SET_HERE}
    return child_env({**inherited, "TPU_SKIP_MDS_QUERY": "1", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0", **(extra or {})})


def run_in_worker(engine: str, artifact: Path, samples: list[list[np.ndarray]], timeout: float = DEFAULT_TIMEOUT,
                  env: dict | None = None) -> dict:
    """Run ``samples`` through ``engine`` in a subprocess; returns {"ok", "outputs", "latency_ms", "error", ...}.
    A hang becomes a timeout error and a crash names its signal; neither reaches this process."""
    with scratch("edgeport-tpu-") as tmp:  # the run's scratch (edgeport.core.scratch)
        feed, result = tmp / "samples.npz", tmp / "result.npz"
        np.savez(feed, **{f"s{i}_{j}": a for i, sample in enumerate(samples) for j, a in enumerate(sample)})
        command = [sys.executable, "-m", "edgeport.targets.tpu.device", engine, str(artifact), str(feed), str(result)]
        start = time.perf_counter()
        try:
            done = subprocess.run(command, env=worker_env(env), capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return _failure(engine, f"timed out after {timeout:g} s (killed)", start)
        if done.returncode != 0 or not result.is_file():
            return _failure(engine, _exit_reason(done), start)
        with np.load(result, allow_pickle=False) as data:
            outputs = [[data[f"o{i}_{j}"] for j in range(int(data[f"n{i}"]))] for i in range(len(samples))]
            latency = {"p50": float(data["p50"]), "p90": float(data["p90"]), "runs": int(data["runs"]), "threads": 1}
            device = str(data["device"])
    return {"engine": engine, "ok": True, "device": device, "outputs": outputs, "latency_ms": latency,
            "error": None, "seconds": round(time.perf_counter() - start, 3)}


def _failure(engine: str, error: str, start: float) -> dict:
    return {"engine": engine, "ok": False, "error": error, "outputs": None, "latency_ms": None,
            "seconds": round(time.perf_counter() - start, 3)}


def _exit_reason(done: subprocess.CompletedProcess) -> str:
    if done.returncode < 0:
        return f"worker killed by {signal.Signals(-done.returncode).name}"
    lines = [ln for ln in (done.stderr or "").splitlines() if ln.strip()]
    marked = [ln for ln in lines if ln.startswith("edgeport-worker:")]
    return (marked or lines or [f"worker exited {done.returncode}"])[-1].removeprefix("edgeport-worker:").strip()[:500]


# ------------------------------------------------------------------------------------------- the worker

def _device_check(engine: str) -> str:
    """Which device the worker runs on. Without a usable TPU it exits with a one-line reason."""
    fake = os.environ.get(FAKE_DEVICE_ENV)
    if fake == "hang":
        time.sleep(3600)
    if fake == "abort":
        os.abort()
    if fake:
        return fake
    if engine == "jax":
        import jax

        devices = jax.devices()
        if devices[0].platform != "tpu":
            _die(f"jax sees no TPU (default backend: {devices[0].platform})")
        return str(devices[0].device_kind)
    import torch
    import torch_tpu  # noqa: F401  (only ever imported here, in the worker)

    if not torch.accelerator.is_available():
        _die("torch_tpu is installed but torch.accelerator sees no TPU")
    return str(torch.accelerator.current_accelerator())


def _die(message: str) -> None:
    print(f"edgeport-worker: {message}", file=sys.stderr)
    sys.exit(3)


def _engine_call(engine: str, artifact: Path, device: str):
    """A callable: list of numpy inputs -> list of numpy outputs."""
    if engine == "jax":
        from edgeport.targets.tpu.runtime import load

        model = load(artifact)
        return lambda inputs: [np.asarray(o, dtype=np.float32) if o.dtype.name == "bfloat16" else np.asarray(o)
                               for o in model(*inputs)]
    import torch

    from edgeport.core.eager import flatten_outputs, to_numpy
    from edgeport.sources.pt2_archive import load_exported_program

    # inspected, never unpickled; its nodes were checked when the run loaded it (a Python source keeps its ops)
    module = load_exported_program(artifact, check_ops=False).module().to(device)
    compiled = torch.compile(module, backend="eager" if device == "cpu" else "tpu")

    def call(inputs):
        with torch.no_grad():
            args = [torch.from_numpy(np.ascontiguousarray(a)).to(device) for a in inputs]
            return [to_numpy(t) for t in flatten_outputs(compiled(*args))]

    return call


def worker_main(argv: list[str]) -> None:
    engine, artifact, feed, result = argv[0], Path(argv[1]), Path(argv[2]), Path(argv[3])
    if engine == "torch_tpu" and os.environ.get(FAKE_DEVICE_ENV) != "cpu":
        os.environ.setdefault("PJRT_DEVICE", "TPU")
    try:
        device = _device_check(engine)
        if engine == "jax" and device == "cpu":
            from edgeport.targets._jax import prefer_cpu_backend

            prefer_cpu_backend()
        call = _engine_call(engine, artifact, device)
        with np.load(feed, allow_pickle=False) as data:
            keys = sorted(data.files, key=lambda k: tuple(int(p) for p in k[1:].split("_")))
            count = 1 + max(int(k[1:].split("_")[0]) for k in keys)
            samples = [[data[k] for k in keys if k.startswith(f"s{i}_")] for i in range(count)]
        outputs = [call(sample) for sample in samples]
        from edgeport.validate.latency import measure

        latency = measure(lambda: call(samples[0]), 1)
    except (SystemExit, *CANCELLED):
        raise  # a cancel (Ctrl-C reaches the worker too) is not the engine's failure
    except BaseException as exc:  # one line for the parent's report
        from edgeport.diagnostics import first_line

        _die(f"{engine} on {os.environ.get(FAKE_DEVICE_ENV) or 'TPU'}: {first_line(exc, 300)}")
    arrays = {f"o{i}_{j}": o for i, out in enumerate(outputs) for j, o in enumerate(out)}
    np.savez(result, **arrays, **{f"n{i}": len(out) for i, out in enumerate(outputs)},
             p50=latency["p50"], p90=latency["p90"], runs=latency["runs"], device=device)


if __name__ == "__main__":
    worker_main(sys.argv[1:])
