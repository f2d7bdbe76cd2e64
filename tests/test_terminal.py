"""What a CI log shows (issue 9, items 3-5): the summary table readable through a pipe at the default width,
stderr carrying edgeport's lines only, and the report saying where it was measured."""

import json
import os
import subprocess
import sys
import textwrap

from conftest import REPO, read_report, run_cli

MODELS = REPO / "tests" / "models.py"


def run_piped(*args, cwd=None, env_extra=None) -> subprocess.CompletedProcess:
    """The CLI with stdout/stderr as pipes and no COLUMNS: what a CI runner does."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env.update(PYTHONPATH=str(REPO), **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "edgeport", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=900)


def test_summary_table_is_readable_in_a_pipe(tmp_path):
    out = tmp_path / "out"
    result = run_piped("convert", f"{MODELS}:mlp", "-t", "onnx", "-t", "litert", "-q", "dynamic-int8", "--samples", "2",
                       "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == "", result.stderr          # converters' import noise (torchao, absl, XNNPACK) is in the logs
    assert "…" not in result.stdout
    header = next(line for line in result.stdout.splitlines() if line.startswith("target"))
    for column in ("target", "variant", "status", "max abs err", "max rel err", "cosine min", "p50 ms", "vs eager"):
        assert column in header
    report = read_report(out)
    row = next(line for line in result.stdout.splitlines() if line.startswith("onnx") and "dynamic-int8" in line)
    cosine = next(r for r in report["targets"] if r["target"] == "onnx" and r["variant"] == "dynamic-int8")["parity"]["cosine_min"]
    assert f"{cosine:.6f}" in row                                            # numbers printed in full
    assert "edgeport: onnx dynamic-int8" in result.stdout                     # progress as lines, not a spinner


def test_stderr_of_a_failing_convert_holds_only_edgeports_lines(tmp_path):
    (tmp_path / "branchy.py").write_text(textwrap.dedent('''
        import torch, warnings

        class Branchy(torch.nn.Module):
            def forward(self, x):
                warnings.warn("a library warning that belongs in the log")
                if x.sum() > 0:            # data-dependent branch: torch.export refuses it
                    return x * 2
                return x

        def build():
            return Branchy(), (torch.randn(1, 4),)
    '''))
    out = tmp_path / "out"
    result = run_piped("convert", tmp_path / "branchy.py:build", "-t", "onnx", "--out", out)
    assert result.returncode == 1
    assert [line for line in result.stderr.splitlines() if line.strip()] == [], result.stderr
    assert "torch.export failed" in result.stdout and "branchy.py" in result.stdout
    assert "graph(" not in result.stdout and "Traceback" not in result.stdout
    log = (out / "edgeport.log").read_text()
    assert "a library warning that belongs in the log" in log


def test_corrupt_pt2_is_one_line(tmp_path):
    bad = tmp_path / "bad.pt2"
    bad.write_bytes(b"PK\x03\x04 not really a zip")
    result = run_piped("convert", bad, "-t", "onnx", "--out", tmp_path / "out")
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("edgeport: error:"), result.stderr


def test_report_says_where_it_was_measured_and_baselines_compare_environments(tmp_path):
    out = tmp_path / "out"
    result = run_cli("convert", f"{MODELS}:mlp", "-t", "onnx", "--samples", "2", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    report = read_report(out)
    env = report["environment"]
    assert env["python"].count(".") == 2 and env["cpu"]["cores"] >= 1 and isinstance(env["cpu"]["isa"], list)
    assert {"torch", "onnxruntime", "onnx"} <= set(env["packages"])
    assert "Measured on:" in (out / "report.md").read_text() and "Measured on:" in (out / "report.html").read_text()
    old = json.loads((out / "report.json").read_text())
    old["environment"]["cpu"] = {"model": "Some Other CPU", "cores": 64, "isa": ["avx2", "fma", "amx_int8"]}
    old["targets"][0]["latency_ms"]["p50"] /= 100          # would be a latency regression on the same machine
    (tmp_path / "old.json").write_text(json.dumps(old))
    result = run_cli("report", out, "--baseline", tmp_path / "old.json")
    assert result.returncode == 0, result.stdout + result.stderr
    baseline = read_report(out)["baseline"]
    assert baseline["comparable"] and any("cpu.model" in n for n in baseline["notes"])
    assert any("latency not compared" in n for n in baseline["notes"])


def test_a_baseline_of_another_model_is_not_compared_silently(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    for spec, out in (("mlp", first), ("two_io", second)):
        assert run_cli("convert", f"{MODELS}:{spec}", "-t", "onnx", "--no-latency", "--samples", "2", "--out", out).returncode == 0
    result = run_cli("report", second, "--baseline", first)
    assert result.returncode == 1
    baseline = read_report(second)["baseline"]
    assert baseline["comparable"] is False and "different model" in baseline["notes"][0]
    assert "different model" in result.stdout


def test_report_rows_without_a_target_are_bad_input(tmp_path):
    out = tmp_path / "out"
    assert run_cli("convert", f"{MODELS}:mlp", "-t", "onnx", "--no-latency", "--samples", "2", "--out", out).returncode == 0
    report = json.loads((out / "report.json").read_text())
    del report["targets"][0]["target"]
    (out / "report.json").write_text(json.dumps(report))
    result = run_cli("report", out)
    assert result.returncode == 2 and "row 0" in result.stderr and "Traceback" not in result.stderr


def test_long_work_shows_each_targets_steps_with_elapsed_time_in_a_ci_log(tmp_path):
    """Issue 21 item 4: without a terminal every step of every target is one plain line with the elapsed
    time and a UTC timestamp (no colour codes, no per-percent spam)."""
    import re

    out = tmp_path / "out"
    result = run_piped("convert", f"{MODELS}:mlp", "-t", "onnx", "-t", "litert", "-t", "tpu", "--tpu-topology", "v5e:1x1",
                       "--samples", "2", "--no-latency", "--jobs", "1", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "\x1b" not in result.stdout + result.stderr
    step = re.compile(r"^edgeport: (\w+) fp32: (.+) \[\+(\d+\.\ds|\d+m\d\ds), \d\d:\d\d:\d\dZ(; previous step [^\]]+)?\]$")
    steps: dict[str, list[str]] = {}
    for line in result.stdout.splitlines():
        match = step.match(line)
        if match:
            steps.setdefault(match[1], []).append(match[2])
    assert steps.get("onnx", [])[:2] == ["torch.onnx export", "serialization"], steps
    assert steps.get("litert", [])[:2] == ["litert_torch conversion", "serialization"], steps
    assert steps.get("tpu", [])[:3] == ["lowering (torchax)", "jax.export serialization", "compile v5e:1x1"], steps
    for target in ("onnx", "litert", "tpu"):
        assert steps[target][-2].startswith("judge"), steps[target]
        assert steps[target][-1].startswith("ok (cosine_min"), steps[target]   # the row's verdict line, as it finished
    assert len(result.stdout.splitlines()) < 60                              # one line per step, not per percent


def test_the_status_line_keeps_counting_the_current_steps_time():
    """On a terminal the status line is re-rendered by Rich: its text is computed at render time."""
    import re

    from edgeport.cli.app import Ticking
    from edgeport.core.progress import Clock

    now = [100.0]
    clock = Clock(now=lambda: now[0])
    now[0] = 103.0
    assert clock.begin("tpu fp32: compile v5e:2x2") == 3.0
    now[0] = 170.0
    assert Ticking(clock).__rich__().plain == "tpu fp32: compile v5e:2x2 (1m07s, total 1m10s)"
    now[0] = 171.0                                                            # the next refresh, no new step
    assert Ticking(clock).__rich__().plain == "tpu fp32: compile v5e:2x2 (1m08s, total 1m11s)"
    took = clock.begin("tpu fp32: judge")
    assert re.fullmatch(r"edgeport: tpu fp32: judge \[\+1m11s, \d\d:\d\d:\d\dZ; previous step 1m08s\]",
                        clock.line("tpu fp32: judge", took))
