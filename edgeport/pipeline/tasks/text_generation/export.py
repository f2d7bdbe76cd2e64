"""Load the causal LM, export prefill and decode once, normalize them, save them in ``DIR/exported/``.

transformers' own path does the tracing: ``DynamoExporter().export_for_generation`` runs ``generate`` on a
static cache and exports the prefill and decode calls it captured. Decode does not depend on the prompt
length, so it is exported once; every further ``--prefill-len`` exports only its prefill (same capture,
``decompose_for_generation`` + ``export_program``). Each program is then flattened (:mod:`.flat`) and saved
as ``prefill_<L>.pt2`` / ``decode.pt2`` with ``layout.json``: targets convert these, ``validate`` re-judges
against them, and nothing downstream re-traces the model.

The model's own ``generation_config`` is set aside while capturing and generating: its eos would stop the
reference early and its processors (repetition penalty, ...) would change tokens the artifacts (raw
logits) cannot reproduce. The artifacts are greedy on raw logits; an app applies its sampling on top.
"""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from edgeport.errors import UsageError
from edgeport.pipeline.tasks.text_generation.layout import EXPORTED_DIR, Layout, cache_entries, describe_tensor, prefill_name

# Files an app needs to turn text into ids and back (copied into DIR/tokenizer/ when the model has them).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                   "vocab.json", "merges.txt", "vocab.txt", "added_tokens.json", "chat_template.jinja")


@dataclass
class Exported:
    model: object                      # the eager model: the reference generates with it
    layout: Layout
    programs: dict                     # signature -> flat ExportedProgram
    samples: dict                      # signature -> {input name: tensor}
    notes: list[str] = field(default_factory=list)


def load_causal_lm(source) -> tuple[object, list[str]]:
    """The model through the same loader as ``hf:`` forward conversions (local files only, repository code
    only with --trust-remote-code), with SDPA attention where the model has it, in float32: the artifacts' fp32 variants are judged
    against it and the quantized ones start from it."""
    import torch
    import transformers

    from edgeport.sources.hf import load_config, load_pretrained

    where = source.model[3:]
    config = load_config(where, source.trust_remote_code)
    if hasattr(config, "use_cache"):
        config.use_cache = True
    model = load_pretrained(transformers.AutoModelForCausalLM, where, config, source.trust_remote_code)
    notes = []
    try:  # SDPA: the mask is a bool input of decode only (eager attention adds a float mask to prefill too)
        model.set_attn_implementation("sdpa")
    except Exception as exc:
        notes.append(f"attention stays eager ({type(exc).__name__}): prefill takes a float additive mask")
    if getattr(model, "_can_set_experts_implementation", lambda: False)():
        # MoE: the default grouped_mm (torch.histc and a transformers custom op) is lowered by no converter
        # here; batched_mm (static shapes) is what transformers' own ExecuTorch exporter switches to
        model.set_experts_implementation("batched_mm")
        notes.append("mixture-of-experts layers run as batched_mm (every token's top-k experts, static shapes)")
    dtypes = {p.dtype for p in model.parameters()}
    if dtypes != {torch.float32}:
        notes.append(f"weights upcast from {', '.join(sorted(str(d).removeprefix('torch.') for d in dtypes))} to "
                     "float32 for export and reference")
        model = model.float()
    return model, notes


def generation_config(model, cache_len: int, new_tokens: int = 2, logits: bool = False):
    """Greedy, static cache of ``cache_len`` slots, no eos and no processors (see the module docstring)."""
    from transformers import GenerationConfig

    pad = model.config.pad_token_id if isinstance(getattr(model.config, "pad_token_id", None), int) else 0
    return GenerationConfig(cache_implementation="static", max_cache_len=cache_len, do_sample=False,
                            max_new_tokens=new_tokens, pad_token_id=pad, output_logits=logits,
                            return_dict_in_generate=logits)


@contextlib.contextmanager
def plain_generation(model):
    """generate() merges the model's generation_config into the one passed: swap in an empty one."""
    from transformers import GenerationConfig

    saved = model.generation_config
    model.generation_config = GenerationConfig()
    try:
        yield
    finally:
        model.generation_config = saved


def sample_ids(model, length: int, seed: int = 1):
    import torch

    low = min(3, model.config.vocab_size - 1)  # stay clear of the usual special ids when the vocabulary allows
    return torch.randint(low, model.config.vocab_size, (1, length), generator=torch.Generator().manual_seed(seed))


def capture(model, length: int, cache_len: int) -> dict:
    """``{"prefill": (module, kwargs), "decode": ...}``: the forward calls generate() makes for a prompt of
    ``length`` tokens (what gets exported, and what eager timing calls)."""
    from transformers.exporters.utils import decompose_for_generation

    ids = sample_ids(model, length)
    with plain_generation(model):
        return decompose_for_generation(model, {"input_ids": ids, "attention_mask": ids.new_ones(ids.shape)},
                                        generation_config=generation_config(model, cache_len))


def export_raw(model, lens: tuple[int, ...], cache_len: int) -> dict:
    """signature -> raw ExportedProgram: export_for_generation for the first length, prefill-only for the rest."""
    from transformers.exporters import DynamoExporter
    from transformers.exporters.configs import DynamoConfig

    ids = sample_ids(model, lens[0])
    with plain_generation(model):
        exported = DynamoExporter().export_for_generation(
            model, {"input_ids": ids, "attention_mask": ids.new_ones(ids.shape)}, DynamoConfig(),
            generation_config=generation_config(model, cache_len))
    raw = {prefill_name(lens[0]): exported.components["prefill"].program}
    for length in lens[1:]:
        module, kwargs = capture(model, length, cache_len)["prefill"]
        raw[prefill_name(length)] = DynamoExporter().export_program(module, kwargs, DynamoConfig())[0]
    raw["decode"] = exported.components["decode"].program
    return raw


def check_window(model, cache_len: int) -> None:
    """A cache longer than a sliding-window layer's window needs per-layer ring caches (:mod:`.ring_cache`):
    exit 2, one line, for the layers a ring cannot hold (before minutes of export)."""
    from edgeport.pipeline.tasks.text_generation.ring_cache import cache_plan, needs_ring

    if needs_ring(model, cache_len):
        cache_plan(model, cache_len)


def export_programs(model, plan) -> dict:
    """signature -> (flat program, sample kwargs). transformers' static sliding-window layer picks "write
    in place" or "roll the window" with a Python int while tracing, so past the window its decode would
    write out of range: such models get ring caches (:mod:`.ring_export`), every other model transformers'
    own export."""
    from edgeport.pipeline.tasks.text_generation.flat import flatten
    from edgeport.pipeline.tasks.text_generation.ring_cache import needs_ring

    if needs_ring(model, plan.cache_len):
        from edgeport.pipeline.tasks.text_generation.ring_export import export_ring

        decode = capture(model, plan.prefill_lens[0], plan.cache_len)["decode"][1]
        return export_ring(model, plan.prefill_lens, plan.cache_len, decode.get("attention_mask"))
    raw = export_raw(model, plan.prefill_lens, plan.cache_len)
    return {name: flatten(program) for name, program in raw.items()}


def export_generation(source, plan, out_dir: Path, loaded: tuple | None = None) -> Exported:
    """Export, flatten, save ``DIR/exported/`` (programs + layout.json) and the tokenizer files; ``loaded``
    is :func:`load_causal_lm`'s result when the caller loaded the model already."""
    from edgeport.errors import ExportFailed
    from edgeport.core.program import describe_export_error, save_program

    model, notes = loaded or load_causal_lm(source)
    check_window(model, plan.cache_len)
    try:
        flat = export_programs(model, plan)
    except UsageError:  # a model the generative contract cannot describe: one line, exit 2
        raise
    except Exception as exc:
        raise ExportFailed(describe_export_error(exc)) from exc
    folder = out_dir / EXPORTED_DIR
    folder.mkdir(parents=True, exist_ok=True)
    layout = make_layout(source.model, model, plan, {name: kwargs for name, (_, kwargs) in flat.items()},
                         {name: program for name, (program, _) in flat.items()})
    for name, (program, _) in flat.items():
        save_program(program, folder / f"{name}.pt2")
    layout.save(folder)
    copy_tokenizer(Path(source.model[3:]), out_dir)
    return Exported(model, layout, {n: p for n, (p, _) in flat.items()}, {n: k for n, (_, k) in flat.items()}, notes)


def make_layout(spec: str, model, plan, samples: dict, programs: dict) -> Layout:
    signatures = {}
    for name, kwargs in samples.items():
        outputs = output_values(programs[name], kwargs)
        signatures[name] = {"file": f"{EXPORTED_DIR}/{name}.pt2",
                            "inputs": [describe_tensor(k, v) for k, v in kwargs.items()],
                            "outputs": [describe_tensor(k, v) for k, v in outputs.items()]}
    config = model.config
    eos = config.eos_token_id if config.eos_token_id is not None else getattr(model.generation_config, "eos_token_id", None)
    eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
    bos = config.bos_token_id if isinstance(config.bos_token_id, int) else None
    cache = cache_entries(signatures["decode"]["inputs"])
    return Layout(spec, plan.architecture, int(config.vocab_size), 1 + max(c["layer"] for c in cache), plan.cache_len,
                  list(plan.prefill_lens), plan.gen_tokens, bos, [int(e) for e in eos_ids], signatures, cache)


def output_values(program, kwargs: dict) -> dict:
    """Output names, shapes and dtypes from the program's graph (no run needed)."""
    out_node = next(n for n in program.graph.nodes if n.op == "output")
    from torch.export.graph_signature import OutputKind

    specs = program.graph_signature.output_specs
    values = [arg.meta["val"] for arg, spec in zip(out_node.args[0], specs) if spec.kind == OutputKind.USER_OUTPUT]
    names = list(program.call_spec.out_spec.context) if program.call_spec.out_spec.context else []
    if len(names) != len(values):
        raise UsageError("cannot name the outputs of the exported decode program")
    return dict(zip(names, values))


def copy_tokenizer(model_dir: Path, out_dir: Path) -> list[str]:
    """The tokenizer files beside the model, copied to DIR/tokenizer/ (``edgeport generate --prompt`` and
    apps read them there); none for a hub id or a model without one."""
    if not model_dir.is_dir():
        return []
    found = [f for f in TOKENIZER_FILES if _own_file(model_dir, f)]
    if found:
        (out_dir / "tokenizer").mkdir(exist_ok=True)
        for name in found:
            shutil.copyfile(model_dir / name, out_dir / "tokenizer" / name)
    return found


def _own_file(model_dir: Path, name: str) -> bool:
    """A file of the model directory itself: a symlink out of it (vocab.txt -> /proc/self/environ, a key
    file) would copy what it names into DIR, which CI publishes. A hub cache snapshot's links into its
    ``blobs/`` are the model's own."""
    path = model_dir / name
    if not path.is_file():
        return False
    real, home = path.resolve(), model_dir.resolve()
    roots = [home] + ([home.parents[1] / "blobs"] if home.parent.name == "snapshots" else [])
    return any(real.is_relative_to(root) for root in roots)
