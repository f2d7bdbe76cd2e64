"""Reports (report.json, report.md, report.html, junit.xml) and manifest.json.

report.json is the contract CI and baselines read (``shared/contracts/report.schema.json``); manifest.json
is the contract the sample apps read (``samples/manifest.schema.json``). Markdown, HTML and JUnit are
renderings of report.json, so ``edgeport report DIR`` can re-render them later from the JSON alone.
"""

from __future__ import annotations

import html
import json
import math
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


def _finite_for_schema(report: dict) -> dict:
    """The schema types the headline parity metrics as numbers: clamp non-finite ones to large finite values."""
    for row in report["targets"]:
        parity = row.get("parity")
        if parity:
            for key, bad in (("max_abs_err", 1e308), ("max_rel_err", 1e308), ("cosine_min", -1.0)):
                if isinstance(parity.get(key), float) and not math.isfinite(parity[key]):
                    parity[key] = bad
    return report


def write_outputs(out_dir: Path, report: dict, manifest: dict | None, junit: Path | None = None) -> dict:
    report = _json_safe(_finite_for_schema(report))
    (out_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
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


def summary_rows(report: dict) -> list[list[str]]:
    """One row per target × variant: the table every rendering (terminal, md, html) shows."""
    eager = (report.get("reference") or {}).get("latency_ms") or {}
    rows = []
    for r in report["targets"]:
        parity, latency = r.get("parity") or {}, r.get("latency_ms") or {}
        speedup = f"{eager['p50'] / latency['p50']:.2f}×" if eager.get("p50") and latency.get("p50") else "–"
        size = f"{r['size_bytes'] / 1024:.1f} KiB" if r.get("size_bytes") else "–"
        rows.append([r["target"], r["variant"], r["status"], size, _fmt(parity.get("max_abs_err")),
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


def render_markdown(report: dict) -> str:
    lines = [f"# edgeport report — `{report['model']['spec']}`", "",
             f"**{'PASSED' if report['passed'] else 'FAILED'}** · edgeport {report['edgeport_version']}"
             f" · params {report['model'].get('params') or '–'}", "",
             "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(row) + " |" for row in summary_rows(report)]
    eager = (report.get("reference") or {}).get("latency_ms")
    if eager:
        lines += ["", f"PyTorch eager: p50 {eager['p50']:.3f} ms, p90 {eager['p90']:.3f} ms ({eager['threads']} threads)"]
    compiles = compile_rows(report)
    if compiles:
        lines += ["", f"## {COMPILE_TITLE}", "", "| " + " | ".join(COMPILE_HEADERS) + " |", "|" + "---|" * len(COMPILE_HEADERS)]
        lines += ["| " + " | ".join(row) + " |" for row in compiles]
    problems = [r for r in report["targets"] if r.get("error") or r.get("notes")]
    if problems:
        lines += ["", "## Notes"]
        for r in problems:
            for text in ([r["error"]] if r.get("error") else []) + list(r.get("notes") or []):
                lines.append(f"- **{r['target']} {r['variant']}**: {text}")
    return "\n".join(lines) + "\n"


def render_html(report: dict) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADERS)
    body = "".join("<tr class='{}'>{}</tr>".format(html.escape(row[2]), "".join(f"<td>{html.escape(c)}</td>" for c in row))
                   for row in summary_rows(report))
    errors = "".join(f"<li><b>{html.escape(r['target'])} {html.escape(r['variant'])}</b>: {html.escape(r['error'])}</li>"
                     for r in report["targets"] if r.get("error"))
    verdict = "PASSED" if report["passed"] else "FAILED"
    compiles = compile_rows(report)
    compile_table = "" if not compiles else (
        f"<h2>{html.escape(COMPILE_TITLE)}</h2><table id='tpu_compile'><thead><tr>"
        + "".join(f"<th>{html.escape(h)}</th>" for h in COMPILE_HEADERS) + "</tr></thead><tbody>"
        + "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in compiles)
        + "</tbody></table>")
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>edgeport report</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px}}
tr.failed{{background:#fdd}}tr.skipped{{background:#eee}}tr.ok{{background:#efe}}</style></head>
<body><h1>edgeport report — {html.escape(report['model']['spec'])}</h1>
<p><b>{verdict}</b> · edgeport {html.escape(report['edgeport_version'])}</p>
<table id="summary"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>
{compile_table}
<ul id="errors">{errors}</ul></body></html>
"""


def render_junit(report: dict) -> str:
    cases = report["targets"]
    suite = ET.Element("testsuite", name="edgeport", tests=str(len(cases)),
                       failures=str(sum(r["status"] == "failed" for r in cases)),
                       skipped=str(sum(r["status"] == "skipped" for r in cases)))
    for r in cases:
        case = ET.SubElement(suite, "testcase", classname=f"edgeport.{r['target']}", name=f"{r['target']}[{r['variant']}]",
                             time=str(r.get("convert_seconds") or 0))
        if r["status"] == "failed":
            ET.SubElement(case, "failure", message=r.get("error") or "failed").text = r.get("error") or ""
        elif r["status"] == "skipped":
            ET.SubElement(case, "skipped", message=r.get("error") or "skipped")
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def build_manifest(spec: str, signature, rows: list[dict]) -> dict:
    """Inputs/outputs of the model and, per artifact, as its runtime sees them (names, dtypes, quantization)."""
    artifacts = [{"target": r["target"], "variant": r["variant"], "path": r["artifact"], "status": r["status"],
                  **(r.get("io") or {})} for r in rows if r.get("artifact")]
    return {
        "schema": "edgeport.manifest/1",
        "edgeport_version": __version__,
        "model": spec,
        "inputs": [i.to_json() for i in signature.inputs],
        "outputs": [o.to_json() for o in signature.outputs],
        "artifacts": artifacts,
    }
