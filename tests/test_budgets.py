"""Budget config beyond thresholds: top-k agreement for classifier outputs, `gate` lists, optional rows."""

import numpy as np
import pytest

from edgeport.config import baseline_thresholds, budget_for, is_required, parse_budget_flags
from edgeport.errors import UsageError
from edgeport.validate.parity import compare, default_budget, topk_agreement


def test_topk_agreement_counts_rows():
    ref = np.array([[0.1, 0.9, 0.0], [0.8, 0.1, 0.1], [0.2, 0.3, 0.5], [0.3, 0.3, 0.4]], np.float32)
    out = np.array([[0.1, 0.9, 0.0], [0.05, 0.8, 0.15], [0.2, 0.5, 0.3], [0.3, 0.3, 0.4]], np.float32)
    assert topk_agreement([ref], [out], 1) == 0.5
    assert topk_agreement([ref], [out], 2) == 0.75  # row 1's top-1 (class 0) is not in the artifact's top-2 {1, 2}


def test_topk_budget_gates_classifier_outputs_only_where_asked():
    rng = np.random.default_rng(0)
    logits = [[rng.standard_normal((16, 10)).astype(np.float32), rng.standard_normal((16, 10)).astype(np.float32)]]
    swapped = [[-logits[0][0], logits[0][1].copy()]]  # output "a" ranks classes backwards, "b" is exact
    budget = {"topk_agreement_min": 0.9, "topk": 3}
    result = compare(logits, swapped, budget, ["a", "b"])
    assert not result["passed"] and result["message"].startswith("a: top-3 agreement")
    assert result["outputs"][1]["topk_agreement"] == 1.0 and result["outputs"][0]["topk"] == 3
    assert compare(logits, swapped, {**budget, "topk_outputs": ["b"]}, ["a", "b"])["passed"]


def test_gate_list_reports_but_does_not_gate_other_metrics():
    ref = [[np.linspace(-1, 1, 100).astype(np.float32)]]
    noisy = [[ref[0][0] + np.float32(0.001)]]
    budget = default_budget("fp32")
    assert not compare(ref, noisy, budget, ["y"])["passed"]
    gated = compare(ref, noisy, {**budget, "gate": ["cosine_min"]}, ["y"])
    assert gated["passed"] and gated["max_rel_err"] > budget["max_rel_err"]


def test_config_lists_and_flags():
    config = {"budgets": {"int8": {"gate": ["cosine_min"], "topk_agreement_min": 0.95, "topk": 5},
                          "onnx.int8": {"topk_outputs": ["logits"]}}}
    flags = parse_budget_flags(["onnx.int8.gate=cosine_min,topk_agreement_min"])
    budget = budget_for("onnx", "int8", config, flags)
    assert budget["gate"] == ["cosine_min", "topk_agreement_min"] and budget["topk_outputs"] == ["logits"]
    assert budget["topk"] == 5.0
    with pytest.raises(UsageError, match="unknown metric 'cosine'"):
        budget_for("onnx", "int8", {"budgets": {"int8": {"gate": ["cosine"]}}}, [])
    with pytest.raises(UsageError, match="must be a number"):
        budget_for("onnx", "int8", {"budgets": {"int8": {"cosine_min": "high"}}}, [])


def test_optional_rows_and_baseline_thresholds():
    config = {"optional": ["tpu", "litert.int8"], "baseline": {"latency_factor": 2}}
    assert not is_required("tpu", "fp32", config) and not is_required("litert", "int8", config)
    assert is_required("litert", "fp32", config) and is_required("onnx", "int8", {})
    assert baseline_thresholds(config)["latency_factor"] == 2.0 and baseline_thresholds({})["size_factor"] == 1.05
    with pytest.raises(UsageError, match="unknown key 'speed'"):
        baseline_thresholds({"baseline": {"speed": 1}})
