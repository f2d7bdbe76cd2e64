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
import statistics
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
    """export_hf -> ``out_dir/model.litertlm`` (its work files, the fp32 ``model.tflite`` among them, stay in
    ``out_dir/export_hf/``)."""
    from edgeport.targets.base import Converted

    work = job.out_dir / "export_hf"
    shutil.rmtree(work, ignore_errors=True)
    from litert_torch.generative.export_hf import export as export_hf  # imports tensorflow

    layout = job.layout
    export_hf.export(str(model_dir(layout)), str(work), prefill_lengths=list(layout["prefill_lens"]),
                     cache_length=int(layout["cache_len"]), bundle_litert_lm=True, quantization_recipe="none",
                     keep_temporary_files=True)
    built = next(work.rglob(BUNDLE), None)
    if built is None:
        raise RuntimeError(f"export_hf wrote no {BUNDLE}")
    path = job.out_dir / BUNDLE
    shutil.move(str(built), path)
    tflite = next(work.rglob("model.tflite"), None)
    return Converted(path, {"built_by": "export_hf", "quantization_recipe": "none",
                            "runtime": "litert_lm.Engine (CPU)",
                            "tflite": str(tflite.relative_to(job.out_dir.parent)) if tflite else None})


def open_engine(artifact: Path, threads: int):
    """The engine on CPU; its XNNPACK weight cache goes to a temporary folder (by default it writes one
    beside the bundle, into DIR, which CI publishes), removed with the engine."""
    import tempfile
    import weakref

    import litert_lm

    cache = tempfile.mkdtemp(prefix="edgeport-litertlm-")
    engine = litert_lm.Engine(str(artifact), backend=litert_lm.Backend.CPU(thread_count=max(1, threads)),
                              enable_benchmark=True, cache_dir=cache)
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


def judge(artifact: Path, session, budget: dict):
    """Greedy tokens of the bundle in ``litert_lm.Engine`` vs PyTorch's on the same prompt ids."""
    from edgeport.diagnostics import first_line
    from edgeport.pipeline.plan import fixed_threads
    from edgeport.pipeline.row import Verdict

    layout = session.layout
    try:
        tokenizer = load_tokenizer(tokenizer_dir(model_dir(layout.to_json()), artifact))
        engine = open_engine(artifact, fixed_threads(session.judge.threads))
        texts, ids, dropped = engine_prompts(engine, tokenizer, session.prompts, layout.cache_len - layout.gen_tokens)
        if not texts:
            return Verdict("failed", "no parity prompt round-trips through the engine's tokenizer as text")
        table = piece_ids(tokenizer)
        runs = [run_text(engine, text, layout.gen_tokens) for text in texts]
    except Exception as exc:
        return Verdict("failed", f"bundle does not run in litert_lm.Engine: {first_line(exc)}")
    counted = [(b.last_prefill_token_count, len(p)) for (_, b), p in zip(runs, ids) if b.last_prefill_token_count != len(p)]
    if counted:
        return Verdict("failed", f"the engine prefilled {counted[0][0]} tokens where the model's tokenizer gives "
                                 f"{counted[0][1]} (start token or tokenizer differ)")
    expected = reference_tokens(layout, session.programs, ids)
    got = [[table.get(p, -1) for p in pieces] for pieces, _ in runs]
    return verdict(expected, got, [b for _, b in runs], ids, dropped, session, budget)


def tokenizer_dir(model: Path, artifact: Path) -> Path:
    """The model's own folder, else the copy the conversion put in DIR/tokenizer (``validate`` elsewhere)."""
    if any((model / f).is_file() for f in TOKENIZER_FILES):
        return model
    return artifact.parents[1] / "tokenizer"


def load_tokenizer(where: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(where), local_files_only=True, trust_remote_code=False)


def reference_tokens(layout, programs: dict, prompts: list[list[int]]) -> list[list[int]]:
    """PyTorch greedy on the engine's prompt ids (the model's generate; the exported programs where the
    model folder is gone, as ``validate`` judges), cut before the first eos (the engine stops there)."""
    from types import SimpleNamespace

    from edgeport.pipeline.tasks.text_generation.export import load_causal_lm
    from edgeport.pipeline.tasks.text_generation.loop import greedy
    from edgeport.pipeline.tasks.text_generation.reference import ProgramRunner, generate_reference

    if (model_dir(layout.to_json()) / "config.json").is_file():
        model, _ = load_causal_lm(SimpleNamespace(model=layout.model, trust_remote_code=False))
        generations = generate_reference(model, prompts, layout.gen_tokens, layout.cache_len)
    else:
        runner = ProgramRunner(programs)
        generations = [greedy(runner, layout, prompt, layout.gen_tokens) for prompt in prompts]
    out = []
    for gen in generations:
        stop = next((i for i, t in enumerate(gen.tokens) if t in layout.eos_token_ids), len(gen.tokens))
        out.append(gen.tokens[:stop])
    return out


def verdict(expected, got, bench, ids, dropped: int, session, budget: dict):
    from edgeport.pipeline.row import Verdict
    from edgeport.pipeline.tasks.text_generation.judge import first_divergence

    matched, divergence = [], None
    for index, (ref, out) in enumerate(zip(expected, got)):
        step = first_divergence(ref, out)
        if step is None and len(out) > len(ref):
            step = len(ref)
        matched.append(len(ref) if step is None else step)
        if step is not None and divergence is None:
            divergence = {"prompt": index, "step": step, "expected": ref[step] if step < len(ref) else None,
                          "got": out[step] if step < len(out) else None}
    total = sum(len(r) for r in expected)
    agreement = sum(matched) / total if total else 1.0
    minimum = budget.get("token_agreement_min", 1.0)
    block = generation_block(bench, session, ids, expected, matched, agreement, divergence, dropped)
    ok = agreement >= minimum and divergence is None if minimum >= 1.0 else agreement >= minimum
    error = None if ok else (f"parity: engine token agreement {agreement:.3f} < {minimum}; first divergence: "
                             f"prompt {divergence['prompt']} step {divergence['step']} (expected token "
                             f"{divergence['expected']}, got {divergence['got']})")
    decode = [1000.0 / b.last_decode_tokens_per_second for b in bench if b.last_decode_tokens_per_second > 0]
    latency = ({"p50": statistics.median(decode), "p90": max(decode), "runs": len(decode),
                "threads": block["threads"]} if decode else None)
    notes = [f"{dropped} parity prompt(s) left out: their text does not tokenize back to the same ids"] if dropped else []
    return Verdict("ok" if ok else "failed", error, None, latency, None, {"generation": block}, notes)


def generation_block(bench, session, ids, expected, matched, agreement, divergence, dropped) -> dict:
    from edgeport.pipeline.plan import fixed_threads

    def median(field):
        values = [getattr(b, field) for b in bench if getattr(b, field) > 0]
        return round(statistics.median(values), 3) if values else None

    decode_tps = median("last_decode_tokens_per_second")
    block = {"judged_by": "litert_lm.Engine (CPU, greedy top_k=1, text prompts)", "prompts": len(ids),
             "prompts_left_out": dropped, "prompt_tokens": [len(p) for p in ids], "new_tokens": session.layout.gen_tokens,
             "tokens_matched": sum(matched), "tokens_total": sum(len(r) for r in expected),
             "token_agreement": round(agreement, 6), "first_divergence": divergence,
             "prefill_tokens_per_s": median("last_prefill_tokens_per_second"), "decode_tokens_per_s": decode_tps,
             "time_to_first_token_s": median("time_to_first_token_in_second"),
             "decode_ms_per_token": round(1000.0 / decode_tps, 4) if decode_tps else None,
             "tokens_per_s": decode_tps, "threads": fixed_threads(session.judge.threads)}
    if session.eager and decode_tps:
        block["eager"] = {k: session.eager[k] for k in ("prefill_ms", "decode_ms_per_token", "tokens_per_s")}
        block["vs_eager"] = session.eager["decode_ms_per_token"] / block["decode_ms_per_token"]
    return block
