"""Reports rendered from report.json: md table, self-contained HTML with charts, JUnit cases, `edgeport report`,
and baselines (regression -> exit 1, none -> 0, unknown schema -> 2)."""

import copy
import itertools
import re
import json
from html.parser import HTMLParser
from xml.etree import ElementTree as ET

import numpy as np

from conftest import REPO, read_report, run_cli, validate_report
from edgeport.pipeline.report import tables
from edgeport.validate.parity import FP32, compare
from edgeport.validate.render import render_junit, render_markdown
from edgeport.validate.render_html import render_html
from edgeport.validate.report import write_outputs

MODELS = REPO / "tests" / "models.py"


def _row(target, variant, status, error=None, **extra):
    return {"target": target, "variant": variant, "status": status, "error": error, "artifact": None,
            "size_bytes": None, "convert_seconds": 1.0, "parity": None, "latency_ms": None, "tpu_compile": None, **extra}


def mixed_report() -> dict:
    """ok, parity-failed, conversion-failed, skipped and optional-failed rows, with real parity dicts."""
    rng = np.random.default_rng(0)
    ref = [[rng.standard_normal((2, 10)).astype(np.float32)] for _ in range(3)]
    close = [[r[0] + rng.normal(0, 1e-7, r[0].shape).astype(np.float32)] for r in ref]
    far = [[r[0] + rng.normal(0, 0.3, r[0].shape).astype(np.float32)] for r in ref]
    ok_parity = compare(ref, close, dict(FP32), ["logits"])
    bad_parity = compare(ref, far, dict(FP32), ["logits"])
    latency = {"p50": 0.5, "p90": 0.7, "runs": 10, "threads": 1}
    rows = [
        _row("onnx", "fp32", "ok", artifact="onnx/model.onnx", size_bytes=4096, parity=ok_parity, latency_ms=latency),
        _row("litert", "fp32", "failed", f"parity: {bad_parity['message']}", artifact="litert/model_fp32.tflite",
             size_bytes=2048, parity=bad_parity, latency_ms={**latency, "p50": 0.25}),
        _row("litert", "int8", "failed", "conversion failed: RuntimeError: unsupported op aten.foo"),
        _row("tpu", "fp32", "skipped", "not installed (torchax): pip install 'edgeport[tpu]'"),
        _row("onnx", "int8", "failed", "conversion failed: ValueError: boom", required=False),
    ]
    return {"schema": "edgeport.report/1", "edgeport_version": "0.1.0", "model": {"spec": "m.py:build", "params": 10, "flops": None},
            "passed": False, "targets": rows, "reference": {"latency_ms": {**latency, "p50": 1.0, "p90": 1.2}}}


class _Collector(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.rows, self.srcs, self._row = [], [], [], None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        self.srcs += [v for k, v in attrs.items() if k in ("src", "href")]
        if tag == "tr" and "class" in attrs:
            self._row = []
            self.rows.append((attrs["class"], self._row))

    def handle_data(self, data):
        if self._row is not None and data.strip():
            self._row.append(data.strip())


def test_markdown_has_one_table_and_first_error_lines():
    md = render_markdown(mixed_report())
    assert "| onnx | fp32 | ok | 4.0 KiB |" in md and "| tpu | fp32 | skipped |" in md
    assert "| onnx | int8 | failed (optional) |" in md
    assert "- **litert fp32**: parity: logits sample" in md
    assert "RuntimeError: unsupported op aten.foo" in md and "optional: does not fail the run" in md
    assert md.count("| target |") == 1
    assert "2.00×" in md  # onnx p50 0.5 ms vs eager 1.0 ms


def test_html_is_self_contained_with_table_and_charts():
    page = render_html(mixed_report())
    parser = _Collector()
    parser.feed(page)
    assert not parser.srcs, "no external resources"
    assert "<script" not in page and "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert [(cls, cells[:3]) for cls, cells in parser.rows] == [
        ("ok", ["onnx", "fp32", "ok"]), ("failed", ["litert", "fp32", "failed"]), ("failed", ["litert", "int8", "failed"]),
        ("skipped", ["tpu", "fp32", "skipped"]), ("failed", ["onnx", "int8", "failed (optional)"])]
    svgs = [attrs.get("class") for tag, attrs in parser.tags if tag == "svg"]
    assert svgs.count("latency") == 1 and svgs.count("histogram") == 2  # one per parity output (2 judged rows)
    bars = [a for t, a in parser.tags if t == "rect" and a.get("class") == "bar"]
    assert len(bars) == 3  # eager + the two timed rows
    assert float(bars[0]["width"]) > float(bars[1]["width"]) > float(bars[2]["width"]) > 0  # 1.0 > 0.5 > 0.25 ms


def test_histogram_counts_every_element():
    report = mixed_report()
    for row in report["targets"][:2]:
        hist = row["parity"]["outputs"][0]["error_histogram"]
        assert sum(hist["counts"]) + hist["zero"] == 3 * 2 * 10
        assert len(hist["counts"]) == len(hist["edges"]) + 1
    bad = report["targets"][1]["parity"]["outputs"][0]["error_histogram"]
    assert sum(bad["counts"][-4:]) > sum(bad["counts"][:-4]), "errors of ~0.3 land in the top decades"


def test_junit_one_case_per_row_failures_carry_messages():
    report = mixed_report()
    suite = ET.fromstring(render_junit(report))
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["onnx[fp32]", "litert[fp32]", "litert[int8]", "tpu[fp32]", "onnx[int8]"]
    failures = {c.get("name"): c.find("failure") for c in cases if c.find("failure") is not None}
    assert set(failures) == {"litert[fp32]", "litert[int8]", "tpu[fp32]"}  # a required skipped row fails the gate
    assert suite.get("failures") == "3" and suite.get("skipped") == "1" and suite.get("tests") == "5"
    assert failures["litert[fp32]"].get("message").startswith("parity: logits sample")
    assert "optional" in cases[4].find("skipped").get("message")


def test_write_outputs_schema_and_report_command_rerenders(tmp_path):
    report = write_outputs(tmp_path, mixed_report(), None)
    validate_report(report)
    for name in ("report.md", "report.html"):
        (tmp_path / name).unlink()
    result = run_cli("report", tmp_path, "--format", "md", "--format", "html", "--format", "junit")
    assert result.returncode == 1, result.stderr  # the report did not pass
    assert (tmp_path / "report.md").read_text() == render_markdown(report)
    assert ET.parse(tmp_path / "junit.xml").getroot().get("failures") == "3"
    assert "<svg" in (tmp_path / "report.html").read_text()
    one = run_cli("report", tmp_path, "-f", "md", "--output", tmp_path / "copy.md")
    assert one.returncode == 1 and (tmp_path / "copy.md").read_text() == render_markdown(report)


def _passing_dir(tmp_path, name="now"):
    report = mixed_report()
    report["targets"] = report["targets"][:1]
    directory = tmp_path / name
    directory.mkdir()
    write_outputs(directory, {**report, "passed": True}, None)
    return directory, json.loads((directory / "report.json").read_text())


def test_baseline_regressions_exit_1_and_are_marked(tmp_path):
    directory, report = _passing_dir(tmp_path)
    old = copy.deepcopy(report)
    row = old["targets"][0]
    row["size_bytes"] = 1000                         # now 4096: bigger
    row["latency_ms"]["p50"] = 0.1                   # now 0.5 ms: slower
    row["parity"]["max_rel_err"] = 1e-9              # now ~1e-7 but under the 1e-6 floor: not a regression
    (tmp_path / "old.json").write_text(json.dumps(old))
    result = run_cli("report", directory, "--baseline", tmp_path / "old.json", "-f", "md", "-f", "junit")
    assert result.returncode == 1, result.stdout + result.stderr
    failure = ET.parse(directory / "junit.xml").getroot().find("testcase/failure")
    assert failure is not None and "regression: bigger" in failure.get("message")
    marked = read_report(directory)
    regressions = marked["targets"][0]["regressions"]
    assert len(regressions) == 2 and any("bigger" in r for r in regressions) and any("slower" in r for r in regressions)
    assert marked["baseline"]["regressions"] == 2 and not marked["passed"]
    assert "REGRESSION: bigger" in (directory / "report.md").read_text()


def test_a_failed_baseline_row_is_nothing_to_regress_from(tmp_path):
    """Full int8 over budget in the baseline, fixed now (e.g. --fallback float keeps a few layers float: a
    bigger, slower artifact with more error than the failed one had): a fix, not a regression."""
    directory, report = _passing_dir(tmp_path)
    old = copy.deepcopy(report)
    row = old["targets"][0]
    row["status"], row["error"] = "failed", "parity: output_0 sample 0: cosine 0.78 < 0.95"
    row["size_bytes"], row["latency_ms"]["p50"], row["parity"]["max_rel_err"] = 1000, 0.1, 1e-9
    (tmp_path / "old.json").write_text(json.dumps(old))
    result = run_cli("report", directory, "--baseline", tmp_path / "old.json", "-f", "md")
    assert result.returncode == 0, result.stdout + result.stderr
    marked = read_report(directory)
    assert marked["targets"][0]["regressions"] == [] and marked["baseline"]["regressions"] == 0 and marked["passed"]


def test_baseline_parity_growth_and_thresholds_from_config(tmp_path):
    directory, report = _passing_dir(tmp_path)
    old = copy.deepcopy(report)
    old["targets"][0]["parity"]["max_rel_err"] = report["targets"][0]["parity"]["max_rel_err"] / 10
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "edgeport.toml").write_text("[baseline]\nerror_floor = 0.0\n")
    result = run_cli("report", directory, "--baseline", tmp_path / "old.json", cwd=tmp_path)
    assert result.returncode == 1 and "parity error grew" in json.dumps(read_report(directory)["targets"][0]["regressions"])
    (tmp_path / "edgeport.toml").write_text("[baseline]\nerror_floor = 0.0\nerror_factor = 20\n")
    assert run_cli("report", directory, "--baseline", tmp_path / "old.json", cwd=tmp_path).returncode == 1  # loosened
    old["config"] = {"baseline_thresholds": {"error_factor": 20.0, "error_floor": 0.0}}  # ... unless the baseline ran so
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert run_cli("report", directory, "--baseline", tmp_path / "old.json", cwd=tmp_path).returncode == 0


def test_same_baseline_is_no_regression(tmp_path):
    directory, _ = _passing_dir(tmp_path)
    result = run_cli("report", directory, "--baseline", directory / "report.json")
    assert result.returncode == 0, result.stderr
    assert read_report(directory)["baseline"]["regressions"] == 0


def test_unknown_baseline_schema_exit_2(tmp_path):
    directory, report = _passing_dir(tmp_path)
    (tmp_path / "future.json").write_text(json.dumps({**report, "schema": "edgeport.report/9"}))
    result = run_cli("report", directory, "--baseline", tmp_path / "future.json")
    assert result.returncode == 2 and "unknown report schema 'edgeport.report/9'" in result.stderr
    assert "Traceback" not in result.stderr
    out = tmp_path / "out"
    result = run_cli("convert", f"{MODELS}:mlp", "-t", "onnx", "--out", out, "--baseline", tmp_path / "future.json")
    assert result.returncode == 2 and "unknown report schema" in result.stderr and not out.exists()


def test_convert_with_baseline_and_optional_target(tmp_path):
    """End to end: an optional row over budget does not fail the run; a baseline regression on a required one does."""
    (tmp_path / "edgeport.toml").write_text('optional = ["onnx.dynamic-int8"]\n[budgets."onnx.dynamic-int8"]\nmax_abs_err = 0.0\n')
    first = tmp_path / "first"
    result = run_cli("convert", f"{MODELS}:mlp", "-t", "onnx", "-q", "dynamic-int8", "--out", first, "--no-latency",
                     "--no-localize", "--samples", "3", "--junit", "junit.xml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    report = read_report(first)
    assert report["passed"] and [r["required"] for r in report["targets"]] == [True, False]
    assert report["targets"][1]["status"] == "failed" and "does not fail the run" in (first / "report.md").read_text()
    assert ET.parse(first / "junit.xml").getroot().get("failures") == "0"
    old = json.loads((first / "report.json").read_text())
    old["targets"][0]["size_bytes"] //= 2
    (tmp_path / "old.json").write_text(json.dumps(old))
    second = tmp_path / "second"
    result = run_cli("convert", f"{MODELS}:mlp", "-t", "onnx", "--out", second, "--no-latency", "--samples", "3",
                     "--baseline", tmp_path / "old.json", cwd=tmp_path)
    assert result.returncode == 1
    assert "bigger" in read_report(second)["targets"][0]["regressions"][0]


# ---- model-provided text is escaped for each format (issue 9 item 17) ----

HOSTILE = "\x1b[31mboom\x1b[0m [red]lit[/red] <script>alert(1)</script> a|b & bell\x07 nul\x00 vt\x0b \u202eevil"


def _hostile_report() -> dict:
    report = mixed_report()
    report["model"]["spec"] = "m`x`.py:build"
    for row in report["targets"][1:]:
        row["error"] = HOSTILE
    report["targets"][0]["notes"] = [HOSTILE]
    report["targets"][0]["rewrites"] = ["<b>bold</b>|x"]
    report["targets"].append(_row("tpu", "fp32", "ok", tpu_compile=[{"topology": "v|1", "ok": False, "error": HOSTILE,
                                                                      "peak_bytes": None, "flops": None}]))
    report["sections"] = tables(report)  # what the pipeline stores: the TPU row's compile table
    return report


def test_junit_is_well_formed_with_control_characters():
    suite = ET.fromstring(render_junit(_hostile_report()))  # raises on characters XML 1.0 forbids
    failure = suite.find("testcase[@name='litert[int8]']/failure")
    assert "\\x07" in failure.get("message") and "\\x00" in failure.text and "\x1b" not in failure.text
    assert "<script>alert(1)</script>" in failure.text  # escaped by XML, read back as text
    assert "skipped" in [c.tag for c in suite.find("testcase[@name='onnx[int8]']")]


def test_markdown_carries_no_raw_html_and_keeps_its_table():
    md = render_markdown(_hostile_report())
    assert "<script>" not in md and "<b>" not in md and "&lt;script&gt;alert(1)&lt;/script&gt;" in md
    assert "a\\|b &amp; bell\\x07" in md and "\x1b" not in md and "\x00" not in md and "\u202e" not in md
    for header in ("| target |", "| variant | topology |"):
        lines = md.splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith(header))
        table = list(itertools.takewhile(lambda line: line.startswith("|"), lines[start:]))
        assert len(table) >= 3 and len({len(re.findall(r"(?<!\\)\|", line)) for line in table}) == 1, table
    assert md.startswith("# edgeport report — `` m`x`.py:build ``")


def test_html_has_no_control_characters():
    page = render_html(_hostile_report())
    assert "<script>" not in page and "\x1b" not in page and "\x07" not in page and "\\x07" in page


def test_printable_strips_escapes_and_rich_markup():
    from rich.console import Console

    from edgeport.validate.render import printable

    text = printable(HOSTILE)
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text and "\\u202e" in text
    console = Console(record=True, width=300, color_system=None)
    console.print(f"[red]row[/red]: {text}")
    shown = console.export_text()
    assert "boom [red]lit[/red] <script>" in shown and "\x1b" not in shown
    assert printable("[bold]x", markup=False) == "[bold]x"


def test_fingerprint_hashes_scalar_constants():
    """A 0-dim int buffer or constant (any BatchNorm's num_batches_tracked) crashed the weights hash."""
    import torch

    from edgeport.core.program import export_program, fingerprint, signature_of

    class Scaled(torch.nn.Module):
        def forward(self, x):
            return x * torch.tensor(3)

    program = export_program(Scaled(), (torch.ones(2),))
    assert any(v.dim() == 0 and not v.is_floating_point() for v in program.constants.values())
    assert len(fingerprint(program, signature_of(program))["weights_sha256"]) == 64


def test_sections_render_from_the_report_alone():
    """A target's tables are stored in report.json by the pipeline; renderers read them back without the
    registry, and leave out an entry that is not a table (a hand-edited file) instead of failing."""
    report = _hostile_report()
    stored = report["sections"]
    assert [s["key"] for s in stored] == ["tpu_compile"] and stored[0]["rows"][0][1] == "v|1"
    report["targets"] = report["targets"][:-1]  # the TPU row gone: its table still renders from "sections"
    report["sections"].append({"key": "broken", "title": "no rows"})
    md = render_markdown(report)
    assert "| variant | topology |" in md and "no rows" not in md
