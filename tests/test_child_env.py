"""Children started as ``python -m edgeport...`` (the libtpu compile child, the TPU device worker) import the
same edgeport as the run that started them, wherever they start: a checkout run from its own directory is on
the parent's path through its working directory, which a child started in a scratch folder lacks (the
compile child then died with "No module named 'edgeport'" and every TPU compile of the run failed)."""

import subprocess
import sys
from pathlib import Path

import edgeport
from edgeport.core.proc import child_env


def test_a_child_started_elsewhere_imports_this_edgeport(monkeypatch, tmp_path):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    result = subprocess.run([sys.executable, "-c", "import edgeport; print(edgeport.__file__)"], cwd=tmp_path,
                            env=child_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert Path(result.stdout.strip()).resolve() == Path(edgeport.__file__).resolve()


def test_an_environment_that_already_names_edgeport_is_left_alone(monkeypatch):
    root = str(Path(edgeport.__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", root)
    assert child_env()["PYTHONPATH"] == root
