"""--data sources (npz by name/position, directory, file.py:callable) and their checks (exit 2 naming the input)."""

import numpy as np
import pytest

from conftest import REPO, read_report, run_cli
from edgeport.errors import UsageError
from edgeport.export.program import Signature, TensorInfo
from edgeport.validate.data import load_data, load_data_with_kind

MODELS = REPO / "tests" / "models.py"
TWO_IO = Signature((TensorInfo("x", (1, 8), "float32"), TensorInfo("y", (1, 4), "float32")), ())


def _arrays(n, rng=np.random.default_rng(0)):
    return rng.standard_normal((n, 1, 8)).astype(np.float32), rng.standard_normal((n, 1, 4)).astype(np.float32)


def test_npz_by_name_and_by_position(tmp_path):
    x, y = _arrays(3)
    np.savez(tmp_path / "named.npz", y=y, x=x)
    np.savez(tmp_path / "positional.npz", x, y)
    named, kind = load_data_with_kind(str(tmp_path / "named.npz"), TWO_IO)
    assert kind == "npz" and len(named) == 3 and np.array_equal(named[2][1], y[2])
    positional = load_data(str(tmp_path / "positional.npz"), TWO_IO)
    assert all(np.array_equal(a, b) for s, t in zip(named, positional) for a, b in zip(s, t))


def test_directory_of_npy_and_npz(tmp_path):
    single = Signature((TensorInfo("x", (1, 8), "float32"),), ())
    x, _ = _arrays(4)
    for i in range(2):
        np.save(tmp_path / f"s{i}.npy", x[i])
    np.savez(tmp_path / "batch.npz", x=x[2:])
    samples, kind = load_data_with_kind(str(tmp_path), single)
    assert kind == "directory" and len(samples) == 4
    assert np.array_equal(samples[0][0], x[2]) and np.array_equal(samples[3][0], x[1])  # sorted: batch.npz, s0, s1


def test_callable_tuples_tensors_and_dicts(tmp_path):
    (tmp_path / "data.py").write_text(
        "import numpy as np, torch\n"
        "def make_inputs():\n"
        "    yield (np.ones((1, 8), np.float64), torch.zeros(1, 4))\n"
        "    yield {'y': np.ones((1, 4), np.float32), 'x': np.zeros((1, 8), np.float32)}\n")
    samples, kind = load_data_with_kind(f"{tmp_path / 'data.py'}:make_inputs", TWO_IO)
    assert kind == "callable" and len(samples) == 2
    assert samples[0][0].dtype == np.float32 and samples[1][1].sum() == 4


@pytest.mark.parametrize("arrays,needle", [
    ({"x": np.zeros((1, 8), np.float32)}, "no array for input 'y'"),
    ({"x": np.zeros((1, 8), np.float32), "y": np.zeros((1, 5), np.float32)}, "input 'y' has shape [1, 5], model expects [1, 4]"),
    ({"x": np.zeros((1, 8), np.int64), "y": np.zeros((1, 4), np.float32)}, "input 'x' has dtype int64, model expects float32"),
])
def test_npz_mismatch_names_the_input(tmp_path, arrays, needle):
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(UsageError, match=None) as info:
        load_data(str(tmp_path / "bad.npz"), TWO_IO)
    assert needle in str(info.value)


def test_callable_mismatch_and_failure(tmp_path):
    (tmp_path / "data.py").write_text(
        "import numpy as np\n"
        "def short():\n    return [(np.zeros((1, 8), np.float32),)]\n"
        "def broken():\n    raise OSError('no such dataset')\n")
    with pytest.raises(UsageError) as info:
        load_data(f"{tmp_path / 'data.py'}:short", TWO_IO)
    assert "data.py:short sample 0" in str(info.value) and "no array for input 'y'" in str(info.value)
    with pytest.raises(UsageError) as info:
        load_data(f"{tmp_path / 'data.py'}:broken", TWO_IO)
    assert "OSError: no such dataset" in str(info.value)


def test_cli_data_callable_counts_and_calibration(tmp_path):
    (tmp_path / "data.py").write_text(
        "import numpy as np\n"
        "def make_inputs():\n"
        "    rng = np.random.default_rng(1)\n"
        "    return [(rng.standard_normal((1, 8)).astype(np.float32), rng.standard_normal((1, 4)).astype(np.float32))\n"
        "            for _ in range(64)]\n")
    out = tmp_path / "out"
    spec = f"{tmp_path / 'data.py'}:make_inputs"
    result = run_cli("convert", f"{MODELS}:two_io", "-t", "onnx", "-q", "int8", "--data", spec, "--calibration-data", spec,
                     "--samples", "3", "--out", out, "--no-latency")
    assert result.returncode == 0, result.stdout + result.stderr
    report = read_report(out)
    rows = {r["variant"]: r for r in report["targets"]}
    assert rows["fp32"]["parity"]["samples"] == 67 and rows["fp32"]["parity"]["sample_origin"] == {"real": 64, "random": 2, "example": 1}
    assert report["data"] == {"kind": "callable", "source": spec, "samples": 64}
    assert not any("random samples" in n for n in rows["int8"]["notes"])
    assert "1 example, 2 seeded random, 64 real (callable:" in (out / "report.md").read_text()


def test_cli_data_mismatch_exit_2_nothing_written(tmp_path):
    np.savez(tmp_path / "bad.npz", x=np.zeros((1, 8), np.float32), y=np.zeros((1, 3), np.float32))
    out = tmp_path / "out"
    result = run_cli("convert", f"{MODELS}:two_io", "-t", "onnx", "--data", tmp_path / "bad.npz", "--out", out)
    assert result.returncode == 2 and "input 'y' has shape [1, 3], model expects [1, 4]" in result.stderr
    assert "Traceback" not in result.stderr and not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]
