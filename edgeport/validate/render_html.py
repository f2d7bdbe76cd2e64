"""report.html: one self-contained page (no script, no CDN) with the summary table, target sections, a
latency chart and per-output error histograms, every model-provided string escaped."""

from __future__ import annotations

import html
import math

from edgeport.validate.quantization import search_curves
from edgeport.validate.render_quality import kld_plot
from edgeport.validate.render import (HEADERS, environment_lines, headline, messages, report_sections, samples_line,
                                      summary_rows)

_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}td:nth-child(-n+3),th{text-align:left}
tr.failed{background:#fdd}tr.skipped{background:#eee}tr.ok{background:#efe}.charts{display:flex;flex-wrap:wrap;gap:1em}
figure{margin:0;border:1px solid #ddd;padding:.5em}figcaption{font-size:.85em;font-weight:bold}svg text{font-size:10px}"""


def esc(text) -> str:
    from edgeport.diagnostics import clean

    return html.escape(clean(str(text)))


def table(key: str, headers, rows, classes=None) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr{}>{}</tr>".format(f" class='{esc(c)}'" if c else "", "".join(f"<td>{esc(x)}</td>" for x in row))
                   for row, c in zip(rows, classes or [None] * len(rows)))
    return f"<table id='{esc(key)}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(report: dict) -> str:
    spec = esc(report["model"]["spec"])
    summary = table("summary", HEADERS, summary_rows(report), [r["status"] for r in report["targets"]])
    sections = "".join(f"<h2>{esc(s.title)}</h2>" + table(s.key, s.headers, s.rows) for s in report_sections(report))
    curves = "".join(_search_svg(curve) for curve in search_curves(report))
    notes = "".join(f"<li><b>{esc(label)}</b>: {esc(text)}</li>" for label, text in messages(report))
    facts = "".join(f"<p>{esc(line)}</p>" for line in [samples_line(report), *environment_lines(report)] if line)
    histograms = "".join(_histogram_svg(f"{r['target']} {r['variant']} · {o.get('name', '?')}", o["error_histogram"])
                         for r in report["targets"] for o in (r.get("parity") or {}).get("outputs") or []
                         if o.get("error_histogram"))
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>edgeport report — {spec}</title>
<style>{_STYLE}</style></head>
<body><h1>edgeport report — {spec}</h1>
<p><b>{esc(headline(report))}</b> · edgeport {esc(report['edgeport_version'])}</p>
{summary}{facts}
{sections}
{f'<h2>Fallback search (budget metric vs layers kept float)</h2><div class="charts" id="search">{curves}</div>' if curves else ''}
{kld_plot(report)}
<ul id="notes">{notes}</ul>
<h2>Latency (p50, p90 whisker)</h2><div id="latency">{_latency_svg(report)}</div>
<h2>Error histograms (|artifact − PyTorch| per element, one bar per decade)</h2><div class="charts" id="histograms">{histograms or "<p>no parity results</p>"}</div>
</body></html>
"""


def _latency_svg(report: dict) -> str:
    """Horizontal bars: PyTorch eager first, then every row that was timed."""
    eager = (report.get("reference") or {}).get("latency_ms")
    bars = ([("PyTorch eager", eager, "#888")] if eager else []) + [
        (f"{r['target']} {r['variant']}", r["latency_ms"], "#4a7" if r["status"] == "ok" else "#d55")
        for r in report["targets"] if r.get("latency_ms")]
    if not bars:
        return "<p>latency not measured (--no-latency)</p>"
    top = max(b[1]["p90"] for b in bars) or 1.0
    width, label_w, bar_h = 640, 170, 22
    scale = (width - label_w - 90) / top
    parts = []
    for i, (label, lat, color) in enumerate(bars):
        y = 10 + i * bar_h
        w50, w90 = lat["p50"] * scale, lat["p90"] * scale
        parts.append(f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end">{html.escape(label)}</text>'
                     f'<rect class="bar" x="{label_w}" y="{y + 3}" width="{w50:.1f}" height="{bar_h - 8}" fill="{color}"/>'
                     f'<line x1="{label_w + w50:.1f}" x2="{label_w + w90:.1f}" y1="{y + 11}" y2="{y + 11}" stroke="#333"/>'
                     f'<text x="{label_w + w90 + 4:.1f}" y="{y + 14}">{lat["p50"]:.3f} ms</text>')
    height = 20 + len(bars) * bar_h
    return f'<svg xmlns="http://www.w3.org/2000/svg" class="latency" width="{width}" height="{height}">{"".join(parts)}</svg>'


def _search_svg(curve: dict) -> str:
    """The search curve: the budget's metric against the number of float layers, the threshold dashed,
    passing candidates green; the artifact's own judgement drawn as a ring."""
    width, height, pad = 360, 180, 36
    points = curve["points"]
    values = [v for _, v, _ in points] + ([curve["threshold"]] if curve["threshold"] is not None else [])
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    most = max(n for n, _, _ in points) or 1
    x = lambda n: pad + (width - 2 * pad) * n / most  # noqa: E731
    y = lambda v: height - pad - (height - 2 * pad) * (v - low) / span  # noqa: E731
    parts = [f'<polyline fill="none" stroke="#47a" points="{" ".join(f"{x(n):.1f},{y(v):.1f}" for n, v, _ in points)}"/>']
    if curve["threshold"] is not None:
        t = y(curve["threshold"])
        parts.append(f'<line class="threshold" x1="{pad}" x2="{width - pad}" y1="{t:.1f}" y2="{t:.1f}" '
                     f'stroke="#888" stroke-dasharray="4 3"/><text x="{width - pad + 2}" y="{t + 3:.1f}">budget</text>')
    for n, v, ok in points:
        parts.append(f'<circle class="step" cx="{x(n):.1f}" cy="{y(v):.1f}" r="4" fill="{"#4a7" if ok else "#d55"}">'
                     f'<title>{n} float: {v:.4g}</title></circle>')
    parts += [f'<text x="{x(n) - 3:.1f}" y="{height - pad + 14}">{n}</text>' for n in sorted({n for n, _, _ in points})]
    metric = {"snr_db_min": "min SNR dB", "cosine_min": "min cosine", "kld_mean": "mean KLD"}.get(curve["metric"], curve["metric"])
    parts.append(f'<text x="2" y="{pad - 8}">{html.escape(metric)}: {low:.4g} .. {high:.4g}</text>'
                 f'<text x="{width / 2 - 30:.0f}" y="{height - 6}">float layers</text>')
    return (f'<figure><figcaption>{html.escape(curve["label"])}</figcaption><svg xmlns="http://www.w3.org/2000/svg" '
            f'class="search" width="{width}" height="{height}">{"".join(parts)}</svg></figure>')


def _histogram_svg(title: str, hist: dict) -> str:
    """Bars per decade of |error| (log-count heights), exact zeros first."""
    edges, counts = hist["edges"], hist["counts"]
    labels = ["0"] + [f"<{edges[0]:.0e}"] + [f"{e:.0e}" for e in edges[:-1]] + [f"≥{edges[-1]:.0e}"]
    values = [hist.get("zero", 0)] + list(counts)
    width, height, pad = 360, 140, 20
    bar_w = (width - 2 * pad) / len(values)
    top = math.log10(max(values) + 1) or 1.0
    parts = []
    for i, (label, count) in enumerate(zip(labels, values)):
        h = (height - 45) * math.log10(count + 1) / top
        x = pad + i * bar_w
        parts.append(f'<rect class="bin" x="{x:.1f}" y="{height - 30 - h:.1f}" width="{bar_w - 2:.1f}" height="{h:.1f}" fill="#47a">'
                     f'<title>{html.escape(label)}: {count}</title></rect>')
        if count:
            parts.append(f'<text x="{x:.1f}" y="{height - 33 - h:.1f}">{count}</text>')
        if i % 2 == 0:
            parts.append(f'<text x="{x:.1f}" y="{height - 16}">{html.escape(label)}</text>')
    return (f'<figure><figcaption>{html.escape(title)}</figcaption><svg xmlns="http://www.w3.org/2000/svg" class="histogram" '
            f'width="{width}" height="{height}">{"".join(parts)}</svg></figure>')
