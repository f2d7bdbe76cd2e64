"""Run ONNX artifacts on saved inputs and print their outputs' digest as JSON; tests/test_int8_portable.py runs
this natively and under an emulated CPU without AVX-512/VNNI (numpy + onnxruntime only, no edgeport)."""

import json
import sys

import numpy as np
import onnxruntime as ort


def main(inputs_npz: str, *models: str) -> None:
    from numpy._core._multiarray_umath import __cpu_features__ as features

    data = np.load(inputs_npz)
    samples = [[data[f"s{i}_{j}"] for j in range(int(data["n_inputs"]))] for i in range(int(data["n_samples"]))]
    result = {"vnni": bool(features.get("AVX512_VNNI")), "avx512f": bool(features.get("AVX512F")), "outputs": {}}
    for path in models:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        outs = [session.run(None, dict(zip(names, sample))) for sample in samples]
        result["outputs"][path] = [[o.tolist() for o in out] for out in outs]
    print(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:])
