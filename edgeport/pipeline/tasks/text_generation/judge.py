"""Judging a generative artifact: the tokens it generates and the logits it chose them from, against the
reference, plus its speed.

- Tokens: per prompt, how many of the reference's greedy tokens it reproduced before the first divergence.
  ``token_agreement`` = those tokens / all tokens. The first divergence (prompt, step, expected id, got id)
  names where to look; after it the two continue from different contexts, so nothing later is compared.
- Logits: each step up to and including the first divergence (same context on both sides) goes through
  the same metrics and budget keys as any forward output (scaled max error, cosine, SNR), as the row's
  ``parity``: so the summary table, baselines and JUnit read a generative row like any other.
- Verdict: within the logits budget AND ``token_agreement >= token_agreement_min`` (default 1.0 for fp32:
  every token; 0.9 for reduced-precision variants, which may flip a near-tie — they gate on cosine too).
"""

from __future__ import annotations

import numpy as np

from edgeport.pipeline.tasks.text_generation.loop import Generation

TOKEN_AGREEMENT_DEFAULT = {"fp32": 1.0}
# per signature: p50 of >= 10 single calls settles well within this on a decode step of any size that runs
# interactively, and a row times 1 + prefill lengths signatures
TIMING_SECONDS = 0.5
TOKEN_AGREEMENT_REDUCED = 0.9


def generation_budget(budget: dict, variant: str) -> dict:
    """The row's budget with the token agreement default for its variant (a configured value wins)."""
    from edgeport.pipeline.tasks.text_generation.quality import QUALITY_BUDGETS

    out = dict(budget)
    out.setdefault("token_agreement_min", TOKEN_AGREEMENT_DEFAULT.get(variant, TOKEN_AGREEMENT_REDUCED))
    from edgeport.pipeline.tasks.text_generation.checks import DROP_DEFAULT

    for key, value in {"checks_drop_max": DROP_DEFAULT, **QUALITY_BUDGETS.get(variant, {})}.items():
        out.setdefault(key, value)
    if isinstance(out.get("builtin"), dict):
        out["builtin"] = generation_budget(out["builtin"], variant)
    return out


def first_divergence(expected: list[int], got: list[int]) -> int | None:
    for step, (a, b) in enumerate(zip(expected, got)):
        if a != b:
            return step
    return None if len(got) >= len(expected) else len(got)


def compare_generations(reference: list[Generation], got: list[Generation], budget: dict) -> tuple[dict, dict]:
    """(tokens block, parity dict) for one artifact over every prompt."""
    from edgeport.validate.parity import compare, gates

    matched, per_prompt, divergence, refs, outs = [], [], None, [], []
    for index, (ref, out) in enumerate(zip(reference, got)):
        step = first_divergence(ref.tokens, out.tokens)
        matched.append(len(ref.tokens) if step is None else step)
        per_prompt.append(round(matched[-1] / max(1, len(ref.tokens)), 4))
        if step is not None and divergence is None:
            divergence = {"prompt": index, "step": step, "expected": ref.tokens[step],
                          "got": out.tokens[step] if step < len(out.tokens) else None}
        steps = min(len(ref.logits), len(out.logits), len(ref.tokens) if step is None else step + 1)
        refs.append([ref.logits[:steps]])
        outs.append([out.logits[:steps]])
    total = sum(len(r.tokens) for r in reference)
    agreement = sum(matched) / total if total else 0.0
    parity = compare(refs, outs, budget, ["logits"])
    tokens = {"tokens_matched": sum(matched), "tokens_total": total, "token_agreement": round(agreement, 6),
              "agreement_per_prompt": per_prompt, "first_divergence": divergence}
    if gates(budget, "token_agreement_min") and agreement < budget["token_agreement_min"]:
        where = (f"; first divergence: prompt {divergence['prompt']} step {divergence['step']} "
                 f"(expected token {divergence['expected']}, got {divergence['got']})") if divergence else ""
        text = f"token agreement {agreement:.3f} < {budget['token_agreement_min']}{where}"
        parity["passed"] = False
        parity["message"] = "; ".join(m for m in (text, parity.get("message")) if m)
    return tokens, parity


def artifact_latency(runner, layout, prompt: list[int]) -> tuple[dict, dict]:
    """(latency block, decode latency_ms) timing each signature alone on realistic feeds."""
    from edgeport.pipeline.tasks.text_generation.loop import timing_feeds
    from edgeport.pipeline.tasks.text_generation.reference import latency_block
    from edgeport.validate.latency import measure

    feeds = timing_feeds(runner, layout, prompt)
    timed = {name: measure(lambda n=name: runner.run(n, feeds[n]), runner.threads, budget_seconds=TIMING_SECONDS)
             for name in feeds}
    prefill = {name.removeprefix("prefill_"): t["p50"] for name, t in timed.items() if name != "decode"}
    return latency_block(prefill, timed["decode"], runner.threads), timed["decode"]


def kv_cache_bytes(io: dict) -> int | None:
    """Bytes of the key/value tensors decode takes, as the artifact's runtime holds them."""
    inputs = (io.get("decode") or {}).get("inputs") or []
    sizes = [int(np.prod(t["shape"])) * np.dtype(t["dtype"]).itemsize for t in inputs
             if (t.get("role") or t["name"]).startswith(("cache_k_", "cache_v_"))]
    return sum(sizes) if sizes else None


def generation_block(prompts: list[list[int]], new_tokens: int, tokens: dict, parity: dict, latency: dict | None,
                     eager: dict | None, io: dict, rss: dict) -> dict:
    """The row's ``generation`` block (the issue's fields, plus eager's numbers for the ratio)."""
    block = {"prompts": len(prompts), "prompt_tokens": [len(p) for p in prompts], "new_tokens": new_tokens, **tokens,
             "logits_max_rel_err": parity.get("max_rel_err"), "logits_cosine_min": parity.get("cosine_min"),
             "prefill_ms": None, "decode_ms_per_token": None, "tokens_per_s": None,
             "kv_cache_bytes": kv_cache_bytes(io), **rss}
    if latency:
        block.update(prefill_ms=latency["prefill_ms"], decode_ms_per_token=latency["decode_ms_per_token"],
                     tokens_per_s=latency["tokens_per_s"], threads=latency["threads"])
    if eager:
        block["eager"] = {k: eager[k] for k in ("prefill_ms", "decode_ms_per_token", "tokens_per_s")}
        if latency:
            block["vs_eager"] = eager["decode_ms_per_token"] / latency["decode_ms_per_token"]
    return block


def reset_peak_rss() -> int | None:
    """Reset the kernel's peak-RSS mark for this process (Linux ``clear_refs`` 5) and return current RSS,
    so the next :func:`peak_rss` is the peak while one artifact loaded and ran."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return _status_bytes("VmRSS")


def peak_rss() -> int | None:
    value = _status_bytes("VmHWM")
    if value is None:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return value


def _status_bytes(key: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
