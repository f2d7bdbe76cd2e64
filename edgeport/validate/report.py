"""Report assembly: report.json (the contract CI and baselines read, ``shared/contracts/report.schema.json``),
its verdict, manifest.json (the contract sample apps read, ``samples/manifest.schema.json``) and writing
them with their renderings (:mod:`edgeport.validate.render`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from edgeport import __version__
from edgeport.core.replace import write_replacing
from edgeport.errors import UsageError

SCHEMA = "edgeport.report/1"
REPORT_FORMATS = {"md": "report.md", "html": "report.html", "junit": "junit.xml"}


def build_report(spec: str, params: int | None, rows: list[dict], reference_latency: dict | None,
                 data: dict | None = None, timings: dict | None = None, environment: dict | None = None,
                 program: dict | None = None) -> dict:
    report = {
        "schema": SCHEMA,
        "edgeport_version": __version__,
        "model": {"spec": spec, "params": params, "flops": None, **(program or {})},
        "passed": False,
        "targets": rows,
        "reference": {"latency_ms": reference_latency} if reference_latency else {},
        "timings_s": timings or {},
        "data": data,
        "environment": environment,
    }
    report["passed"] = verdict(report)
    return report


def finish_report(report: dict, baseline=None, config: dict | None = None) -> dict:
    """Apply the baseline (if any) and set the verdict: the one place ``passed`` is decided. ``config``
    (as loaded): the report names the files it came from, the [baseline] thresholds it would judge a baseline
    by, and every budget or threshold that differs from the default."""
    from edgeport.config import BASELINE_DEFAULTS, FILES_KEY, baseline_thresholds
    from edgeport.validate.baseline import apply_baseline
    from edgeport.validate.budget_audit import THRESHOLDS_KEY, audit

    stored = report.get("config") if isinstance(report.get("config"), dict) else {}
    if config is not None:
        stored = {"files": list(config.get(FILES_KEY, [])), THRESHOLDS_KEY: baseline_thresholds(config)}
    if baseline is not None:  # the thresholds this run judges its baseline by
        stored = {**stored, THRESHOLDS_KEY: dict(baseline.thresholds)}
    if isinstance(stored.get(THRESHOLDS_KEY), dict):
        stored = {**stored, THRESHOLDS_KEY: {**stored[THRESHOLDS_KEY]}, "baseline_defaults": dict(BASELINE_DEFAULTS)}
    report["config"] = stored
    report["config"] = audit(report)
    if baseline is not None:
        apply_baseline(report, baseline.report, baseline.thresholds, baseline.source)
    report["passed"] = verdict(report)
    return report


def verdict(report: dict) -> bool:
    """The gate, always recomputed from the rows (a stored ``passed`` is never trusted): every required row
    ok (optional rows may fail), at least one row ok (a run that proved nothing is no pass), no
    regression against a baseline, and the run not stopped before its end (``incomplete``)."""
    rows = [r for r in report.get("targets") or [] if isinstance(r, dict)]
    rows_ok = any(r.get("status") == "ok" for r in rows) and \
        all(r.get("status") == "ok" for r in rows if r.get("required", True) is not False)
    return rows_ok and not (report.get("baseline") or {}).get("regressions") and not report.get("incomplete")


def json_safe(value):
    """JSON has no Infinity/NaN: non-finite metrics become strings a reader can still see."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def finite_for_schema(report: dict) -> dict:
    """The schema types the headline parity metrics as numbers: clamp non-finite ones to large finite values."""
    for row in report["targets"]:
        parity = row.get("parity")
        if parity:
            for key, bad in (("max_abs_err", 1e308), ("max_rel_err", 1e308), ("cosine_min", -1.0)):
                if isinstance(parity.get(key), float) and not math.isfinite(parity[key]):
                    parity[key] = bad
    return report


def write_json(path: Path, report: dict) -> dict:
    report = json_safe(finite_for_schema(report))
    write_replacing(path, json.dumps(report, indent=2) + "\n")
    return report


def write_outputs(out_dir: Path, report: dict, manifest: dict | None, junit: Path | None = None) -> dict:
    from edgeport.validate.render import render_junit, render_markdown
    from edgeport.validate.render_html import render_html

    report = write_json(out_dir / "report.json", report)
    write_replacing(out_dir / "report.md", render_markdown(report))
    write_replacing(out_dir / "report.html", render_html(report))
    if manifest is not None:
        write_replacing(out_dir / "manifest.json", json.dumps(json_safe(manifest), indent=2) + "\n")
    if junit is not None:
        target = junit if junit.is_absolute() else out_dir / junit
        write_replacing(target, render_junit(report))
    return report


def renderers() -> dict:
    from edgeport.validate.render import render_junit, render_markdown
    from edgeport.validate.render_html import render_html

    return {"md": render_markdown, "html": render_html, "junit": render_junit}


def read_report_dir(directory: Path) -> dict:
    """report.json of an edgeport output directory; anything else is bad input (exit 2)."""
    from edgeport.validate.baseline import load_baseline

    directory = Path(directory)
    if not directory.is_dir():
        raise UsageError(f"not a directory: {directory}")
    if not (directory / "report.json").is_file():
        raise UsageError(f"{directory} has no report.json (is it an edgeport --out directory?)")
    try:
        return load_baseline(directory / "report.json")
    except UsageError as exc:
        raise UsageError(str(exc).replace("--baseline ", "")) from exc


def validate_writes(junit: Path | None) -> list[str]:
    """The report files ``validate`` writes into DIR (an absolute --junit is the user's own path)."""
    names = ["report.json", REPORT_FORMATS["md"], REPORT_FORMATS["html"]]
    return names + ([str(junit)] if junit is not None and not Path(junit).is_absolute() else [])


def artifact_in(directory: Path, rel) -> Path | None:
    """``directory/rel`` when it stays inside ``directory`` (symlinks resolved), else None: a report.json's
    artifact path is data from the directory, and never names a file elsewhere."""
    if not isinstance(rel, str) or not rel:
        return None
    path = (Path(directory) / rel).resolve()
    return path if path.is_relative_to(Path(directory).resolve()) else None


def file_list(row: dict) -> dict:
    """A manifest entry's ``sha256`` (of ``path``), ``size_bytes`` (of every file) and ``files``: every file of the artifact
    (path relative to the manifest, size_bytes, sha256), the one list apps, ``bundle`` and ``validate`` follow."""
    return {"sha256": row.get("sha256"), "size_bytes": row.get("size_bytes"), "files": row.get("files") or []}


def build_manifest(spec: str, signature, rows: list[dict]) -> dict:
    """Inputs/outputs of the model and, per artifact, as its runtime sees them (names, dtypes, quantization)."""
    artifacts = [{"target": r["target"], "variant": r["variant"], "path": r["artifact"], "status": r["status"],
                  **(r.get("io") or {}), "parity_sample": r.get("parity_sample"), **file_list(r)}
                 for r in rows if r.get("artifact")]
    return {
        "schema": "edgeport.manifest/1",
        "edgeport_version": __version__,
        "model": spec,
        "inputs": [i.to_json() for i in signature.inputs],
        "outputs": [o.to_json() for o in signature.outputs],
        "artifacts": artifacts,
    }
