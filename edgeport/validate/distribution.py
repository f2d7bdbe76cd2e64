"""Next-token distributions of an artifact against the reference's, teacher-forced over the same text: the
yardstick llama.cpp's ``llama-perplexity --kl-divergence`` gives quantized models, with its definitions:

- KLD per token: ``sum_v p_ref(v) * (log p_ref(v) - log p_art(v))`` over the vocabulary (softmax of each side's
  logits, in float64); reported as the mean, the median, the 99th percentile and the maximum over the tokens.
- top-1 agreement ("same top p"): share of tokens where both sides' most likely next token is the same.
- perplexity of each side: ``exp(mean(-log p(actual next token)))``; ``delta_ppl`` = artifact's - reference's,
  ``ppl_ratio`` = artifact's / reference's.

Free-running greedy agreement mixes "the model got worse" with "one near-tie flipped and the rest diverged";
teacher forcing feeds both the same context at every step, so each token's numbers stand on their own.
"""

from __future__ import annotations

import numpy as np

PER_TOKEN_DIGITS = 6


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = np.asarray(logits, np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def token_kld(ref_logits: np.ndarray, got_logits: np.ndarray) -> np.ndarray:
    """KL(reference || artifact) per row of (tokens, vocab) logits."""
    ref, got = log_softmax(ref_logits), log_softmax(got_logits)
    return np.maximum((np.exp(ref) * (ref - got)).sum(axis=-1), 0.0)


def distribution_metrics(ref_logits: np.ndarray, got_logits: np.ndarray, targets: np.ndarray) -> dict:
    """The quality block's numbers for (tokens, vocab) logits of both sides and the text's actual next tokens."""
    ref, got = log_softmax(ref_logits), log_softmax(got_logits)
    kld = np.maximum((np.exp(ref) * (ref - got)).sum(axis=-1), 0.0)
    rows = np.arange(len(targets))
    ppl_ref = float(np.exp(-ref[rows, targets].mean()))
    ppl = float(np.exp(-got[rows, targets].mean())) if np.all(np.isfinite(got)) else float("inf")
    return {"tokens": int(len(targets)), "kld_mean": float(kld.mean()), "kld_median": float(np.median(kld)),
            "kld_p99": float(np.percentile(kld, 99)), "kld_max": float(kld.max()),
            "top1_agreement": float(np.mean(ref.argmax(-1) == got.argmax(-1))),
            "ppl_reference": ppl_ref, "ppl": ppl, "delta_ppl": ppl - ppl_ref, "ppl_ratio": ppl / ppl_ref,
            "kld_per_token": [float(f"{k:.{PER_TOKEN_DIGITS}g}") for k in kld]}
