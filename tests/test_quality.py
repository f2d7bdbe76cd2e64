"""Quality on real text and task checks (issue 37): the llama.cpp-style numbers (KLD, same top-1, perplexity)
teacher-forced through each artifact's own prefill/decode signatures, their budgets replacing free-running
token agreement as the gate of reduced-precision rows, and --checks. One tiny GGUF conversion (ONNX fp32 +
dynamic-int8) carries the end-to-end assertions; the metrics and the checks are also tested on their own."""

import json
import math

import numpy as np
import pytest

import tiny_gguf
from conftest import read_report, run_cli

TEXT = ("The quick brown fox jumps over the lazy dog. " * 4 + "Python is a programming language that lets you work "
        "quickly and integrate systems more effectively. ") * 3


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """ONNX fp32 + dynamic-int8 of a tiny GGUF, with a mean-KLD budget on int8 no quantization can meet."""
    root = tmp_path_factory.mktemp("quality")
    model = tiny_gguf.write(root / "tiny.gguf")
    (root / "text.txt").write_text(TEXT)
    (root / "checks.json").write_text(json.dumps([
        {"name": "anything", "prompt": "Say something.", "regex": ".", "max_new_tokens": 4},
        {"name": "paris", "prompt": "What is the capital of France?", "contains": "Paris", "max_new_tokens": 4}]))
    out = root / "out"
    result = run_cli("convert", model, "-t", "onnx", "-q", "dynamic-int8", "--prefill-len", "8", "--cache-len", "96",
                     "--gen-tokens", "4", "--no-latency", "--eval-text", root / "text.txt", "--eval-tokens", "40",
                     "--checks", root / "checks.json", "--budget", "onnx.dynamic-int8.kld_mean_max=1e-12",
                     "--out", out, timeout=900)
    return result, out, read_report(out)


def rows(report):
    return {r["variant"]: r for r in report["targets"]}


def test_fp32_is_the_reference_on_real_text(converted):
    result, out, report = converted
    fp32 = rows(report)["fp32"]
    q = fp32["quality"]
    assert q["text"] == "text.txt" and q["tokens"] == 40 and len(q["kld_per_token"]) == 40
    assert q["kld_mean"] < 1e-6 and q["top1_agreement"] == 1.0 and abs(q["delta_ppl"]) < 1e-3 * q["ppl_reference"]
    assert fp32["status"] == "ok" and fp32["generation"]["token_agreement"] == 1.0


def test_quality_budget_gates_the_quantized_row(converted):
    """int8 moves the distributions (KLD above fp32's) and its budget of 1e-12 fails it: exit 1, the error
    names the mean KLD, and token agreement is not what gated it."""
    result, out, report = converted
    assert result.returncode == 1, result.stderr
    fp32, int8 = rows(report)["fp32"], rows(report)["dynamic-int8"]
    assert int8["status"] == "failed" and "mean KLD" in int8["error"], int8["error"]
    assert int8["quality"]["kld_mean"] > 100 * fp32["quality"]["kld_mean"]
    assert "token_agreement_min" not in int8["parity"]["budget"]["gate"]
    assert "kld_mean_max" in int8["parity"]["budget"]["gate"]
    assert "Quality on real text" in (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    assert "<polyline" in html and "KL divergence from PyTorch fp32 per token" in html and "<script" not in html


def test_checks_run_on_pytorch_and_every_artifact(converted):
    _, _, report = converted
    for row in report["targets"]:
        checks = row["checks"]
        assert checks["total"] == 2 and checks["reference_passed"] == 1 and checks["passed"] == 1
        assert [r["name"] for r in checks["results"]] == ["anything", "paris"]
        assert checks["results"][1]["why"] == "no 'Paris' in the answer"


def test_distribution_metrics_follow_llama_cpp_definitions():
    from edgeport.validate.distribution import distribution_metrics

    ref = np.log(np.array([[0.5, 0.25, 0.25], [0.1, 0.8, 0.1]]))
    got = np.log(np.array([[0.25, 0.5, 0.25], [0.1, 0.8, 0.1]]))
    m = distribution_metrics(ref + 3.0, got, np.array([0, 1]))   # a constant shift of logits changes nothing
    kld0 = 0.5 * math.log(2) + 0.25 * math.log(0.5)
    assert m["kld_per_token"] == pytest.approx([kld0, 0.0], abs=1e-6)
    assert m["kld_mean"] == pytest.approx(kld0 / 2) and m["kld_max"] == pytest.approx(kld0)
    assert m["kld_p99"] == pytest.approx(np.percentile([kld0, 0.0], 99))
    assert m["top1_agreement"] == 0.5
    assert m["ppl_reference"] == pytest.approx(math.exp(-(math.log(0.5) + math.log(0.8)) / 2))
    assert m["ppl"] == pytest.approx(math.exp(-(math.log(0.25) + math.log(0.8)) / 2))
    assert m["delta_ppl"] == pytest.approx(m["ppl"] - m["ppl_reference"])


def test_windows_score_each_token_once_with_context():
    from edgeport.pipeline.tasks.text_generation.layout import Layout
    from edgeport.pipeline.tasks.text_generation.quality import windows_of

    layout = Layout("m", None, 100, 1, 16, [4, 8], 2, None, [])
    context, windows = windows_of(list(range(60)), layout, 20)
    assert context == 8 and all(len(w) <= 16 for w in windows)
    scored = [t for w in windows for t in w[context:]]
    assert scored == list(range(8, 28))   # every next token once, in order, each after >= 8 tokens of context


def test_default_text_is_pythons_help_topics():
    from edgeport.pipeline.tasks.text_generation.quality import read_text

    name, text = read_text(None)
    assert "pydoc_data" in name and len(text) > 100_000


def test_checks_file_errors_are_usage_errors(tmp_path):
    from edgeport.errors import UsageError
    from edgeport.pipeline.tasks.text_generation.checks import read_checks

    cases = [([], "expected a list"), ([{"prompt": "x"}], "exactly one of"),
             ([{"prompt": "x", "regex": "("}], "bad regex"), ([{"prompt": "", "contains": "a"}], "non-empty 'prompt'"),
             ([{"prompt": "x", "json_schema": {"type": 3}}], "bad JSON schema")]
    for n, (data, message) in enumerate(cases):
        path = tmp_path / f"c{n}.json"
        path.write_text(json.dumps(data))
        with pytest.raises(UsageError, match=message):
            read_checks(str(path))
    toml = tmp_path / "c.toml"
    toml.write_text('[[checks]]\nprompt = "Capital of France?"\ncontains = "Paris"\n')
    assert read_checks(str(toml))[0]["kind"] == "contains"


def test_checks_hold_and_gate_on_the_drop():
    from edgeport.pipeline.tasks.text_generation.checks import checks_failures, holds

    schema = {"kind": "json_schema", "expected": {"type": "object", "required": ["city"]}}
    assert holds(schema, 'Sure: {"city": "Paris"} done')[0]
    assert holds(schema, '{"town": "Paris"}') == (False, "the answer's JSON breaks the schema: 'city' is a required property")
    assert holds({"kind": "regex", "expected": r"\d+"}, "it is 42")[0]
    block = {"total": 4, "passed": 2, "reference_passed": 3, "pass_rate": 0.5, "reference_pass_rate": 0.75,
             "results": [{"name": "a", "passed": False, "reference_passed": True}]}
    assert "lost: a" in checks_failures(block, {"checks_drop_max": 0.0})[0]
    assert checks_failures(block, {"checks_drop_max": 1.0}) == []   # the one firm pass PyTorch had, lost
    block["results"][0]["fragile"] = True   # PyTorch's own pass was a near-tie: losing it is not counted
    assert checks_failures(block, {"checks_drop_max": 0.0}) == []
    block["results"].append({"name": "b", "passed": False, "reference_passed": True, "fragile": False})
    block.update(passed=1, pass_rate=0.25)
    assert checks_failures(block, {"checks_drop_max": 0.0}) == [
        "task checks: 1/4 pass vs PyTorch's 3/4 (lost 1 of the 1 PyTorch passes firmly, drop 1.000 > 0; lost: b; "
        "not counted, near-ties in PyTorch: a)"]


def test_the_checks_drop_is_a_share_of_what_pytorch_passes_and_a_gain_buys_nothing_back():
    """20 checks, PyTorch passes 10 firmly: losing 2 is a 0.2 drop (not 2/20), and passing a check PyTorch
    failed does not offset a lost one (the old net pass-rate difference would have read 0 here)."""
    from edgeport.pipeline.tasks.text_generation.checks import checks_drop, checks_failures

    results = [{"name": f"p{i}", "passed": i >= 2, "reference_passed": True} for i in range(10)]
    results += [{"name": f"f{i}", "passed": i < 2, "reference_passed": False} for i in range(10)]
    assert checks_drop(results) == (0.2, ["p0", "p1"], [], 10)
    block = {"total": 20, "passed": 10, "reference_passed": 10, "results": results}
    assert "lost 2 of the 10 PyTorch passes firmly, drop 0.200 > 0.1" in checks_failures(block, {"checks_drop_max": 0.1})[0]
    assert checks_failures(block, {"checks_drop_max": 0.2}) == []
    results[0]["fragile"] = True   # a near-tie leaves the numerator and the denominator
    assert checks_drop(results) == (1 / 9, ["p1"], ["p0"], 9)


def test_int4_may_lose_one_check_in_ten_other_variants_none():
    from edgeport.pipeline.tasks.text_generation.judge import generation_budget

    assert generation_budget({}, "int4-block32")["checks_drop_max"] == 0.1
    assert generation_budget({}, "dynamic-int8")["checks_drop_max"] == 0.0
    assert generation_budget({}, "fp32")["checks_drop_max"] == 0.0
    assert generation_budget({"checks_drop_max": 0.0}, "int4-block32")["checks_drop_max"] == 0.0


def test_a_checks_margin_is_taken_up_to_where_the_answer_holds():
    """The near-tie that matters is before the answer held: one after it cannot change the verdict."""
    import numpy as np

    from edgeport.pipeline.tasks.text_generation.checks import decisive_margin
    from edgeport.pipeline.tasks.text_generation.loop import Generation

    class Letters:   # token i decodes to the i-th letter
        def decode(self, ids, skip_special_tokens=True):
            return "".join(chr(ord("a") + i) for i in ids)

    logits = np.log(np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.34, 0.33, 0.33]]))
    generation = Generation([0, 1, 0], logits)   # "a", "ab", "aba"
    check = {"kind": "contains", "expected": "ab"}
    assert decisive_margin(check, generation, Letters()) == pytest.approx(0.5)    # steps 0-1: 0.5, 0.7
    assert decisive_margin({"kind": "contains", "expected": "aba"}, generation, Letters()) == pytest.approx(0.01)


def test_manifest_carries_each_artifacts_quality_for_the_app_screens(converted):
    _, out, report = converted
    manifest = json.loads((out / "manifest.json").read_text())
    entries = {a["variant"]: a["quality"] for a in manifest["generation"]["artifacts"]}
    for row in report["targets"]:
        q = entries[row["variant"]]
        assert q["kld_mean"] == row["quality"]["kld_mean"] and q["top1_agreement"] == row["quality"]["top1_agreement"]
        assert q["checks"] == {"total": 2, "passed": 1, "reference_passed": 1}
        assert "kld_per_token" not in q


def test_validate_judges_quantized_rows_on_real_text_too(converted, tmp_path):
    """validate has no model: its quality reference is the exported programs teacher-forced over the token
    windows convert scored (the user's --eval-text, saved in DIR/exported/), so a quantized row is gated on
    KLD there as in convert (not on free-running tokens, which an int4 row fails by design) and on the same
    text; --eval-text / --eval-tokens score afresh, and a tampered windows file is exit 2."""
    import shutil

    _, out, before = converted
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    result = run_cli("validate", copy, "--no-latency", "--budget", "onnx.dynamic-int8.kld_mean_max=1e-12")
    assert result.returncode == 1, result.stdout + result.stderr
    report = read_report(copy)
    fp32, int8 = rows(report)["fp32"], rows(report)["dynamic-int8"]
    assert fp32["status"] == "ok" and fp32["quality"]["kld_mean"] < 1e-6, fp32.get("quality")
    assert fp32["quality"]["text"] == "text.txt" and "exported programs" in fp32["quality"]["reference"]
    assert int8["quality"]["tokens"] == 40
    assert int8["quality"]["kld_mean"] == pytest.approx(rows(before)["dynamic-int8"]["quality"]["kld_mean"], rel=1e-3, abs=1e-6)
    assert int8["status"] == "failed" and "mean KLD" in int8["error"], int8["error"]
    assert "token_agreement_min" not in int8["parity"]["budget"]["gate"]

    result = run_cli("validate", copy, "--no-latency", "--eval-tokens", "24")
    assert result.returncode in (0, 1), result.stdout + result.stderr
    q = rows(read_report(copy))["fp32"]["quality"]
    assert q["text"].startswith("Python's help topics") and q["tokens"] == 24

    windows = copy / "exported" / "eval_windows.json"
    data = json.loads(windows.read_text())
    data["windows"][0][-1] = 10**9   # an id no vocabulary has
    windows.write_text(json.dumps(data))
    result = run_cli("validate", copy, "--no-latency")
    assert result.returncode == 2 and "eval windows" in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_a_non_finite_perplexity_is_written_as_the_schema_allows(converted, tmp_path):
    """An artifact whose logits overflow has an infinite perplexity: report.json says "inf" (JSON has no
    Infinity) and still meets the project's schema (it failed it before)."""
    import copy
    import jsonschema

    from conftest import REPORT_SCHEMA
    from edgeport.validate.report import write_json

    _, _, report = converted
    broken = copy.deepcopy(report)
    quality = rows(broken)["dynamic-int8"]["quality"]
    quality.update(ppl=float("inf"), delta_ppl=float("inf"), ppl_ratio=float("inf"), kld_max=float("nan"))
    written = write_json(tmp_path / "report.json", broken)
    assert rows(written)["dynamic-int8"]["quality"]["ppl"] == "inf"
    jsonschema.validate(json.loads((tmp_path / "report.json").read_text()), json.loads(REPORT_SCHEMA.read_text()))


def test_a_search_candidate_answers_only_the_firm_checks_and_stops_at_the_loss_that_breaks_the_budget():
    """A candidate's checks stop once the budget is broken (a failing candidate costs a few answers, not the
    file); checks PyTorch failed or passed through a near-tie cannot decide the gate, so they are not asked."""
    from edgeport.pipeline.tasks.text_generation.checks import lost_past_budget

    checks = [{"name": f"c{i}", "kind": "contains", "expected": "yes"} for i in range(12)]
    reference = [(i != 0, None, "", 0.01 if i == 1 else 0.5) for i in range(12)]   # c0 failed, c1 a near-tie
    asked = []

    def answer(check):
        asked.append(check["name"])
        return "no" if check["name"] in ("c2", "c3", "c5") else "yes"

    # 10 firm checks, 0.1 allows 1 lost: the second loss (c3) ends it
    assert lost_past_budget(checks, reference, 0.1, answer) == [
        "task checks: lost 2 of the 10 PyTorch passes firmly, more than checks_drop_max 0.1 allows "
        "(stopped there; lost: c2, c3)"]
    assert asked == ["c2", "c3"]
    asked.clear()
    assert lost_past_budget(checks, reference, 0.3, answer) == []   # 3 of 10 allowed: every firm check asked
    assert asked == [f"c{i}" for i in range(2, 12)]
