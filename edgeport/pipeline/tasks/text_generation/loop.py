"""The greedy loop every target is judged with and ``edgeport generate`` runs: prefill once, then decode
one token at a time, the cache passed back in as explicit state.

It speaks only to a :class:`~edgeport.targets.signature.SignatureRunner` and the layout, so it is the same
loop for a .tflite, two ONNX graphs, a jax.export program or the exported torch programs:

- a prompt goes into the smallest prefill length that holds it, right-padded; the cache's write slots are
  then set back to the real length (the padded slots are masked out and overwritten before they are read);
- a prompt longer than every prefill length fills the longest one, and its remaining tokens go through
  decode one by one (their predictions are discarded) — a chunked prefill an app can do the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgeport.pipeline.tasks.text_generation.layout import Layout, decode_feeds, prefill_feeds, prefill_name, set_length


@dataclass
class Generation:
    tokens: list[int]
    logits: np.ndarray                 # (steps, vocab) float32: the logits each token was chosen from


def prefill_length_for(layout: Layout, prompt_len: int) -> int:
    """The smallest prefill length that holds the prompt, else the longest (the rest goes through decode)."""
    return next((n for n in layout.prefill_lens if n >= prompt_len), layout.prefill_lens[-1])


def check_fits(layout: Layout, prompt_len: int, new_tokens: int) -> str | None:
    """Why a prompt cannot be generated from (None when it can)."""
    if prompt_len < 1:
        return "the prompt is empty"
    if prompt_len + new_tokens > layout.cache_len:
        return (f"a {prompt_len}-token prompt plus {new_tokens} new tokens needs {prompt_len + new_tokens} cache slots; "
                f"the artifact's cache holds {layout.cache_len}")
    return None


def greedy(runner, layout: Layout, prompt: list[int], new_tokens: int, stop_ids=(), forced=None) -> Generation:
    """``new_tokens`` greedy tokens after ``prompt`` (fewer if one of ``stop_ids`` is generated). ``forced``:
    the tokens to feed instead of the runner's own choices (teacher-forced over another side's answer: the
    logits are then the runner's at each step of that answer)."""
    return interleaved(runner, [greedy_steps(runner, layout, prompt, new_tokens, stop_ids, forced)])[0]


def greedy_steps(runner, layout: Layout, prompt: list[int], new_tokens: int, stop_ids=(), forced=None):
    """:func:`greedy` as the calls it makes: a generator that yields ``(signature, feeds)``, is sent each
    call's outputs and returns the :class:`Generation` (:func:`interleaved` runs several together)."""
    problem = check_fits(layout, len(prompt), new_tokens)
    if problem:
        raise ValueError(problem)
    length = prefill_length_for(layout, len(prompt))
    head = prompt[:length]
    out = yield prefill_name(length), runner_prefill_feeds(runner, layout, length, head)
    last = last_logits(out, len(head))
    cache = set_length(cache_of(out, layout), len(head))
    pos = len(head)
    for token in prompt[length:]:
        last, cache = yield from decode_steps(layout, token, pos, cache)
        pos += 1
    pick = (lambda step, logits: int(np.argmax(logits))) if forced is None else (lambda step, _l: int(forced[step]))
    tokens, logits = [pick(0, last)], [last]
    while len(tokens) < new_tokens and tokens[-1] not in stop_ids:
        last, cache = yield from decode_steps(layout, tokens[-1], pos, cache)
        tokens.append(pick(len(tokens), last))
        logits.append(last)
        pos += 1
    return Generation(tokens, np.stack(logits))


def interleaved(runner, tasks: list) -> list:
    """Generators of calls (:func:`greedy_steps`, :func:`~.quality.teacher_forced_steps`) run together on
    ``runner``; their return values, in order. A call goes to the signature used last while any task waits
    on it, else to a prefill some task waits on (the one most wait on), else to decode: every signature is
    then used once, in one run.

    Why: a runner that keeps one signature's runtime at a time (:class:`~edgeport.targets.signature.PerSignature`,
    above 1 GiB) rebuilds it at every switch, seconds at 1B. A judge's prompts and quality windows, run one
    after another, switched twice each (6 of the 8 rebuilds of ExecuTorch's packed weights in a Llama-3.2-1B
    judge); run together, they switch twice for all. Each task's calls keep their order and tasks share
    nothing (the cache is every call's explicit input and output), so the results are those of running the
    tasks one after another."""
    from collections import Counter

    results, waiting = [None] * len(tasks), {}

    def advance(i: int, outputs) -> None:
        try:
            waiting[i] = tasks[i].send(outputs)
        except StopIteration as done:
            waiting.pop(i, None)
            results[i] = done.value

    for i in range(len(tasks)):
        advance(i, None)
    current = None
    while waiting:
        ready = [i for i, (name, _feeds) in waiting.items() if name == current]
        if not ready:
            counts = Counter(name for name, _feeds in waiting.values())
            current = min(counts, key=lambda name: (name == "decode", -counts[name]))
            continue
        for i in ready:
            advance(i, runner.run(*waiting[i]))
    return results


def runner_prefill_feeds(runner, layout: Layout, length: int, head: list[int]) -> dict:
    """The layout's prefill feeds, plus ``prompt_len`` (the real tokens) for a runner that asks for it
    (``takes_prompt_len``: an artifact whose prefill returns no logits answers the last real token's)."""
    feeds = prefill_feeds(layout, length, head)
    if getattr(runner, "takes_prompt_len", False):
        feeds.setdefault("prompt_len", np.array(len(head), np.int64))
    return feeds


def last_logits(out: dict, real: int) -> np.ndarray:
    """The prompt's last real position's logits: row ``real - 1`` of a prefill's (1, L, V), or the one row
    a prefill answering only the last position returns."""
    logits = np.asarray(out["logits"], np.float32)
    rows = logits.reshape(-1, logits.shape[-1])
    return rows[real - 1] if len(rows) > 1 else rows[0]


def decode_steps(layout: Layout, token: int, pos: int, cache: dict):
    """One decode call (yielded, as :func:`greedy_steps`' calls are): returns (logits, the updated cache)."""
    out = yield "decode", decode_feeds(layout, token, pos, cache)
    return np.asarray(out["logits"], np.float32).reshape(-1), cache_of(out, layout)


def cache_of(outputs: dict, layout: Layout) -> dict:
    return {name: outputs[name] for name in layout.cache_names()}


def timing_feeds(runner, layout: Layout, prompt: list[int]) -> dict[str, dict]:
    """Realistic feeds for timing each signature once on its own: every prefill on a prompt of its length,
    decode at the slot after the prompt with the cache the prefill left."""
    feeds = {}
    for length in layout.prefill_lens:
        ids = (prompt * (length // max(1, len(prompt)) + 1))[:length]
        feeds[prefill_name(length)] = runner_prefill_feeds(runner, layout, length, ids)
    length = prefill_length_for(layout, len(prompt))
    out = runner.run(prefill_name(length), feeds[prefill_name(length)])
    feeds["decode"] = decode_feeds(layout, int(np.argmax(last_logits(out, length))), length, cache_of(out, layout))
    return feeds
