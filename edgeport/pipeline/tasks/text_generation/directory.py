"""``edgeport validate DIR`` for a text-generation directory: the reference read back from DIR, without the
model (the one pipeline's validate judges every artifact against it).

The reference is the flat programs saved in ``DIR/exported/`` (loaded through the same inspected,
no-unpickling loader as any .pt2), run by the same greedy loop: they are token-exact with the model's own
``generate`` (the tests check it), so a changed artifact, runtime or budget is judged against the same
tokens. Prompts are drawn again from ``--samples``/``--seed`` (plus ``--data``); eager latency is the
exported programs' own, labelled so.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from edgeport.errors import UsageError, load_json
from edgeport.pipeline.tasks.text_generation.layout import EXPORTED_DIR, LAYOUT_FILE, Layout
from edgeport.pipeline.tasks.text_generation.plan import MAX_GEN_TOKENS

SIGNATURE_NAME = re.compile(r"prefill_\d+|decode")
# Bounds on a layout.json's numbers: far above any real model (a 128k-slot cache of 8 heads x 128 is 2**27
# elements per tensor), far below what would exhaust memory before the first token.
MAX_LAYOUT_INT = 2**24
MAX_TENSOR_ELEMENTS = 2**30


def is_generative_dir(directory: Path) -> bool:
    return (Path(directory) / EXPORTED_DIR / LAYOUT_FILE).is_file()


def read_layout(directory: Path) -> Layout:
    path = directory / EXPORTED_DIR / LAYOUT_FILE
    try:
        data = load_json(path.read_text(), str(path))
        problem = layout_problem(data) if isinstance(data, dict) else "not a JSON object"
        if problem:
            raise ValueError(problem)
        layout = Layout.from_json(data)
    except (OSError, ValueError, TypeError, RecursionError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from exc
    bad = [n for n in layout.signatures if not SIGNATURE_NAME.fullmatch(n)]
    if bad or "decode" not in layout.signatures:
        raise UsageError(f"{path} does not describe prefill/decode signatures (found {sorted(layout.signatures)})")
    return layout


def _is_int(value, low: int = 0, high: int = MAX_LAYOUT_INT) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def layout_problem(data: dict) -> str | None:
    """What in a layout.json (data from DIR) the loop, the judge and ``generate`` could not use: wrong
    types, or sizes that would allocate without bound (a cache of 10**12 slots). None when it is usable."""
    for key in ("vocab_size", "num_layers", "cache_len"):
        if not _is_int(data.get(key), 1):
            return f"{key} must be a positive integer up to {MAX_LAYOUT_INT}, got {str(data.get(key))[:40]!r}"
    lens = data.get("prefill_lens")
    if not isinstance(lens, list) or not lens or not all(_is_int(n, 1, data["cache_len"]) for n in lens):
        return f"prefill_lens must be a list of lengths 1..cache_len, got {str(lens)[:40]!r}"
    if not _is_int(data.get("gen_tokens"), 1, MAX_GEN_TOKENS):
        return f"gen_tokens must be 1..{MAX_GEN_TOKENS}, got {str(data.get('gen_tokens'))[:40]!r}"
    if data.get("bos_token_id") is not None and not _is_int(data["bos_token_id"]):
        return "bos_token_id must be a token id or null"
    if not isinstance(data.get("eos_token_ids"), list) or not all(_is_int(t) for t in data["eos_token_ids"]):
        return "eos_token_ids must be a list of token ids"
    signatures, cache = data.get("signatures"), data.get("cache")
    if not isinstance(signatures, dict) or not isinstance(cache, list):
        return "signatures must be an object and cache a list"
    if not all(isinstance(sig, dict) and isinstance(sig.get("inputs"), list) for sig in signatures.values()) \
            or not all(_tensor_ok(e) for sig in signatures.values() for e in sig["inputs"]) \
            or not all(_tensor_ok(e) and e.get("kind") in ("key", "value", "length") for e in cache):
        return "each signature's inputs and each cache entry must be {name, shape, dtype} tensors of a bounded size"
    return None


def _tensor_ok(entry) -> bool:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not isinstance(entry.get("dtype"), str):
        return False
    shape = entry.get("shape")
    return isinstance(shape, list) and all(_is_int(d) for d in shape) and math.prod(shape) <= MAX_TENSOR_ELEMENTS


def reference_session(directory: Path, layout: Layout, judge, trust_pickle: bool, namespaces=()):
    from edgeport.pipeline.tasks.text_generation.judge import artifact_latency
    from edgeport.pipeline.tasks.text_generation.loop import greedy
    from edgeport.pipeline.tasks.text_generation.prompts import random_prompts, read_prompts
    from edgeport.pipeline.tasks.text_generation.quality import programs_reference
    from edgeport.pipeline.tasks.text_generation.reference import ProgramRunner
    from edgeport.pipeline.tasks.text_generation.session import GenSession
    from edgeport.pipeline.plan import fixed_threads
    from edgeport.sources.pt2_archive import load_exported_program

    programs = {}
    for name in layout.signatures:
        path = directory / EXPORTED_DIR / f"{name}.pt2"
        if not path.is_file():
            raise UsageError(f"{directory} has no {EXPORTED_DIR}/{name}.pt2: nothing to compare the artifacts against")
        programs[name] = load_exported_program(path, trust_pickle, namespaces)
    runner = ProgramRunner(programs, fixed_threads(judge.threads))
    real, data = read_prompts(judge.data, layout, directory / "tokenizer") if judge.data else ([], None)
    prompts = real + random_prompts(layout, judge.samples, judge.seed)
    reference = [greedy(runner, layout, p, layout.gen_tokens) for p in prompts]
    eager = artifact_latency(runner, layout, prompts[-1])[0] if judge.latency else None
    quality, note = programs_reference(runner, layout, directory, judge.eval_text, judge.eval_tokens)
    return GenSession(layout, programs, {}, prompts, reference, eager, judge, {}, data,
                      {"real": len(real), "random": len(prompts) - len(real)},
                      reference_source=f"the exported programs in {EXPORTED_DIR}/ (torch, greedy)",
                      eager_label="exported programs (torch)", quality=quality, quality_note=note)


def reference_from(directory: Path, judge, reading, progress) -> tuple:
    """(session, program fields for the report): layout.json checked, then the exported programs' greedy run
    (read with ``reading``'s --trust-pickle and --decompositions namespaces)."""
    from edgeport.sources.program_policy import user_namespaces

    layout = read_layout(directory)
    namespaces = user_namespaces(reading.decompositions)
    progress(f"loading {EXPORTED_DIR}/ (reference)")
    return reference_session(directory, layout, judge, reading.trust_pickle, namespaces), {}
