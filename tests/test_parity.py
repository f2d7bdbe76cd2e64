"""Parity metrics and budgets on hand-made arrays: the judge itself must be right."""

import math

import numpy as np

from edgeport.config import budget_for, parse_budget_flags
from edgeport.validate.parity import FP32, STATIC_INT8, compare


def _one(ref, out, budget=FP32):
    return compare([[np.asarray(ref, np.float32)]], [[np.asarray(out, np.float32)]], dict(budget), ["y"])


def test_identical_passes():
    result = _one([1.0, -2.0, 3.0], [1.0, -2.0, 3.0])
    assert result["passed"] and result["max_abs_err"] == 0 and result["cosine_min"] == 1.0


def test_nan_in_artifact_always_fails_even_with_huge_budget():
    ref = [[np.array([1.0, 2.0], np.float32)]]
    out = [[np.array([1.0, np.nan], np.float32)]]
    budget = {"max_abs_err": 1e9, "max_rel_err": 1e9, "cosine_min": -1.0}
    result = compare(ref, out, budget, ["y"])
    assert not result["passed"] and "NaN/Inf" in result["message"]


def test_scaled_error_ignores_near_zero_reference():
    ref = np.array([1e-9, 100.0], np.float32)
    out = ref + np.array([1e-6, 0.0], np.float32)
    result = _one(ref, out)
    assert result["passed"] and result["max_rel_err"] < 1e-7


def test_worst_sample_and_output_named():
    refs = [[np.ones(4, np.float32), np.ones(2, np.float32)] for _ in range(3)]
    outs = [[np.ones(4, np.float32), np.ones(2, np.float32)] for _ in range(3)]
    outs[2][1] = np.array([1.0, 1.5], np.float32)
    result = compare(refs, outs, dict(FP32), ["a", "b"])
    assert not result["passed"] and result["message"].startswith("b sample 2:")
    assert result["outputs"][0]["passed"] and not result["outputs"][1]["passed"]


def test_int8_judged_by_cosine_and_snr_not_abs():
    ref = np.linspace(-1, 1, 1000).astype(np.float32)
    noisy = ref + np.random.default_rng(0).normal(0, 0.01, ref.shape).astype(np.float32)
    assert _one(ref, noisy, STATIC_INT8)["passed"]
    assert not _one(ref, noisy, FP32)["passed"]
    assert not _one(ref, -ref, STATIC_INT8)["passed"]
    assert math.isfinite(_one(ref, noisy, STATIC_INT8)["snr_db_min"])


def test_shape_mismatch_fails():
    result = _one(np.ones((2, 3)), np.ones((3, 2)))
    assert not result["passed"] and "shape" in result["message"]


def test_budget_layers_general_to_specific():
    config = {"budgets": {"fp16": {"cosine_min": 0.9}, "litert.fp16": {"max_rel_err": 0.5}}}
    flags = parse_budget_flags(["snr_db_min=3", "fp16.cosine_min=0.8", "onnx.fp32.cosine_min=0.1"])
    budget = budget_for("litert", "fp16", config, flags)
    builtin = budget.pop("builtin")  # the target's own default rides along, for the report's budget audit
    assert budget == {"max_rel_err": 0.5, "cosine_min": 0.8, "snr_db_min": 3.0}
    assert builtin == {"max_rel_err": 2e-2, "cosine_min": 0.999}


# ---- honest verdicts (issue 9 item 13): a pass needs something compared ----

def test_nan_where_reference_is_nan_is_not_equal():
    result = _one([np.nan, np.nan, np.nan], [np.nan, np.nan, np.nan])
    assert not result["passed"] and result["elements_compared"] == 0
    assert result["outputs"][0]["reference_nonfinite"] == 3 and "allow_nonfinite_reference" in result["message"]
    allowed = compare([[np.full(3, np.nan, np.float32)]], [[np.full(3, np.nan, np.float32)]],
                      {**dict(FP32), "allow_nonfinite_reference": True}, ["y"])
    assert not allowed["passed"] and "nothing compared" in allowed["message"]  # allowed, but still nothing compared


def test_nonfinite_reference_allowed_judges_only_finite_elements():
    ref = [[np.array([-np.inf, 1.0, 2.0], np.float32)]]
    masked = [[np.array([np.finfo(np.float32).min, 1.0, 2.0], np.float32)]]  # a converter's -inf mask
    budget = {**dict(FP32), "allow_nonfinite_reference": True}
    assert not compare(ref, masked, dict(FP32), ["y"])["passed"]
    result = compare(ref, masked, budget, ["y"])
    assert result["passed"] and result["elements_compared"] == 2 and result["max_abs_err"] == 0.0
    assert "only its finite elements were compared" in result["notes"][0]
    wrong = compare(ref, [[np.array([-np.inf, 1.0, 3.0], np.float32)]], budget, ["y"])
    assert not wrong["passed"] and "max_rel_err" in wrong["message"]


def test_zero_size_output_is_nothing_compared_unless_allowed():
    empty = np.zeros((0, 4), np.float32)
    result = _one(empty, empty)
    assert not result["passed"] and "nothing compared: the output has no elements" in result["message"]
    assert result["outputs"][0]["empty"] is True and result["outputs"][0]["cosine_min"] is None
    allowed = compare([[empty]], [[empty]], {**dict(FP32), "allow_empty": True}, ["y"])
    assert allowed["passed"] and allowed["elements_compared"] == 0 and "allow_empty" in allowed["notes"][0]


def test_denormal_reference_flushed_by_runtime_passes_as_degenerate():
    ref = np.array([3e-40, -1e-40, 0.0, 2e-41], np.float32)  # float32 denormals, what FTZ runtimes flush
    result = _one(ref, np.zeros(4))
    output = result["outputs"][0]
    assert result["passed"], result["message"]
    assert output["degenerate_reference"]["max_abs_ref"] < 1e-39 and output["cosine_min"] is None
    assert "all zeros/denormal" in result["notes"][0] and result["cosine_min"] == 1.0


def test_degenerate_reference_with_signal_in_artifact_fails_naming_the_reference():
    result = _one(np.zeros(4), [0.5, 0.0, 0.0, 0.0])
    assert not result["passed"]
    assert "reference output is all zeros/denormal (max |ref| 0)" in result["message"]
    assert "differs by up to 0.5" in result["message"] and "cosine" not in result["message"].split("meaningless")[1]
    lenient = compare([[np.zeros(4, np.float32)]], [[np.array([0.5, 0, 0, 0], np.float32)]],
                      {**dict(FP32), "max_abs_err": 1.0}, ["y"])
    assert lenient["passed"]  # the budget's own absolute tolerance judges a no-signal output


def test_zero_sample_inside_an_output_with_signal_is_judged_by_the_outputs_scale():
    refs = [[np.linspace(-1, 1, 8).astype(np.float32)], [np.zeros(8, np.float32)]]
    outs = [[refs[0][0].copy()], [np.full(8, 1e-7, np.float32)]]  # float residue where the reference is exactly 0
    result = compare(refs, outs, dict(FP32), ["y"])
    assert result["passed"] and result["cosine_min"] > 0.99999, result["message"]  # sample 1 has no cosine
    far = compare(refs, [[refs[0][0].copy()], [np.full(8, 0.1, np.float32)]], dict(FP32), ["y"])
    assert not far["passed"] and far["message"].startswith("y sample 1: max_rel_err")


def test_artifact_with_fewer_outputs_fails_cleanly():
    result = compare([[np.ones(2, np.float32), np.ones(2, np.float32)]], [[np.ones(2, np.float32)]],
                     dict(FP32), ["a", "b"])
    assert not result["passed"] and "artifact returned 1 outputs, the model has 2" in result["message"]


def test_row_summary_stays_schema_valid(tmp_path):
    from conftest import validate_report
    from edgeport.validate.report import write_json

    cases = [([np.nan] * 2, [np.nan] * 2), (np.zeros((0, 2)), np.zeros((0, 2))), ([1e-40, 0], [0, 0]),
             ([0.0, 0.0], [0.5, 0.0]), ([1.0, 2.0], [np.inf, 2.0])]
    rows = [{"target": "t", "variant": "fp32", "status": "failed", "error": None, "artifact": None,
             "parity": _one(r, o), "latency_ms": None} for r, o in cases]
    report = write_json(tmp_path / "report.json", {"schema": "edgeport.report/1", "edgeport_version": "0", "passed": False,
                                                   "model": {"spec": "m"}, "targets": rows})
    validate_report(report)
    assert [r["parity"]["passed"] for r in report["targets"]] == [False, False, True, False, False]
