"""Parity metrics and budgets on hand-made arrays: the judge itself must be right."""

import math

import numpy as np

from edgeport.config import budget_for, parse_budget_flags
from edgeport.validate.parity import compare, default_budget


def _one(ref, out, variant="fp32"):
    return compare([[np.asarray(ref, np.float32)]], [[np.asarray(out, np.float32)]], default_budget(variant), ["y"])


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
    result = compare(refs, outs, default_budget("fp32"), ["a", "b"])
    assert not result["passed"] and result["message"].startswith("b sample 2:")
    assert result["outputs"][0]["passed"] and not result["outputs"][1]["passed"]


def test_int8_judged_by_cosine_and_snr_not_abs():
    ref = np.linspace(-1, 1, 1000).astype(np.float32)
    noisy = ref + np.random.default_rng(0).normal(0, 0.01, ref.shape).astype(np.float32)
    assert _one(ref, noisy, "int8")["passed"]
    assert not _one(ref, noisy, "fp32")["passed"]
    assert not _one(ref, -ref, "int8")["passed"]
    assert math.isfinite(_one(ref, noisy, "int8")["snr_db_min"])


def test_shape_mismatch_fails():
    result = _one(np.ones((2, 3)), np.ones((3, 2)))
    assert not result["passed"] and "shape" in result["message"]


def test_budget_layers_general_to_specific():
    config = {"budgets": {"fp16": {"cosine_min": 0.9}, "litert.fp16": {"max_rel_err": 0.5}}}
    flags = parse_budget_flags(["snr_db_min=3", "fp16.cosine_min=0.8", "onnx.fp16.cosine_min=0.1"])
    budget = budget_for("litert", "fp16", config, flags)
    assert budget == {"max_rel_err": 0.5, "cosine_min": 0.8, "snr_db_min": 3.0}
