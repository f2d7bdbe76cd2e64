"""Text-generation variants an on-device runtime runs from TEXT (a target's ``BundleSupport``, e.g. a bundle an
LLM runtime loads): judged here, by the same rule as every generation row (the reference's greedy tokens),
with the target's bundle module (``impl``) supplying only what is its runtime's own: the tokenizer it reads,
the engine, which prompts it can take as text, and how its streamed pieces map back to ids."""

from __future__ import annotations

import statistics
from pathlib import Path
from types import SimpleNamespace

from edgeport.diagnostics import first_line
from edgeport.pipeline.plan import fixed_threads
from edgeport.pipeline.row import Verdict
from edgeport.pipeline.tasks.text_generation.export import load_causal_lm
from edgeport.pipeline.tasks.text_generation.judge import first_divergence
from edgeport.pipeline.tasks.text_generation.loop import greedy
from edgeport.pipeline.tasks.text_generation.reference import ProgramRunner, generate_reference


def judge(impl, artifact: Path, session, budget: dict) -> Verdict:
    """Greedy tokens of the bundle in its own runtime (``impl``: the target's bundle module) vs PyTorch's on
    the same prompt ids. The runtime runs in a child process (:func:`contained`): a native crash in it (a
    Rust panic that aborts, a segfault) fails this row, not the run."""
    layout = session.layout
    runtime = impl.JUDGED_BY.split(" ")[0]
    try:
        texts, ids, dropped, table, runs = contained(engine_runs, impl.__name__, str(artifact), layout.to_json(),
                                                     session.prompts, fixed_threads(session.judge.threads))
        tokenizer = impl.load_tokenizer(impl.tokenizer_dir(impl.model_dir(layout.to_json()), artifact))
    except ChildCrashed as exc:
        return Verdict("failed", f"bundle crashed {runtime} ({exc}); the run went on without it")
    except Exception as exc:
        return Verdict("failed", f"bundle does not run in {runtime}: {first_line(exc)}")
    if not texts:
        return Verdict("failed", "no parity prompt round-trips through the engine's tokenizer as text")
    counted = [(b.last_prefill_token_count, len(p)) for (_, b), p in zip(runs, ids) if b.last_prefill_token_count != len(p)]
    if counted:
        return Verdict("failed", f"the engine prefilled {counted[0][0]} tokens where the model's tokenizer gives "
                                 f"{counted[0][1]} (start token or tokenizer differ)")
    expected = reference_tokens(layout, session.programs, ids, impl.model_dir(layout.to_json()))
    got = [[table.get(p, -1) for p in pieces] for pieces, _ in runs]
    result = verdict(expected, got, [b for _, b in runs], ids, dropped, session, budget, impl.JUDGED_BY)
    result.details["generation"]["text_sample"] = text_sample(tokenizer, texts, expected, layout.gen_tokens)
    return result


BENCH_FIELDS = ("last_prefill_token_count", "last_prefill_tokens_per_second", "last_decode_tokens_per_second",
                "time_to_first_token_in_second")


def engine_runs(module: str, artifact: str, layout_json: dict, prompts: list, threads: int) -> tuple:
    """In the child: (texts, ids, prompts dropped, piece -> id table, [(pieces, benchmark)]) of the engine."""
    import importlib

    impl, path = importlib.import_module(module), Path(artifact)
    room = layout_json["cache_len"] - layout_json["gen_tokens"]
    tokenizer = impl.load_tokenizer(impl.tokenizer_dir(impl.model_dir(layout_json), path))
    engine = impl.open_engine(path, threads)
    texts, ids, dropped = impl.engine_prompts(engine, tokenizer, prompts, room)
    if not texts:
        return texts, ids, dropped, {}, []
    runs = [impl.run_text(engine, text, layout_json["gen_tokens"]) for text in texts]
    bench = [SimpleNamespace(**{f: getattr(b, f, 0) for f in BENCH_FIELDS}) for _, b in runs]
    return texts, ids, dropped, impl.piece_ids(tokenizer), [(p, b) for (p, _), b in zip(runs, bench)]


class ChildCrashed(RuntimeError):
    """The child process died without an answer (a signal, or an exit from native code)."""


def contained(fn, *args):
    """``fn(*args)`` in a spawned child process: its value, its exception re-raised here (as RuntimeError with
    its first line), or :class:`ChildCrashed` naming how the child died. Unlike a process pool (which waits
    forever for a worker that aborted), the child's death is an answer."""
    import multiprocessing
    import signal

    if multiprocessing.current_process().daemon:  # a daemonic worker may not start children: run it here
        return fn(*args)
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_contained_child, args=(send, fn, args), daemon=False)
    child.start()
    send.close()
    try:
        kind, value = receive.recv()
    except EOFError:
        child.join()
        code = child.exitcode
        how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
        raise ChildCrashed(f"its process died: {how}") from None
    finally:
        receive.close()
    child.join()
    if kind == "error":
        raise RuntimeError(value)
    return value


def _contained_child(send, fn, args) -> None:
    try:
        message = ("ok", fn(*args))
    except BaseException as exc:  # noqa: BLE001 -- every failure is the parent's answer
        message = ("error", first_line(exc))
    send.send(message)
    send.close()


def text_sample(tokenizer, texts: list[str], expected: list[list[int]], new_tokens: int) -> dict:
    """What an app driving the bundle by text checks itself against (manifest.json's ``text_sample``): each
    judged prompt as the text the engine was fed, and PyTorch's greedy tokens as the pieces the engine streams
    (one token's text each; cut at eos, where the engine stops)."""
    return {"new_tokens": new_tokens,
            "prompts": [{"text": text, "pieces": [tokenizer.decode([t], skip_special_tokens=False) for t in ref]}
                        for text, ref in zip(texts, expected)]}


def reference_tokens(layout, programs: dict, prompts: list[list[int]], model: Path) -> list[list[int]]:
    """PyTorch greedy on the engine's prompt ids (the model's generate; the exported programs where the
    model folder is gone, as ``validate`` judges), cut before the first eos (the engine stops there)."""
    if (model / "config.json").is_file():
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


def verdict(expected, got, bench, ids, dropped: int, session, budget: dict, judged_by: str) -> Verdict:
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
    block = generation_block(bench, session, ids, expected, matched, agreement, divergence, dropped, judged_by)
    ok = agreement >= minimum and divergence is None if minimum >= 1.0 else agreement >= minimum
    error = None if ok else (f"parity: engine token agreement {agreement:.3f} < {minimum}; first divergence: "
                             f"prompt {divergence['prompt']} step {divergence['step']} (expected token "
                             f"{divergence['expected']}, got {divergence['got']})")
    decode = [1000.0 / b.last_decode_tokens_per_second for b in bench if b.last_decode_tokens_per_second > 0]
    latency = ({"p50": statistics.median(decode), "p90": max(decode), "runs": len(decode),
                "threads": block["threads"]} if decode else None)
    notes = [f"{dropped} parity prompt(s) left out: their text does not tokenize back to the same ids"] if dropped else []
    return Verdict("ok" if ok else "failed", error, None, latency, None, {"generation": block}, notes)


def generation_block(bench, session, ids, expected, matched, agreement, divergence, dropped, judged_by: str) -> dict:
    def median(field):
        values = [getattr(b, field) for b in bench if getattr(b, field) > 0]
        return round(statistics.median(values), 3) if values else None

    decode_tps = median("last_decode_tokens_per_second")
    block = {"judged_by": judged_by, "prompts": len(ids),
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
