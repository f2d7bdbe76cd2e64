"""--data sources (npz by name/position, directory, file.py:callable) and their checks (exit 2 naming the input)."""

import numpy as np
import pytest

from conftest import REPO, read_report, run_cli
from edgeport.errors import UsageError
from edgeport.core.program import Signature, TensorInfo
from edgeport.validate.data import (MAX_DATA_SAMPLES, MAX_SAMPLES, check_sample_count, load_data, load_data_with_kind,
                                     make_samples, read_data)

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
    assert report["data"] == {"kind": "callable", "source": spec, "samples": 64, "samples_used": 64, "samples_available": 64}
    assert not any("random samples" in n for n in rows["int8"]["notes"])
    assert "1 example, 2 seeded random, 64 real (callable:" in (out / "report.md").read_text()


def test_cli_data_mismatch_exit_2_nothing_written(tmp_path):
    np.savez(tmp_path / "bad.npz", x=np.zeros((1, 8), np.float32), y=np.zeros((1, 3), np.float32))
    out = tmp_path / "out"
    result = run_cli("convert", f"{MODELS}:two_io", "-t", "onnx", "--data", tmp_path / "bad.npz", "--out", out)
    assert result.returncode == 2 and "input 'y' has shape [1, 3], model expects [1, 4]" in result.stderr
    assert "Traceback" not in result.stderr and not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]


# ---- clean errors and caps (issue 9 items 16, 18) ----

SINGLE = Signature((TensorInfo("x", (1, 64), "float32"),), ())


@pytest.mark.parametrize("flag", ["--data", "--calibration-data"])
def test_object_arrays_are_refused_naming_the_flag_and_file(tmp_path, flag):
    np.savez(tmp_path / "objects.npz", x=np.array([{"a": 1}, None], dtype=object))
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}, None], dtype=object))
    (tmp_path / "fake.npz").write_bytes(b"not a zip, numpy would try to unpickle this")
    for name in ("objects.npz", "objects.npy", "fake.npz"):
        with pytest.raises(UsageError) as info:
            load_data(str(tmp_path / name), SINGLE, flag)
        assert str(info.value).startswith(f"{flag} {name}:") and "never unpickles" in str(info.value)


def test_calibration_data_errors_name_calibration_data(tmp_path):
    np.savez(tmp_path / "bad.npz", x=np.zeros((1, 8), np.float32), y=np.zeros((1, 3), np.float32))
    with pytest.raises(UsageError) as info:
        load_data(str(tmp_path / "bad.npz"), TWO_IO, flag="--calibration-data")
    assert str(info.value).startswith("--calibration-data bad.npz:") and "--data " not in str(info.value)
    with pytest.raises(UsageError, match="^--calibration-data not found"):
        load_data(str(tmp_path / "missing.npz"), TWO_IO, flag="--calibration-data")


@pytest.mark.parametrize("save", ["npz", "npz_compressed", "npy"])
def test_huge_data_file_read_only_up_to_the_cap(tmp_path, save):
    import tracemalloc

    x = np.zeros((100_000, 1, 64), np.float32)  # 25.6 MB, 100k samples, distinct, quick to compress
    x[:, 0, 0] = np.arange(100_000)
    path = tmp_path / ("data.npy" if save == "npy" else "data.npz")
    if save == "npy":
        np.save(path, x)
    else:
        (np.savez_compressed if save == "npz_compressed" else np.savez)(path, x=x)
    del x
    tracemalloc.start()
    data = read_data(str(path), SINGLE)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(data.samples) == MAX_DATA_SAMPLES == 256 and peak < 2_000_000, peak  # never the whole 25.6 MB
    assert np.array_equal(data.samples[255][0], np.load(path)["x"][255] if save != "npy" else np.load(path)[255])
    block = data.report(str(path))
    assert block["samples_used"] == 256 and block["samples_available"] == 100_000
    assert "holds 100,000 samples; the first 256 were used" in block["note"]


def test_directory_and_endless_generator_are_capped(tmp_path):
    x = np.zeros((300, 1, 64), np.float32)
    np.save(tmp_path / "a.npy", x[:200])
    np.savez(tmp_path / "b.npz", x=x[:100])
    data = read_data(str(tmp_path), SINGLE)
    assert len(data.samples) == 256 and data.available == 300
    (tmp_path / "gen.py").write_text(
        "import numpy as np\n"
        "def endless():\n    while True:\n        yield (np.zeros((1, 64), np.float32),)\n"
        "def few():\n    return [(np.zeros((1, 64), np.float32),)] * 3\n")
    endless = read_data(f"{tmp_path / 'gen.py'}:endless", SINGLE)
    assert len(endless.samples) == 256 and endless.available is None
    assert "yields more than 256 samples; the first 256 were used" in endless.report("gen.py:endless")["note"]
    few = read_data(f"{tmp_path / 'gen.py'}:few", SINGLE).report("gen.py:few")
    assert few["samples_used"] == few["samples_available"] == 3 and "note" not in few


def test_batched_arrays_of_different_lengths_are_refused(tmp_path):
    x, y = _arrays(4)
    np.savez(tmp_path / "uneven.npz", x=x, y=y[:3])
    with pytest.raises(UsageError, match="different numbers of samples"):
        load_data(str(tmp_path / "uneven.npz"), TWO_IO)


def test_samples_cap():
    check_sample_count(MAX_SAMPLES)
    with pytest.raises(UsageError, match=f"--samples 100000: at most {MAX_SAMPLES}"):
        make_samples([np.zeros((1, 8), np.float32)], 100_000)


def test_cli_object_npz_and_samples_cap_exit_2(tmp_path):
    np.savez(tmp_path / "objects.npz", x=np.array([None], dtype=object), y=np.zeros((1, 4), np.float32))
    out = tmp_path / "out"
    result = run_cli("convert", f"{MODELS}:two_io", "-t", "onnx", "--no-latency", "--samples", "2",
                     "--data", tmp_path / "objects.npz", "--out", out)
    assert result.returncode == 2 and "--data objects.npz: array 'x' holds Python objects" in result.stderr
    assert "Traceback" not in result.stderr and not out.exists()
    result = run_cli("convert", f"{MODELS}:two_io", "-t", "onnx", "--no-latency", "--samples", "100000", "--out", out)
    assert result.returncode == 2 and "--samples 100000: at most 1024" in result.stderr and not out.exists()
