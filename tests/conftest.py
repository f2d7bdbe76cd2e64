"""Shared test helpers: run the CLI as a user would (a subprocess), read and schema-check reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REPORT_SCHEMA = REPO.parent / "shared" / "contracts" / "report.schema.json"


def run_cli(*args, cwd: Path | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "edgeport", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def validate_report(report: dict) -> None:
    import jsonschema

    schema_path = REPORT_SCHEMA if REPORT_SCHEMA.is_file() else REPO / "tests" / "report.schema.json"
    jsonschema.validate(report, json.loads(schema_path.read_text()))


def read_report(out: Path) -> dict:
    report = json.loads((out / "report.json").read_text())
    validate_report(report)
    return report


def write_model_file(tmp_path: Path, body: str, name: str = "model.py") -> Path:
    path = tmp_path / name
    path.write_text("import torch\nfrom torch import nn\n\n" + body)
    return path


@pytest.fixture
def cli():
    return run_cli
