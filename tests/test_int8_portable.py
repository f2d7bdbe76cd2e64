"""ONNX int8 must be right on every x86-64 CPU it may be deployed on (issue 9, item 1).

onnxruntime's int8 kernels take another path on CPUs without VNNI, where full-range 8-bit weights saturate.
The test runs the artifacts natively and on an emulated AVX2 CPU without AVX-512/VNNI (qemu-user, installed
by scripts/system-deps.sh): the portable default must give the same outputs on both and stay within budget;
the ``vnni`` build shows that the emulated CPU really takes the other kernel path."""

import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, convert_in_process, read_report, run_cli

MODELS = REPO / "tests" / "models.py"
EMULATED_CPU = ["qemu-x86_64", "-cpu", "Haswell"]   # AVX2 + FMA, no AVX-512, no VNNI


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    root = tmp_path_factory.mktemp("isa")
    rng = np.random.default_rng(1)
    calib = {"x": rng.standard_normal((64, 1, 8)).astype(np.float32) * 4,
             "y": rng.standard_normal((64, 1, 4)).astype(np.float32) * 4}
    np.savez(root / "calib.npz", **calib)
    dirs = {}
    for kernels in ("portable", "vnni"):
        out = root / kernels
        result = convert_in_process(f"{MODELS}:two_io", out, ["onnx"], quantize=["int8", "dynamic-int8"],
                                    target_options={"onnx_int8": kernels}, calibration_data=str(root / "calib.npz"),
                                    latency=False, samples=2)
        assert result.exit_code in (0, 1), [r.get("error") for r in result.report["targets"]]
        dirs[kernels] = out
    held_out = {"s%d_%d" % (i, j): (rng.standard_normal(shape).astype(np.float32) * 4)
                for i in range(16) for j, shape in enumerate([(1, 8), (1, 4)])}
    np.savez(root / "inputs.npz", n_samples=16, n_inputs=2, **held_out)
    return root, dirs


def run_eval(prefix: list[str], inputs, models) -> dict:
    done = subprocess.run([*prefix, sys.executable, str(REPO / "tests" / "isa_eval.py"), str(inputs), *map(str, models)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_portable_int8_is_identical_with_and_without_vnni(artifacts):
    root, dirs = artifacts
    portable = [dirs["portable"] / "onnx" / f"model_{v}.onnx" for v in ("int8", "dynamic-int8")]
    vnni = [dirs["vnni"] / "onnx" / f"model_{v}.onnx" for v in ("int8", "dynamic-int8")]
    native = run_eval([], root / "inputs.npz", portable + vnni)
    emulated = run_eval(EMULATED_CPU, root / "inputs.npz", portable + vnni)
    assert not emulated["vnni"] and not emulated["avx512f"], "the emulated CPU must lack VNNI and AVX-512"
    same = lambda path: native["outputs"][str(path)] == emulated["outputs"][str(path)]  # noqa: E731  (exact floats)
    assert all(same(path) for path in portable)
    differs = [not same(path) for path in vnni]
    if native["vnni"]:  # on a VNNI host the full-range build must take another (saturating) path when emulated
        assert any(differs), "the emulated CPU did not change the int8 kernel path"


def test_row_records_the_int8_kernels(artifacts):
    _, dirs = artifacts
    rows = {r["variant"]: r for r in read_report(dirs["portable"])["targets"]}
    assert rows["int8"]["int8_kernels"] == {"built_for": "portable", "activation_type": "uint8",
                                            "weight_type": "int8", "reduce_range": True}
    assert rows["int8"]["status"] == "ok" and rows["dynamic-int8"]["status"] == "ok"
    assert "int8_kernels" not in rows["fp32"]
    vnni = {r["variant"]: r for r in read_report(dirs["vnni"])["targets"]}
    assert vnni["int8"]["int8_kernels"]["reduce_range"] is False


def test_bad_int8_kernels_value_is_bad_input(tmp_path):
    result = run_cli("convert", f"{MODELS}:mlp", "-t", "onnx", "--onnx-int8", "avx9", "--out", tmp_path / "o")
    assert result.returncode == 2 and "--onnx-int8 'avx9'" in result.stderr and not (tmp_path / "o").exists()
