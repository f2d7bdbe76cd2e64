"""Model files written the way real projects write them load the way Python imports them (issue 9, item 2):
dataclass configs, pickling and copying of their classes, sibling imports (at import and lazily), packages
with relative imports, `__main__` guards, `from __future__` annotations, odd outputs; and a .pt2 saved
from such a model loads again."""

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO, read_report, run_cli

DATACLASS_MODEL = '''
from __future__ import annotations

import copy
import pickle
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import nn

from layers import Block          # a sibling module, imported at import time


@dataclass
class Config:
    width: int = 8
    depth: int = 2
    names: list[str] = field(default_factory=lambda: ["a", "b"])
    dropout: Optional[float] = None


@dataclass
class Output:                     # an output type pytree does not know
    logits: torch.Tensor
    hidden: torch.Tensor
    note: str = "not a tensor"


class Net(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.config = config
        self.blocks = nn.Sequential(*[Block(config.width) for _ in range(config.depth)])
        self.head = nn.Linear(config.width, 3)

    def forward(self, x: torch.Tensor) -> Output:
        hidden = self.blocks(x)
        return Output(self.head(hidden), hidden)


def build():
    from helpers import seed    # a sibling imported lazily, after the file was imported
    seed()
    config = copy.deepcopy(Config())
    assert pickle.loads(pickle.dumps(config)) == config
    return Net(config).eval(), (torch.randn(2, config.width),)


if __name__ == "__main__":
    raise SystemExit("a guarded script body must not run on import")
'''


def write_project(root):
    (root / "layers.py").write_text(textwrap.dedent('''
        from torch import nn

        class Block(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.linear = nn.Linear(width, width)

            def forward(self, x):
                return self.linear(x).relu()
    '''))
    (root / "helpers.py").write_text("import torch\n\ndef seed():\n    torch.manual_seed(0)\n")
    (root / "model.py").write_text(DATACLASS_MODEL)


@pytest.mark.slow   # three CLI runs; `make test` reloads a .pt2 (test_litert) and validates a DIR (test_validate) elsewhere
def test_dataclass_config_siblings_and_odd_outputs_convert_and_the_pt2_loads_again(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    write_project(project)
    out = tmp_path / "out"
    result = run_cli("convert", project / "model.py:build", "-t", "onnx", "--no-latency", "--samples", "2", "--out", out,
                     cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    row = read_report(out)["targets"][0]
    assert row["status"] == "ok" and len(row["parity"]["outputs"]) == 2   # logits and hidden; the str dropped
    again = tmp_path / "again"
    result = run_cli("convert", out / "exported.pt2", "-t", "onnx", "--no-latency", "--samples", "2", "--out", again)
    assert result.returncode == 0, result.stdout + result.stderr
    result = run_cli("validate", out, "--no-latency", "--samples", "2")
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_file_inside_a_package_uses_relative_imports(tmp_path):
    package = tmp_path / "proj" / "models"
    package.mkdir(parents=True)
    (tmp_path / "proj" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "parts.py").write_text("from torch import nn\n\ndef head():\n    return nn.Linear(4, 2)\n")
    (package / "net.py").write_text(textwrap.dedent('''
        import torch
        from .parts import head
        from ..util import WIDTH

        def build():
            torch.manual_seed(0)
            return torch.nn.Sequential(torch.nn.Linear(WIDTH, 4), head()).eval(), (torch.randn(1, WIDTH),)
    '''))
    (tmp_path / "proj" / "util.py").write_text("WIDTH = 6\n")
    out = tmp_path / "out"
    result = run_cli("convert", package / "net.py:build", "-t", "onnx", "--no-latency", "--samples", "2", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr


def test_module_named_like_a_stdlib_module_still_loads(tmp_path):
    (tmp_path / "copy.py").write_text(
        "import torch\n\ndef build():\n    return torch.nn.Linear(3, 2).eval(), (torch.randn(1, 3),)\n")
    out = tmp_path / "out"
    result = run_cli("convert", tmp_path / "copy.py:build", "-t", "onnx", "--no-latency", "--samples", "2", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("returns,needle", [("'text'", "forward returned str"), ("42", "forward returned int")])
def test_forward_without_tensors_is_bad_input(tmp_path, returns, needle):
    (tmp_path / "m.py").write_text(textwrap.dedent(f'''
        import torch

        class M(torch.nn.Module):
            def forward(self, x):
                return {returns}

        def build():
            return M(), (torch.randn(1, 3),)
    '''))
    result = run_cli("convert", tmp_path / "m.py:build", "-t", "onnx", "--out", tmp_path / "out")
    assert result.returncode == 2 and needle in result.stderr and "Traceback" not in result.stderr


def test_input_flags_reach_a_keyword_only_forward_by_name(tmp_path):
    (tmp_path / "m.py").write_text(textwrap.dedent('''
        import torch

        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b = torch.nn.Linear(4, 2), torch.nn.Linear(3, 2)

            def forward(self, *, ids, feats):
                return self.a(feats) + self.b(ids.float())

        def build():
            torch.manual_seed(0)
            return M().eval()
    '''))
    out = tmp_path / "out"
    result = run_cli("convert", tmp_path / "m.py:build", "-t", "onnx", "--input", "feats:1x4:float32",
                     "--input", "ids:1x3:int64:0..9", "--no-latency", "--samples", "2", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    manifest = __import__("json").loads((out / "manifest.json").read_text())
    assert [i["name"] for i in manifest["inputs"]] == ["ids", "feats"]   # the forward's own order


def write_remote_code_repo(root):
    """A save_pretrained-like directory whose config asks for the repository's own code (auto_map)."""
    root.mkdir()
    marker = root / "RAN"
    (root / "config.json").write_text(__import__("json").dumps({
        "model_type": "evil", "architectures": ["EvilModel"],
        "auto_map": {"AutoConfig": "evil.EvilConfig", "AutoModel": "evil.EvilModel"}}))
    (root / "evil.py").write_text(textwrap.dedent(f'''
        import pathlib
        pathlib.Path({str(marker)!r}).write_text("the repository's code ran")
        from transformers import PretrainedConfig, PreTrainedModel

        class EvilConfig(PretrainedConfig):
            model_type = "evil"

        class EvilModel(PreTrainedModel):
            config_class = EvilConfig
    '''))
    return marker


def test_hf_repository_code_runs_only_with_trust_remote_code(tmp_path):
    marker = write_remote_code_repo(tmp_path / "repo")
    env = {"HF_HOME": str(tmp_path / "hf")}
    result = subprocess.run([sys.executable, "-m", "edgeport", "convert", f"hf:{tmp_path / 'repo'}", "-t", "onnx",
                             "--out", str(tmp_path / "out")], input="y\ny\n", capture_output=True, text=True,
                            timeout=300, env={**os.environ, "PYTHONPATH": str(REPO), **env})
    assert result.returncode == 2 and "--trust-remote-code" in result.stderr, result.stderr
    assert not marker.exists(), "the repository's code ran without --trust-remote-code"
    trusted = subprocess.run([sys.executable, "-m", "edgeport", "convert", f"hf:{tmp_path / 'repo'}", "-t", "onnx",
                              "--trust-remote-code", "--out", str(tmp_path / "out2")], capture_output=True, text=True,
                             timeout=300, env={**os.environ, "PYTHONPATH": str(REPO), **env})
    assert marker.exists(), trusted.stderr   # the flag is what allows it (the model itself is not convertible)
