"""The HTML page's quality plot: KL divergence from PyTorch fp32 per scored token of the eval text, one line
per text-generation row (log scale, inline SVG, no scripts): a quantization that is bad everywhere sits high
along the whole text; one that breaks on some contexts shows spikes where they are."""

from __future__ import annotations

import html
import math

COLORS = ("#47a", "#c63", "#393", "#a3a", "#888", "#b92", "#2aa", "#d44")
FLOOR = 1e-8


def kld_plot(report: dict) -> str:
    lines = [(f"{r['target']} {r['variant']}", r["quality"]["kld_per_token"]) for r in report.get("targets", [])
             if (r.get("quality") or {}).get("kld_per_token")]
    if not lines:
        return ""
    width, height, pad = 720, 220, 40
    logs = [[math.log10(max(k, FLOOR)) for k in values] for _, values in lines]
    low, high = math.floor(min(map(min, logs))), math.ceil(max(map(max, logs)))
    high = high if high > low else low + 1
    longest = max(len(v) for v in logs)
    x = lambda i: pad + (width - 2 * pad) * i / max(1, longest - 1)  # noqa: E731
    y = lambda v: height - pad - (height - 2 * pad) * (v - low) / (high - low)  # noqa: E731
    parts = [f'<text x="2" y="{y(e) + 4:.1f}">1e{e}</text>' for e in range(low, high + 1)]
    for n, ((label, _), values) in enumerate(zip(lines, logs)):
        color = COLORS[n % len(COLORS)]
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1" points="{points}">'
                     f'<title>{html.escape(label)}</title></polyline>')
        parts.append(f'<text x="{width - pad - 150}" y="{14 + 14 * n}" fill="{color}">{html.escape(label)}</text>')
    parts.append(f'<text x="{pad}" y="{height - 8}">scored token of the eval text →</text>')
    return (f'<h2>KL divergence from PyTorch fp32 per token (teacher-forced eval text, log scale)</h2>'
            f'<div id="kld"><svg xmlns="http://www.w3.org/2000/svg" class="kld" width="{width}" height="{height}">'
            f'{"".join(parts)}</svg></div>')
