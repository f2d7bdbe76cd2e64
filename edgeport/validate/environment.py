"""Where a report was measured: Python, OS, CPU model, cores, the ISA features kernels dispatch on, thread
settings and library versions.

Why it belongs in every report: int8 kernels take different paths with and without VNNI (and give
different numbers), latency moves with the CPU, and a baseline from another machine compares a different
computer, not a different model. :func:`differences` names the fields two environments disagree on.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

# flags kernels dispatch on (x86 and Arm); the rest of /proc/cpuinfo's list says little about speed
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
             "avx512_fp16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16", "asimd", "asimddp", "i8mm", "sve", "sve2",
             "bf16")
COMPARED = ("python", "os", "cpu.model", "cpu.cores", "cpu.isa", "threads", "packages")


def environment(threads, libraries: list[str]) -> dict:
    """The block for report.json. ``libraries``: import names of the target libraries this run used."""
    return {"python": platform.python_version(), "os": f"{platform.system()} {platform.release()} {platform.machine()}",
            "cpu": cpu_info(), "threads": threads, "thread_env": thread_env(),
            "packages": package_versions(["torch", "numpy", *libraries])}


def cpu_info() -> dict:
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Hardware") and model in ("", platform.machine(), platform.processor()):
                model = value.strip()
            elif key.strip() in ("flags", "Features") and not flags:
                flags = set(value.split())
    except OSError:
        pass
    return {"model": model, "cores": os.cpu_count(), "isa": [f for f in ISA_FLAGS if f in flags]}


def thread_env() -> dict:
    names = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "XLA_FLAGS")
    return {name: os.environ[name] for name in names if name in os.environ}


def package_versions(modules: list[str]) -> dict:
    """Installed version of each module's distribution (import name -> distribution name, e.g.
    ``ai_edge_litert`` -> ``ai-edge-litert``). Most import names are their distribution's name (metadata
    lookups treat ``-``/``_``/``.`` alike), so those are asked directly; only the others pay for
    ``packages_distributions``, which reads every installed package's file list (~1 s per run: every
    convert, cache key and compile report asks)."""
    from importlib import metadata

    versions, unresolved = {}, []
    for module in dict.fromkeys(m.split(".")[0] for m in modules):
        try:
            dist = metadata.distribution(module)
        except metadata.PackageNotFoundError:
            unresolved.append(module)
            continue
        if module in _top_level_names(dist):
            versions[dist.metadata["Name"]] = dist.version
        else:
            unresolved.append(module)
    if unresolved:
        owners = metadata.packages_distributions()
        for module in unresolved:
            for dist in owners.get(module, []):
                try:
                    versions[dist] = metadata.version(dist)
                except metadata.PackageNotFoundError:
                    continue
    return versions


def _top_level_names(dist) -> set[str]:
    """The import names a distribution installs: its ``top_level.txt``, else the first part of each
    file it records (what ``packages_distributions`` reads too)."""
    text = dist.read_text("top_level.txt")
    if text:
        return set(text.split())
    return {f.parts[0].removesuffix(".py") for f in dist.files or () if f.parts and not f.parts[0].endswith(".dist-info")}


def differences(old: dict | None, new: dict | None) -> list[str]:
    """The compared fields two environments disagree on, e.g. ``cpu.isa: avx512_vnni missing``."""
    if not old or not new:
        return ["environment not recorded in " + ("the baseline" if not old else "this report")]
    out = []
    for key in COMPARED:
        a, b = _get(old, key), _get(new, key)
        if a == b:
            continue
        if isinstance(a, list) and isinstance(b, list):
            gone, added = sorted(set(a) - set(b)), sorted(set(b) - set(a))
            out.append(f"{key}: " + "; ".join(filter(None, [gone and f"missing {', '.join(gone)}",
                                                             added and f"new {', '.join(added)}"])))
        elif isinstance(a, dict) and isinstance(b, dict):
            changed = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            out.append(f"{key}: " + ", ".join(f"{k} {a.get(k, '–')} -> {b.get(k, '–')}" for k in changed))
        else:
            out.append(f"{key}: {a} -> {b}")
    return out


def _get(env: dict, dotted: str):
    value = env
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value

