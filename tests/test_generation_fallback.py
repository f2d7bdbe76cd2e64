"""``--fallback float`` on text generation (issue 37): a quantized row over its quality budget keeps the weight
groups that cost the most KLD in float, is rebuilt and judged again on the same eval text. One tiny GGUF
(random llama, 2 blocks: 5 groups) converted to ONNX int4-block32 with a mean-KLD budget its full int4 misses
(0.00030 measured) and one float group meets (lm_head float: 0.00019)."""

import json

import numpy as np
import pytest

import tiny_gguf
from conftest import read_report, run_cli
from test_quality import TEXT

BUDGET = 0.00025


def convert_searched(root, target: str, keep: str, budget: float, also=()):
    """(result, DIR): the tiny GGUF's int4-block32 row (and the ``also`` variants, on their default budgets)
    on ``target`` over TEXT with a mean-KLD budget and ``--fallback keep`` allowed every group (the searches'
    shared conversion)."""
    model = tiny_gguf.write(root / "tiny.gguf")
    (root / "text.txt").write_text(TEXT)
    # a check every answer holds: the candidates that meet the budget go through the search's checks gate too
    (root / "checks.json").write_text(json.dumps([{"name": "any", "prompt": "Hello", "regex": "", "max_new_tokens": 2}]))
    out = root / "out"
    variants = [a for v in also for a in ("-q", v)]
    result = run_cli("convert", model, "-t", target, *variants, "-q", "int4-block32", "--prefill-len", "8", "--cache-len", "96",
                     "--gen-tokens", "4", "--no-latency", "--no-cache", "--eval-text", root / "text.txt",
                     "--eval-tokens", "40", "--fallback", keep, "--fallback-max", "100%", "--checks", root / "checks.json",
                     "--budget", f"{target}.int4-block32.kld_mean_max={budget}", "--out", out, timeout=900)
    return result, out


def assert_searched_row_passed(result, out, row: dict, groups: int, measured: str) -> list[str]:
    """What every target's searched row shows: the rebuilt artifact's mean KLD is below the full int4's, it
    names its kept groups (a proper subset of ``groups``), the search curve starts at the failed artifact and
    ends at the passing one, the kept groups cost size, and the files are what the row names. Returns the
    kept groups' names."""
    assert result.returncode == 0, result.stderr
    q = row["quantization"]
    assert row["status"] == "ok" and q["before"]["kld_mean"] > row["quality"]["kld_mean"]
    assert q["after"]["kld_mean"] == row["quality"]["kld_mean"] and q["measured"] == measured
    floats = [layer["name"] for layer in q["float_layers"]]
    assert q["layers"] == groups and 0 < len(floats) < groups
    assert q["search"][0] == {**q["search"][0], "float_layers": 0, "measured": "artifact", "passed": False}
    assert q["search"][-1] == {**q["search"][-1], "float_layers": len(floats), "measured": "artifact", "passed": True}
    assert q["after"]["size_bytes"] == row["size_bytes"] > q["before"]["size_bytes"]
    assert any(", ".join(floats) in note for note in row["notes"])
    assert sum((out / f["path"]).stat().st_size for f in row["files"]) == row["size_bytes"]
    return floats


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    result, out = convert_searched(tmp_path_factory.mktemp("genfallback"), "onnx", "float", BUDGET)
    return result, out, read_report(out)


def test_row_over_budget_keeps_groups_float_and_passes_rebuilt(searched):
    """Full int4 misses the budget; the rebuilt artifact (judged through onnxruntime on the same text) meets it,
    lists its float groups in report.json, costs size, and its files are what the row names."""
    result, out, report = searched
    row = next(r for r in report["targets"] if r["variant"] == "int4-block32")
    floats = assert_searched_row_passed(result, out, row, 5, "simulation")
    assert row["quality"]["kld_mean"] <= BUDGET and row["checks"]["passed"] == row["checks"]["total"] == 1
    assert row["checks"]["lost"] == 0 and floats
    assert all(layer["why"].startswith("--fallback float") for layer in row["quantization"]["float_layers"])
    assert "Fallback search (float groups" in (out / "report.md").read_text()


def test_simulation_matches_the_artifact_it_predicts(searched):
    """The search's candidates run the artifact's own quantized weights in the fp32 graphs: its prediction of
    the winner is the rebuilt artifact's measurement (within float rounding), not an estimate."""
    _, _, report = searched
    q = next(r for r in report["targets"] if r["variant"] == "int4-block32")["quantization"]
    sim = [s for s in q["search"] if s["measured"] == "simulation" and s["float_layers"] == len(q["float_layers"])]
    real = q["search"][-1]
    assert sim and np.isclose(sim[-1]["kld_mean"], real["kld_mean"], rtol=1e-3)
    ranked = [g["kld_mean"] for g in q["sensitive_layers"]]
    assert ranked == sorted(ranked, reverse=True) and q["float_layers"][0]["name"] == q["sensitive_layers"][0]["name"]


def test_fallback_needs_a_variant_that_can_keep_groups_float(tmp_path):
    """dynamic-int8 quantizes activations inside ONNX's kernel (no simulation): --fallback float without a
    variant it can search is exit 2, one line naming the ones it can."""
    model = tiny_gguf.write(tmp_path / "tiny.gguf")
    result = run_cli("convert", model, "-t", "onnx", "-q", "dynamic-int8", "--fallback", "float", "--out", tmp_path / "out")
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip()
    assert "\n" not in line and "onnx int4-block32" in line and "--fallback float" in line, line
    assert not (tmp_path / "out").exists()


def test_a_budget_no_allowed_search_meets_fails_and_says_how_far_it_got(tmp_path, monkeypatch):
    """A mean-KLD budget one float group cannot meet with --fallback-max 1: the row fails (exit 1), the
    search's steps are in report.json and the error names the cap and the best it measured. The rows run in
    worker processes (-j 2; the crash hook, which fires only in a worker, ends the fp32 row's): the policy
    reaches a worker's rebuilt session."""
    model = tiny_gguf.write(tmp_path / "tiny.gguf")
    (tmp_path / "text.txt").write_text(TEXT)
    monkeypatch.setenv("EDGEPORT_TEST_CRASH", f"onnx/fp32={tmp_path / 'attempts'}")
    result = run_cli("convert", model, "-t", "onnx", "-q", "fp32", "-q", "int4-block32", "--prefill-len", "8",
                     "--cache-len", "96", "--gen-tokens", "4", "--no-latency", "--no-cache", "--eval-text",
                     tmp_path / "text.txt", "--eval-tokens", "40", "--fallback", "float", "--fallback-max", "1",
                     "--budget", "onnx.int4-block32.kld_mean_max=1e-9", "-j", "2", "--out", tmp_path / "out", timeout=900)
    assert result.returncode == 1, result.stderr
    assert "--fallback float: 1 group(s) float fail: mean KLD" in result.stdout + result.stderr, result.stdout   # why, as it happens
    fp32 = next(r for r in read_report(tmp_path / "out")["targets"] if r["variant"] == "fp32")
    assert "worker process exited" in fp32["error"], fp32
    row = next(r for r in read_report(tmp_path / "out")["targets"] if r["variant"] == "int4-block32")
    q = row["quantization"]
    assert row["status"] == "failed" and "still over budget with up to 1 of 5 weight groups float" in row["error"], row["error"]
    assert [s["float_layers"] for s in q["search"]] == [0, 1] and not any(s["passed"] for s in q["search"])
    assert q["float_layers"] == [] and "after" not in q and row["size_bytes"] == q["before"]["size_bytes"]
