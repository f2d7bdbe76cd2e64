"""``--task``, ``--prefill-len``, ``--cache-len`` and ``--gen-tokens``: what a generative conversion is asked
for, decided and checked at plan time (before the model loads), so a cache shorter than a prefill or a
text-generation task on an encoder is one line and exit 2, not a minute of work and a traceback.

The task is read off the model's config without loading weights: ``auto`` picks text-generation for a
``hf:`` model whose architecture is a causal LM (``*ForCausalLM``, or any class transformers maps as one,
such as ``GPT2LMHeadModel``), and the plain forward conversion for everything else.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgeport.errors import UsageError, load_json

TASKS = ("auto", "text-generation", "forward")
DEFAULT_PREFILL_LENS = (32,)
DEFAULT_GEN_TOKENS = 16
# Why 256: the artifact's cache length is what an app can hold (prompt + reply); a default just big enough
# for the judge would ship an artifact that cannot answer a real prompt. Capped by the model's positions.
DEFAULT_CACHE_LEN = 256
MAX_GEN_TOKENS = 4096


@dataclass(frozen=True)
class GenerationOptions:
    task: str = "auto"
    prefill_lens: tuple[int, ...] = ()
    cache_len: int | None = None
    gen_tokens: int | None = None
    eval_text: str | None = None       # quality on real text: the text (default: Python's help topics)
    eval_tokens: int | None = None     # quality on real text: tokens scored (default quality.DEFAULT_EVAL_TOKENS)
    checks: str | None = None          # task checks: prompts with what the answer must hold (.checks)


@dataclass(frozen=True)
class GenerationPlan:
    """What a text-generation conversion will build: the signatures, the cache and the judge's length."""

    prefill_lens: tuple[int, ...]
    cache_len: int
    gen_tokens: int
    architecture: str
    rows: list                         # (Target, variant) with generative support
    skipped: list                      # (Target, variant, why): requested targets without generative support


def plan_generation(opts, targets: list) -> GenerationPlan | None:
    """None for a forward conversion; the checked generation plan otherwise (UsageError on bad input)."""
    g = opts.generation
    if g.task not in TASKS:
        raise UsageError(f"unknown --task {g.task!r}; known: {', '.join(TASKS)}")
    explicit = [flag for flag, value in (("--prefill-len", g.prefill_lens), ("--cache-len", g.cache_len),
                                         ("--gen-tokens", g.gen_tokens), ("--eval-text", g.eval_text),
                                         ("--eval-tokens", g.eval_tokens), ("--checks", g.checks)) if value]
    arch, causal, positions = describe_source(opts.source, g.task)
    if g.task == "forward" or (g.task == "auto" and not causal):
        refuse_bundle_options(opts, targets, "this model is not a causal LM" if not causal else "--task forward was given")
        if explicit:
            raise UsageError(f"{explicit[0]} applies to --task text-generation "
                             f"({'this model is not a causal LM' if not causal else '--task forward was given'})")
        return None
    if not causal:
        raise UsageError(f"--task text-generation needs a causal language model (hf: or a GGUF); "
                         f"{opts.source.model!r} is {arch or 'not a Hugging Face model'}")
    refuse_forward_only(opts)
    lens, gen_tokens, cache_len = lengths(g, positions)
    check_quality_options(g)
    rows, skipped = generation_rows(targets, opts.quantize, opts.target_options)
    for target, variant in rows:
        bundle = target.generation().bundle(variant)
        if bundle:  # (a GGUF's folder is written at run time: only the extra is checked)
            bundle.impl().check(Path(opts.source.model.removeprefix("hf:")))
    for target in dict.fromkeys(target for target, _ in rows):
        if target.generation().check:
            target.generation().check(opts.source, opts.target_options or {}, cache_len)
    return GenerationPlan(lens, cache_len, gen_tokens, arch, rows, skipped)


def check_quality_options(g: GenerationOptions) -> None:
    """--eval-text / --eval-tokens / --checks, checked before the model loads."""
    from edgeport.pipeline.tasks.text_generation.quality import MAX_EVAL_TOKENS

    if g.eval_tokens is not None and not 1 <= g.eval_tokens <= MAX_EVAL_TOKENS:
        raise UsageError(f"--eval-tokens must be 1..{MAX_EVAL_TOKENS}, got {g.eval_tokens}")
    if g.eval_text is not None and not Path(g.eval_text).is_file():
        raise UsageError(f"--eval-text not found: {g.eval_text}")
    if g.checks is not None:
        from edgeport.pipeline.tasks.text_generation.checks import read_checks

        read_checks(g.checks)


def refuse_forward_only(opts) -> None:
    """Flags that shape the one-forward export mean nothing for prefill/decode programs."""
    if opts.source.dynamic:
        raise UsageError("--dynamic does not apply to --task text-generation: prefill and decode are static "
                         "(one prefill per --prefill-len)")
    if opts.calibration_data:
        raise UsageError("--calibration-data does not apply to --task text-generation (no static int8 variant)")
    if opts.source.inputs:
        raise UsageError("--input does not apply to --task text-generation: inputs are token ids, positions and the cache")


def lengths(g: GenerationOptions, positions: int | None) -> tuple[tuple[int, ...], int, int]:
    lens = tuple(sorted(set(g.prefill_lens or DEFAULT_PREFILL_LENS)))
    gen_tokens = DEFAULT_GEN_TOKENS if g.gen_tokens is None else g.gen_tokens
    if lens[0] < 1:
        raise UsageError(f"--prefill-len must be at least 1, got {lens[0]}")
    if not 1 <= gen_tokens <= MAX_GEN_TOKENS:
        raise UsageError(f"--gen-tokens must be 1..{MAX_GEN_TOKENS}, got {gen_tokens}")
    need = lens[-1] + gen_tokens
    cache_len = g.cache_len if g.cache_len is not None else max(need, min(DEFAULT_CACHE_LEN, positions or DEFAULT_CACHE_LEN))
    if cache_len < lens[-1]:
        raise UsageError(f"--cache-len {cache_len} is smaller than --prefill-len {lens[-1]}: the cache must hold the prompt")
    if cache_len < need:
        raise UsageError(f"--cache-len {cache_len} holds the longest prefill ({lens[-1]}) but not --gen-tokens "
                         f"{gen_tokens} more: use --cache-len {need} or more")
    if positions and cache_len > positions:
        raise UsageError(f"--cache-len {cache_len} exceeds the model's {positions} positions")
    return lens, gen_tokens, cache_len


def refuse_bundle_options(opts, targets: list, why: str) -> None:
    """A bundle option (``--litertlm``) asks for a text-generation artifact: on a forward conversion it is exit 2."""
    for target in targets:
        support = target.generation()
        for bundle in support.requested_bundles(opts.target_options) if support else []:
            flag = next((o.flag for o in target.options if o.key == bundle.option), bundle.option)
            raise UsageError(f"--{flag} builds a text-generation bundle from a Hugging Face causal LM "
                             f"(hf:DIR with --task text-generation); {why}")


def generation_rows(targets: list, quantize, options: dict | None = None) -> tuple[list, list]:
    offered = {v for t in targets if t.generation() for v in t.generation().variants}
    for q in quantize:
        if q not in offered:
            raise UsageError(f"--quantize {q!r} is not offered for text-generation by {', '.join(t.name for t in targets)}; "
                             f"known: {', '.join(sorted(offered)) or 'none'}")
    rows, skipped = [], []
    for target in targets:
        support = target.generation()
        if support is None:
            skipped.append((target, "fp32", f"{target.name} has no text-generation support"))
            continue
        rows += [(target, v) for v in dict.fromkeys([support.variants[0], *quantize]) if v in support.variants]
        rows += [(target, b.variant) for b in support.requested_bundles(options or {})]
    return rows, skipped


def describe_source(source, task: str) -> tuple[str | None, bool, int | None]:
    """(architecture, is a causal LM, max positions) from an ``hf:`` model's config; nothing for other specs."""
    from edgeport.sources.gguf import describe, is_gguf

    if is_gguf(source.model):  # its config from the file's metadata (nothing dequantized yet)
        config = describe(source.model)["config"]
    elif not source.model.startswith("hf:"):
        return None, False, None
    else:
        config = read_config(source.model[3:], source.trust_remote_code, force=task == "text-generation")
    if config is None:
        return None, False, None
    archs = list(config.get("architectures") or [])
    auto_map = config.get("auto_map") or {}
    causal = source.hf_task == "causal-lm" or "AutoModelForCausalLM" in auto_map or any(is_causal_class(a) for a in archs)
    positions = next((config[k] for k in ("max_position_embeddings", "n_positions", "n_ctx") if isinstance(config.get(k), int)), None)
    return (archs[0] if archs else config.get("model_type")), causal, positions


def read_config(where: str, trust_remote_code: bool, force: bool) -> dict | None:
    """config.json of a local directory as JSON (no code runs); a hub id through transformers' local cache.
    An unreadable config is left for the model loader to report, unless text-generation was asked for."""
    path = Path(where) / "config.json"
    if path.is_file():
        try:
            return load_json(path.read_text(), str(path))
        except (OSError, ValueError) as exc:
            raise UsageError(f"cannot read {path}: {exc}") from exc
    if Path(where).is_dir() and not force:
        return None
    from edgeport.sources.hf import load_config

    return load_config(where, trust_remote_code).to_dict()


def is_causal_class(name: str) -> bool:
    if name.endswith("ForCausalLM"):
        return True
    try:
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    except ImportError:
        return False
    return name in set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())
