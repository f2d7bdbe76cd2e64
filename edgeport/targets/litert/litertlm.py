"""``--litertlm``: ``DIR/litert/model.litertlm``, the bundle Android/iOS LLM apps load with the LiteRT-LM runtime,
built by litert-torch's own Hugging Face path (``litert_torch.generative.export_hf``) and judged by running it
through ``litert_lm.Engine`` on CPU, the way an app runs it.

Why export_hf and not edgeport's own ``.tflite``: export_hf writes the signatures, cache layout and metadata the
runtime reads (``prefill_<L>``/``decode``, ``kv_cache_k_<i>``/``kv_cache_v_<i>`` written as one contiguous block at
``input_pos``, tokenizer, bos/eos, the chat template) and bundles them; the row says so (``built_by``).
``quantization_recipe="none"``: export_hf's default is dynamic int8, which drifts from PyTorch's greedy tokens.

The engine takes TEXT only (no token-id input in litert-lm-api 0.18.1) and prepends the bundle's start token,
so the judge feeds each parity prompt as text, keeps the prompts whose ``engine.tokenize(text)`` is the
model tokenizer's ids for that text, and compares the engine's greedy tokens (one ``run_decode_async`` chunk per
token, mapped back to ids) with PyTorch's greedy continuation of those same ids, up to the first eos (where
the engine stops). It has no logits to compare: the row's parity is its tokens. ``tensorflow`` (which export_hf
imports) is imported only in :func:`convert`.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from edgeport.errors import UsageError

BUNDLE = "model.litertlm"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model")
NEEDS = {"litert_lm": "litert-lm-api", "tensorflow": "tensorflow-cpu"}


def check(model_dir: Path) -> None:
    """Plan time: the extra is installed and the model directory has a tokenizer the bundle can carry."""
    missing = [pkg for mod, pkg in NEEDS.items() if importlib.util.find_spec(mod) is None]
    if missing:
        raise UsageError(f"--litertlm needs {', '.join(missing)}: pip install 'edgeport[litert-lm]'")
    if model_dir.is_dir() and not any((model_dir / f).is_file() for f in TOKENIZER_FILES):
        raise UsageError(f"--litertlm bundles the model's tokenizer, and {model_dir} has none "
                         f"(missing: {' or '.join(TOKENIZER_FILES)})")


def check_runtime() -> None:
    """``generate`` on a bundle: the engine is installed (else exit 2 with the extra to install)."""
    if importlib.util.find_spec("litert_lm") is None:
        raise UsageError("running model.litertlm needs litert-lm-api: pip install 'edgeport[litert-lm]'")


def model_dir(layout: dict) -> Path:
    return Path(layout["model"].removeprefix("hf:"))


def convert(job):
    """export_hf -> ``out_dir/model.litertlm`` (its work files stay in ``out_dir/export_hf/``). When this run's
    fp32 row was lowered by export_hf (:mod:`.hf_lowering`), that one call wrote the bundle too: it is taken
    from there instead of exporting again."""
    from edgeport.targets.base import Converted
    from edgeport.targets.litert.generate import artifact_path

    work = job.out_dir / "export_hf"
    built = next(work.rglob(BUNDLE), None) if work.is_dir() else None
    shared = built is not None
    if built is None:
        built = _export(job, work)
    path = job.out_dir / BUNDLE
    shutil.move(str(built), path)
    tflite = next(work.rglob("model.tflite"), None) or (artifact_path(job.out_dir, "fp32") if shared else None)
    return Converted(path, {"built_by": "export_hf", "quantization_recipe": "none",
                            "runtime": "litert_lm.Engine (CPU)", "export_shared_with_fp32": shared,
                            "tflite": str(tflite.relative_to(job.out_dir.parent)) if tflite else None})


def _export(job, work: Path) -> Path:
    from edgeport.targets.litert.hf_lowering import run_export_hf

    run_export_hf(model_dir(job.layout), job.layout, work, bundle=True)
    built = next(work.rglob(BUNDLE), None)
    if built is None:
        raise RuntimeError(f"export_hf wrote no {BUNDLE}")
    return built


def open_engine(artifact: Path, threads: int):
    """The engine on CPU; its XNNPACK weight cache goes to a scratch folder (by default it writes one
    beside the bundle, into DIR, which CI publishes; in a ``convert`` the scratch is the run's own,
    :mod:`edgeport.core.scratch`), removed with the engine."""
    import weakref

    import litert_lm

    from edgeport.core.scratch import scratch_dir

    cache = str(scratch_dir("edgeport-litertlm-"))
    try:
        engine = litert_lm.Engine(str(artifact), backend=litert_lm.Backend.CPU(thread_count=max(1, threads)),
                                  enable_benchmark=True, cache_dir=cache)
    except BaseException:
        shutil.rmtree(cache, ignore_errors=True)
        raise
    weakref.finalize(engine, shutil.rmtree, cache, True)
    return engine


def stream(engine, text: str, max_new: int):
    """Greedy continuation of ``text`` (fed as-is, after the bundle's start token): yields each token's text;
    returns the engine's benchmark info."""
    import litert_lm

    session = engine.create_session(apply_prompt_template=False, sampler_config=litert_lm.SamplerConfig(top_k=1),
                                    max_output_tokens=max_new)
    try:
        session.run_prefill([text])
        for chunk in session.run_decode_async():
            yield chunk.texts[0]
        return session.get_benchmark_info()
    finally:
        session.close()


def run_text(engine, text: str, max_new: int) -> tuple[list[str], object]:
    pieces, gen = [], stream(engine, text, max_new)
    while True:
        try:
            pieces.append(next(gen))
        except StopIteration as stop:
            return pieces, stop.value


def piece_ids(tokenizer) -> dict[str, int]:
    """Each token's text -> its id (the engine streams one token's text per chunk)."""
    table = {}
    for i in range(len(tokenizer)):
        table.setdefault(tokenizer.decode([i], skip_special_tokens=False), i)
    return table


def engine_prompts(engine, tokenizer, prompts: list[list[int]], room: int) -> tuple[list[str], list[list[int]], int]:
    """(texts, the ids the model sees for each, prompts dropped): each parity prompt as text, kept when the
    engine tokenizes it to the model tokenizer's ids and it fits the cache with the new tokens."""
    texts, ids, dropped = [], [], 0
    for prompt in prompts:
        text = tokenizer.decode(prompt, skip_special_tokens=True)
        plain = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        full = list(tokenizer(text)["input_ids"])
        if not plain or list(engine.tokenize(text)) != plain or len(full) > room:
            dropped += 1
            continue
        texts.append(text)
        ids.append(full)
    return texts, ids, dropped


def tokenizer_dir(model: Path, artifact: Path) -> Path:
    """The model's own folder, else the copy the conversion put in DIR/tokenizer (``validate`` elsewhere)."""
    if any((model / f).is_file() for f in TOKENIZER_FILES):
        return model
    return artifact.parents[1] / "tokenizer"


def load_tokenizer(where: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(where), local_files_only=True, trust_remote_code=False)


# what the pipeline's bundle judge names in the row (edgeport.pipeline.tasks.text_generation.bundle)
JUDGED_BY = "litert_lm.Engine (CPU, greedy top_k=1, text prompts)"
