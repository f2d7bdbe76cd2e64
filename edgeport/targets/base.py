"""What a target is (:class:`Target`) and the typed jobs the pipeline hands it (:class:`ConvertJob`,
:class:`GenerativeJob`): the contract between the pipeline and ``edgeport/targets/<name>/``.

A target declares everything that is its own: variants and their parity budgets, runners, rewrite passes,
the ops its converter refuses, its command-line options and the report sections only it has; nothing
outside ``edgeport/targets/`` branches on target names (:mod:`edgeport.targets.registry` lists them).
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from edgeport.targets.runner import BaseRunner
from edgeport.validate.sections import ReportSection  # a target's report_sections return these


@dataclass
class ConvertJob:
    """Everything a target needs to convert one variant of the one exported program."""

    program: Any                      # torch.export.ExportedProgram
    example_inputs: tuple             # torch tensors, flattened in signature order
    signature: Any                    # edgeport.core.program.Signature
    variant: str
    out_dir: Path                     # DIR/<target>/ inside the temporary output directory
    options: dict = field(default_factory=dict)       # the target's own options (TargetOption keys) only
    calibration: list | None = None   # numpy input lists a calibrated variant quantizes with (None: the example)
    calibration_is_real: bool = False  # from --calibration-data (else the parity samples stand in)
    samples: list | None = None       # the parity samples (numpy input lists), for a target that judges on a device
    budget: dict = field(default_factory=dict)       # the row's configured parity budget, for the same
    dynamic: tuple[str, ...] = ()     # --dynamic: inputs whose batch dim stays symbolic
    float_layers: tuple[str, ...] = ()   # layer ids a quantized variant keeps float (FallbackSupport)
    artifact_only: bool = False       # just a runnable artifact (targets may skip extra work such as AOT compiles)
    notes: list[str] = field(default_factory=list)    # warnings that belong in the report
    # the run's progress (edgeport.pipeline.run.Progress), already naming the row: a long conversion says
    # which step it is in ("lowering", "compile v5e:2x2"); the run adds the time
    progress: Callable[[str], None] = field(default=lambda _step: None, repr=False)
    # the eager module the program was exported from (positional inputs in signature order, flat outputs),
    # for a target whose converter cannot take the program and captures the module itself; None when there
    # is none (.pt2) or when the program carries rewrites the module does not
    module: Any = None
    cache: Any = None                 # edgeport.cache.Cache for pieces a target caches itself (TPU compiles)
    # where this process does not hold the module (a worker), how to load it again (edgeport.pipeline.eager)
    load_module: Callable[[], Any] | None = None

    def calibration_samples(self) -> list:
        """What a calibrated variant quantizes with: ``calibration``, else the example inputs."""
        return self.calibration or [[x.numpy() for x in self.example_inputs]]

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
    # every other file the artifact needs at run time (ONNX external data, TPU weights and executables, a
    # tokenizer): with the artifact (every file under it, for a directory) they are manifest.json's file list
    files: list[Path] = field(default_factory=list)

    def all_files(self) -> list[Path]:
        from edgeport.core.files import artifact_files

        return artifact_files(self.artifact, self.files)
    # True: built from the model's own files (e.g. a library's Hugging Face path), not from the exported
    # programs, so the shared rewrites applied to those programs are not part of it (the row lists none)
    from_source: bool = False
    # False: the result depends on something outside the cache key (a compile process that died or timed
    # out, which the machine decides), so it is reported but never stored in the cache
    cacheable: bool = True


@dataclass
class GenerativeJob:
    """Everything a target needs to convert one variant of a generative model: one flat program per
    signature (``prefill_<L>`` for each prefill length, then ``decode``), each taking named tensors and
    returning a dict (``logits`` then the updated cache), with the sample keyword inputs it was exported with."""

    programs: dict                    # signature name -> torch.export.ExportedProgram (flat, named I/O)
    samples: dict                     # signature name -> {input name: torch tensor}
    layout: dict                      # edgeport.pipeline.tasks.text_generation.layout.Layout as JSON: roles, cache tensors, ids
    variant: str
    out_dir: Path                     # DIR/<target>/ inside the temporary output directory
    options: dict = field(default_factory=dict)       # the target's own options (e.g. TPU topologies)
    notes: list[str] = field(default_factory=list)
    artifact_only: bool = False       # just a runnable artifact (targets may skip extra work such as AOT compiles)
    progress: Callable[[str], None] = field(default=lambda _step: None, repr=False)   # as ConvertJob's
    # applies the target's rewrite passes to ``programs`` (once; later calls do nothing) and returns their
    # names: the pipeline calls it before ``convert``, unless the target's ``from_source(job)`` says the
    # artifact will come from the model's own files, in which case a convert that falls back to the programs
    # calls it first
    rewrite: Callable[[], list] = field(default=lambda: [], repr=False)
    # the target's passes ``rewrite`` applies (the row's; none for a bundle): a target that may build from the
    # model's own files checks none of them is needed first (they would not reach that artifact)
    passes: tuple[str, ...] = ()


@dataclass(frozen=True)
class BundleSupport:
    """A generative variant an on-device LLM runtime runs from TEXT (a ``.litertlm`` for LiteRT-LM): built
    when the target option ``option`` is given, then judged and driven by that runtime, because apps run the
    bundle through it, not through edgeport's prefill/decode loop. ``module`` defines
    ``check(model_dir)`` (plan time, UsageError on what the bundle cannot be built from), ``check_runtime()``,
    ``convert(job) -> Converted``, what the pipeline's bundle judge calls (``JUDGED_BY``, ``model_dir``,
    ``tokenizer_dir``, ``load_tokenizer``, ``engine_prompts``, ``run_text``),
    ``open_engine(artifact, threads)``, ``stream(engine, text, max_new)`` (yields each token's text) and
    ``piece_ids(tokenizer)`` (token text -> id)."""

    variant: str
    option: str                       # the TargetOption key that asks for it
    precision: str                    # its budget defaults are this precision's (fp32: every token)
    module: str

    def impl(self):
        return importlib.import_module(self.module)


@dataclass(frozen=True)
class GenerativeFallback:
    """A generative variant whose quantizer can keep chosen weight groups (a block's attention projections,
    its MLP, the lm_head) in float. ``prepare(artifact, variant, threads)`` reads the row's artifact and the
    fp32 graphs it was quantized from, and returns an object with ``groups`` ({name: {"op", "bytes", ...}}),
    ``measured`` (how a candidate is run: "simulation" when its quantized weights are put back into the fp32
    graphs), ``runner(quantized)`` (a SignatureRunner with only those groups quantized), ``build(floats)``
    (the real artifact with those groups float, written where the row's was; returns Converted) and
    ``close()``. The search lives in :mod:`edgeport.pipeline.tasks.text_generation.fallback`.

    ``keeps``: the precisions a kept group may have (``--fallback float|int8``): one tuple for every variant,
    or {variant: tuple} when they differ (int8 is a step up from int4, not from dynamic-int8; a variant not
    named keeps float only). For a mode other than "float", ``prepare`` gets ``keep=<mode>``,
    ``runner(quantized, kept=[...])`` runs the kept groups at that precision (the others not named stay
    float: a group's sensitivity is measured alone) and ``build(kept)`` keeps them at it; the object says how
    in ``kept_scheme``.

    ``programs``: the quantizer works on the programs, not on an fp32 artifact beside the row's (ExecuTorch
    quantizes the exported programs before lowering): ``prepare`` also gets ``job``, the row's
    :class:`GenerativeJob` with every signature's program (the target's rewrites applied), and the session
    keeps the programs for the judges (they are otherwise let go once every row is built)."""

    variants: dict[str, str] = field(hash=False)   # variant -> its quantization scheme, as the report states it
    prepare: Callable[..., Any]
    keeps: tuple[str, ...] | dict[str, tuple[str, ...]] = field(default=("float",), hash=False)
    programs: bool = False

    def keeps_for(self, variant: str) -> tuple[str, ...]:
        """The precisions ``variant``'s kept groups may have (none when the variant has no search)."""
        if variant not in self.variants:
            return ()
        return self.keeps.get(variant, ("float",)) if isinstance(self.keeps, dict) else self.keeps


@dataclass(frozen=True)
class GenerativeSupport:
    """What a target offers for generative models (prefill/decode with an explicit KV cache).

    ``convert`` writes one artifact (a file or a directory) holding every signature; ``load`` returns a
    :class:`~edgeport.targets.signature.SignatureRunner` over it. Declared in a module of the target's own
    (``Target.generative`` names it), so listing targets never imports it."""

    variants: tuple[str, ...]         # the first is always built; others on --quantize
    convert: Callable[[GenerativeJob], "Converted"]
    load: Callable[[Path, int], Any]
    bundles: tuple[BundleSupport, ...] = ()   # variants a runtime of the target's runs from text, on an option
    # job -> True when ``convert`` will build this job's artifact from the model's own files (no rewrites
    # needed up front; see GenerativeJob.rewrite); None: always from the programs
    from_source: Callable[[GenerativeJob], bool] | None = None
    # plan time, before the model loads: (source, target options, cache_len) -> None, UsageError (exit 2)
    # when the target's options cannot hold for this model
    check: Callable[[Any, dict, int], None] | None = None
    # quantized variants that can keep weight groups in float (``--fallback float`` on text generation)
    float_fallback: "GenerativeFallback | None" = None

    def can_keep_float(self, variant: str, mode: str = "float") -> bool:
        """``variant``'s weight groups can be kept at ``mode`` (``--fallback float|int8``)."""
        return self.float_fallback is not None and mode in self.float_fallback.keeps_for(variant)

    def bundle(self, variant: str) -> BundleSupport | None:
        return next((b for b in self.bundles if b.variant == variant), None)

    def requested_bundles(self, options: dict) -> list[BundleSupport]:
        return [b for b in self.bundles if options.get(b.option)]


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
    ``job.float_layers`` (layer ids, :mod:`edgeport.quantize.layers`) for these variants, and
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
    rewrites: tuple[str, ...] = ()     # passes from edgeport.targets.rewrites, applied when their ops are present
    # ops the raw converter/runtime is known to refuse: (op, the error it gives), read by `edgeport check`;
    # custom ops and bf16/fp16 weights are checked for every target
    refuses: tuple[tuple[str, str], ...] = ()
    # ops that convert but will run off the target's fast path, for `edgeport check` (listed, never failing it):
    # slow_ops(program) -> {op: (count, why)}; may be slow itself (it may run the target's partitioner)
    slow_ops: Callable[[Any], dict[str, tuple[int, str]]] | None = None
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
    # variant -> its default parity budget (constants in edgeport.validate.parity), for every variant the
    # target offers, forward and generative; config and flags tighten or loosen it per row
    budgets: dict[str, dict[str, float]] = field(default_factory=dict, hash=False)
    # artifact -> edgeport.quantize.artifact_share.ArtifactQuantization: what a non-fp32 artifact really quantizes
    read_quantization: Callable[[Path], Any] | None = None

    def __post_init__(self):
        from edgeport.targets.rewrites import check_known

        check_known(self.rewrites, f"target {self.name!r}")
        missing = [v for v in self.variants if v not in self.budgets]
        if missing:
            raise ValueError(f"target {self.name!r} declares no parity budget for variant(s) {', '.join(missing)}")

    def budget(self, variant: str) -> dict:
        """The default parity budget of ``variant`` (a copy); an unknown variant is an error, never fp32's."""
        if variant not in self.budgets:
            from edgeport.errors import UsageError

            raise UsageError(f"target {self.name!r} has no variant {variant!r} (no parity budget); "
                             f"its variants: {', '.join(self.every_variant)}")
        return dict(self.budgets[variant])

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
        offered = (support.variants + tuple(b.variant for b in support.bundles)) if support else ()
        return tuple(dict.fromkeys(self.variants + offered))

    @property
    def measured(self):
        """What benchmarks measured about this target (memory and disk factors for the pre-flight check):
        data in ``edgeport/targets/<name>/measured.toml``, not part of the contract (:mod:`edgeport.targets.measured`)."""
        from edgeport.targets.measured import measured

        return measured(self.name)

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
