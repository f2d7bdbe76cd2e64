"""The fleet's own report: ``fleet.json`` (schema ``edgeport.fleet/1``), ``fleet.md`` and ``fleet.html``:
one row per model, pass/fail per target, a link to each model's own report. Written atomically (temp file
+ rename) so a reader never sees half a fleet.json."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from edgeport import __version__

SCHEMA = "edgeport.fleet/1"


def build(runs, info: dict, fleet_path: Path) -> dict:
    models = []
    for run in runs:
        report = run.report or {}
        rows = [{k: r.get(k) for k in ("target", "variant", "status", "required", "cache", "error") if k in r}
                for r in report.get("targets", [])]
        entry = {"name": run.model.name, "spec": run.model.opts.source.model,
                 "passed": bool(report.get("passed")) and run.error is None,
                 "report": f"{run.model.name}/report.json" if report else None, "rows": rows}
        if run.error:
            entry["error"] = run.error
        models.append(entry)
    return {"schema": SCHEMA, "edgeport_version": __version__, "fleet": str(fleet_path),
            "passed": all(m["passed"] for m in models), "models": models, "ray": info}


def targets_of(fleet: dict) -> list[str]:
    return list(dict.fromkeys(r["target"] for m in fleet["models"] for r in m["rows"]))


def cell(model: dict, target: str) -> str:
    """``fp32 ok, fp16 failed`` for one model and target; ``–`` when the model has no such row."""
    rows = [r for r in model["rows"] if r["target"] == target]
    return ", ".join(f"{r['variant']} {r['status']}" + ("" if r.get("required", True) else " (optional)")
                     for r in rows) or "–"


def render_md(fleet: dict) -> str:
    from edgeport.validate.render import markdown_cell as md

    targets = targets_of(fleet)
    lines = [f"# edgeport fleet — {'PASSED' if fleet['passed'] else 'FAILED'}", "",
             f"{len(fleet['models'])} models · Ray: {md(str(fleet['ray'].get('address')))} · "
             f"{fleet['ray'].get('seconds', '?')} s", "",
             "| model | passed | " + " | ".join(md(t) for t in targets) + " | report |",
             "|" + "---|" * (len(targets) + 3)]
    for m in fleet["models"]:
        link = f"[report]({md(m['name'])}/report.md)" if m["report"] else "–"
        lines.append(f"| {md(m['name'])} | {'yes' if m['passed'] else 'NO'} | "
                     + " | ".join(md(cell(m, t)) for t in targets) + f" | {link} |")
    errors = [m for m in fleet["models"] if m.get("error")]
    if errors:
        lines += ["", "## Errors", ""] + [f"- **{md(m['name'])}**: {md(m['error'])}" for m in errors]
    return "\n".join(lines) + "\n"


def render_html(fleet: dict) -> str:
    from urllib.parse import quote

    from edgeport.validate.render_html import esc

    targets = targets_of(fleet)
    head = "".join(f"<th>{esc(h)}</th>" for h in ["model", "passed", *targets, "report"])
    body = []
    for m in fleet["models"]:
        cells = "".join(f"<td class='{'bad' if 'failed' in cell(m, t) else 'good'}'>{esc(cell(m, t))}</td>" for t in targets)
        link = f"<a href='{esc(quote(m['name']))}/report.html'>report</a>" if m["report"] else "–"
        error = f"<br><small>{esc(m['error'])}</small>" if m.get("error") else ""
        body.append(f"<tr class='{'ok' if m['passed'] else 'failed'}'><td>{esc(m['name'])}{error}</td>"
                    f"<td>{'yes' if m['passed'] else 'NO'}</td>{cells}<td>{link}</td></tr>")
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>edgeport fleet</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px}}
tr.failed td:first-child{{background:#fdd}}td.bad{{background:#fdd}}td.good{{background:#efe}}</style></head>
<body><h1>edgeport fleet — {'PASSED' if fleet['passed'] else 'FAILED'}</h1>
<p>{len(fleet['models'])} models · Ray: {esc(fleet['ray'].get('address'))} · {esc(fleet['ray'].get('seconds', '?'))} s</p>
<table id="fleet"><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>
</body></html>
"""


def write(out: Path, fleet: dict) -> None:
    for name, text in (("fleet.json", json.dumps(fleet, indent=2, default=str) + "\n"),
                       ("fleet.md", render_md(fleet)), ("fleet.html", render_html(fleet))):
        handle, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=out)
        with os.fdopen(handle, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out / name)
