"""The generation table every rendering shows for a text-generation run: one line per target x variant
with the tokens it reproduced, where it first diverged, its speed against PyTorch eager (same run, same
threads) and the KV cache it holds. Built from report.json alone, for any target."""

from __future__ import annotations

from edgeport.validate.sections import ReportSection

TITLE = "Text generation (greedy tokens vs the reference; latency vs PyTorch eager with a static cache)"
HEADERS = ("target", "variant", "lowered by", "tokens matched", "agreement", "first divergence", "logits cos min",
           "prefill ms", "decode ms/token", "tokens/s", "vs eager", "KV cache MiB", "peak RSS MiB")


def generation_sections(report: dict) -> list[ReportSection]:
    rows = [cells(r) for r in report.get("targets", []) if r.get("generation")]
    if not rows:
        return []
    block = report.get("generation") or {}
    eager = block.get("eager")
    if eager:
        rows.append([block.get("eager_label") or "PyTorch eager", "fp32", "–", "–", "–", "–", "–", prefill_text(eager["prefill_ms"]),
                     num(eager["decode_ms_per_token"], ".3f"), num(eager["tokens_per_s"], ".1f"), "1.00×", "–", "–"])
    return [ReportSection("generation", TITLE, HEADERS, rows), *quality_sections(report)]


QUALITY_TITLE = "Quality on real text (teacher-forced vs PyTorch fp32, llama.cpp's --kl-divergence numbers)"
QUALITY_HEADERS = ("target", "variant", "tokens", "mean KLD", "p99 KLD", "max KLD", "same top-1", "PPL PyTorch",
                   "PPL artifact", "Δppl", "checks passed")


def quality_sections(report: dict) -> list[ReportSection]:
    rows = [quality_cells(r) for r in report.get("targets", []) if r.get("quality") or r.get("checks")]
    return [ReportSection("quality", QUALITY_TITLE, QUALITY_HEADERS, rows)] if rows else []


def quality_cells(row: dict) -> list[str]:
    q, c = row.get("quality") or {}, row.get("checks")
    checks = f"{c['passed']}/{c['total']} (PyTorch {c['reference_passed']}/{c['total']})" if c else "–"
    return [row["target"], row["variant"], str(q.get("tokens", "–")), num(q.get("kld_mean"), ".3g"), num(q.get("kld_p99"), ".3g"),
            num(q.get("kld_max"), ".3g"), num(100 * q["top1_agreement"] if "top1_agreement" in q else None, ".1f") + ("%" if q else ""),
            num(q.get("ppl_reference"), ".3f"), num(q.get("ppl"), ".3f"), num(q.get("delta_ppl"), "+.4f"), checks]


def cells(row: dict) -> list[str]:
    g = row["generation"]
    div = g.get("first_divergence")
    where = "none" if not div else f"prompt {div['prompt']} step {div['step']}: {div['expected']} → {div['got']}"
    return [row["target"], row["variant"], lowered(row), f"{g['tokens_matched']}/{g['tokens_total']}", num(g.get("token_agreement"), ".3f"),
            where, num(g.get("logits_cosine_min"), ".6f"), prefill_text(g.get("prefill_ms")),
            num(g.get("decode_ms_per_token"), ".3f"), num(g.get("tokens_per_s"), ".1f"),
            f"{g['vs_eager']:.2f}×" if isinstance(g.get("vs_eager"), (int, float)) else "–",
            num(g["kv_cache_bytes"] / 2**20 if g.get("kv_cache_bytes") else None, ".3f"),
            num(g["peak_rss_bytes"] / 2**20 if g.get("peak_rss_bytes") else None, ".0f")]


def lowered(row: dict) -> str:
    """Which path built the artifact (``built_by``) and, where a target chose between paths, why."""
    by, why = row.get("built_by"), row.get("lowering_reason")
    return "–" if not by else f"{by} ({why})" if why else by


def prefill_text(prefill: dict | None) -> str:
    if not prefill:
        return "–"
    return ", ".join(f"{length}: {ms:.3f}" for length, ms in prefill.items())


def num(value, spec: str) -> str:
    return "–" if not isinstance(value, (int, float)) else format(value, spec)
