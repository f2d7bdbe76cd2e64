"""The tiny LLM families on every generative target, ExecuTorch beside the others, in one run per family.

    python bench/families.py [--families llama,qwen2,...] [--targets executorch,litert,onnx,tpu] [--timeout 1200]

Per family: a random-init causal LM built from its config (tests/tiny_lm.py: 2 layers, hidden 64, vocab 256;
nothing downloads), ONE ``edgeport convert hf:DIR --task text-generation`` child for all the targets (so eager
and every artifact are timed in the same process, same thread count), its exit code and report read back.
Per row: converted, token agreement with transformers' ``generate`` (the judge), the first divergence, decode
ms/token and its ratio to eager's decode (>1 = faster than eager), and the row's error when it failed.
Results go to bench/families.json and bench/FAMILIES.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "families.json"
FAMILIES = ("llama", "qwen2", "gpt2", "gemma", "gemma2", "gemma3", "mixtral", "deepseek_v2", "mamba")
GEN_ARGS = ("--prefill-len", "8", "--cache-len", "32", "--gen-tokens", "5", "--samples", "3",
            "--tpu-topology", "v5e:1x1", "--threads", "1")


def run_family(family: str, targets: list[str], timeout: float, work: Path) -> dict:
    sys.path[:0] = [str(HERE), str(ROOT / "tests")]
    import tiny_lm
    from coverage import run_child, scrub_paths

    model_dir = tiny_lm.save(tiny_lm.build(family), work / family, tokenizer=True)
    out = work / f"{family}-out"
    argv = [sys.executable, "-m", "edgeport", "convert", f"hf:{model_dir}", "--task", "text-generation",
            *[a for t in targets for a in ("-t", t)], *GEN_ARGS, "--out", str(out), "--force"]
    result = run_child(argv, timeout, ROOT)
    record = {"family": family, "rc": result["rc"], "wall_seconds": result["seconds"], "rss_mb": result["rss_mb"]}
    report_path = out / "report.json"
    if result["timed_out"] or not report_path.exists():
        last = (result["stderr"].strip().splitlines() or [""])[-1]
        return {**record, "status": "timeout" if result["timed_out"] else "no report",
                "error": scrub_paths(last[:300]), "rows": {}}
    report = json.loads(report_path.read_text())
    eager = ((report.get("generation") or {}).get("eager") or {}).get("decode_ms_per_token")
    record.update(status="ran", eager_decode_ms=eager, rows={})
    for row in report["targets"]:
        if row.get("variant") != "fp32":
            continue
        g = row.get("generation") or {}
        decode = g.get("decode_ms_per_token")
        record["rows"][row["target"]] = {
            "status": row["status"], "token_agreement": g.get("token_agreement"),
            "first_divergence": g.get("first_divergence"), "logits_max_rel_err": g.get("logits_max_rel_err"),
            "decode_ms": decode, "vs_eager": round(eager / decode, 2) if eager and decode else None,
            "rewrites": row.get("rewrites") or [], "error": scrub_paths((row.get("error") or "")[:300]) or None}
    return record


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--targets", default="executorch,litert,onnx,tpu")
    parser.add_argument("--timeout", type=float, default=1200)
    ns = parser.parse_args()
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    targets = ns.targets.split(",")
    with tempfile.TemporaryDirectory(prefix="edgeport-families-") as tmp:
        for family in ns.families.split(","):
            results[family] = run_family(family, targets, ns.timeout, Path(tmp))
            rows = results[family]["rows"]
            print(f"{family:12s} {results[family]['status']:8s} " + " ".join(
                f"{t}={r['status']}/{r['token_agreement']}" for t, r in rows.items()), flush=True)
            RESULTS.write_text(json.dumps(results, indent=1, default=str))
    write_markdown(results, targets)


def _cell(row: dict | None) -> str:
    if not row:
        return "—"
    if row["status"] != "ok":
        return f"{row['status']}"
    exact = "exact" if row["token_agreement"] == 1.0 else f"agree {row['token_agreement']}"
    ms = f", {row['decode_ms']:.3f} ms" if row.get("decode_ms") else ""
    ratio = f", {row['vs_eager']:.1f}×" if row.get("vs_eager") else ""
    return f"{exact}{ms}{ratio}"


def write_markdown(results: dict, targets: list[str]) -> None:
    lines = ["# LLM families on every generative target (bench/families.py)", "",
             f"`python bench/families.py` — tiny random-init models from tests/tiny_lm.py (2 layers, hidden 64, vocab "
             f"256), one `edgeport convert hf:DIR --task text-generation` per family for all targets "
             f"({' '.join(GEN_ARGS)}), so eager and every artifact are timed in the same process. Cell: token "
             "agreement with transformers' generate, the artifact's decode ms/token, then eager decode ms/token ÷ the "
             "artifact's (>1× = faster than eager). 2 shared cores with other jobs running: ratios are noisy.", "",
             "| family | eager decode ms | " + " | ".join(targets) + " |", "|---|---|" + "---|" * len(targets)]
    for family, r in results.items():
        eager = f"{r['eager_decode_ms']:.3f}" if r.get("eager_decode_ms") else r.get("status", "—")
        lines.append(f"| {family} | {eager} | " + " | ".join(_cell(r["rows"].get(t)) for t in targets) + " |")
    lines += ["", "Errors:", ""]
    for family, r in results.items():
        if r.get("error"):
            lines.append(f"- {family}: `{r['error']}`")
        for target, row in r["rows"].items():
            if row.get("error"):
                lines.append(f"- {family} {target}: `{row['error']}`")
    lines += [""] + [f"- {note}" for note in NOTES]
    (HERE / "FAMILIES.md").write_text("\n".join(lines) + "\n")


NOTES: list[str] = [  # what the numbers do not say by themselves (read from the run above)
    "Run 2026-12-01 on 2 cores shared with five other jobs (load average 12-15); one family took ~10 minutes for "
    "the four targets, so the run covers the families listed (gemma3, deepseek_v2 and mamba are in "
    "FAMILIES but did not finish in the time).",
    "Every listed family is token-exact on ExecuTorch, like on the other three targets; ExecuTorch needed no rewrite "
    "(LiteRT needs expand_before_transpose for the grouped kv heads).",
    "Eager decode here is transformers' generate step on a 2-layer, 64-wide model: ~20 ms/token of Python overhead, "
    "so every artifact is tens of times faster; compare the targets by their decode ms instead. ExecuTorch's decode "
    "is the slowest of the four on these tiny models (0.42-0.84 ms/token against LiteRT's 0.09-0.29, ONNX's "
    "0.16-0.54, XLA-CPU's 0.26-0.61); not profiled: at this size per-call overhead (method call, KV-cache write-back) "
    "rather than FLOPs is the likely cause; bench/GENERATION.md measures a 16M-parameter Llama.",
]


if __name__ == "__main__":
    main()
