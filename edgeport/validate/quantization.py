"""The report's view of quantized rows' ``quantization`` records (:mod:`edgeport.quantize`): which layers were
kept float, which layers int8 breaks, and the search curve — as tables every rendering shows, and the points
of the curve the HTML report draws. Target-agnostic: it reads only the row's record."""

from __future__ import annotations


def _fmt(value, spec: str) -> str:
    if value is None:
        return "–"
    if isinstance(value, str):
        return value
    return format(value, spec)


def _rows_with(report: dict, key: str) -> list[tuple[str, dict]]:
    return [(f"{r['target']} {r['variant']}", r["quantization"]) for r in report["targets"]
            if (r.get("quantization") or {}).get(key)]


def quantization_sections(report: dict) -> list:
    """Float layers, then the most sensitive layers, then the search steps (tables only when non-empty)."""
    from edgeport.validate.sections import ReportSection

    floats = [[label, layer["name"], layer["op"], layer.get("source") or "–", layer.get("why") or "--fallback float",
               _cost(q)] for label, q in _rows_with(report, "float_layers") for layer in q["float_layers"]]
    sensitive = [[label, layer["name"], layer["op"], layer.get("source") or "–", _fmt(layer["cosine_min"], ".4f"),
                  _fmt(layer["snr_db_min"], ".1f")]
                 for label, q in _rows_with(report, "sensitive_layers") if not _kld(q) for layer in q["sensitive_layers"]]
    steps = [[label, str(s["float_layers"]), _fmt(s["cosine_min"], ".5f"), _fmt(s["snr_db_min"], ".1f"),
              "yes" if s["passed"] else "no", s.get("measured") or "–"]
             for label, q in _rows_with(report, "search") if not _kld(q) and (len(q["search"]) > 1 or q["search"][0]["passed"])
             for s in q["search"]]
    sections = []
    if floats:
        sections.append(ReportSection("float-layers", "Layers kept in float",
                                      ("row", "layer", "op", "source", "why", "vs full int8"), floats))
    if sensitive:
        sections.append(ReportSection("sensitive-layers", "Most int8-sensitive layers (each quantized alone)",
                                      ("row", "layer", "op", "source", "cosine min", "SNR dB"), sensitive))
    if steps:
        sections.append(ReportSection("fallback-search", "Fallback search (float layers → parity)",
                                      ("row", "float layers", "cosine min", "SNR dB", "passed", "measured on"), steps))
    return sections + kld_sections(report)


def _kld(record: dict) -> bool:
    """A text-generation search (:mod:`edgeport.pipeline.tasks.text_generation.fallback`): judged by KLD over
    the eval text, not by cosine/SNR on parity samples."""
    return record.get("metric") == "kld"


def kld_sections(report: dict) -> list:
    """Text generation's sensitive weight groups and search curve, in the quality block's numbers."""
    from edgeport.validate.sections import ReportSection

    sensitive = [[label, g["name"], str(g.get("matmuls", "–")), _fmt(g["kld_mean"], ".4g"), _fmt(g["kld_p99"], ".4g"),
                  _fmt(100 * g["top1_agreement"], ".1f")]
                 for label, q in _rows_with(report, "sensitive_layers") if _kld(q) for g in q["sensitive_layers"]]
    kept = lambda q: "" if q.get("keep", "float") == "float" else f" at {q['keep']}"  # noqa: E731  (--fallback int8)
    steps = [[label, f"{s['float_layers']}{kept(q)}{_for(s)}", _fmt(s["kld_mean"], ".4g"), _fmt(s["kld_p99"], ".4g"),
              _fmt(None if s["top1_agreement"] is None else 100 * s["top1_agreement"], ".1f"),
              "yes" if s["passed"] else "no", s.get("measured") or "–"]
             for label, q in _rows_with(report, "search") if _kld(q) for s in q["search"]]
    sections = []
    if sensitive:
        sections.append(ReportSection("sensitive-groups", "Most quantization-sensitive weight groups (each quantized "
                                      "alone, KLD over the start of the eval text)",
                                      ("row", "group", "matmuls", "mean KLD", "p99 KLD", "same top-1 %"), sensitive))
    if steps:
        sections.append(ReportSection("fallback-search-kld", "Fallback search (float groups → quality on the eval text)",
                                      ("row", "float groups", "mean KLD", "p99 KLD", "same top-1 %", "passed",
                                       "measured on"), steps))
    return sections


def _for(step: dict) -> str:
    """A step whose last group was kept for the task checks (the quality budget was met, checks were lost)."""
    return " (last for the checks)" if step.get("for") == "checks" else ""


def _cost(record: dict) -> str:
    # *_int8: the keys' names before they covered int4 rows (a report.json written then, re-rendered)
    size = record.get("size_vs_full_quantized", record.get("size_vs_full_int8"))
    latency = record.get("latency_vs_full_quantized", record.get("latency_vs_full_int8"))
    parts = ([f"size ×{size:.2f}"] if size else []) + ([f"p50 ×{latency:.2f}"] if latency else [])
    return ", ".join(parts) or "–"


def search_curves(report: dict) -> list[dict]:
    """Per row that searched: the points (float layers, metric, passed) of the budget's metric — SNR dB when
    the budget gates it, else cosine — and the budget's threshold for it."""
    curves = []
    for r in report["targets"]:
        record = r.get("quantization") or {}
        if len(record.get("search") or []) < 2:
            continue
        budget = (r.get("parity") or {}).get("budget") or {}
        metric = "kld_mean" if _kld(record) else \
            "snr_db_min" if "snr_db_min" in budget or "cosine_min" not in budget else "cosine_min"
        points = [(s["float_layers"], s[metric], s["passed"]) for s in record["search"]
                  if isinstance(s.get(metric), (int, float))]
        threshold = budget.get("kld_mean_max" if _kld(record) else metric)
        curves.append({"label": f"{r['target']} {r['variant']}", "metric": metric, "threshold": threshold,
                       "points": points})
    return curves
