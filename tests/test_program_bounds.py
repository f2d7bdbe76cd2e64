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
