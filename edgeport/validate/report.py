"""Reports (report.json, report.md, report.html, junit.xml) and manifest.json.

report.json is the contract CI and baselines read (``shared/contracts/report.schema.json``); manifest.json
is the contract the sample apps read (``samples/manifest.schema.json``). Markdown, HTML and JUnit are
renderings of report.json, so ``edgeport report DIR`` can re-render them later from the JSON alone.
"""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path
from xml.etree import ElementTree as ET

from edgeport import __version__


def _json_safe(value):
    """JSON has no Infinity/NaN: non-finite metrics become strings a reader can still see."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


# Text in a report comes partly from the model and its libraries (error messages, notes, output names), so each
# rendering escapes it for its own format: nothing a model prints may become markup, a terminal control
# sequence or a malformed document.
_ANSI = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|[@-Z\\-_])")  # CSI, OSC, 2-byte escapes
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ufffe\uffff\ud800-\udfff]")


def _visible(text) -> str:
    """``text`` without ANSI escape sequences (colour codes are noise in a report), and every other control
    character (C0/C1, bidi overrides, what XML 1.0 forbids) shown as ``\\xNN``/``\\uNNNN`` instead of acting."""
    cleaned = _ANSI.sub("", str(text))
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", cleaned)


def printable(text, markup: bool = True) -> str:
    """Text from a report made safe for the terminal: no escape sequences or control characters and, for
    rich output (``markup``), no rich markup (``[red]`` prints as written)."""
    cleaned = _visible(text)
    if not markup:
        return cleaned
    from rich.markup import escape

    return escape(cleaned)


def _md(text) -> str:
    """Text for a Markdown table cell or list item: no raw HTML (``<``, ``>``, ``&`` as entities), no ``|``
    that would split the row, one line."""
    cleaned = _visible(text).replace("\r\n", " ").replace("\n", " ").replace("\r", " ").replace("\t", " ")
    return html.escape(cleaned, quote=False).replace("|", "\\|")


def _md_code(text) -> str:
    """An inline code span that holds ``text`` literally, whatever backticks it contains (CommonMark: a fence
    longer than any backtick run inside, padded with spaces)."""
    cleaned = _visible(text).replace("\n", " ")
    fence = "`" * (max((len(run) for run in re.findall("`+", cleaned)), default=0) + 1)
    return f"{fence} {cleaned} {fence}" if "`" in cleaned else f"`{cleaned}`"


def _finite_for_schema(report: dict) -> dict:
    """The schema types the headline parity metrics as numbers: clamp non-finite ones to large finite values."""
    for row in report["targets"]:
        parity = row.get("parity")
        if parity:
            for key, bad in (("max_abs_err", 1e308), ("max_rel_err", 1e308), ("cosine_min", -1.0)):
                if isinstance(parity.get(key), float) and not math.isfinite(parity[key]):
                    parity[key] = bad
    return report


def write_json(path: Path, report: dict) -> dict:
    report = _json_safe(_finite_for_schema(report))
    path.write_text(json.dumps(report, indent=2) + "\n")
    return report


def write_outputs(out_dir: Path, report: dict, manifest: dict | None, junit: Path | None = None) -> dict:
    report = write_json(out_dir / "report.json", report)
    (out_dir / "report.md").write_text(render_markdown(report))
    (out_dir / "report.html").write_text(render_html(report))
    if manifest is not None:
        (out_dir / "manifest.json").write_text(json.dumps(_json_safe(manifest), indent=2) + "\n")
    if junit is not None:
        target = junit if junit.is_absolute() else out_dir / junit
        target.write_text(render_junit(report))
    return report


def _fmt(value, spec: str = ".3g") -> str:
    if value is None:
        return "–"
    if isinstance(value, str):
        return value
    return format(value, spec)


def verdict(report: dict) -> bool:
    """The gate: every required row ok (optional rows may fail) and no regression against a baseline."""
    rows = report["targets"]
    rows_ok = bool(rows) and all(r["status"] == "ok" for r in rows if r.get("required", True))
    return rows_ok and not (report.get("baseline") or {}).get("regressions")


def status_text(row: dict) -> str:
    return row["status"] + (" (optional)" if row.get("required") is False else "")


def summary_rows(report: dict) -> list[list[str]]:
    """One row per target × variant: the table every rendering (terminal, md, html) shows."""
    eager = (report.get("reference") or {}).get("latency_ms") or {}
    rows = []
    for r in report["targets"]:
        parity, latency = r.get("parity") or {}, r.get("latency_ms") or {}
        speedup = f"{eager['p50'] / latency['p50']:.2f}×" if eager.get("p50") and latency.get("p50") else "–"
        size = f"{r['size_bytes'] / 1024:.1f} KiB" if r.get("size_bytes") else "–"
        rows.append([r["target"], r["variant"], status_text(r), size, _fmt(parity.get("max_abs_err")),
                     _fmt(parity.get("max_rel_err")), _fmt(parity.get("cosine_min"), ".6f"),
                     _fmt(latency.get("p50"), ".3f"), _fmt(latency.get("p90"), ".3f"), speedup])
    return rows


HEADERS = ["target", "variant", "status", "size", "max abs err", "max rel err", "cosine min", "p50 ms", "p90 ms", "vs eager"]


COMPILE_HEADERS = ["target", "variant", "topology", "compiled", "sharding", "peak MiB/device", "fits HBM", "GFLOP/device",
                   "est. µs (roofline)", "est. µs (compiler)"]
COMPILE_TITLE = "TPU ahead-of-time compiles (memory and FLOPs from the compiler; latencies are ESTIMATES, not measured)"


def compile_rows(report: dict) -> list[list[str]]:
    """One row per (target, variant, topology) of ``tpu_compile``: what every rendering shows for it."""
    rows = []
    for r in report["targets"]:
        for c in r.get("tpu_compile") or []:
            us = lambda v: _fmt(v * 1e6 if isinstance(v, (int, float)) else None, ".3g")  # noqa: E731
            rows.append([r["target"], r["variant"], c["topology"], "yes" if c["ok"] else f"no: {c.get('error') or ''}"[:120],
                         c.get("sharding") or "–", _fmt(c["peak_bytes"] / 2**20 if c.get("peak_bytes") else None, ".2f"),
                         {True: "yes", False: "NO"}.get(c.get("fits_hbm"), "–"),
                         _fmt(c["flops"] / 1e9 if c.get("flops") is not None else None, ".3g"),
                         us(c.get("est_seconds")), us(c.get("compiler_est_seconds"))])
    return rows


def _headline(report: dict) -> str:
    verdict_text = "PASSED" if report["passed"] else "FAILED"
    baseline = report.get("baseline")
    if baseline:
        verdict_text += f" · {baseline['regressions']} regression(s) vs baseline {baseline['source']}"
    return verdict_text


def _samples_line(report: dict) -> str | None:
    """How many parity samples came from where (the first judged row carries the counts)."""
    origin = next(((r.get("parity") or {}).get("sample_origin") for r in report["targets"]
                   if (r.get("parity") or {}).get("sample_origin")), None)
    if not origin:
        return None
    data = report.get("data") or {}
    real = f"{origin.get('real', 0)} real" + (f" ({data['kind']}: {data['source']})" if data else "")
    return f"Parity samples: {origin.get('example', 0)} example, {origin.get('random', 0)} seeded random, {real}"


def _messages(report: dict) -> list[tuple[str, str]]:
    """(row label, text) for every error, regression and note: what a reader must see below the table."""
    out = []
    for r in report["targets"]:
        label = f"{r['target']} {r['variant']}" + (" (optional: does not fail the run)" if r.get("required") is False and r["status"] != "ok" else "")
        out += [(label, r["error"])] if r.get("error") else []
        out += [(label, f"REGRESSION: {text}") for text in r.get("regressions") or []]
        out += [(label, text) for text in r.get("notes") or []]
    return out


def render_markdown(report: dict) -> str:
    lines = [f"# edgeport report — {_md_code(report['model']['spec'])}", "",
             f"**{_md(_headline(report))}** · edgeport {_md(report['edgeport_version'])}"
             f" · params {report['model'].get('params') or '–'}", "",
             "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(_md(c) for c in row) + " |" for row in summary_rows(report)]
    eager = (report.get("reference") or {}).get("latency_ms")
    if eager:
        lines += ["", f"PyTorch eager: p50 {eager['p50']:.3f} ms, p90 {eager['p90']:.3f} ms ({eager['threads']} threads)"]
    rewritten = [r for r in report["targets"] if r.get("rewrites")]
    if rewritten:
        lines += ["", "## Rewrites (the program was changed before conversion)"]
        lines += [f"- **{_md(r['target'])} {_md(r['variant'])}**: {_md(', '.join(r['rewrites']))}" for r in rewritten]
    compiles = compile_rows(report)
    if compiles:
        lines += ["", f"## {COMPILE_TITLE}", "", "| " + " | ".join(COMPILE_HEADERS) + " |", "|" + "---|" * len(COMPILE_HEADERS)]
        lines += ["| " + " | ".join(_md(c) for c in row) + " |" for row in compiles]
    if _samples_line(report):
        lines += ["", _md(_samples_line(report))]
    if _messages(report):
        lines += ["", "## Notes"] + [f"- **{_md(label)}**: {_md(text)}" for label, text in _messages(report)]
    return "\n".join(lines) + "\n"


_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}td:nth-child(-n+3),th{text-align:left}
tr.failed{background:#fdd}tr.skipped{background:#eee}tr.ok{background:#efe}.charts{display:flex;flex-wrap:wrap;gap:1em}
figure{margin:0;border:1px solid #ddd;padding:.5em}figcaption{font-size:.85em;font-weight:bold}svg text{font-size:10px}"""


def render_html(report: dict) -> str:
    """One self-contained page (no scripts, no CDN): table, latency bar chart, per-output error histograms."""
    esc = lambda text: html.escape(_visible(text))  # noqa: E731
    head = "".join(f"<th>{esc(h)}</th>" for h in HEADERS)
    body = "".join("<tr class='{}'>{}</tr>".format(esc(r["status"]), "".join(f"<td>{esc(c)}</td>" for c in row))
                   for r, row in zip(report["targets"], summary_rows(report)))
    notes = "".join(f"<li><b>{esc(label)}</b>: {esc(str(text))}</li>" for label, text in _messages(report))
    histograms = "".join(_histogram_svg(f"{r['target']} {r['variant']} · {o.get('name', '?')}", o["error_histogram"])
                         for r in report["targets"] for o in (r.get("parity") or {}).get("outputs") or []
                         if o.get("error_histogram"))
    samples = f"<p>{esc(_samples_line(report))}</p>" if _samples_line(report) else ""
    compiles = compile_rows(report)
    compile_table = "" if not compiles else (
        f"<h2>{esc(COMPILE_TITLE)}</h2><table id='tpu_compile'><thead><tr>"
        + "".join(f"<th>{esc(h)}</th>" for h in COMPILE_HEADERS) + "</tr></thead><tbody>"
        + "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in compiles)
        + "</tbody></table>")
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>edgeport report — {esc(report['model']['spec'])}</title>
<style>{_STYLE}</style></head>
<body><h1>edgeport report — {esc(report['model']['spec'])}</h1>
<p><b>{esc(_headline(report))}</b> · edgeport {esc(report['edgeport_version'])}</p>
<table id="summary"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{samples}
{compile_table}
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
        parts.append(f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end">{html.escape(_visible(label))}</text>'
                     f'<rect class="bar" x="{label_w}" y="{y + 3}" width="{w50:.1f}" height="{bar_h - 8}" fill="{color}"/>'
                     f'<line x1="{label_w + w50:.1f}" x2="{label_w + w90:.1f}" y1="{y + 11}" y2="{y + 11}" stroke="#333"/>'
                     f'<text x="{label_w + w90 + 4:.1f}" y="{y + 14}">{lat["p50"]:.3f} ms</text>')
    height = 20 + len(bars) * bar_h
    return f'<svg xmlns="http://www.w3.org/2000/svg" class="latency" width="{width}" height="{height}">{"".join(parts)}</svg>'


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
    return (f'<figure><figcaption>{html.escape(_visible(title))}</figcaption><svg xmlns="http://www.w3.org/2000/svg" class="histogram" '
            f'width="{width}" height="{height}">{"".join(parts)}</svg></figure>')


def render_junit(report: dict) -> str:
    """One testcase per target × variant, mirroring the exit code: a required row that is not ok (failed, or
    skipped for a missing dependency) or regressed is a <failure> carrying the error (the parity message for
    parity failures) and regressions; an optional row that did not pass is <skipped> saying so, because it
    must not turn CI red."""
    cases = report["targets"]
    failing = [r for r in cases if r.get("required", True) and (r["status"] != "ok" or r.get("regressions"))]
    optional_bad = [r for r in cases if r.get("required") is False and (r["status"] != "ok" or r.get("regressions"))]
    suite = ET.Element("testsuite", name="edgeport", tests=str(len(cases)), failures=str(len(failing)),
                       skipped=str(len(optional_bad)))
    for r in cases:  # every text through _visible: XML 1.0 cannot hold most control characters, even escaped
        case = ET.SubElement(suite, "testcase", classname=_visible(f"edgeport.{r['target']}"),
                             name=_visible(f"{r['target']}[{r['variant']}]"), time=str(r.get("convert_seconds") or 0))
        problems = ([r["error"]] if r["status"] != "ok" and r.get("error") else []) + \
                   [f"regression: {t}" for t in r.get("regressions") or []]
        if any(r is f for f in failing):
            text = _visible("; ".join(problems) or r["status"])
            ET.SubElement(case, "failure", message=text).text = text
        elif problems:
            ET.SubElement(case, "skipped", message=_visible("optional row did not pass (does not gate): " + "; ".join(problems)))
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def build_manifest(spec: str, signature, rows: list[dict]) -> dict:
    """Inputs/outputs of the model and, per artifact, as its runtime sees them (names, dtypes, quantization)."""
    artifacts = [{"target": r["target"], "variant": r["variant"], "path": r["artifact"], "status": r["status"],
                  **(r.get("io") or {}), "parity_sample": r.get("parity_sample")} for r in rows if r.get("artifact")]
    return {
        "schema": "edgeport.manifest/1",
        "edgeport_version": __version__,
        "model": spec,
        "inputs": [i.to_json() for i in signature.inputs],
        "outputs": [o.to_json() for o in signature.outputs],
        "artifacts": artifacts,
    }
