"""Everything that can be checked before minutes of work is checked here: targets, variants, target
options, threads, samples, the output directory, the budgets and the baseline. A bad value is a
:class:`UsageError` (exit 2) before anything heavy loads."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from edgeport.errors import UsageError
from edgeport.pipeline.options import ConvertOptions, JudgeOptions
from edgeport.quantize.policy import FallbackPolicy


@dataclass(frozen=True)
class Baseline:
    """An earlier report.json, already checked readable, with the thresholds to judge against it."""

    report: dict
    thresholds: dict
    source: str


@dataclass(frozen=True)
class RowPolicy:
    """One row's policy, decided once, by the plan: the budget its judge applies (the target's own, then the
    config's tables, then --budget flags; the built-in default rides along as ``budget['builtin']``) and
    whether its failure fails the run. Every later stage reads it from here (a row worker from its spec),
    so no stage can decide "which budget" or "generative?" its own way. ``budget`` is None for a row that
    is never built (skipped: its task or target cannot, or the target does not offer the variant)."""

    budget: dict | None
    required: bool


def row_policies(keys, config: dict, flags: list, generative: bool, built: bool = True) -> dict:
    """{(target name, variant): RowPolicy}; a budget that gates nothing is exit 2 here, before any work."""
    from edgeport.config import budget_for, is_required

    return {(t, v): RowPolicy(budget_for(t, v, config, flags, generative) if built else None,
                              is_required(t, v, config)) for t, v in keys}


@dataclass(frozen=True)
class Plan:
    """What will run, decided (and validated) before any heavy work starts."""

    rows: list[tuple[object, str]]     # (Target, variant)
    config: dict
    budget_flags: list
    baseline: Baseline | None = None
    decompositions: dict = field(default_factory=dict)
    generation: object = None          # edgeport.pipeline.tasks.text_generation.plan.GenerationPlan for --task text-generation
    fallback: FallbackPolicy = field(default_factory=FallbackPolicy)   # --fallback / --fallback-max
    task: object = None                # edgeport.pipeline.tasks.Task: forward or text-generation
    skipped: list = field(default_factory=list)   # (Target, variant, why): requested rows the task cannot build
    not_offered: list = field(default_factory=list)   # (Target, variant, why): a -q variant a target lacks (optional)
    limits: object = None              # edgeport.pipeline.limits.Requested: --row-timeout / --row-memory / [limits]
    policies: dict = field(default_factory=dict)  # (target name, variant) -> RowPolicy, every row's (row_policies)

    def policy(self, target, variant: str) -> RowPolicy:
        """The row's policy as the plan decided it (``target``: a Target or its name)."""
        return self.policies[(getattr(target, "name", target), variant)]


def plan(opts: ConvertOptions) -> Plan:
    from edgeport.config import load_config, parse_budget_flags
    from edgeport.pipeline.limits import requested
    from edgeport.pipeline.outdir import check_junit, check_output_dir, input_paths

    from edgeport.pipeline.tasks import task_of
    from edgeport.pipeline.tasks.text_generation.plan import plan_generation

    targets = requested_targets(opts.targets)
    generation = plan_generation(opts, targets)
    if generation is None:
        check_variants(opts.quantize, targets)
    for target in targets:
        target.validate_options(opts.target_options)
    check_dynamic(opts.source.dynamic)
    check_source_numbers(opts.source)
    check_judge(opts.judge)
    check_run(opts)
    rows = generation.rows if generation else \
        [(t, v) for t in targets for v in dict.fromkeys([t.default_variant, *opts.quantize]) if v in t.variants]
    not_offered = [] if generation else not_offered_rows(targets, opts.quantize)
    fallback = check_fallback(opts, rows, generative=generation is not None)
    check_output_dir(opts.output.out, opts.output.force,
                     input_paths(opts.source.model, opts.judge.data, opts.calibration_data, opts.judge.config,
                                 opts.judge.baseline, opts.source.decompositions))
    check_junit(opts.output.junit)
    config, flags = load_config(opts.judge.config), parse_budget_flags(opts.judge.budgets)
    limits = requested(opts.row_timeout, opts.row_memory, config)
    task = task_of(generation)
    skipped = generation.skipped if generation else []
    policies = {**row_policies([(t.name, v) for t, v, _why in skipped], config, flags, task.generative, built=False),
                **{(t.name, v): RowPolicy(None, False) for t, v, _why in not_offered},   # optional: not offering it is no failure
                **row_policies([(t.name, v) for t, v in rows], config, flags, task.generative)}
    return Plan(rows, config, flags, read_baseline(opts.judge.baseline, config),
                load_user_decompositions(opts.source.decompositions), generation, fallback, task, skipped,
                not_offered, limits, policies)


def requested_targets(names) -> list:
    from edgeport.targets.registry import get_target, target_names

    if not names:
        raise UsageError(f"no --target given; known targets: {', '.join(target_names())}")
    unknown = [t for t in names if t not in target_names()]
    if unknown:
        raise UsageError(f"unknown target {unknown[0]!r}; known targets: {', '.join(target_names())}")
    return [get_target(name) for name in dict.fromkeys(names)]


def check_variants(quantize, targets: list) -> None:
    for q in quantize:
        if not any(q in t.variants for t in targets):
            known = sorted({v for t in targets for v in t.variants})
            raise UsageError(f"--quantize {q!r} is not offered by {', '.join(t.name for t in targets)}; known: {', '.join(known)}")


def not_offered_rows(targets: list, quantize) -> list[tuple[object, str, str]]:
    """A ``-q`` variant some requested target does not offer is a skipped row of that target saying so
    (optional: not offering it is no failure), not a silent gap in the report."""
    return [(t, q, f"{t.name} does not offer {q}; its variants: {', '.join(t.variants)}")
            for t in targets for q in dict.fromkeys(quantize) if q not in t.variants]


def check_fallback(opts: ConvertOptions, rows: list, generative: bool = False) -> FallbackPolicy:
    """``--fallback`` needs a requested variant whose layers can be kept at its precision (float; int8 for
    text-generation variants that declare it); ``--fallback-max`` a sane cap."""
    from edgeport.quantize.policy import parse_policy

    policy = parse_policy(opts.fallback, opts.fallback_max)
    mode = policy.mode
    keeps = (lambda t, v: generative_keeps_float(t, v, mode)) if generative else \
        (lambda t, v: mode == "float" and t.can_keep_float(v))
    if mode and not any(keeps(t, v) for t, v in rows):
        able = sorted({f"{t.name} {v}" for t in requested_targets(opts.targets) for v in t.every_variant if keeps(t, v)})
        kept = "float" if mode == "float" else f"at {mode} (text generation)"
        raise UsageError(f"--fallback {mode} needs a quantized variant that can keep layers {kept} "
                         f"(requested: {', '.join(opts.quantize) or 'none'}; possible: {', '.join(able) or 'none'})")
    return policy


def generative_keeps_float(target, variant: str, mode: str = "float") -> bool:
    """A text-generation variant whose weight groups can be kept at ``mode`` (``GenerativeSupport.float_fallback``)."""
    support = target.generation()
    return support is not None and support.can_keep_float(variant, mode)


def check_dynamic(dynamic) -> None:
    from edgeport.core.program import DYNAMIC_DIMS

    unknown = [d for d in dynamic if d not in DYNAMIC_DIMS]
    if unknown:
        raise UsageError(f"--dynamic {unknown[0]!r} is not supported; supported: {', '.join(DYNAMIC_DIMS)}")


def check_source_numbers(source) -> None:
    from edgeport.validate.limits import check_number

    check_number("seq_len", source.seq_len, "--seq-len")


def check_judge(judge: JudgeOptions) -> None:
    from edgeport.validate.limits import check_number

    check_number("seed", judge.seed, "--seed")
    if judge.threads != "auto" and (not isinstance(judge.threads, int) or judge.threads < 1):
        raise UsageError(f"--threads must be a number >= 1 or 'auto', got {judge.threads!r}")
    from edgeport.validate.data import check_sample_count

    check_sample_count(judge.samples)


def rejudge_settings(judge: JudgeOptions, junit) -> tuple[dict, list, Baseline | None]:
    """``validate``'s checks before any work: the judge options and --junit, then (config, budget flags,
    baseline) to judge the artifacts already on disk with."""
    from edgeport.config import load_config, parse_budget_flags
    from edgeport.pipeline.outdir import check_junit

    check_judge(judge)
    check_junit(junit)
    config = load_config(judge.config)
    return config, parse_budget_flags(judge.budgets), read_baseline(judge.baseline, config)


def check_run(opts: ConvertOptions) -> None:
    """--jobs and the cache's settings (EDGEPORT_CACHE_MAX) are read before any work."""
    if opts.jobs is not None and (not isinstance(opts.jobs, int) or opts.jobs < 1):
        raise UsageError(f"--jobs must be a number >= 1, got {opts.jobs!r}")
    if opts.reuse_verdict and not opts.cache:
        raise UsageError("--reuse-verdict reads verdicts from the cache, which --no-cache turns off")
    if opts.cache:
        from edgeport.cache import default_max_bytes

        default_max_bytes()


def fixed_threads(threads: int | str) -> int:
    """The thread count for what --threads auto does not sweep (the PyTorch reference, localize): all cores."""
    from edgeport.validate.autotune import max_threads

    return max_threads() if threads == "auto" else int(threads)


def read_baseline(path: Path | None, config: dict) -> Baseline | None:
    """Read and check the baseline (and its thresholds) before any heavy work: a bad one is exit 2."""
    from edgeport.config import baseline_thresholds
    from edgeport.validate.baseline import load_baseline

    if path is None:
        return None
    return Baseline(load_baseline(path), baseline_thresholds(config), str(path))


def load_user_decompositions(path_text: str | None) -> dict:
    if not path_text:
        return {}
    from edgeport.targets.rewrites import load_decompositions

    return load_decompositions(path_text)
