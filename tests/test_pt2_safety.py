"""A .pt2 must not run code hidden in it: crafted archives (a real torch.export.save'd program, rewritten)
are refused with exit 2 and one line naming the entry, and the payload never runs (its marker file is
never created); --trust-pickle loads a pickled entry on purpose; a normal .pt2 still loads."""

import io
import json
import shutil
import zipfile
from pathlib import Path

import pytest
import torch

from conftest import REPO, run_cli
from edgeport.errors import UsageError
from edgeport.sources import pt2_archive
from edgeport.sources.pt2_archive import inspect_pt2, load_exported_program

MODELS = REPO / "tests" / "models.py"


class Payload:
    """Unpickling this creates ``marker`` (pickle calls open(marker, "w")): proof that code ran."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _saved(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def rewrite(src: Path, dst: Path, change) -> Path:
    """Copy the zip, passing each (record name, bytes) through ``change``; it returns new bytes or None (drop)."""
    with zipfile.ZipFile(src) as z:
        entries = [(info, z.read(info)) for info in z.infolist()]
    root = entries[0][0].filename.split("/", 1)[0] + "/"
    with zipfile.ZipFile(dst, "w") as z:
        for info, data in entries:
            new = change(info.filename[len(root):], data)
            if new is not None:
                z.writestr(info, new)
    return dst


def pickled_weight(src: Path, dst: Path, payload) -> Path:
    """weight_0 replaced by a torch.save'd object and its config entry marked use_pickle (as torch itself
    does for tensor subclasses): torch.export.load reads it with weights_only=False."""
    def change(name, data):
        if name == "data/weights/weight_0":
            return _saved(payload)
        if name == "data/weights/model_weights_config.json":
            config = json.loads(data)
            next(iter(config["config"].values()))["use_pickle"] = True
            return json.dumps(config).encode()
        return data
    return rewrite(src, dst, change)


def pickled_sample_inputs(src: Path, dst: Path, payload) -> Path:
    return rewrite(src, dst, lambda name, data: _saved(payload) if name == "data/sample_inputs/model.pt" else data)


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    import models

    module, example = models.mlp()
    path = tmp_path_factory.mktemp("pt2") / "mlp.pt2"
    torch.export.save(torch.export.export(module, example), path)
    return path


def _one_error_line(result, *needles):
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("edgeport: error:"), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize("command", ["convert", "check", "validate"])
def test_pickled_weight_is_refused_and_never_runs(program, converted, tmp_path, command):
    marker = tmp_path / "MARKER"
    evil = pickled_weight(program, tmp_path / "evil.pt2", Payload(marker))
    if command == "validate":  # conftest's converted: the session's ONNX conversion of models.py:mlp
        directory = tmp_path / "dir"
        shutil.copytree(converted, directory)
        shutil.copy(evil, directory / "exported.pt2")
        result = run_cli("validate", directory, "--no-latency", "--samples", "2")
    elif command == "check":
        result = run_cli("check", evil, "-t", "onnx")
    else:
        result = run_cli("convert", evil, "-t", "onnx", "--out", tmp_path / "out", "--no-latency", "--samples", "2")
    assert not marker.exists(), "the pickled payload ran"
    _one_error_line(result, "data/weights/weight_0", "use_pickle", "--trust-pickle")
    assert not (tmp_path / "out").exists()


def test_trust_pickle_loads_a_pickled_entry(program, tmp_path):
    """A use_pickle weight holding a real tensor (what torch writes for tensor subclasses): refused by
    default, converted with --trust-pickle."""
    import models

    weight = next(iter(models.mlp()[0].state_dict().values()))
    pickled = pickled_weight(program, tmp_path / "pickled.pt2", torch.nn.Parameter(weight.clone()))
    out = tmp_path / "out"
    refused = run_cli("convert", pickled, "-t", "onnx", "--out", out, "--no-latency", "--samples", "2")
    _one_error_line(refused, "use_pickle")
    trusted = run_cli("convert", pickled, "-t", "onnx", "--out", out, "--no-latency", "--samples", "2", "--trust-pickle")
    assert trusted.returncode == 0, trusted.stderr
    assert json.loads((out / "report.json").read_text())["targets"][0]["status"] == "ok"


def test_normal_pt2_still_loads(program):
    loaded = load_exported_program(program)
    assert loaded.module()(torch.randn(2, 20)).shape == (2, 4)
    result = run_cli("check", program, "-t", "onnx")
    assert result.returncode == 0, result.stderr


def test_sample_inputs_never_fall_back_to_unpickling(program, tmp_path):
    marker = tmp_path / "MARKER"
    evil = pickled_sample_inputs(program, tmp_path / "evil.pt2", Payload(marker))
    with pytest.raises(UsageError, match=r"data/sample_inputs/model\.pt \(sample inputs that torch's weights-only"):
        load_exported_program(evil)
    assert not marker.exists()


@pytest.mark.parametrize("craft", [pickled_weight, pickled_sample_inputs])
def test_guard_blocks_unpickling_even_if_inspection_missed_it(program, tmp_path, monkeypatch, craft):
    """Loading itself is safe: with the inspection switched off, the guard still refuses torch's
    weights_only=False load (the use_pickle weight, and the sample-inputs fallback)."""
    marker = tmp_path / "MARKER"
    evil = craft(program, tmp_path / "evil.pt2", Payload(marker))
    monkeypatch.setattr(pt2_archive, "inspect_pt2", lambda *_args: None)
    with pytest.raises(UsageError, match="would be unpickled with weights_only=False"):
        load_exported_program(evil)
    assert not marker.exists()
    assert torch.load.__module__ == "torch.serialization", "the guard must restore torch.load"


def _add_entry(name: str, data: bytes):
    def craft(src: Path, dst: Path) -> Path:
        with zipfile.ZipFile(src) as z:
            entries = [(info, z.read(info)) for info in z.infolist()]
        with zipfile.ZipFile(dst, "w") as z:
            for info, payload in entries:
                z.writestr(info, payload)
            z.writestr(name, data)
        return dst
    return craft


def _opaque_constant(src: Path, dst: Path) -> Path:
    def change(name, data):
        if name == "data/constants/model_constants_config.json":
            return json.dumps({"config": {"obj": {"path_name": "opaque_obj_0", "is_param": False,
                                                  "use_pickle": True, "tensor_meta": None}}}).encode()
        return data
    return _add_entry("mlp/data/constants/opaque_obj_0", b"\x80\x04N.")(rewrite(src, dst.with_suffix(".tmp"), change), dst)


def _no_format(src: Path, dst: Path) -> Path:
    return rewrite(src, dst, lambda name, data: None if name == "archive_format" else data)


def _bomb(src: Path, dst: Path) -> Path:
    shutil.copy(src, dst)
    with zipfile.ZipFile(dst, "a", compression=zipfile.ZIP_DEFLATED) as z, z.open("mlp/extra/bomb", "w") as f:
        block = bytes(1 << 20)
        for _ in range(100):  # 100 MiB of zeros, ~100 KiB on disk
            f.write(block)
    return dst


@pytest.mark.parametrize("craft,needle", [
    (_add_entry("mlp/../../evil.txt", b"x"), "absolute or '..' path"),
    (_add_entry("/etc/evil.txt", b"x"), "absolute or '..' path"),
    (_add_entry("mlp/models/model.json", b"{}"), "appears twice"),
    (_add_entry("mlp/data/aotinductor/model/model.so", b"\x7fELF"), "data/aotinductor/model/model.so (compiled code)"),
    (_opaque_constant, "data/constants/opaque_obj_0"),
    (_no_format, "older layout with pickle"),
    (_bomb, "zip bomb"),
])
def test_malformed_or_code_carrying_archives_are_refused(program, tmp_path, craft, needle):
    crafted = craft(program, tmp_path / "crafted.pt2")
    with pytest.raises(UsageError, match=None) as info:
        inspect_pt2(crafted)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_not_a_zip_is_one_line(tmp_path):
    path = tmp_path / "x.pt2"
    path.write_text("not a zip")
    _one_error_line(run_cli("check", path, "-t", "onnx"), "is not a .pt2 archive")


def test_graph_calling_a_non_operator_is_refused(program, tmp_path):
    """A graph node may name any attribute under ``torch.`` as its call (``torch.os.system``); torch's
    verifier refuses non-operators on load. This pins that: the command never runs."""
    marker = tmp_path / "MARKER"

    def change(name, data):
        if name != "models/model.json":
            return data
        model = json.loads(data)
        graph = model["graph_module"]["graph"]
        graph["nodes"].insert(0, {"target": "torch.os.system", "name": "evil", "metadata": {},
                                  "inputs": [{"name": "command", "arg": {"as_string": f"touch {marker}"}, "kind": 1}],
                                  "outputs": [{"as_sym_int": {"as_name": "evil"}}], "is_hop_single_tensor_return": None})
        graph["sym_int_values"]["evil"] = {"as_int": 0}
        return json.dumps(model).encode()

    evil = rewrite(program, tmp_path / "evil.pt2", change)
    with pytest.raises(UsageError, match="not an allowed operator"):
        load_exported_program(evil)
    assert not marker.exists()
