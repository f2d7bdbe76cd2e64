"""Bad input: exit 2, one line naming the problem, no traceback, nothing left in --out or beside it."""

from pathlib import Path

import pytest

from conftest import REPO, run_cli, write_model_file

MODELS = REPO / "tests" / "models.py"


def _assert_usage_error(result, out: Path, needle: str):
    assert result.returncode == 2, result.stderr
    lines = [ln for ln in result.stderr.strip().splitlines() if ln.startswith("edgeport: error:")]
    assert len(lines) == 1, result.stderr
    assert needle in lines[0]
    assert "Traceback" not in result.stderr
    assert not out.exists() or not any(out.iterdir())
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")], "staging dir left behind"


@pytest.mark.parametrize("spec_suffix,needle", [
    ("missing.py:build", "model file not found"),
    ("MODELS:nope", "has no attribute 'nope'"),
    ("RAISES:build", "raised RuntimeError: boom"),
    ("WRONG:build", "must return an nn.Module"),
    ("no_such_pkg.models:build", "no module named 'no_such_pkg'"),
    ("nothing_here.pt2", "exported program not found"),
    ("justtext", "bad MODEL"),
])
def test_bad_model_specs(tmp_path, spec_suffix, needle):
    raises = write_model_file(tmp_path, "def build():\n    raise RuntimeError('boom')\n", "raises.py")
    wrong = write_model_file(tmp_path, "def build():\n    return 42\n", "wrong.py")
    spec = (spec_suffix.replace("MODELS", str(MODELS)).replace("RAISES", str(raises)).replace("WRONG", str(wrong)))
    if spec.startswith("missing") or spec.endswith(".pt2"):
        spec = str(tmp_path / spec)
    out = tmp_path / "out"
    _assert_usage_error(run_cli("convert", spec, "--out", out, cwd=tmp_path), out, needle)


@pytest.mark.parametrize("flag,needle", [
    ("x:1by20:float32", "bad shape '1by20'"),
    ("x:1x20:float99", "unknown dtype 'float99'"),
    ("x1x20", "expected NAME:SHAPE:DTYPE"),
    ("x:1x20:int64:10..5", "LOW must be below HIGH"),
    ("x:1x20:float32:1.2.3..4", "bad range '1.2.3..4'"),
    ("x:1x20:float32:nan..1", "bad range 'nan..1'"),
    ("x:1x20:int8:0..1000", "int8 values are drawn from [-128, 128)"),
    ("x:100000x100000x100:float32", "input x would need 3,725.3 GiB"),
])
def test_bad_input_flags(tmp_path, flag, needle):
    out = tmp_path / "out"
    _assert_usage_error(run_cli("convert", f"{MODELS}:bare_mlp", "--input", flag, "--out", out), out, needle)


def test_module_without_inputs_asks_for_input(tmp_path):
    out = tmp_path / "out"
    _assert_usage_error(run_cli("convert", f"{MODELS}:bare_mlp", "--out", out), out, "--input NAME:SHAPE:DTYPE")


def test_unknown_target_and_variant(tmp_path):
    out = tmp_path / "out"
    _assert_usage_error(run_cli("convert", f"{MODELS}:mlp", "-t", "coreml", "--out", out), out, "unknown target 'coreml'")
    _assert_usage_error(run_cli("convert", f"{MODELS}:mlp", "-q", "int3", "--out", out), out, "--quantize 'int3'")
    _assert_usage_error(run_cli("convert", f"{MODELS}:mlp", "--budget", "cosine=0.9", "--out", out), out, "bad --budget")


def test_non_empty_out_refused_without_force(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    result = run_cli("convert", f"{MODELS}:mlp", "--out", out)
    assert result.returncode == 2 and "not empty" in result.stderr
    assert (out / "keep.txt").read_text() == "mine"


def test_export_failure_names_user_line_and_exits_1(tmp_path):
    model = write_model_file(tmp_path, (
        "class Branchy(nn.Module):\n"
        "    def forward(self, x):\n"
        "        if x.sum() > 0:  # data-dependent control flow\n"
        "            return x * 2\n"
        "        return x - 1\n\n"
        "def build():\n    return Branchy(), (torch.randn(2, 3),)\n"))
    out = tmp_path / "out"
    result = run_cli("convert", f"{model}:build", "--out", out, "--no-latency")
    assert result.returncode == 1, result.stderr
    report = (out / "report.json").read_text()
    assert "torch.export failed" in report
    assert "model.py" in report and "x.sum() > 0" in report
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("budget,needle", [
    ("onxx.fp32.max_rel_err=1e-30", "unknown target 'onxx'"),
    ("fp32.max_rel_err=nan", "must be a finite number"),
])
def test_budget_that_would_do_nothing_is_exit_2(tmp_path, budget, needle):
    out = tmp_path / "out"
    _assert_usage_error(run_cli("convert", f"{MODELS}:mlp", "-t", "onnx", "--budget", budget, "--out", out), out, needle)


def test_config_budget_table_typo_is_exit_2(tmp_path):
    (tmp_path / "edgeport.toml").write_text('[budgets."onxx.fp32"]\nmax_rel_err = 1e-30\n')
    out = tmp_path / "out"
    result = run_cli("convert", f"{MODELS}:mlp", "-t", "onnx", "--out", out, cwd=tmp_path)
    _assert_usage_error(result, out, "unknown target 'onxx'")


def test_model_message_is_escaped_for_terminal_junit_and_markdown(tmp_path):
    """A model's own error text carries an ANSI colour, rich markup, HTML and control characters."""
    import re
    from xml.etree import ElementTree as ET

    model = write_model_file(tmp_path, (
        "class Loud(nn.Module):\n"
        "    def forward(self, x):\n"
        "        raise RuntimeError('\\x1b[31mboom\\x1b[0m [red]lit[/red] <script>x</script> a|b \\x07\\x00 end')\n\n"
        "def build():\n    return Loud(), (torch.randn(1, 4),)\n"))
    out = tmp_path / "out"
    result = run_cli("convert", f"{model}:build", "-t", "onnx", "--no-latency", "--samples", "2", "--out", out,
                     "--junit", "junit.xml")
    assert result.returncode == 1, result.stderr
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", result.stdout), repr(result.stdout)
    assert "boom [red]lit[/red] <script>x</script>" in result.stdout  # markup printed as written
    failure = ET.parse(out / "junit.xml").getroot().find("testcase/failure")  # well-formed despite \x07 \x00
    assert "\\x07\\x00" in failure.get("message")
    md = (out / "report.md").read_text()
    assert "<script>" not in md and "&lt;script&gt;x&lt;/script&gt; a\\|b" in md


def test_nan_and_empty_outputs_do_not_pass_parity(tmp_path):
    """An all-NaN output (NaN in the reference too) and a zero-size one compared nothing: exit 1, named."""
    from conftest import read_report

    model = write_model_file(tmp_path, (
        "class Hollow(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x * float('nan'), x[:, :0] * 2.0, x + 1.0\n\n"
        "def build():\n    return Hollow(), (torch.randn(1, 4),)\n"))
    out = tmp_path / "out"
    result = run_cli("convert", f"{model}:build", "-t", "onnx", "--no-latency", "--samples", "2", "--no-localize",
                     "--out", out)
    assert result.returncode == 1, result.stderr
    row = read_report(out)["targets"][0]  # schema-valid summary although nothing was compared in two outputs
    assert row["status"] == "failed" and row["parity"]["elements_compared"] == 8
    assert "output_0: the reference (PyTorch) output holds 8 NaN/Inf value(s)" in row["error"]
    assert "output_1: nothing compared: the output has no elements" in row["error"]
    assert [o["passed"] for o in row["parity"]["outputs"]] == [False, False, True]


def test_help_names_every_registered_target():
    """The one-line description of edgeport lists the targets from the registry (it said "LiteRT / TPU /
    ONNX" after ExecuTorch was added)."""
    from edgeport.targets.registry import target_names

    result = run_cli("--help")
    assert result.returncode == 0
    assert all(name in result.stdout for name in target_names()), result.stdout


def test_convert_flags_reach_their_typed_options_by_name(monkeypatch, tmp_path):
    """The CLI builds ConvertOptions part by part (source, output, judge, generation): every flag lands in
    the field named for it, the same options the keyword form builds."""
    from typer.testing import CliRunner

    from edgeport import api
    from edgeport.cli.app import app

    seen = []

    class Stop(Exception):
        pass

    def fake(opts, progress=None):
        seen.append(opts)
        raise Stop

    monkeypatch.setattr(api, "convert", fake)
    args = ["convert", "m.py:build", "-t", "onnx", "-q", "dynamic-int8", "--input", "x:1x3:float32", "--hf-task",
            "auto", "--seq-len", "7", "--dynamic", "batch", "--decompositions", "ns", "--trust-pickle", "--out",
            str(tmp_path / "o"), "--force", "--junit", "j.xml", "--threads", "2", "--samples", "3", "--seed", "5",
            "--data", "d.npz", "--no-latency", "--budget", "cosine_min=0.5", "--calibration-data", "c.npz",
            "--task", "forward", "--fallback", "float", "--fallback-max", "2", "--no-cache", "--reuse-verdict",
            "--max-memory", "3G", "-j", "1", "--row-timeout", "9m", "--row-memory", "5G"]
    CliRunner().invoke(app, args)
    [opts] = seen
    expected = api.convert_options(
        model="m.py:build", inputs=["x:1x3:float32"], hf_task="auto", seq_len=7, dynamic=["batch"], decompositions="ns",
        trust_pickle=True, out=tmp_path / "o", force=True, junit=Path("j.xml"), threads=2, samples=3, seed=5,
        data="d.npz", latency=False, budgets=["cosine_min=0.5"], targets=["onnx"], quantize=["dynamic-int8"],
        calibration_data="c.npz", target_options=opts.target_options, task="forward", fallback="float",
        fallback_max="2", cache=False, reuse_verdict=True, max_memory=3 * 1024 ** 3, jobs=1, row_timeout="9m",
        row_memory="5G")
    assert opts == expected
