"""Issue 33, item 4: every threshold a file can set is finite, checked and shown.

Hostile class ``config``: a pull request's ``edgeport.toml`` / ``fleet.toml`` must not be able to switch the
gate off (non-finite or out-of-range values are exit 2 before any work), nor loosen it unseen (looser than
the default is listed LOOSENED in the terminal, report.md, report.html and JUnit, and looser than the
baseline's own run is a regression), nor gate on a metric that applies to no output."""

import json

import pytest

from conftest import REPO, read_report, run_cli

MODELS = REPO / "tests" / "models.py"
FAST = ("-t", "onnx", "--samples", "1", "--no-latency", "--no-localize")


def _shrunk_baseline(directory, tmp_path, factor: float, thresholds: dict | None = None):
    """The directory's report as a baseline whose artifacts were ``factor`` times smaller."""
    report = json.loads((directory / "report.json").read_text())
    for row in report["targets"]:
        row["size_bytes"] = int(row["size_bytes"] / factor)
    if thresholds is not None:
        report["config"]["baseline_thresholds"] = thresholds
    (tmp_path / "base.json").write_text(json.dumps(report))
    return tmp_path / "base.json"


@pytest.mark.parametrize("line", ["size_factor = inf", "error_factor = nan", "latency_factor = inf",
                                  "size_factor = 0.5", "error_floor = -1.0", 'size_factor = "4"'])
def test_config_baseline_threshold_out_of_range_is_exit_2(fresh, tmp_path, line):
    (tmp_path / "edgeport.toml").write_text(f"[baseline]\n{line}\n")
    base = _shrunk_baseline(fresh, tmp_path, 3.8)
    result = run_cli("report", fresh, "--baseline", base, "--config", tmp_path / "edgeport.toml")
    assert result.returncode == 2, result.stdout + result.stderr
    key = line.split(" ")[0]
    assert key in result.stderr and "[baseline]" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    # and a convert is refused before any work, --baseline or not: the file is checked when read
    result = run_cli("convert", f"{MODELS}:mlp", "--out", tmp_path / "out", *FAST, cwd=tmp_path)
    assert result.returncode == 2 and key in result.stderr, result.stdout + result.stderr
    assert not (tmp_path / "out").exists()


def test_config_loosened_baseline_threshold_is_shown_and_is_a_regression(fresh, tmp_path):
    (tmp_path / "edgeport.toml").write_text("[baseline]\nsize_factor = 4.0\nlatency_factor = 1.2\n")
    base = _shrunk_baseline(fresh, tmp_path, 3.8)
    result = run_cli("report", fresh, "--baseline", base, "--config", tmp_path / "edgeport.toml",
                     "--format", "md", "--format", "html", "--format", "junit")
    assert result.returncode == 1, result.stdout + result.stderr  # looser than the default the baseline ran with
    report = read_report(fresh)
    changes = {c["key"]: c["direction"] for c in report["config"]["thresholds_changed"]}
    assert changes == {"size_factor": "loosened", "latency_factor": "tightened"}
    assert report["baseline"]["loosened"] == ["baseline threshold loosened: size_factor 1.05 -> 4"]
    for text in (result.stdout, (fresh / "report.md").read_text(), (fresh / "report.html").read_text(),
                 (fresh / "junit.xml").read_text()):
        assert "baseline threshold size_factor: 1.05 -" in text and "4.0 (LOOSENED)" in text
    assert 'name="verdict"' in (fresh / "junit.xml").read_text()


def test_config_threshold_recorded_by_the_baseline_run_is_not_a_regression_but_still_shown(fresh, tmp_path):
    (tmp_path / "edgeport.toml").write_text("[baseline]\nsize_factor = 4.0\n")
    recorded = {"error_factor": 2.0, "error_floor": 1e-6, "latency_factor": 1.5, "size_factor": 4.0}
    base = _shrunk_baseline(fresh, tmp_path, 3.8, recorded)
    result = run_cli("report", fresh, "--baseline", base, "--config", tmp_path / "edgeport.toml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "LOOSENED" in result.stdout and "size_factor" in result.stdout
    # without the loosening, the same 3.8x growth is a regression
    result = run_cli("report", fresh, "--baseline", base)
    assert result.returncode == 1 and "bigger" in result.stdout, result.stdout + result.stderr


@pytest.mark.parametrize("toml,needle", [
    ('[budgets.fp32]\ngate = ["topk_agreement_min"]\ntopk_agreement_min = 0.9\ntopk_outputs = []\n', "topk_outputs = []"),
    ('[budgets.fp32]\ngate = ["topk_agreement_min"]\ntopk_agreement_min = 0.0\n', "gates nothing"),
    ('[budgets.fp32]\ngate = ["cosine_min"]\ncosine_min = -1.0\n', "gates nothing"),
    ('[budgets.fp32]\ntoken_agreement_min = 0.9\ngate = ["token_agreement_min"]\n', "generates none"),
    ('[budgets.fp32]\ncosine_min = 1.5\n', "cosine_min must be a finite number >= -1 and <= 1"),
    ('[budgets.fp32]\nmax_rel_err = -0.1\n', "max_rel_err must be"),
    ('[budgets.fp32]\ntopk = 1e9\n', "topk must be a whole number"),
    ('[baselin]\nsize_factor = 9\n', "unknown key 'baselin'"),
    ('baseline = 3\n', "[baseline] in edgeport.toml must be a table"),
])
def test_config_value_that_gates_nothing_or_is_out_of_range_is_exit_2(tmp_path, toml, needle):
    (tmp_path / "edgeport.toml").write_text(toml)
    result = run_cli("convert", f"{MODELS}:mlp", "--out", tmp_path / "out", *FAST, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert needle in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("toml,needle", [
    ('[budgets.fp32]\ntopk_agreement_min = 0.9\ntopk_outputs = ["logits"]\n', "topk_outputs names 'logits'"),
    ('[budgets.fp32]\ntopk_agreement_min = 0.9\n', "no output of the model has a class axis"),
])
def test_config_topk_that_applies_to_no_output_is_exit_2_before_conversion(tmp_path, toml, needle):
    """Known only once the program's outputs are (after the export, before any target converts)."""
    (tmp_path / "m.py").write_text("import torch\n"
                                   "class M(torch.nn.Module):\n"
                                   "    def forward(self, x):\n        return x.sum(-1, keepdim=True)\n"
                                   "def build():\n    return M(), (torch.randn(2, 8),)\n")
    (tmp_path / "edgeport.toml").write_text(toml)
    result = run_cli("convert", f"{tmp_path / 'm.py'}:build", "--out", tmp_path / "out", *FAST, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert needle in result.stderr and "output_0" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists() and "onnx fp32" not in result.stderr


def test_config_topk_as_large_as_the_class_count_cannot_fail_so_it_is_exit_2(tmp_path):
    """topk = the number of classes puts every class in the top k: a gate that cannot fail is exit 2."""
    (tmp_path / "m.py").write_text("import torch\n"
                                   "def build():\n    return torch.nn.Linear(8, 4), (torch.randn(2, 8),)\n")
    (tmp_path / "edgeport.toml").write_text('[budgets.fp32]\ntopk_agreement_min = 0.9\ntopk = 4\n')
    result = run_cli("convert", f"{tmp_path / 'm.py'}:build", "--out", tmp_path / "out", *FAST, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "topk = 4" in result.stderr and "cannot fail" in result.stderr and "Traceback" not in result.stderr
    (tmp_path / "edgeport.toml").write_text('[budgets.fp32]\ntopk_agreement_min = 0.9\ntopk = 3\n')
    result = run_cli("convert", f"{tmp_path / 'm.py'}:build", "--out", tmp_path / "out", *FAST, cwd=tmp_path)
    assert result.returncode in (0, 1) and "cannot fail" not in result.stderr, result.stdout + result.stderr


def test_config_topk_agreement_zero_is_never_shown_as_tightened():
    from edgeport.validate.budget_audit import budget_changes

    changes = budget_changes({"cosine_min": 0.9, "topk_agreement_min": 0.0}, {"cosine_min": 0.9})
    assert changes == [{"key": "topk_agreement_min", "from": None, "to": 0.0, "direction": "no effect"}]
    changes = budget_changes({"cosine_min": -1.0}, {"cosine_min": 0.9})
    assert changes[0]["direction"] == "loosened"


@pytest.mark.parametrize("ray,needle", [("cpus_per_task = nan", "cpus_per_task"), ("cpus_per_task = inf", "cpus_per_task"),
                                        ("max_retries = 100000", "max_retries")])
def test_config_fleet_ray_value_out_of_range_is_exit_2(tmp_path, ray, needle):
    (tmp_path / "fleet.toml").write_text(f'[[model]]\nname = "a"\nspec = "{MODELS}:mlp"\ntargets = ["onnx"]\n'
                                         f"[ray]\n{ray}\n")
    result = run_cli("fleet", "fleet.toml", "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert needle in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("key,value", [("seed", -1), ("seq_len", 0), ("samples", 0)])
def test_config_fleet_counts_out_of_range_are_exit_2(tmp_path, key, value):
    (tmp_path / "fleet.toml").write_text(f'[[model]]\nname = "a"\nspec = "{MODELS}:mlp"\ntargets = ["onnx"]\n'
                                         f"{key} = {value}\n")
    result = run_cli("fleet", "fleet.toml", "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert ("--" + key.replace("_", "-") in result.stderr or key in result.stderr) and "Traceback" not in result.stderr


DEEP = "[" * 200_000 + "]" * 200_000   # 200,000 levels: a RecursionError (exit 1) or a C stack overflow before


def _deep_hf(directory, deep_file: str):
    """An hf: directory whose ``deep_file`` (config.json, generation_config.json or model.safetensors's header)
    nests an array 200,000 deep."""
    import struct

    directory.mkdir()
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "vocab_size": 256,
              "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 64}
    (directory / "config.json").write_text(json.dumps(config))
    if deep_file.endswith(".json"):   # transformers parses generation_config.json: read through edgeport's first
        (directory / deep_file).write_text(json.dumps(config)[:-1] + ', "x": ' + DEEP + "}")
        return directory / deep_file
    header = ('{"__metadata__": {"format": "pt"}, "x": ' + DEEP + "}").encode()
    (directory / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    return directory / "model.safetensors"


@pytest.mark.parametrize("door", ["edgeport.toml", "pyproject.toml", "fleet.toml", "hf config.json",
                                  "hf generation_config.json", "hf model.safetensors"])
def test_config_document_nested_200000_deep_is_one_line_exit_2(tmp_path, door):
    """Every document edgeport parses from input goes through errors.load_document: too deep is exit 2 naming
    the file, never ``internal error: RecursionError`` (exit 1) nor a crash."""
    out, toml = tmp_path / "out", f"[budgets.fp32]\nx = {DEEP}\n"
    if door == "edgeport.toml":
        (tmp_path / "elsewhere.toml").write_text(toml)
        named = tmp_path / "elsewhere.toml"
        args = ("convert", f"{MODELS}:mlp", "--out", out, "--config", named, *FAST)
    elif door == "pyproject.toml":
        named = tmp_path / "pyproject.toml"
        named.write_text(f"[tool.edgeport]\nx = {DEEP}\n")
        args = ("convert", f"{MODELS}:mlp", "--out", out, *FAST)
    elif door == "fleet.toml":
        named = tmp_path / "fleet.toml"
        named.write_text(f'[[model]]\nname = "a"\nspec = "{MODELS}:mlp"\ntargets = ["onnx"]\nx = {DEEP}\n')
        args = ("fleet", "fleet.toml", "--out", out)
    else:
        named = _deep_hf(tmp_path / "hf", door.split(" ")[1])
        args = ("convert", f"hf:{tmp_path / 'hf'}", "--out", out, *FAST)
    result = run_cli(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr[-2000:]
    error = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(error) == 1 and named.name in error[0] and "nested deeper than 1000 levels" in error[0], result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert not out.exists()


def test_config_deep_checks_and_toml_refused_even_after_the_recursion_limit_was_raised(tmp_path):
    """--checks (JSON or TOML) and every TOML reader, in a process whose recursion limit a library raised to
    100,000 (as LiteRT's converter tools do): exit 0 here means each refused the file as bad input; and a
    --checks JSON check on a model's answer 200,000 brackets deep fails that check instead of crashing."""
    import subprocess
    import sys

    (tmp_path / "checks.json").write_text(DEEP)
    (tmp_path / "checks.toml").write_text(f"checks = {DEEP}\n")
    (tmp_path / "edgeport.toml").write_text(f"x = {DEEP}\n")
    (tmp_path / "fleet.toml").write_text(f"x = {{a = {'{a = ' * 100_000}1{'}' * 100_000}}}\n")
    code = ("import sys, pathlib; sys.setrecursionlimit(100_000); d = pathlib.Path(sys.argv[1])\n"
            "from edgeport.errors import NestedTooDeep\n"
            "from edgeport.config import load_config\n"
            "from edgeport.fleet.spec import read_fleet\n"
            "from edgeport.pipeline.tasks.text_generation.checks import read_checks\n"
            "calls = [lambda: read_checks(str(d / 'checks.json')), lambda: read_checks(str(d / 'checks.toml')),\n"
            "         lambda: load_config(d / 'edgeport.toml'), lambda: read_fleet(d / 'fleet.toml', d / 'out')]\n"
            "for call in calls:\n"
            "    try:\n        call()\n    except NestedTooDeep as exc:\n        assert 'nested deeper' in str(exc)\n"
            "    else:\n        sys.exit('no error')\n"
            "from edgeport.pipeline.tasks.text_generation.checks import json_holds\n"
            "held, why = json_holds({'type': 'array'}, 'answer: ' + '[' * 200_000 + ']' * 200_000)\n"
            "assert not held and 'nested deeper' in why, why  # a model's answer: the check fails, no crash\n"
            "assert sys.getrecursionlimit() == 100_000\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
