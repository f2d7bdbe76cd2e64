"""Target registry: name -> Target, and the capability table that code and diagnostics both read.

Adding a target is one module in ``export/``, one in ``runtimes/`` and one line in ``TARGET_MODULES``;
nothing else branches on target names. A target declares everything that is its own: variants, runners,
rewrite passes, the ops its converter refuses, its command-line options and the report sections only it
has. Target modules are light to import (heavy libraries load inside the functions that need them), so
listing targets, building the CLI's flags and rendering a report cost nothing.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from edgeport.runtimes.base import BaseRunner

# The registry: target name -> module defining ``TARGET``. Order is report order.
DEFAULT_TARGET = "litert"              # what `edgeport convert` builds when no --target is given
TARGET_MODULES = {
    "litert": "edgeport.export.litert",
    "onnx": "edgeport.export.onnx",
    "tpu": "edgeport.export.tpu",
}


@dataclass
class ConvertJob:
    """Everything a target needs to convert one variant of the one exported program."""

    program: Any                      # torch.export.ExportedProgram
    example_inputs: tuple             # torch tensors, flattened in signature order
    signature: Any                    # edgeport.export.program.Signature
    variant: str
    out_dir: Path                     # DIR/<target>/ inside the temporary output directory
    options: dict = field(default_factory=dict)       # the target's own options, calibration samples, ...;
    # "artifact_only": True asks for just a runnable artifact (targets may skip extra work such as AOT compiles)
    notes: list[str] = field(default_factory=list)    # warnings that belong in the report
    # the eager module the program was exported from (positional inputs in signature order, flat outputs),
    # for a target whose converter cannot take the program and captures the module itself; None when there
    # is none (.pt2) or when the program carries rewrites the module does not
    module: Any = None
    cache: Any = None                 # edgeport.cache.Cache for pieces a target caches itself (TPU compiles)
    # where this process does not hold the module (a worker), how to load it again (edgeport.pipeline.eager)
    load_module: Callable[[], Any] | None = None

    def eager_module(self):
        """``module``, loaded on first use where this process does not hold it; None when there is none or
        it cannot be loaded again as the reference's (the reason is in ``notes``)."""
        if self.module is None and self.load_module is not None:
            load, self.load_module = self.load_module, None
            try:
                self.module = load()
            except Exception as exc:
                from edgeport.diagnostics import first_line

                self.notes.append(f"the eager module is not available in this worker process: {first_line(exc)}")
        return self.module


@dataclass
class Converted:
    artifact: Path
    details: dict = field(default_factory=dict)   # extra report fields (ops, compiles, ...)
    rewrites: list[str] = field(default_factory=list)   # what the target did beyond the shared passes
    # a known converter limitation that explains a parity failure of this artifact (appended to that error)
    parity_caveat: str | None = None


@dataclass
class GenerativeJob:
    """Everything a target needs to convert one variant of a generative model: one flat program per
    signature (``prefill_<L>`` for each prefill length, then ``decode``), each taking named tensors and
    returning a dict (``logits`` then the updated cache), with the sample keyword inputs it was exported with."""

    programs: dict                    # signature name -> torch.export.ExportedProgram (flat, named I/O)
    samples: dict                     # signature name -> {input name: torch tensor}
    layout: dict                      # edgeport.generative.layout.Layout as JSON: roles, cache tensors, ids
    variant: str
    out_dir: Path                     # DIR/<target>/ inside the temporary output directory
    options: dict = field(default_factory=dict)       # the target's own options (e.g. TPU topologies)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class GenerativeSupport:
    """What a target offers for generative models (prefill/decode with an explicit KV cache).

    ``convert`` writes one artifact (a file or a directory) holding every signature; ``load`` returns a
    :class:`~edgeport.runtimes.signature.SignatureRunner` over it. Declared in a module of the target's own
    (``Target.generative`` names it), so listing targets never imports it."""

    variants: tuple[str, ...]         # the first is always built; others on --quantize
    convert: Callable[[GenerativeJob], "Converted"]
    load: Callable[[Path, int], Any]


@dataclass(frozen=True)
class TargetOption:
    """A command-line option that only one target understands (``--nhwc``, ``--tpu-topology``). The CLI
    builds the flag from this; the value reaches the target as ``job.options[key]``."""

    flag: str                                  # without the dashes, e.g. "tpu-topology"
    help: str
    kind: type = str                           # str or bool
    multiple: bool = False                     # repeatable: the value is a list
    validate: Callable[[Any], None] | None = None   # raises UsageError (exit 2) on a bad value, at plan time

    @property
    def key(self) -> str:
        return self.flag.replace("-", "_")

    @property
    def default(self):
        return [] if self.multiple else (False if self.kind is bool else None)


@dataclass(frozen=True)
class ReportSection:
    """A table only one target has (e.g. TPU compiles per topology), rendered by every report format.
    Sections with the same title from several rows are merged into one table."""

    key: str                                   # stable id (the HTML table's id)
    title: str
    headers: tuple[str, ...]
    rows: list[list[str]]


@dataclass(frozen=True)
class RunnerConfig:
    """One way to run an artifact that ``--threads auto`` may pick: a runner name and a thread count."""

    runner: str
    threads: int

    @property
    def label(self) -> str:
        return f"{self.runner}/{self.threads}"


def no_sections(row: dict) -> list[ReportSection]:
    return []


@dataclass(frozen=True)
class FallbackSupport:
    """The target's quantizer can keep chosen layers in float: its ``convert`` honours
    ``job.options["float_layers"]`` (layer ids, :mod:`edgeport.quantize.layers`) for these variants, and
    ``prepare(job)`` calibrates once and returns a :class:`edgeport.quantize.layers.LayerQuantizer` that the
    search (:mod:`edgeport.quantize`) asks for candidates. ``layers(program, variant)`` lists what can stay
    float (cheap: no conversion)."""

    variants: dict[str, str] = field(hash=False)   # variant -> its quantization scheme, as the report states it
    layers: Callable[[Any, str], list]
    prepare: Callable[[ConvertJob], Any]


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    variants: tuple[str, ...]          # the first one is always built; others on --quantize
    requires: tuple[str, ...]          # importable modules the target needs
    extra: str                         # pip extra that installs them
    convert: Callable[[ConvertJob], Converted]
    runners: tuple[type[BaseRunner], ...]   # ways to run the artifact; the first is the one fixed --threads uses
    dynamic_dims: bool = False
    rewrites: tuple[str, ...] = ()     # passes from edgeport.export.rewrites, applied when their ops are present
    # ops the raw converter/runtime is known to refuse: (op, the error it gives), read by `edgeport check`;
    # custom ops and bf16/fp16 weights are checked for every target
    refuses: tuple[tuple[str, str], ...] = ()
    options: tuple[TargetOption, ...] = ()
    # thread_sweep=False: the runtime ignores the thread count (XLA CPU sizes its own pool)
    thread_sweep: bool = True
    report_sections: Callable[[dict], list[ReportSection]] = no_sections
    # module defining ``GENERATIVE: GenerativeSupport`` (prefill/decode with a KV cache), if the target has one
    generative: str | None = None
    float_fallback: FallbackSupport | None = None   # quantized variants that can keep layers in float
    # variants whose convert() reads job.options["calibration"]: their cache key hashes those samples
    # (None: not declared, so every variant's key does)
    calibrated_variants: tuple[str, ...] | None = None
    # independent pieces of one conversion that may run side by side (e.g. one compile per TPU topology):
    # pieces(options, program) -> option overrides, one per piece ([]: no split); piece 0 builds the artifact
    # and is judged, the others only add files; merge_pieces(target_dir, variant, details, others) -> details
    pieces: Callable[[dict, Any], list[dict]] | None = None
    # how long a conversion usually takes relative to others (scheduling only: longest tasks start first)
    relative_cost: float = 1.0
    merge_pieces: Callable[[Path, str, dict, list[dict]], dict] | None = None
    # artifact -> edgeport.quantize.artifact_share.ArtifactQuantization: what a non-fp32 artifact really quantizes
    read_quantization: Callable[[Path], Any] | None = None

    def __post_init__(self):
        from edgeport.export.rewrites import check_known

        check_known(self.rewrites, f"target {self.name!r}")

    @property
    def default_variant(self) -> str:
        return self.variants[0]

    def generation(self) -> GenerativeSupport | None:
        """The target's generative support (imported on first use), or None."""
        return importlib.import_module(self.generative).GENERATIVE if self.generative else None

    @property
    def every_variant(self) -> tuple[str, ...]:
        """Forward and generative variants: what a budget scope or ``--quantize`` may name for this target."""
        support = self.generation()
        return tuple(dict.fromkeys(self.variants + (support.variants if support else ())))

    def can_keep_float(self, variant: str) -> bool:
        return self.float_fallback is not None and variant in self.float_fallback.variants

    def load_runner(self, path: Path, threads: int) -> BaseRunner:
        return self.runners[0](path, threads)

    def describe_error(self, exc: BaseException) -> str:
        return self.runners[0].describe_error(exc)

    def validate_options(self, values: dict) -> None:
        """Check this target's own options (the others' keys are theirs to check)."""
        for option in self.options:
            if option.validate is not None and values.get(option.key) not in (None, [], False):
                option.validate(values[option.key])

    def runner_configs(self, max_threads: int) -> list[RunnerConfig]:
        """Every (runner, threads) ``--threads auto`` times on this machine."""
        counts = thread_counts(max_threads) if self.thread_sweep else [max(1, max_threads)]
        return [RunnerConfig(runner.name, n) for runner in self.runners for n in counts]

    def load_config(self, path: Path, config: RunnerConfig) -> BaseRunner:
        runner = next((r for r in self.runners if r.name == config.runner), self.runners[0])
        return runner(path, config.threads)

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


def all_targets() -> list[Target]:
    return [get_target(name) for name in TARGET_MODULES]


def all_options() -> list[TargetOption]:
    """Every target's own options, once each (the CLI turns them into flags)."""
    seen: dict[str, TargetOption] = {}
    for target in all_targets():
        for option in target.options:
            seen.setdefault(option.key, option)
    return list(seen.values())


def all_variants() -> set[str]:
    """Every variant some target offers (what a budget's VARIANT scope may name)."""
    return {v for target in all_targets() for v in target.every_variant}
