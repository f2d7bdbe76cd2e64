"""Shared test helpers: run the CLI as a user would (a subprocess), read and schema-check reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Imported once, first: in-process conversions of tests/models.py then reuse this module instead of executing
# the file again, which would register its torch.library custom op twice (torch crashes on that).
import models  # noqa: F401,E402

REPO = Path(__file__).resolve().parents[1]
REPORT_SCHEMA = REPO.parent / "shared" / "contracts" / "report.schema.json"


def run_cli(*args, cwd: Path | None = None, timeout: int = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(env or os.environ)
    inherited = [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []  # e.g. where Ray is installed
    env = {**env, "PYTHONPATH": os.pathsep.join([str(REPO), *inherited]), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "edgeport", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def validate_report(report: dict) -> None:
    import jsonschema

    schema_path = REPORT_SCHEMA if REPORT_SCHEMA.is_file() else REPO / "tests" / "report.schema.json"
    jsonschema.validate(report, json.loads(schema_path.read_text()))


MANIFEST_SCHEMA = REPO / "samples" / "manifest.schema.json"


def read_report(out: Path) -> dict:
    """report.json, schema-checked; so is manifest.json (and its parity samples) wherever one was written."""
    report = json.loads((out / "report.json").read_text())
    validate_report(report)
    if (out / "manifest.json").exists():
        read_manifest(out)
    return report


def read_manifest(out: Path) -> dict:
    """manifest.json validated against samples/manifest.schema.json, with every parity sample index it names."""
    import jsonschema

    schema = json.loads(MANIFEST_SCHEMA.read_text())
    manifest = json.loads((out / "manifest.json").read_text())
    jsonschema.validate(manifest, schema)
    index_schema = {"$ref": "#/$defs/paritySampleIndex", "$defs": schema["$defs"]}
    for path in {a["parity_sample"] for a in manifest["artifacts"] if a.get("parity_sample")}:
        index = json.loads((out / path).read_text())
        jsonschema.validate(index, index_schema)
        for entry in index["inputs"] + index["outputs"]:
            size = (out / path).parent.joinpath(entry["file"]).stat().st_size
            assert size == _numel(entry["shape"]) * _itemsize(entry["dtype"]), entry
    return manifest


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _itemsize(dtype: str) -> int:
    import numpy as np

    return np.dtype(dtype).itemsize


def write_model_file(tmp_path: Path, body: str, name: str = "model.py") -> Path:
    path = tmp_path / name
    path.write_text("import torch\nfrom torch import nn\n\n" + body)
    return path


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """An ONNX conversion of tests/models.py:mlp, per test module (a module may define its own ``converted``)."""
    out = tmp_path_factory.mktemp("converted") / "out"
    result = run_cli("convert", f"{REPO / 'tests' / 'models.py'}:mlp", "-t", "onnx", "--out", out, "--samples", "2",
                     "--no-latency")
    assert result.returncode == 0, result.stdout + result.stderr
    return out


@pytest.fixture
def fresh(converted, tmp_path):
    """A copy of the test module's ``converted`` output directory (its own fixture), for a test to alter."""
    import shutil

    copy = tmp_path / "dist"
    shutil.copytree(converted, copy)
    return copy


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture(autouse=True, scope="module")
def _module_cache(tmp_path_factory):
    """No test writes edgeport's real cache, and no test is sped up (or hidden) by another's entries: each
    module's fixtures get their own empty cache ..."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EDGEPORT_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture(autouse=True)
def _test_cache(tmp_path_factory, monkeypatch):
    """... and each test its own, outside its tmp_path (a test sharing one on purpose sets EDGEPORT_CACHE)."""
    monkeypatch.setenv("EDGEPORT_CACHE", str(tmp_path_factory.mktemp("cache")))
