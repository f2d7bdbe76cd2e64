"""Target registry: name -> Target, and the capability table that code and diagnostics both read.

Adding a target is one module in ``export/``, one in ``runtimes/`` and one line in ``TARGET_MODULES``;
nothing else branches on target names. Target modules are light to import: their heavy libraries are
imported inside the functions that need them, so listing targets costs nothing.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import numpy as np

# The registry: target name -> module defining ``TARGET``. Order is report order.
TARGET_MODULES = {
    "litert": "edgeport.export.litert",
    "onnx": "edgeport.export.onnx",
    "tpu": "edgeport.export.tpu",
}


def accept_any_options(options: dict) -> None:
    """Default option check: a target that takes no options of its own ignores the others'."""


class Runner(Protocol):
    """A loaded artifact. Inputs and outputs are numpy arrays in the exported program's flattened order."""

    threads: int

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]: ...

    def io(self) -> dict:
        """``{"inputs": [...], "outputs": [...]}`` as the runtime sees them (name, shape, dtype,
        quantization): the per-target part of manifest.json that apps read."""
        ...


@dataclass
class ConvertJob:
    """Everything a target needs to convert one variant of the one exported program."""

    program: Any                      # torch.export.ExportedProgram
    example_inputs: tuple             # torch tensors, flattened in signature order
    signature: Any                    # edgeport.export.program.Signature
    variant: str
    out_dir: Path                     # DIR/<target>/ inside the temporary output directory
    options: dict = field(default_factory=dict)       # --nhwc, calibration samples, topologies, ...;
    # "artifact_only": True asks for just a runnable artifact (targets may skip extra work such as AOT compiles)
    notes: list[str] = field(default_factory=list)    # warnings that belong in the report


@dataclass
class Converted:
    artifact: Path
    details: dict = field(default_factory=dict)   # extra report fields (ops, tpu_compile, rewrites, ...)


@dataclass(frozen=True)
class RunnerConfig:
    """One way to run an artifact that ``--threads auto`` may pick: a runner name and a thread count."""

    runner: str
    threads: int

    @property
    def label(self) -> str:
        return f"{self.runner}/{self.threads}"


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    variants: tuple[str, ...]          # the first one is always built; others on --quantize
    requires: tuple[str, ...]          # importable modules the target needs
    extra: str                         # pip extra that installs them
    convert: Callable[[ConvertJob], Converted]
    load_runner: Callable[[Path, int], Runner]
    dynamic_dims: bool = False
    rewrites: tuple[str, ...] = ()     # names in edgeport.export.rewrites applied when their ops are present
    # ops the raw converter/runtime is known to refuse: (op, the error it gives), read by `edgeport check`;
    # custom ops and bf16/fp16 weights are checked for every target
    refuses: tuple[tuple[str, str], ...] = ()
    # Checks the CLI's target options (ConvertOptions.target_options) at plan time, before any heavy
    # work; raises UsageError (exit 2) on a bad value. Each target validates only its own keys.
    validate_options: Callable[[dict], None] = accept_any_options
    # How the artifact can be run, for --threads auto: name -> loader(path, threads); the first is the one
    # fixed --threads uses (load_runner). thread_sweep=False: the runtime ignores the thread count
    # (XLA CPU sizes its own pool), so there is nothing to pick.
    runners: tuple[tuple[str, Callable[[Path, int], Runner]], ...] = ()
    thread_sweep: bool = True

    @property
    def default_variant(self) -> str:
        return self.variants[0]

    def runner_configs(self, max_threads: int) -> list[RunnerConfig]:
        """Every (runner, threads) ``--threads auto`` times on this machine."""
        names = [name for name, _ in self.runners] or ["default"]
        counts = thread_counts(max_threads) if self.thread_sweep else [max(1, max_threads)]
        return [RunnerConfig(name, n) for name in names for n in counts]

    def load_config(self, path: Path, config: RunnerConfig) -> Runner:
        loaders = dict(self.runners)
        return loaders.get(config.runner, self.load_runner)(path, config.threads)

    def missing_requirements(self) -> list[str]:
        return [m for m in self.requires if importlib.util.find_spec(m) is None]

    @property
    def install_hint(self) -> str:
        return f"pip install 'edgeport[{self.extra}]'"


def thread_counts(max_threads: int) -> list[int]:
    """Thread counts worth timing: 1..4, then powers of two, then all cores — every count on a small
    machine, a sweep that stays short on a 64-core one."""
    top = max(1, max_threads)
    return sorted({*range(1, min(4, top) + 1), *(2 ** k for k in range(2, top.bit_length())), top})


def get_target(name: str) -> Target:
    return importlib.import_module(TARGET_MODULES[name]).TARGET


def target_names() -> list[str]:
    return list(TARGET_MODULES)


def all_variants() -> set[str]:
    return {v for name in TARGET_MODULES for v in get_target(name).variants}
