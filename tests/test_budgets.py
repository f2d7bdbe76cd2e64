"""Budget config beyond thresholds: top-k agreement for classifier outputs, `gate` lists, optional rows."""

import numpy as np
import pytest

from edgeport.config import baseline_thresholds, budget_for, is_required, load_config, parse_budget_flags
from edgeport.errors import UsageError
from edgeport.validate.parity import FP32, compare, topk_agreement


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
    budget = dict(FP32)
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


# ---- budgets that would silently do nothing are exit 2 (issue 9 item 14) ----

@pytest.mark.parametrize("flag,needle", [
    ("onxx.fp32.max_rel_err=1e-30", "unknown target 'onxx'"),
    ("onnx.fp16.max_rel_err=1e-3", "target 'onnx' has no variant 'fp16'"),
    ("fp33.cosine_min=0.9", "unknown variant 'fp33'"),
    ("onnx.cosine_min=0.9", "'onnx' is a target: write onnx.VARIANT"),
    ("fp32.max_rel=1e-3", "bad --budget"),
    ("fp32.max_rel_err=nan", "must be a finite number"),
    ("cosine_min=inf", "must be a finite number"),
    ("topk=2.5", "topk must be a whole number"),
    ("allow_empty=maybe", "expected true or false"),
])
def test_bad_budget_flags(flag, needle):
    with pytest.raises(UsageError) as info:
        parse_budget_flags([flag])
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_allow_keys_from_flags_and_tables(tmp_path):
    flags = parse_budget_flags(["onnx.fp32.allow_empty=true", "allow_nonfinite_reference=1"])
    budget = budget_for("onnx", "fp32", {"budgets": {"fp32": {"allow_empty": False}}}, flags)
    assert budget["allow_empty"] is True and budget["allow_nonfinite_reference"] is True
    assert "allow_empty" not in budget_for("litert", "fp32", {}, flags)
    (tmp_path / "edgeport.toml").write_text('[budgets."onnx.fp32"]\nallow_empty = true\n')
    assert load_config(cwd=tmp_path)["budgets"]["onnx.fp32"] == {"allow_empty": True}


@pytest.mark.parametrize("toml,needle", [
    ('[budgets."onxx.fp32"]\nmax_rel_err = 1e-3\n', "unknown target 'onxx'"),
    ('[budgets."tpu.int8"]\ncosine_min = 0.9\n', "target 'tpu' has no variant 'int8'"),
    ('[budgets.fp64]\ncosine_min = 0.9\n', "unknown variant 'fp64'"),
    ('[budgets.fp32]\nmax_rel_err = nan\n', "must be a finite number"),
    ('[budgets.fp32]\ncosine_min = -inf\n', "must be a finite number"),
    ('[budgets.fp32]\ncosine = 0.9\n', "unknown budget key 'cosine'"),
    ('[budgets.fp32]\nallow_empty = 1\n', "must be true or false"),
    ('optional = ["onxx"]\n', "unknown target 'onxx'"),
    ('optional = ["onnx.fp16"]\n', "target 'onnx' has no variant 'fp16'"),
])
def test_bad_config_tables_are_refused_when_read(tmp_path, toml, needle):
    (tmp_path / "edgeport.toml").write_text(toml)
    with pytest.raises(UsageError) as info:
        load_config(cwd=tmp_path)
    assert needle in str(info.value) and "edgeport.toml" in str(info.value)


def test_an_unknown_variant_is_an_error_not_the_fp32_budget():
    """A budget comes from the target's own table; a variant it does not offer is refused, never judged as fp32."""
    from edgeport.targets.registry import get_target

    assert budget_for("litert", "int8", {}, [])["cosine_min"] == 0.95
    with pytest.raises(UsageError, match="no variant 'int3'"):
        budget_for("litert", "int3", {}, [])
    with pytest.raises(UsageError, match="no variant 'bf16'"):
        get_target("onnx").budget("bf16")
