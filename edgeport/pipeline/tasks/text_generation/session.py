"""The text-generation task's session: load the causal LM, export prefill/decode once, draw the prompts and
generate the reference (:class:`GenSession`, what every row shares).

Called through :data:`edgeport.pipeline.tasks.text_generation.task.TASK` by the one pipeline
(:func:`edgeport.pipeline.run.convert`), inside the same staging directory and run log as a forward
conversion, so publishing, ``--force`` and the log work the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from edgeport.core.proc import timed
from edgeport.pipeline.tasks import Prepared
from edgeport.pipeline.tasks.text_generation.layout import Layout


def prepare(staging: Path, opts, the_plan, progress, timings: dict, workers: bool = False) -> Prepared:
    """Load -> --data prompts (checked before the export) -> export_for_generation -> reference generation."""
    from edgeport.pipeline.tasks.text_generation.export import export_generation, load_causal_lm

    progress("loading model")
    with timed(timings, "load"):
        loaded = load_causal_lm(opts.source)
    check_fits(loaded[0], opts, the_plan, workers)
    real, data = real_prompts(opts, the_plan.generation, loaded[0])
    progress("export_for_generation (prefill + decode)")
    with timed(timings, "export"):
        exported = export_generation(opts.source, the_plan.generation, staging, loaded)
    progress("PyTorch reference (generate)")
    with timed(timings, "reference"):
        session = start_session(exported, opts, real, data)
    if session.quality is not None:   # validate scores the same windows again (:func:`.quality.saved_windows`)
        from edgeport.pipeline.tasks.text_generation.layout import EXPORTED_DIR
        from edgeport.pipeline.tasks.text_generation.quality import save_windows

        save_windows(session.quality, staging / EXPORTED_DIR)
    session.progress, session.fallback = progress, the_plan.fallback   # --fallback float (:mod:`.fallback`)
    params = int(sum(p.numel() for p in exported.model.parameters()))
    session.weight_bytes = 4 * params
    del loaded
    release_model(exported, session.weight_bytes)
    return Prepared(session, None, {"params": params}, timings)


def release_model(exported, weight_bytes: int) -> None:
    """The eager model is done once the reference is: the rows convert the programs, which share its
    parameters' storage. What only the model holds (its generate caches, buffers the programs do not
    take, the allocator's leftovers from tracing) goes before the first row converts."""
    from edgeport.core.memory import release

    exported.model = None
    release(weight_bytes)


def release_programs(session, rows) -> None:
    """Every row is built: the programs (the weights, once) go before the judges load the artifacts, whose
    runtimes hold their own copies (mapped file, packed or dequantized weights). Kept when a row's judge
    runs them: a bundle's reference comes from the programs (:mod:`.bundle`), a precision search whose
    quantizer works on them (``GenerativeFallback.programs``, :mod:`.fallback`) rebuilds from them."""
    from edgeport.core.memory import release

    if any(t.generation() is not None and (t.generation().bundle(v) is not None or _searches_programs(session, t, v))
           for t, v in rows):
        return
    session.programs = {}
    release(session.weight_bytes)


def _searches_programs(session, target, variant: str) -> bool:
    """``--fallback`` may search this row with a quantizer that works on the programs."""
    policy, support = session.fallback, target.generation()
    return bool(policy is not None and policy.mode and support.can_keep_float(variant, policy.mode)
                and support.float_fallback.programs)


def check_fits(model, opts, the_plan, workers: bool) -> None:
    """convert's pre-flight memory and disk check, before the export: the weights once in memory (the
    signatures' programs share the model's storage), once on disk per saved signature program."""
    from edgeport.core.memory import fp32_weight_bytes
    from edgeport.pipeline.run import check_fits as fits

    weights = fp32_weight_bytes([*model.parameters(), *model.buffers()])
    fits(weights, opts, the_plan, workers, programs=len(the_plan.generation.prefill_lens) + 1, generative=True)


def real_prompts(opts, plan, model) -> tuple[list, dict | None]:
    """--data prompts, read and checked before the export (a bad file is exit 2 before minutes of work)."""
    if not opts.judge.data:
        return [], None
    from edgeport.pipeline.tasks.text_generation.layout import Layout
    from edgeport.pipeline.tasks.text_generation.prompts import read_prompts

    shape = Layout(opts.source.model, plan.architecture, int(model.config.vocab_size), 0, plan.cache_len,
                   list(plan.prefill_lens), plan.gen_tokens, None, [])
    return read_prompts(opts.judge.data, shape, Path(opts.source.model[3:]))


def start_session(exported, opts, real: list, data: dict | None):
    from edgeport.pipeline.tasks.text_generation.prompts import random_prompts
    from edgeport.pipeline.tasks.text_generation.reference import eager_latency, generate_reference
    from edgeport.pipeline.plan import fixed_threads

    layout = exported.layout
    prompts = real + random_prompts(layout, opts.judge.samples, opts.judge.seed)
    reference = generate_reference(exported.model, prompts, layout.gen_tokens, layout.cache_len)
    eager = eager_latency(exported.model, layout, fixed_threads(opts.judge.threads)) if opts.judge.latency else None
    quality, note = quality_reference(exported.model, layout, opts)
    return GenSession(layout, exported.programs, exported.samples, prompts, reference, eager, opts.judge,
                      dict(opts.target_options), data, {"real": len(real), "random": len(prompts) - len(real)},
                      notes=list(exported.notes), cache=open_cache(opts.cache), reuse_verdict=opts.reuse_verdict,
                      quality=quality, quality_note=note, checks=task_checks(exported, opts))


def task_checks(exported, opts) -> dict | None:
    """--checks with PyTorch's answers (:mod:`.checks`); None without the flag."""
    from edgeport.pipeline.tasks.text_generation.checks import prepare_checks

    if not opts.generation.checks:
        return None
    where = Path(opts.source.model[3:]) if opts.source.model.startswith("hf:") else None
    return prepare_checks(opts.generation.checks, where, exported.layout, exported.programs)


def quality_reference(model, layout, opts):
    """PyTorch fp32 over the eval text, for every row's quality block (:mod:`.quality`)."""
    from edgeport.pipeline.tasks.text_generation.quality import DEFAULT_EVAL_TOKENS, prepare_reference

    g = opts.generation
    where = Path(opts.source.model[3:]) if opts.source.model.startswith("hf:") else None
    return prepare_reference(model, layout, where, g.eval_text, g.eval_tokens or DEFAULT_EVAL_TOKENS)


def open_cache(enabled: bool):
    from edgeport.cache import Cache

    return Cache() if enabled else None



@dataclass
class GenSession:
    layout: Layout
    programs: dict                     # signature -> flat ExportedProgram
    samples: dict                      # signature -> {input name: tensor}
    prompts: list                      # token id lists: real (--data) first, then seeded random
    reference: list                    # Generation per prompt
    eager: dict | None                 # PyTorch eager's latency block (None with --no-latency)
    judge: object                      # JudgeOptions
    target_options: dict = field(default_factory=dict)
    data: dict | None = None
    origin: dict = field(default_factory=dict)
    reference_source: str = "transformers generate (greedy, static cache)"
    notes: list = field(default_factory=list)
    eager_label: str = "PyTorch eager"
    progress: object = None            # the run's Progress (None: quiet): rows and targets report their steps
    cache: object = None               # edgeport.cache.Cache, or None (--no-cache; validate)
    reuse_verdict: bool = False        # a cached artifact keeps its cached verdict (--reuse-verdict)
    weight_bytes: int | None = None    # fp32 bytes of the model's parameters (None: unknown)
    quality: object = None             # quality.QualityReference: PyTorch fp32 over the eval text (None: not measured)
    quality_note: str | None = None    # why there is no quality block
    checks: dict | None = None         # --checks with PyTorch's answers (checks.prepare_checks)
    fallback: object = None            # quantize.policy.FallbackPolicy: --fallback float (:mod:`.fallback`)
    _programs_id: dict | None = None

    def programs_id(self) -> dict:
        """The programs' and layout's part of every row's cache key (hashed once per run)."""
        from edgeport.pipeline.tasks.text_generation.reuse import programs_id

        if self._programs_id is None:
            self._programs_id = programs_id(self.programs, self.layout.to_json())
        return self._programs_id

    def judged_count(self) -> int:
        """How many prompts every row generates from (``samples`` is the programs' example inputs)."""
        return len(self.prompts)

    def verdict_inputs(self) -> dict:
        from edgeport.pipeline.tasks.text_generation.reuse import verdict_inputs

        return verdict_inputs(self)

    @property
    def reference_latency(self) -> dict | None:
        """Eager's decode step in the summary table's latency form (its "vs eager" column)."""
        if not self.eager:
            return None
        return {"p50": self.eager["decode_ms_per_token"], "p90": self.eager["decode_p90_ms"],
                "runs": self.eager["decode_runs"], "threads": self.eager["threads"]}

    def report_block(self) -> dict:
        return {"task": "text-generation", "reference": self.reference_source, "prompts": len(self.prompts),
                "prompt_origin": self.origin, "new_tokens": self.layout.gen_tokens, "cache_len": self.layout.cache_len,
                "prefill_lens": self.layout.prefill_lens, "eager": self.eager, "eager_label": self.eager_label,
                **({"quality": {**self.quality.block_info(), "tokens": int(len(self.quality.targets))}} if self.quality else {})}
