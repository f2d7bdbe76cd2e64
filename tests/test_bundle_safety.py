"""`edgeport bundle` with a crafted manifest: every path must stay inside the output directory and the app's
asset folder, errors are one line (exit 2), and a failure leaves the app exactly as it was."""

import json
import shutil
from pathlib import Path

import pytest

from conftest import run_cli
from edgeport.errors import UsageError

ASSETS = Path("app/src/main/assets/edgeport")


def _out(tmp_path: Path, artifact_path: str = "litert/model_fp32.tflite", sample_file: str = "input_0.bin") -> Path:
    """An output directory as convert writes it (manifest, one model, one parity sample), paths as given."""
    out = tmp_path / "out"
    (out / "litert" / "parity_sample").mkdir(parents=True)
    (out / "litert" / "model_fp32.tflite").write_bytes(b"TFL3model")
    (out / "litert" / "parity_sample" / "input_0.bin").write_bytes(b"\0" * 16)
    (out / "litert" / "parity_sample" / "index.json").write_text(json.dumps(
        {"inputs": [{"file": sample_file, "shape": [4], "dtype": "float32"}], "outputs": []}))
    (out / "manifest.json").write_text(json.dumps({"schema": "edgeport.manifest/1", "artifacts": [
        {"target": "litert", "variant": "fp32", "path": artifact_path, "status": "ok",
         "parity_sample": "litert/parity_sample/index.json"}]}))
    return out


def _app(tmp_path: Path) -> Path:
    app = tmp_path / "app_dir"
    (app / ASSETS).mkdir(parents=True)
    (app / ASSETS / "old.tflite").write_text("the app's current model")
    from edgeport.pipeline.marker import write_marker

    write_marker(app / ASSETS)  # as an earlier bundle left it: edgeport's own list
    return app


def _snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def _refused(result, needle: str):
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("edgeport: error:") and needle in lines[0], result.stderr


@pytest.mark.parametrize("artifact_path,needle", [
    ("../outside.tflite", "leaves"),
    ("/etc/hostname", "is absolute"),
    ("litert/../../outside.tflite", "leaves"),
])
def test_manifest_paths_outside_the_output_are_refused(tmp_path, artifact_path, needle):
    out, app = _out(tmp_path, artifact_path), _app(tmp_path)
    (tmp_path / "outside.tflite").write_text("not the user's to bundle")
    before = _snapshot(tmp_path)
    _refused(run_cli("bundle", out, "--android", app), needle)
    assert _snapshot(tmp_path) == before  # nothing written anywhere, the app as it was


def test_symlink_leading_out_of_the_output_is_refused(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("private")
    out, app = _out(tmp_path), _app(tmp_path)
    model = out / "litert" / "model_fp32.tflite"
    model.unlink()
    model.symlink_to(secret)
    before = _snapshot(app)
    _refused(run_cli("bundle", out, "--android", app), "leads outside")
    assert _snapshot(app) == before


def test_parity_sample_file_outside_is_refused(tmp_path):
    out, app = _out(tmp_path, sample_file="../../../secret.bin"), _app(tmp_path)
    before = _snapshot(app)
    _refused(run_cli("bundle", out, "--android", app), "parity sample file")
    assert _snapshot(app) == before


def test_asset_folder_leading_out_of_the_app_is_refused(tmp_path):
    out, app = _out(tmp_path), tmp_path / "app_dir"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (app / "app" / "src").mkdir(parents=True)
    (app / "app" / "src" / "main").symlink_to(elsewhere)
    _refused(run_cli("bundle", out, "--android", app), "leads outside")
    assert list(elsewhere.iterdir()) == []


def test_bad_manifest_is_one_line(tmp_path):
    out, app = _out(tmp_path), _app(tmp_path)
    (out / "manifest.json").write_text("{not json")
    _refused(run_cli("bundle", out, "--android", app), "cannot read manifest")


def test_a_failure_while_copying_leaves_the_app_as_it_was(tmp_path, monkeypatch):
    from edgeport import bundle

    out, app = _out(tmp_path), _app(tmp_path)
    before = _snapshot(tmp_path / "app_dir")
    copied = []

    def failing_copy(src, dst):
        copied.append(src)
        if len(copied) == 2:
            raise OSError(28, "No space left on device")
        return shutil.copyfile(src, dst)

    monkeypatch.setattr(bundle.shutil, "copy2", failing_copy)
    with pytest.raises(UsageError, match="the app is unchanged"):
        bundle.bundle(out, app, "android")
    assert _snapshot(tmp_path / "app_dir") == before  # old assets in place, no staging directory left


def test_good_bundle_replaces_the_assets_and_leaves_nothing_else(tmp_path):
    out, app = _out(tmp_path), _app(tmp_path)
    result = run_cli("bundle", out, "--android", app)
    assert result.returncode == 0, result.stderr
    assets = app / ASSETS
    assert sorted(str(p.relative_to(assets)) for p in assets.rglob("*") if p.is_file() and p.name != ".edgeport") == [
        "litert/model_fp32.tflite", "litert/parity_sample/index.json", "litert/parity_sample/input_0.bin", "manifest.json"]
    assert sorted(p.name for p in assets.parent.iterdir()) == ["edgeport"]
