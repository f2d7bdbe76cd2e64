"""A file-loaded program is held to what it declares before it runs: its intermediates count in the
pre-flight memory estimate, and inputs that would fail deep in a kernel are one-line refusals (exit 2)."""

import torch

from conftest import run_cli


class Full(torch.nn.Module):
    def __init__(self, count: int):
        super().__init__()
        self.count = count

    def forward(self, x):
        return torch.full((self.count,), 1.0).sum() + x


def _archive(tmp_path, count: int):
    path = tmp_path / "full.pt2"
    torch.export.save(torch.export.export(Full(count), (torch.randn(2),), strict=False), path)
    return path


def test_declared_intermediate_counts_in_the_estimate():
    from edgeport.core import memory

    program = torch.export.export(Full(500_000_000), (torch.randn(2),), strict=False)
    assert memory.program_intermediate_bytes(program) == 2_000_000_000
    est = memory.estimate(0, [], intermediate_bytes=2_000_000_000)
    assert est.memory >= 2_000_000_000 and "largest intermediate" in est.describe_memory()


def test_small_file_declaring_a_huge_tensor_is_refused_before_it_allocates(tmp_path):
    """5e8 floats (2 GB) from a file of a few KB: refused under --max-memory 2G with the estimate; 5e10
    (200 GB, more than malloc gives) refused by the estimate alone, not an internal error."""
    archive = _archive(tmp_path, 500_000_000)
    assert archive.stat().st_size < 64_000
    result = run_cli("convert", archive, "-t", "onnx", "--out", tmp_path / "a", "--max-memory", "2G",
                     "--samples", "1", "--no-latency")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "2.00 GB largest intermediate" in result.stderr and "Traceback" not in result.stderr
    result = run_cli("convert", _archive(tmp_path, 50_000_000_000), "-t", "onnx", "--out", tmp_path / "b",
                     "--samples", "1", "--no-latency")
    assert result.returncode == 2 and "largest intermediate" in result.stderr, result.stdout + result.stderr
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_sparse_example_input_from_build_is_one_line_exit_2(tmp_path):
    from conftest import write_model_file

    model = write_model_file(tmp_path, "import torch\n\ndef build():\n"
                             "    return torch.nn.Linear(4, 4), (torch.eye(4).to_sparse(),)\n")
    result = run_cli("convert", f"{model}:build", "-t", "onnx", "--out", tmp_path / "o", "--samples", "1",
                     "--no-latency")
    assert result.returncode == 2 and "sparse_coo" in result.stderr, result.stdout + result.stderr
    assert "internal error" not in result.stderr


def test_an_allocation_larger_than_malloc_gives_is_exit_2_not_internal_error(tmp_path):
    from conftest import write_model_file

    model = write_model_file(tmp_path, "import torch\n\nclass Greedy(torch.nn.Module):\n"
                             "    def forward(self, x):\n        return x + torch.zeros(1 << 46).sum()\n\n"
                             "def build():\n    return Greedy(), (torch.randn(4),)\n")
    result = run_cli("convert", f"{model}:build", "-t", "onnx", "--out", tmp_path / "o", "--samples", "1",
                     "--no-latency")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "more memory than this machine gives" in result.stderr or "allocate" in result.stderr
    assert "internal error" not in result.stderr and not (tmp_path / "o").exists()


def test_tpu_weights_header_is_checked_against_the_file_before_reading(tmp_path):
    import json

    import numpy as np
    import pytest

    from edgeport.targets.tpu.weights import load, save

    path = tmp_path / "weights.safetensors"
    path.write_bytes((1 << 62).to_bytes(8, "little") + b"{}")
    with pytest.raises(ValueError, match="header claims"):
        load(path)
    save({"w": np.ones((4, 4), np.float32)}, path)
    data = path.read_bytes()
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + size])
    header["w"]["shape"] = [1 << 20, 4]   # claims 16 MB of a 64-byte data section
    text = json.dumps(header).encode().ljust(size)
    path.write_bytes(data[:8] + text + data[8 + size:])
    with pytest.raises(ValueError, match="does not fit"):
        load(path)


CRASHER = '''import os
import signal

import torch


@torch.library.custom_op("crashtest::boom", mutates_args=())
def boom(x: torch.Tensor) -> torch.Tensor:
    os.kill(os.getpid(), signal.SIGSEGV)   # a kernel bug nobody knows yet
    return x.clone()


@boom.register_fake
def _(x):
    return torch.empty_like(x)


DECOMPOSITIONS = {"crashtest::boom": lambda x: x.clone()}
'''


def _crash_ops(tmp_path):
    """The crashing custom op, registered in this process (to export it) and written for --decompositions."""
    import importlib.util

    decompositions = tmp_path / "crash_ops.py"
    decompositions.write_text(CRASHER)
    spec = importlib.util.spec_from_file_location("crash_ops", decompositions)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    return decompositions


def test_a_program_that_crashes_pytorch_is_exit_2_not_a_crash_of_edgeport(tmp_path):
    """The first run of a file-loaded program is in a contained child: a segfaulting kernel there is one
    line and exit 2, with nothing left in --out (without it, edgeport itself dies of SIGSEGV)."""
    decompositions = _crash_ops(tmp_path)

    class Crash(torch.nn.Module):
        def forward(self, x):
            return torch.ops.crashtest.boom(x) + 1

    archive = tmp_path / "crash.pt2"
    torch.export.save(torch.export.export(Crash(), (torch.randn(2),), strict=False), archive)
    result = run_cli("convert", archive, "--decompositions", decompositions, "-t", "onnx", "--out", tmp_path / "o",
                     "--samples", "1", "--no-latency")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "crashed PyTorch (SIGSEGV)" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "o").exists()


def test_a_program_that_fails_on_its_own_inputs_is_exit_2_not_an_internal_error(tmp_path):
    """A constant index out of range passes export (fake tensors check no bounds) and fails when run: the
    contained first run says which input and why, exit 2, before the program runs in edgeport's process."""

    class OutOfRange(torch.nn.Module):
        def forward(self, x):
            return x.index_select(0, torch.tensor([100_000])) * 2

    archive = tmp_path / "oob.pt2"
    torch.export.save(torch.export.export(OutOfRange(), (torch.randn(4, 4),), strict=False), archive)
    result = run_cli("convert", archive, "-t", "onnx", "--out", tmp_path / "o", "--samples", "1", "--no-latency")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "the program fails on its reference input 1 of 1" in result.stderr and "index out of range" in result.stderr
    assert "internal error" not in result.stderr and not (tmp_path / "o").exists()


def test_every_reference_input_is_run_contained_not_only_the_example(tmp_path):
    """A branch (torch.cond) the stored example never takes but a random sample does: the contained first
    run covers every input the reference runs here, so its crash is exit 2, never a SIGSEGV of edgeport."""
    decompositions = _crash_ops(tmp_path)

    class Hidden(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.abs().sum() > 0, lambda v: torch.ops.crashtest.boom(v), lambda v: v.clone(), (x,))

    archive = tmp_path / "hidden.pt2"
    torch.export.save(torch.export.export(Hidden(), (torch.zeros(2),), strict=False), archive)
    result = run_cli("convert", archive, "--decompositions", decompositions, "-t", "onnx", "--out", tmp_path / "o",
                     "--samples", "2", "--no-latency")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "crashed PyTorch (SIGSEGV)" in result.stderr and "Traceback" not in result.stderr


def test_hf_dir_whose_config_implies_weights_its_files_lack_is_refused_before_building(tmp_path):
    import json
    import time

    import tiny_lm

    from edgeport.errors import UsageError
    from edgeport.sources.hf_declared import check_declared

    folder = tiny_lm.save(tiny_lm.build("llama"), tmp_path / "llama")
    check_declared(str(folder), tiny_lm.config("llama"))    # an honest directory passes
    config = json.loads((folder / "config.json").read_text())
    for key, value in (("intermediate_size", 16_000_000), ("num_hidden_layers", 20_000)):
        (folder / "config.json").write_text(json.dumps({**config, key: value}))
        start = time.perf_counter()
        result = run_cli("convert", f"hf:{folder}", "-t", "onnx", "--out", tmp_path / "o", "--samples", "1",
                         "--no-latency")
        assert result.returncode == 2 and "implies" in result.stderr, result.stdout + result.stderr
        assert time.perf_counter() - start < 60 and not (tmp_path / "o").exists()
    import pytest

    with pytest.raises(UsageError, match="implies"):
        check_declared(str(folder), type("C", (), {"hidden_size": 64, "num_hidden_layers": 20_000,
                                                   "intermediate_size": 128, "vocab_size": 256})())


def test_every_tiny_family_passes_the_declared_check(tmp_path):
    import tiny_lm

    from edgeport.sources.hf_declared import check_declared

    for family in ("gpt2", "mixtral", "mamba", "deepseek_v2", "gemma3"):
        folder = tiny_lm.save(tiny_lm.build(family), tmp_path / family)
        check_declared(str(folder), tiny_lm.config(family))
