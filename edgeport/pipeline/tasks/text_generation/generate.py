"""``edgeport generate DIR -t TARGET``: greedy generation with a converted artifact, as an app would run it
(the same loop the judge uses; it stops at an eos id). Bad input is one line and exit 2: a directory
without generative artifacts, a target or variant that was not converted, ids outside the vocabulary, a
text prompt without a tokenizer, a prompt the cache cannot hold."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from edgeport.errors import UsageError


@dataclass
class Generated:
    target: str
    variant: str
    prompt_ids: list[int]
    tokens: list[int]
    stopped_at_eos: bool
    text: str | None = None
    streamed: bool = False            # the text was already shown piece by piece (on_text)


def generate(directory: Path, target: str, variant: str | None, prompt_ids: str | None, prompt: str | None,
             max_new: int, threads: int = 1, on_text=None) -> Generated:
    """``on_text(piece)`` receives each token's text as a bundle runtime streams it (a ``.litertlm``)."""
    from edgeport.pipeline.tasks.text_generation.loop import greedy
    from edgeport.pipeline.tasks.text_generation.prompts import check_prompt, load_tokenizer
    from edgeport.pipeline.tasks.text_generation.directory import is_generative_dir, read_layout
    from edgeport.core.memory import release
    from edgeport.core.proc import redirected

    directory = Path(directory)
    if not is_generative_dir(directory):
        raise UsageError(f"{directory} holds no generative artifacts (convert a causal LM with --task text-generation)")
    layout = read_layout(directory)
    row = pick_row(directory, target, variant)
    if (prompt_ids is None) == (prompt is None):
        raise UsageError("give exactly one of --prompt-ids 1,2,3 or --prompt TEXT")
    if max_new < 1:
        raise UsageError(f"--max-new must be at least 1, got {max_new}")
    tokenizer = load_tokenizer(directory / "tokenizer", "--prompt") if prompt is not None else None
    ids = parse_ids(prompt_ids) if prompt_ids is not None else list(tokenizer(prompt)["input_ids"])
    check_prompt(ids, layout, "prompt", max_new)
    bundle = bundle_of(row)
    if bundle is not None:
        return generate_bundle(directory, row, bundle, ids, prompt, max_new, threads, on_text, layout)
    with redirected():  # runtimes' native chatter (XNNPACK's "Created ... delegate") is not generate's output
        runner = load_runner(directory, row, threads)
        out = greedy(runner, layout, ids, max_new, stop_ids=tuple(layout.eos_token_ids))
        del runner   # a runtime prints as it goes (LiteRT's CompiledModel: "DestroyAccelerator"): still captured
        release()
    stopped = bool(out.tokens) and out.tokens[-1] in layout.eos_token_ids
    if tokenizer is None and (directory / "tokenizer").is_dir():
        tokenizer = load_tokenizer(directory / "tokenizer", "decoding")
    text = tokenizer.decode(out.tokens, skip_special_tokens=True) if tokenizer is not None else None
    return Generated(row["target"], row["variant"], ids, out.tokens, stopped, text)


def pick_row(directory: Path, target: str, variant: str | None) -> dict:
    """The report row of ``target`` (and ``variant``; default: its first converted one) with an artifact."""
    from edgeport.validate.report import read_report_dir

    rows = [r for r in read_report_dir(directory)["targets"] if r.get("target") == target and r.get("artifact")]
    if not rows:
        raise UsageError(f"{directory} has no {target!r} artifact")
    if variant is None:  # an app-ready bundle (a .litertlm) when the conversion wrote one
        return next((r for r in rows if bundle_of(r) is not None), rows[0])
    row = next((r for r in rows if r.get("variant") == variant), None)
    if row is None:
        raise UsageError(f"{directory} has no {target} {variant!r} artifact; it has: {', '.join(r['variant'] for r in rows)}")
    return row


def load_runner(directory: Path, row: dict, threads: int):
    from edgeport.pipeline.row import skip_reason
    from edgeport.targets.registry import get_target, target_names
    from edgeport.validate.report import artifact_in

    if row["target"] not in target_names() or get_target(row["target"]).generation() is None:
        raise UsageError(f"target {row['target']!r} has no text-generation support in this edgeport")
    target = get_target(row["target"])
    skipped = skip_reason(target)  # the rows' skip rule; here there is nothing else to do, so exit 2
    if skipped:
        raise UsageError(f"{target.name} is {skipped}")
    path = artifact_in(directory, row["artifact"])
    if path is None or not path.exists():
        raise UsageError(f"artifact missing: {row['artifact']}")
    if bundle_of(row) is not None:
        return None  # its own runtime loads it (generate_bundle)
    return target.generation().load(path, threads)


def bundle_of(row: dict):
    """The target's BundleSupport for the row's variant (None: edgeport's prefill/decode loop runs it)."""
    from edgeport.targets.registry import get_target, target_names

    if row.get("target") not in target_names():
        return None
    support = get_target(row["target"]).generation()
    return support.bundle(row.get("variant")) if support else None


def generate_bundle(directory: Path, row: dict, bundle, ids: list[int], prompt: str | None, max_new: int,
                    threads: int, on_text, layout) -> Generated:
    """The bundle through its own runtime, which takes text: --prompt-ids are decoded with DIR's tokenizer.
    The runtime splits a prompt longer than the largest prefill into several prefill calls; the cache bound
    was checked by the caller."""
    from edgeport.core.memory import release
    from edgeport.pipeline.tasks.text_generation.prompts import load_tokenizer
    from edgeport.core.proc import redirected

    tokenizer = load_tokenizer(directory / "tokenizer", "a bundle (it takes text)")
    text = prompt if prompt is not None else tokenizer.decode(ids, skip_special_tokens=True)
    impl, table = bundle.impl(), None
    impl.check_runtime()
    with redirected():   # the same exit-2 checks (target installed, artifact present); the runner goes at once
        load_runner(directory, row, threads)
        release()
    from edgeport.validate.report import artifact_in

    pieces = []
    with redirected(directory / "edgeport.log"):  # the runtime's native logs are not generate's output
        engine = impl.open_engine(artifact_in(directory, row["artifact"]), threads)
        for piece in impl.stream(engine, text, max_new):
            pieces.append(piece)
            if on_text:
                on_text(piece)
        table = impl.piece_ids(tokenizer)
    tokens = [table.get(p, -1) for p in pieces]
    stopped = len(tokens) < max_new
    return Generated(row["target"], row["variant"], ids, tokens, stopped, "".join(pieces), bool(on_text and pieces))


def parse_ids(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        raise UsageError(f"--prompt-ids {text!r}: expected comma-separated token ids, e.g. 1,2,3") from None
    if not ids:
        raise UsageError("--prompt-ids is empty")
    return ids


def as_json(result: Generated) -> str:
    return json.dumps({"target": result.target, "variant": result.variant, "prompt_ids": result.prompt_ids,
                       "tokens": result.tokens, "stopped_at_eos": result.stopped_at_eos, "text": result.text})
