"""Every number a row quotes agrees with the row's own metrics: a parity error names the output's extreme
(the row's cosine_min), the fallback's "best" names each metric's best with its float count and how it was
measured, and an ONNX row names where its time goes (onnxruntime's profile, by op type)."""

import numpy as np


def test_a_parity_error_quotes_the_outputs_lowest_cosine_when_another_sample_is_worst():
    from edgeport.validate.parity import compare

    rng = np.random.default_rng(0)
    ref = [rng.standard_normal(256).astype(np.float32) for _ in range(2)]
    spiked = ref[0].copy()
    spiked[0] += 8.0                                   # sample 0: one huge error (worst scaled error), cosine ~0.9
    noisy = ref[1] + 1.2 * rng.standard_normal(256).astype(np.float32)   # sample 1: the lowest cosine
    result = compare([[r] for r in ref], [[spiked], [noisy]], {"cosine_min": 0.99}, ["y"])
    lowest = result["cosine_min"]
    assert not result["passed"] and result["outputs"][0]["worst_sample"] == 0
    assert result["message"].startswith("y sample 0: cosine")
    assert f"lowest cosine {lowest:.6f} at sample 1" in result["message"], result["message"]


def test_the_fallbacks_best_is_quoted_per_metric_with_how_it_was_measured():
    from edgeport.quantize.fallback import best_steps

    steps = [{"float_layers": 0, "cosine_min": 0.66, "snr_db_min": 2.0, "measured": "artifact"},
             {"float_layers": 1, "cosine_min": 0.9388, "snr_db_min": 8.0, "measured": "simulation"},
             {"float_layers": 2, "cosine_min": 0.9349, "snr_db_min": 9.5, "measured": "simulation"}]
    text = best_steps(steps)
    assert "best cosine 0.9388 with 1 float (simulation)" in text and "best SNR 9.5 dB with 2 float (simulation)" in text
    assert best_steps(steps[:1]) == ""


def test_an_onnx_row_names_its_time_by_op_type(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    from edgeport.targets.onnx.profile import describe
    from edgeport.targets.onnx.runtime import OnnxRunner

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256])
    w = helper.make_tensor("w", TensorProto.FLOAT, [256, 256], np.ones(256 * 256, np.float32))
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
                              "g", [x], [y], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    runner = OnnxRunner(tmp_path / "m.onnx", 1)
    assert runner.speed_causes({"latency_ms": None}) == [], "not timed: nothing profiled"
    runner.run([np.ones((1, 256), np.float32)])
    [cause] = runner.speed_causes({"latency_ms": {"p50": 0.05}})
    assert cause.startswith("time by op type (onnxruntime profile") and "MatMul" in cause and "Relu" in cause
    assert not list(tmp_path.glob("*.json")), "the profile file stays out of the artifact's folder"
    causes = describe({"QGemm": 40.0, "QuantizeLinear": 30.0, "DequantizeLinear": 30.0})
    assert "quantize/dequantize ops take 60% of the kernel time" in causes[1]
