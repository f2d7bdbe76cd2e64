"""The house's limits (issue 10) hold on every change: scripts/structure.py over the package."""

import subprocess
import sys

from conftest import REPO


def test_package_is_within_its_limits():
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "structure.py")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_checker_sees_a_violation(tmp_path, monkeypatch):
    sys.path.insert(0, str(REPO / "scripts"))
    import structure

    package = tmp_path / "edgeport"
    (package / "targets").mkdir(parents=True)
    (package / "targets" / "registry.py").write_text('TARGET_MODULES = {\n    "lite": "edgeport.targets.lite",\n}\n')
    (package / "pipeline" / "tasks").mkdir(parents=True)
    (package / "pipeline" / "tasks" / "__init__.py").write_text(
        'TASK_MODULES = {\n    "fwd": "edgeport.pipeline.tasks.fwd",\n}\n')
    (package / "a.py").write_text("from edgeport import b\nNAME = 'lite'\n" + "def f():\n" + "    x = 1\n" * 60
                                  + "KIND = 'fwd'\nbudget = budget_for('lite', 'fp32', {}, [])\n")
    (package / "b.py").write_text("from edgeport import a\n")
    for sub, other in (("up", "down"), ("down", "up")):  # two sub-packages that import each other
        (package / sub).mkdir()
        (package / sub / "__init__.py").write_text("")
        (package / sub / "m.py").write_text(f"def g():\n    from edgeport.{other} import m\n")
    found = structure.problems(package)
    assert any("target name" in f for f in found) and any("f: 61 lines" in f for f in found)
    assert any("import cycle" in f for f in found)
    assert any(f.startswith("a.py:64: task name outside the task layer") for f in found)   # KIND = 'fwd'
    assert any(f.startswith("a.py:65: a row's policy decided outside the plan") for f in found)
    assert any("package cycle: edgeport.down <-> edgeport.up" in f for f in found)
