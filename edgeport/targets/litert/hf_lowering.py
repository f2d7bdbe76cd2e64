"""Which path lowers a Hugging Face causal LM's LiteRT text-generation ``.tflite``: litert-torch's own
``export_hf`` (``litert_torch.generative.export_hf``, the well-kept library for this job) or edgeport's lowering
of its exported prefill/decode programs (:mod:`edgeport.targets.litert.generate`).

``--litert-lowering auto`` (the default) takes export_hf when it can and edgeport's lowering otherwise:
measured on the same model in the same run, export_hf's fp32 ``.tflite`` is token-exact and faster
(bench/GENERATION.md). export_hf is not taken, and the row says why (``lowering_reason``), when:

- it is not installed: it imports ``tensorflow`` (the ``litert-lm`` extra, tensorflow-cpu), which only this
  route imports, and only when it runs (never at ``convert`` start-up);
- the source is not a local Hugging Face directory, or it has no tokenizer (export_hf reads the checkpoint and
  loads the tokenizer itself);
- the layout uses ring caches (a sliding-window model with a cache longer than its window): export_hf's
  cache and mask span the whole cache for every layer;
- export_hf raises (a model type or option it does not handle, no tokenizer, ...), or writes signatures
  that do not match the layout (prefill lengths, cache length, layers).

``--litert-lowering export_hf`` makes any of these the row's error; ``edgeport`` never tries export_hf.
Either way the artifact is judged by edgeport like every other row: greedy tokens against PyTorch, logits
budget, latency (through :class:`~edgeport.targets.litert.hf_runner.ExportHfRunner`).

With ``--litertlm`` the same export_hf call also writes the ``.litertlm`` bundle (``bundle_litert_lm``), which
the bundle row then takes (:func:`edgeport.targets.litert.litertlm.convert`): one export, not two.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

from edgeport.errors import UsageError

OPTION = "litert_lowering"
# LiteRT's passes on attention and the KV cache write, which export_hf writes its own way (they do not count
# against taking it); every other declared pass the programs need does (:func:`job_refusal`)
OWN_ATTENTION = ("grouped_query_attention", "kv_write_dynamic_update_slice", "expand_before_transpose")
CHOICES = ("auto", "export_hf", "edgeport")
WORK = "export_hf"          # out_dir/export_hf/: export_hf's work files (the bundle's, with --litertlm)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt")   # what AutoTokenizer reads
INSTALL = "pip install 'edgeport[litert-lm]'"


def validate(value) -> None:
    """Plan time: a known choice; ``export_hf`` asked for needs it installed."""
    if value not in CHOICES:
        raise UsageError(f"--litert-lowering {value!r}: choose one of {', '.join(CHOICES)}")
    if value == "export_hf" and not installed():
        raise UsageError(f"--litert-lowering export_hf needs tensorflow-cpu and litert-torch: {INSTALL}")


def installed() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("tensorflow", "litert_torch"))


def model_dir(layout: dict) -> Path | None:
    return local_dir(layout.get("model") or "")


def local_dir(spec: str) -> Path | None:
    """The local Hugging Face directory of an ``hf:`` source spec (None for anything else)."""
    where = Path(spec[3:]) if spec.startswith("hf:") else None
    return where if where is not None and (where / "config.json").is_file() else None


def source_refusal(spec: str) -> str | None:
    """Why export_hf cannot take the source ``spec`` (None: it may): what its files say, before any export."""
    if not installed():
        return f"export_hf is not installed ({INSTALL})"
    if local_dir(spec) is None:
        return f"export_hf reads a local Hugging Face directory; the source is {spec!r}"
    if not any((local_dir(spec) / f).is_file() for f in TOKENIZER_FILES):
        return f"export_hf loads the model's tokenizer, and the model directory has none ({' or '.join(TOKENIZER_FILES)})"
    return None


RING = "which export_hf's whole-cache mask does not express"


def refusal(layout: dict) -> str | None:
    """Why export_hf cannot take this model before trying it (None: try it)."""
    why = source_refusal(layout.get("model") or "")
    if why:
        return why
    ring = [c["name"] for c in layout.get("cache", []) if c["kind"] != "length" and c["shape"][2] != layout["cache_len"]]
    if ring:
        return f"ring caches for sliding-window layers ({ring[0]}, ...: cache longer than the window), {RING}"
    return None


def check_plan(source, options: dict, cache_len: int) -> None:
    """Plan time (before the model loads): ``--litert-lowering export_hf`` on a model export_hf refuses is
    exit 2, one line naming why; ``auto`` falls back to edgeport's lowering at convert time, the reason in
    the row."""
    if (options.get(OPTION) or "auto") != "export_hf":
        return
    why = source_refusal(source.model) or window_refusal(local_dir(source.model), cache_len, source.trust_remote_code)
    if why:
        raise UsageError(f"--litert-lowering export_hf: {why}")


def window_refusal(where: Path, cache_len: int, trust_remote_code: bool) -> str | None:
    """The ring-cache refusal read off the config (transformers' own static cache layers, no weights): a
    sliding-window layer whose window is shorter than ``cache_len``."""
    from transformers import AutoConfig, StaticCache

    try:
        config = AutoConfig.from_pretrained(where, trust_remote_code=trust_remote_code)
        layers = StaticCache(config=config, max_cache_len=cache_len).layers
    except Exception:   # an unusual config: export_hf (or the model loader) says why at convert time
        return None
    windows = sorted({int(x.max_cache_len) for x in layers if getattr(x, "is_sliding", False) and x.max_cache_len < cache_len})
    if windows:
        return (f"--cache-len {cache_len} exceeds the sliding window ({windows[0]}): ring caches for the "
                f"sliding-window layers, {RING}")
    return None


def will_try(job) -> bool:
    """export_hf is asked for or may take the model (cheap: no import); it may still refuse it."""
    return (job.options.get(OPTION) or "auto") != "edgeport" and job_refusal(job) is None


def job_refusal(job) -> str | None:
    """:func:`refusal`, or the passes LiteRT declares that these programs need: export_hf lowers the model's
    own modules, so none of them would reach its ``.tflite`` (a MoE router's sort became STABLEHLO_SORT,
    which the interpreter does not load; ``sort_by_rank`` on the programs is what LiteRT runs)."""
    why = refusal(job.layout)
    if why or not job.programs:
        return why
    from edgeport.targets.rewrites import pending

    needed = pending(job.programs.values(), [n for n in job.passes if n not in OWN_ATTENTION])
    return f"the programs need {', '.join(needed)}, which export_hf's own lowering does not apply" if needed else None


def lower(job, dst: Path, edgeport_lowering) -> tuple[str, str]:
    """Write the fp32 ``.tflite`` at ``dst`` by the chosen path; (built_by, lowering_reason).
    ``edgeport_lowering(job, dst)`` is edgeport's own."""
    choice = job.options.get(OPTION) or "auto"
    if choice == "edgeport":
        edgeport_lowering(job, dst)
        return "edgeport", "--litert-lowering edgeport"
    why = job_refusal(job)
    if why is None:
        try:
            export(job, dst)
            return "export_hf", ("--litert-lowering export_hf" if choice == "export_hf"
                                 else "auto: export_hf lowers this Hugging Face causal LM")
        except Exception as exc:
            from edgeport.diagnostics import first_line

            dst.unlink(missing_ok=True)
            shutil.rmtree(job.out_dir / WORK, ignore_errors=True)
            if choice == "export_hf":
                raise
            why = f"export_hf refused the model: {first_line(exc)}"
    if choice == "export_hf":
        raise RuntimeError(f"--litert-lowering export_hf: {why}")
    edgeport_lowering(job, dst)
    return "edgeport", f"auto: {why}"


def export(job, dst: Path) -> None:
    """export_hf (fp32: ``quantization_recipe="none"``; its default is dynamic int8) into ``out_dir/export_hf``,
    its ``model.tflite`` moved to ``dst``; with ``--litertlm`` the bundle stays there for the bundle row."""
    layout, bundle = job.layout, bool(job.options.get("litertlm"))
    work = job.out_dir / WORK
    job.progress("export_hf (litert-torch's Hugging Face path)")
    from edgeport.core.memory import in_child, program_tensors

    # in a child process: export_hf's imports (tensorflow) and leftovers (~3 GB at 0.6B, kept by this process
    # through the judges otherwise) go when it exits; it reads the model's own files, not the programs, whose
    # mapped weights this process need not keep resident meanwhile (2.4 GB at 0.6B)
    in_child(run_export_hf, model_dir(layout), layout, work, bundle, lightweight(job),
             idle=program_tensors(job.programs.values()))
    built = next(work.rglob("model.tflite"), None)
    if built is None:
        raise RuntimeError("export_hf wrote no model.tflite")
    check_signatures(built, layout)
    shutil.move(str(built), dst)
    if not bundle:
        shutil.rmtree(work, ignore_errors=True)


def lightweight(job) -> bool:
    """export_hf's lightweight conversion for a model over the forward path's threshold
    (``edgeport.targets.litert.LIGHTWEIGHT_ABOVE``): litert-torch then keeps its constants out of each
    signature's lowered graph until the flatbuffer is written. Measured on a Qwen3-shaped model (bench/LARGE_GENERATION.md,
    "Memory, fifth session"): the same logits to the bit and the same ops, ~1.9x the weights less at peak."""
    from edgeport.targets.litert import over_lightweight_threshold

    return over_lightweight_threshold((getattr(job, "programs", None) or {}).get("decode"))


def run_export_hf(source: Path, layout: dict, work: Path, bundle: bool, lightweight: bool = False) -> None:
    """The one export_hf call (this route's and the ``--litertlm`` bundle's): fp32 (``quantization_recipe=
    "none"``; its default is dynamic int8) at the layout's prefill lengths and cache length, into a fresh
    ``work`` folder; its prefill returns the last real token's logits where the hook takes
    (:mod:`edgeport.targets.litert.hf_prefill`; never in the bundle). ``lightweight``: see :func:`lightweight`."""
    os.environ.setdefault("LITERT_TORCH_SHOW_PROGRESS", "n")
    shutil.rmtree(work, ignore_errors=True)
    from litert_torch.generative.export_hf import export as export_hf  # imports tensorflow

    from edgeport.targets.litert import hf_prefill

    hf_prefill.export(export_hf, str(source), str(work), bundle, prefill_lengths=list(layout["prefill_lens"]),
                      cache_length=int(layout["cache_len"]), quantization_recipe="none", keep_temporary_files=True,
                      **({"experimental_lightweight_conversion": True} if lightweight else {}))


def check_signatures(path: Path, layout: dict) -> None:
    """export_hf's signatures hold what the layout asks for: every prefill length, decode, the cache length
    and one key/value cache per layer of the layout."""
    from edgeport.targets.litert.hf_runner import KV, signature_inputs

    signatures = signature_inputs(path)
    wanted = [f"prefill_{n}" for n in layout["prefill_lens"]] + ["decode"]
    missing = [s for s in wanted if s not in signatures]
    if missing:
        raise RuntimeError(f"export_hf wrote no {missing[0]} signature (it has {', '.join(sorted(signatures))})")
    kv = sorted(n.removeprefix(KV) for n in signatures["decode"] if n.startswith(KV))
    ours = sorted(f"{c['name'].split('_')[1]}_{c['layer']}" for c in layout.get("cache", []) if c["kind"] != "length")
    if kv != ours:
        raise RuntimeError(f"export_hf's caches ({len(kv)}) are not the model's key/value layers ({len(ours)})")
