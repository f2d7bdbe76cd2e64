"""Issue 16: the gate cannot be forged, switched off or turned against the machine it runs on.

A program read from a file may only compute (crafted archives built here: ``aten.from_file`` + ``copy_``
writing a file, ``aten.save``, parameter mutation, nested graphs); ``--force`` replaces only what edgeport
wrote; a budget cannot silently gate nothing."""

import json
import shutil

import pytest
import torch

from conftest import REPO, read_report, run_cli

MODELS = REPO / "tests" / "models.py"


def _fake_from_file(filename, shared=None, size=0, dtype=None, layout=None, device=None, pin_memory=None):
    return torch.empty(size, dtype=dtype or torch.float32, device="meta")


_LIB = torch.library.Library("aten", "IMPL")  # a Meta kernel so torch.export can trace the attack
_LIB.impl("from_file", _fake_from_file, "Meta")


class FileWriter(torch.nn.Module):
    """Writes ``payload`` into ``path`` when the program runs: the attack of issue 16, item 1."""

    def __init__(self, path: str, shared: bool = True):
        super().__init__()
        self.path, self.shared = path, shared
        self.register_buffer("payload", torch.tensor(list(b"pwned\n"), dtype=torch.uint8))
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        mapped = torch.ops.aten.from_file(self.path, self.shared, 6, dtype=torch.uint8)
        mapped.copy_(self.payload)
        return self.linear(x) + mapped.sum().float() * 0


class ParamWriter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        with torch.no_grad():
            self.linear.weight.add_(1)
        return self.linear(x)


class BufferCounter(torch.nn.Module):
    """Legitimate: in-place ops on a buffer and on its own intermediates (inplace ReLU)."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x):
        self.calls.add_(1)
        return torch.relu_(self.linear(x) * 2)


class CondWriter(torch.nn.Module):
    def __init__(self, path: str):
        super().__init__()
        self.path = path

    def forward(self, x):
        def yes(x):
            return x + torch.ops.aten.from_file(self.path, False, 4, dtype=torch.float32).sum()

        return torch.cond(x.sum() > 0, yes, lambda x: x - 1, (x,))


def _save(module, path):
    program = torch.export.export(module, (torch.randn(1, 4),))
    torch.export.save(program, path)
    return path


@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "victim.pth"
    path.write_bytes(b"precious\n")
    return path


@pytest.mark.parametrize("command", ["convert", "check"])
def test_from_file_copy_archive_is_refused_before_it_runs(tmp_path, victim, command):
    archive = _save(FileWriter(str(victim)), tmp_path / "attack.pt2")
    args = ("--out", tmp_path / "out", "-t", "onnx", "--samples", "1", "--no-latency") if command == "convert" else ()
    result = run_cli(command, archive, *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "from_file" in result.stderr and "node" in result.stderr and "Traceback" not in result.stderr
    assert victim.read_bytes() == b"precious\n"


def test_from_file_refused_even_with_trust_pickle(tmp_path, victim):
    archive = _save(FileWriter(str(victim)), tmp_path / "attack.pt2")
    result = run_cli("check", archive, "--trust-pickle")
    assert result.returncode == 2 and "from_file" in result.stderr, result.stderr
    assert victim.read_bytes() == b"precious\n"


def test_validate_dir_with_swapped_program_is_refused(fresh, tmp_path, victim):
    program = torch.export.export(FileWriter(str(victim)), (torch.randn(1, 4),))
    torch.export.save(program, fresh / "exported.pt2")
    result = run_cli("validate", fresh, "--samples", "1", "--no-latency")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "from_file" in result.stderr and victim.read_bytes() == b"precious\n"


def test_reading_a_file_into_the_reference_is_refused_in_a_nested_graph(tmp_path, victim):
    archive = _save(CondWriter(str(victim)), tmp_path / "cond.pt2")
    result = run_cli("check", archive)
    assert result.returncode == 2 and "from_file" in result.stderr and "nested graph" in result.stderr, result.stderr


def test_parameter_mutation_is_refused_buffer_and_intermediate_mutation_kept(tmp_path):
    result = run_cli("check", _save(ParamWriter(), tmp_path / "param.pt2"))
    assert result.returncode == 2 and "in place" in result.stderr and "add_" in result.stderr, result.stderr
    result = run_cli("check", _save(BufferCounter(), tmp_path / "buffer.pt2"))
    assert result.returncode != 2 or "in place" not in result.stderr, result.stderr


def test_save_node_is_refused_by_policy(tmp_path):
    """A graph node calling aten.save (patched into the archive's graph JSON) is exit 2, one line."""
    import zipfile

    archive = _save(torch.nn.Linear(4, 4), tmp_path / "plain.pt2")
    crafted = tmp_path / "save.pt2"
    with zipfile.ZipFile(archive) as src, zipfile.ZipFile(crafted, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("models/model.json"):
                data = data.replace(b"torch.ops.aten.linear.default", b"torch.ops.aten.save.default")
            dst.writestr(info, data)
    result = run_cli("check", crafted)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "save" in result.stderr and "Traceback" not in result.stderr


def test_policy_unit_custom_namespace_needs_decompositions():
    from edgeport.errors import UsageError
    from edgeport.sources.program_policy import check_program

    from models import opaque_op

    module, example = opaque_op()
    program = torch.export.export(module, example)
    with pytest.raises(UsageError, match="namespace"):
        check_program(program, "x.pt2")
    namespaces = {n.target.namespace for n in program.graph.nodes if hasattr(n.target, "namespace")} - {"aten"}
    check_program(program, "x.pt2", namespaces)  # named with --decompositions: allowed


# --- HIGH 2: --force replaces only what edgeport wrote -------------------------------------------------------

def test_force_refuses_a_project_with_a_copied_report_json(converted, tmp_path):
    project = tmp_path / "myproj"
    (project / ".git").mkdir(parents=True)
    (project / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (project / "src").mkdir()
    (project / "src" / "app.py").write_text("print('mine')\n")
    shutil.copy(converted / "report.json", project / "report.json")
    result = run_cli("convert", f"{MODELS}:mlp", "-t", "onnx", "--out", project, "--force", "--samples", "1",
                     "--no-latency")
    assert result.returncode == 2, result.stdout + result.stderr
    assert (project / ".git" / "HEAD").is_file() and (project / "src" / "app.py").is_file()
    assert "Traceback" not in result.stderr


def test_force_refuses_an_output_with_a_user_file_added_and_names_it(converted, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(converted, out)
    (out / "notes.md").write_text("my notes\n")
    (out / "onnx" / "mine.txt").write_text("mine\n")
    result = run_cli("convert", f"{MODELS}:mlp", "-t", "onnx", "--out", out, "--force", "--samples", "1",
                     "--no-latency")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "notes.md" in result.stderr and "onnx/mine.txt" in result.stderr
    assert (out / "notes.md").read_text() == "my notes\n" and (out / "onnx" / "mine.txt").is_file()


def test_force_replaces_a_pure_edgeport_output_and_its_validate_files(converted, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(converted, out)
    assert run_cli("validate", out, "--samples", "1", "--no-latency", "--junit", "j.xml").returncode == 0
    result = run_cli("convert", f"{MODELS}:mlp", "-t", "onnx", "--out", out, "--force", "--samples", "1",
                     "--no-latency")
    assert result.returncode == 0, result.stdout + result.stderr
    assert not (out / "j.xml").exists() and (out / "report.json").is_file()


def test_marker_unit_kinds_nested_outputs_and_old_markers(tmp_path):
    from edgeport.pipeline.marker import MARKER, foreign_entries, write_marker

    out = tmp_path / "out"
    (out / "model").mkdir(parents=True)
    (out / "fleet.json").write_text("{}")
    (out / "model" / "report.json").write_text("{}")
    write_marker(out / "model")
    write_marker(out)
    assert foreign_entries(out) == []
    (out / "model" / "report.json").unlink()
    (out / "model" / "report.json").mkdir()   # same name, another kind: not what edgeport wrote
    assert foreign_entries(out) == ["model/report.json"]
    (out / "baseline").mkdir()
    (out / "baseline" / "report.json").write_text('{"schema": "edgeport.report/1"}')
    assert "baseline" in foreign_entries(out)
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / MARKER).write_text("edgeport.report/1\n")  # lists nothing: vouches for nothing
    assert foreign_entries(tmp_path / "old") is None


@pytest.mark.slow
def test_fleet_force_keeps_a_sibling_baseline_with_notes(tmp_path, converted):
    (tmp_path / "models.py").write_text((REPO / "tests" / "models.py").read_text())
    (tmp_path / "fleet.toml").write_text('[[model]]\nname = "mlp"\nspec = "models.py:mlp"\ntargets = ["onnx"]\n'
                                         'samples = 1\nlatency = false\n')
    out = tmp_path / "OUT"
    first = run_cli("fleet", "fleet.toml", "--out", out, cwd=tmp_path, timeout=900)
    assert first.returncode == 0, first.stdout + first.stderr
    shutil.copytree(converted, out / "baseline")
    (out / "baseline" / "notes.txt").write_text("the user's own")
    result = run_cli("fleet", "fleet.toml", "--out", out, "--force", cwd=tmp_path, timeout=900)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "baseline" in result.stderr and (out / "baseline" / "notes.txt").read_text() == "the user's own"


# --- HIGH 3: one config line cannot turn the gate off unseen -------------------------------------------------

CONVERT_FAST = ("-t", "onnx", "--samples", "1", "--no-latency", "--no-localize")


@pytest.mark.parametrize("how", ["toml_empty_gate", "flag_empty_gate", "flag_unset_metric", "toml_unset_metric"])
def test_a_budget_that_gates_nothing_is_exit_2(tmp_path, how):
    args = []
    if how.startswith("toml"):
        gate = "[]" if how == "toml_empty_gate" else '["max_abs_err"]'
        (tmp_path / "edgeport.toml").write_text(f"[budgets.fp32]\ngate = {gate}\n")
    else:
        args = ["--budget", "gate=" if how == "flag_empty_gate" else "gate=max_abs_err"]
    result = run_cli("convert", f"{MODELS}:mlp", "--out", tmp_path / "out", *CONVERT_FAST, *args, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "gate" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_every_report_names_the_config_and_a_loosened_budget(tmp_path):
    (tmp_path / "edgeport.toml").write_text("[budgets.fp32]\ncosine_min = 0.5\nmax_rel_err = 0.00001\n")
    out = tmp_path / "out"
    result = run_cli("convert", f"{MODELS}:mlp", "--out", out, *CONVERT_FAST, "--junit", "junit.xml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    report = read_report(out)
    assert report["config"]["files"] and report["config"]["files"][0].endswith("edgeport.toml")
    changes = {c["key"]: c["direction"] for c in report["config"]["budgets_changed"]}
    assert changes == {"cosine_min": "loosened", "max_rel_err": "tightened"}
    for text in (result.stdout, (out / "report.md").read_text(), (out / "report.html").read_text(),
                 (out / "junit.xml").read_text()):
        assert "edgeport.toml" in text and "LOOSENED" in text and "cosine_min" in text


def test_report_baseline_flags_a_loosened_budget_as_a_regression(converted, tmp_path):
    out = tmp_path / "out"
    result = run_cli("convert", f"{MODELS}:mlp", "--out", out, "-t", "onnx", "--samples", "2", "--no-latency",
                     "--budget", "cosine_min=0.1")
    assert result.returncode == 0, result.stdout + result.stderr
    result = run_cli("report", out, "--baseline", converted)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "budget loosened: cosine_min" in json.dumps(read_report(out)["targets"][0]["regressions"])


# --- MEDIUM 4 and 5: the verdict comes from the rows ---------------------------------------------------------

def test_report_recomputes_an_edited_passed(fresh):
    report = read_report(fresh)
    report["targets"][0].update(status="failed", error="parity: over budget")
    report["passed"] = True
    (fresh / "report.json").write_text(json.dumps(report))
    result = run_cli("report", fresh, "--format", "junit")
    assert result.returncode == 1, result.stdout + result.stderr
    assert 'failures="1"' in (fresh / "junit.xml").read_text()


def test_a_run_where_no_row_passed_is_not_a_pass(fresh):
    report = read_report(fresh)
    for row in report["targets"]:
        row.update(status="failed", error="parity: over budget", required=False)
    report["passed"] = True
    (fresh / "report.json").write_text(json.dumps(report))
    result = run_cli("report", fresh, "--format", "md", "--format", "junit")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAILED" in (fresh / "report.md").read_text()
    assert 'name="verdict"' in (fresh / "junit.xml").read_text()


# --- MEDIUM 6 and 7 -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["build", "data"])
def test_sys_exit_zero_in_user_code_is_exit_2_not_a_pass(tmp_path, where):
    model = tmp_path / "m.py"
    model.write_text("import sys, torch\n"
                     "def build():\n"
                     + ("    sys.exit(0)\n" if where == "build" else "")
                     + "    return torch.nn.Linear(4, 4).eval(), (torch.randn(1, 4),)\n"
                     "def data():\n    sys.exit(0)\n    yield None\n")
    extra = ["--data", f"{model}:data"] if where == "data" else []
    result = run_cli("convert", f"{model}:build", "--out", tmp_path / "out", *CONVERT_FAST, *extra)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "sys.exit" in result.stderr or "SystemExit" in result.stderr


def test_zip_bomb_nested_in_an_entry_is_refused_as_a_bomb(tmp_path):
    import zipfile

    archive = _save(torch.nn.Linear(4, 4), tmp_path / "plain.pt2")
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as inner, inner.open("archive/data/0", "w") as handle:
        for _ in range(200):
            handle.write(bytes(1 << 20))   # 200 MiB of zeros: ~200 KB compressed
    crafted = tmp_path / "nested.pt2"
    with zipfile.ZipFile(archive) as src, zipfile.ZipFile(crafted, "w") as dst:
        for info in src.infolist():
            data = bomb.read_bytes() if "sample_inputs" in info.filename else src.read(info)
            dst.writestr(info, data)
    result = run_cli("check", crafted)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "zip bomb" in result.stderr and "run code" not in result.stderr


# --- MEDIUM 10 and LOW 17: bad input is exit 2, not an internal error ---------------------------------------

def _static_program(tmp_path, example=(torch.randn(1, 8),)):
    program = torch.export.export(torch.nn.Linear(8, 4), (torch.randn(1, 8),))
    path = tmp_path / "static.pt2"
    torch.export.save(program, path)
    return path


def test_input_that_does_not_fit_a_static_program_is_exit_2(tmp_path):
    archive = _static_program(tmp_path)
    result = run_cli("convert", archive, "--input", "x:1x9:float32", "--out", tmp_path / "out", *CONVERT_FAST)
    assert result.returncode == 2 and "1x8" in result.stderr, result.stdout + result.stderr


def test_stored_sample_inputs_of_the_wrong_shape_are_exit_2(tmp_path):
    import io
    import zipfile

    archive = _static_program(tmp_path)
    crafted = tmp_path / "wrong.pt2"
    buffer = io.BytesIO()
    torch.save(((torch.randn(2, 3, 5),), {}), buffer)
    with zipfile.ZipFile(archive) as src, zipfile.ZipFile(crafted, "w") as dst:
        for info in src.infolist():
            dst.writestr(info, buffer.getvalue() if "sample_inputs" in info.filename else src.read(info))
    result = run_cli("convert", crafted, "--out", tmp_path / "out", *CONVERT_FAST)
    assert result.returncode == 2 and "sample inputs" in result.stderr, result.stdout + result.stderr


def test_out_under_proc_is_exit_2(tmp_path):
    result = run_cli("convert", f"{MODELS}:mlp", "--out", "/proc/edgeport-x/out", *CONVERT_FAST)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stdout + result.stderr


def test_zero_size_input_dimension_is_exit_2(tmp_path):
    result = run_cli("convert", f"{MODELS}:cnn", "--input", "x:1x0x32x32:float32", "--out", tmp_path / "out",
                     *CONVERT_FAST)
    assert result.returncode == 2 and "at least 1" in result.stderr, result.stdout + result.stderr


# --- LOW 14 and 15: fleet.toml -------------------------------------------------------------------------------

def test_fleet_memory_error_names_the_fleet_key_and_names_differing_in_case_collide(tmp_path):
    from edgeport.errors import UsageError
    from edgeport.fleet.spec import read_fleet

    model = f'spec = "{MODELS}:mlp"\ntargets = ["onnx"]\n'
    path = tmp_path / "fleet.toml"
    path.write_text(f'[[model]]\nname = "a"\n{model}[ray]\nmemory_per_task = "1P"\n')
    with pytest.raises(UsageError, match="memory_per_task") as info:
        read_fleet(path, tmp_path / "out")
    assert "EDGEPORT_CACHE_MAX" not in str(info.value)
    path.write_text(f'[[model]]\nname = "a"\n{model}[[model]]\nname = "A"\n{model}')
    with pytest.raises(UsageError, match="duplicate model name"):
        read_fleet(path, tmp_path / "out")


# --- LOW 12: --data that judges nothing ----------------------------------------------------------------------

@pytest.mark.parametrize("case", ["zero_samples", "unknown_key"])
def test_data_with_no_samples_or_an_unknown_key_is_exit_2(tmp_path, case):
    import numpy as np

    data = tmp_path / "data.npz"
    if case == "zero_samples":
        np.savez(data, x=np.zeros((0, 2, 20), np.float32))
    else:
        np.savez(data, x=np.zeros((2, 20), np.float32), x_typo=np.zeros((2, 20), np.float32))
    result = run_cli("convert", f"{MODELS}:mlp", "--data", data, "--out", tmp_path / "out", *CONVERT_FAST)
    assert result.returncode == 2, result.stdout + result.stderr
    assert ("no samples" if case == "zero_samples" else "x_typo") in result.stderr


# --- LOW 11: a report.json cannot cost minutes and gigabytes ------------------------------------------------

@pytest.mark.parametrize("rows", [2, 5000])
def test_duplicate_or_countless_rows_are_refused(fresh, rows):
    report = read_report(fresh)
    row = report["targets"][0]
    report["targets"] = [row] * 2 if rows == 2 else [{**row, "variant": f"v{i}"} for i in range(rows)]
    (fresh / "report.json").write_text(json.dumps(report))
    result = run_cli("report", fresh, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert ("repeats" if rows == 2 else "more than") in result.stderr


# --- LOW 16: a kill between publish's two renames loses nothing ---------------------------------------------

def test_old_output_in_a_dead_runs_trash_is_recovered(tmp_path):
    import socket
    import subprocess
    import sys

    from edgeport.pipeline import outdir

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # a pid that existed and is gone: the run killed between old -> trash and staging -> out
    trash = tmp_path / ".out.trash-dead"
    (trash / "old").mkdir(parents=True)
    (trash / "old" / "report.json").write_text("the last good output")
    (trash / outdir.PID_FILE).write_text(f"{child.pid} {socket.gethostname()}\n")
    outdir.clean_stale(tmp_path, "out")
    assert (tmp_path / "out" / "report.json").read_text() == "the last good output"
    assert not trash.exists()


@pytest.mark.slow
def test_fleet_with_a_relative_out_as_in_the_readme(tmp_path):
    (tmp_path / "models.py").write_text((REPO / "tests" / "models.py").read_text())
    (tmp_path / "fleet.toml").write_text('[[model]]\nname = "mlp"\nspec = "models.py:mlp"\ntargets = ["onnx"]\n'
                                         'samples = 1\nlatency = false\n')
    result = run_cli("fleet", "fleet.toml", "--out", "dist/fleet/", cwd=tmp_path, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    assert read_report(tmp_path / "dist" / "fleet" / "mlp")["passed"]


# --- HIGH 2, continued: bundle and cache clear delete only what edgeport wrote -------------------------------

def test_bundle_refuses_an_asset_folder_holding_the_users_files(tmp_path):
    from test_bundle_safety import ASSETS, _app, _out

    out, app = _out(tmp_path), _app(tmp_path)
    (app / ASSETS / "my_labels.txt").write_text("cat\ndog\n")
    result = run_cli("bundle", out, "--android", app)
    assert result.returncode == 2 and "my_labels.txt" in result.stderr, result.stdout + result.stderr
    assert (app / ASSETS / "my_labels.txt").read_text() == "cat\ndog\n"


def test_cache_clear_leaves_an_entry_holding_a_file_it_did_not_write(tmp_path):
    from edgeport.cache import Cache

    src = tmp_path / "src"
    src.mkdir()
    (src / "a.bin").write_bytes(b"artifact")
    cache = Cache(tmp_path / "cache")
    assert cache.put("ab" + "0" * 62, src, ["a.bin"], {})
    assert cache.put("cd" + "0" * 62, src, ["a.bin"], {})
    planted = cache.entry_dir("cd" + "0" * 62) / "files" / "notes.txt"
    planted.write_text("someone's")
    assert cache.clear() == 1
    assert planted.read_text() == "someone's" and not cache.entry_dir("ab" + "0" * 62).exists()


# --- LOW 13: auto_map with a built-in model_type ------------------------------------------------------------

def test_auto_map_with_a_builtin_model_type_needs_trust_remote_code(tmp_path):
    import transformers

    model_dir = tmp_path / "bert"
    transformers.BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=8).save_pretrained(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    config["auto_map"] = {"AutoModel": "modeling_evil.EvilModel"}
    (model_dir / "config.json").write_text(json.dumps(config))
    result = run_cli("convert", f"hf:{model_dir}", "--out", tmp_path / "out", *CONVERT_FAST)
    assert result.returncode == 2 and "trust-remote-code" in result.stderr, result.stdout + result.stderr


# --- MEDIUM 8: a topology the generation does not have never reaches libtpu --------------------------------

@pytest.mark.parametrize("text,needle", [("v5e:32x32", "16x16"), ("v6e:3x5", "its slices"),
                                         ("v4:64x64x64", "at most 4096")])
def test_topology_beyond_the_generation_is_exit_2_with_its_limits(tmp_path, text, needle):
    from edgeport.errors import UsageError
    from edgeport.targets.tpu.aot import parse_topology

    with pytest.raises(UsageError, match=needle):
        parse_topology(text)
    assert parse_topology("v5e:2x4").shape == (2, 4) and parse_topology("v4:2x2x1").shape == (2, 2, 1)


def test_buffer_written_under_no_grad_is_kept_parameter_is_not():
    """A no-grad region becomes a nested graph: its inputs stand for the caller's operands, so a buffer
    stays writable there and a parameter does not."""
    from edgeport.errors import UsageError
    from edgeport.sources.program_policy import check_program

    class NoGradBuffer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("steps", torch.zeros(4))
            self.linear = torch.nn.Linear(4, 4)

        def forward(self, x):
            with torch.no_grad():
                self.steps.add_(1)
            return self.linear(x) + self.steps

    check_program(torch.export.export(NoGradBuffer(), (torch.randn(1, 4),)), "buffer.pt2")
    with pytest.raises(UsageError, match="p_linear_weight"):
        check_program(torch.export.export(ParamWriter(), (torch.randn(1, 4),)), "param.pt2")
