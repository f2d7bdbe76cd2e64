"""The ``tpu_cost`` block as a report section (every report format) and as a standalone page: one HTML file
with no scripts and nothing fetched, two inline SVG plots (tokens/s and $/1M against batch, log axes, one
line per TPU topology and GPU) above the full table and the sources of every figure."""

from __future__ import annotations

import html
import math
from pathlib import Path

from edgeport.validate.sections import ReportSection

TITLE = "Should this model move to TPU? tokens/s and $ per 1M {unit} per generation x topology x batch (ESTIMATES)"
# "GB moved" is what the roofline divides by the bandwidth; "GB compiler" the cost analysis' bytes accessed, shown
# so the two can be compared (edgeport.targets.tpu.cost.traffic_bytes says why the first is used)
HEADERS = ("variant", "hardware", "batch", "fits memory", "peak MiB/device", "step µs", "bound", "GB moved/step",
           "GB compiler", "tokens/s (slice)",
           "tokens/s per chip", "prefill tokens/s", "$/hour", "$/1M", "basis", "best")
FORWARD_HEADERS = tuple(h.replace("tokens/s", "inferences/s") for h in HEADERS)


def headers(block: dict) -> tuple[str, ...]:
    return HEADERS if block["unit"] == "output tokens" else FORWARD_HEADERS
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22")


def cost_sections(row: dict) -> list[ReportSection]:
    block = row.get("tpu_cost")
    if not block:
        return []
    title = TITLE.format(unit=block["unit"])
    return [ReportSection("tpu_cost", title, headers(block), [cells(row["variant"], e) for e in block["rows"]])]


def cells(variant: str, e: dict) -> list[str]:
    from edgeport.validate.render import fmt

    if not e.get("ok"):
        return [variant, e["hardware"], str(e["batch"]), "no compile", *["–"] * 10, e.get("error") or "", ""][:len(HEADERS)]
    fits = "yes" if e["fits"] else f"NO: over by {_gib(e['over_hbm_bytes'])} ({e['peak_bytes'] / e['hbm_bytes']:.1f}x)"
    money = lambda v, f=".3g": "–" if v is None else f"${v:{f}}"  # noqa: E731
    return [variant, e["hardware"], str(e["batch"]), fits, fmt(e["peak_bytes"] / 2**20, ".1f"),
            fmt(e["step_seconds"] * 1e6 if e.get("step_seconds") else None, ".3g"), e["bound"],
            fmt(e.get("bytes_moved", e["bytes_accessed"]) / 1e9, ".3g"), fmt(e["bytes_accessed"] / 1e9, ".3g"),
            fmt(e["tokens_per_s"], ".4g"), fmt(e["tokens_per_s_per_chip"], ".4g"), fmt(e.get("prefill_tokens_per_s"), ".4g"),
            money(e.get("usd_per_hour"), ".2f"), money(e.get("usd_per_million")),
            "measured" if e["estimate"] == "measured" else "roofline estimate", "BEST" if e.get("best") else ""]


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**28 else f"{n / 2**20:.1f} MiB"


def write_page(block: dict, path: Path, label: str) -> None:
    rows = [cells(label, e) for e in block["rows"]]
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers(block))
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    sources = "".join(f"<li><b>{html.escape(g)}</b>: {html.escape(str(c['source']))}</li>"
                      for g, c in block["chips"].items() if c.get("source"))
    sources += "".join(f"<li><b>{html.escape(g)} price</b>: ${p['usd_per_chip_hour']:.2f}/chip-hour, "
                       f"{html.escape(p['source'])}</li>" for g, p in block["prices"].items())
    sources += "".join(f"<li><b>{html.escape(n)}</b>: ${s['usd_per_hour']:.2f}/hour, {html.escape(str(s.get('source')))}</li>"
                       for n, s in block["gpus"].items())
    unit = html.escape(block["unit"])
    plots = _svg(block, "tokens_per_s", f"{unit}/s per slice (or GPU)") + _svg(block, "usd_per_million", f"$ per 1M {unit}")
    path.write_text(f"""<!doctype html><html><head><meta charset="utf-8"><title>TPU cost: {html.escape(label)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1200px}}table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right}}th{{background:#eee}}svg{{margin:1em 1em 0 0}}</style>
</head><body><h1>Should this model move to TPU? ({html.escape(label)})</h1>
<p><b>Estimates, not measurements.</b> {html.escape(block['method'])}</p>{plots}
<table><tr>{head}</tr>{body}</table><h2>Sources</h2><ul>{sources}</ul>
<p>Batch sweep compile time: {block['sweep_compile_seconds']:.1f} s. Ahead-of-time compiled per topology with libtpu on a host without a TPU.</p>
</body></html>
""")


def _svg(block: dict, key: str, title: str, w: int = 560, h: int = 340) -> str:
    """A log-log plot of ``key`` against batch, one line per hardware (points over HBM are hollow)."""
    series: dict[str, list] = {}
    for e in block["rows"]:
        if e.get("ok") and e.get(key):
            series.setdefault(e["hardware"], []).append((e["batch"], e[key], e.get("fits", True)))
    points = [p for s in series.values() for p in s]
    if not points:
        return ""
    xs, ys = [math.log10(p[0]) for p in points], [math.log10(p[1]) for p in points]
    x0, x1, y0, y1 = min(xs), max(xs) or 1.0, min(ys), max(ys)
    x1, y1 = (x1 if x1 > x0 else x0 + 1), (y1 if y1 > y0 else y0 + 1)
    px = lambda x: 60 + (math.log10(x) - x0) / (x1 - x0) * (w - 180)  # noqa: E731
    py = lambda y: h - 40 - (math.log10(y) - y0) / (y1 - y0) * (h - 80)  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" aria-label="{html.escape(title)}">',
             f'<text x="{w / 2 - 60}" y="18" font-size="13">{html.escape(title)} vs batch (log-log)</text>',
             f'<line x1="60" y1="{h - 40}" x2="{w - 120}" y2="{h - 40}" stroke="#333"/><line x1="60" y1="30" x2="60" y2="{h - 40}" stroke="#333"/>']
    for b in sorted({p[0] for p in points}):
        parts.append(f'<text x="{px(b) - 6}" y="{h - 24}" font-size="11">{b}</text>')
    for v in (10 ** y0, 10 ** ((y0 + y1) / 2), 10 ** y1):
        parts.append(f'<text x="2" y="{py(v) + 4}" font-size="10">{v:.3g}</text>')
    for i, (name, pts) in enumerate(series.items()):
        color, pts = COLORS[i % len(COLORS)], sorted(pts)
        line = " ".join(f"{px(b):.1f},{py(v):.1f}" for b, v, _f in pts)
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{line}"/>')
        parts += [f'<circle cx="{px(b):.1f}" cy="{py(v):.1f}" r="3.5" fill="{color if f else "white"}" stroke="{color}"/>'
                  for b, v, f in pts]
        parts.append(f'<text x="{w - 112}" y="{40 + 14 * i}" font-size="11" fill="{color}">{html.escape(name)}</text>')
    return "".join(parts) + "</svg>"
