"""Every file of an artifact (issue 21 item 1): manifest.json lists each with size and sha256 (ONNX external
data, TPU weights/meta/executables), and validate, bundle, the cache and the workers' transfer follow the
list: a missing or altered side file fails validate with a one-line reason."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from conftest import REPO, convert_in_process, read_manifest, read_report, run_cli

MODELS = REPO / "tests" / "models.py"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def entry(manifest: dict, target: str, variant: str = "fp32") -> dict:
    return next(a for a in manifest["artifacts"] if a["target"] == target and a["variant"] == variant)


@pytest.fixture(scope="module")
def external(tmp_path_factory):
    """ONNX with its weights in model.onnx.data (the documented --onnx-external-data, what torch.onnx does by
    itself above 1.5 GB) and TPU, in one output directory."""
    out = tmp_path_factory.mktemp("files") / "out"
    result = convert_in_process(f"{MODELS}:mlp", out, ["onnx", "tpu"], samples=2, latency=False,
                                target_options={"onnx_external_data": True, "tpu_topology": ["v5e:1x1"]})
    assert result.exit_code == 0, [(r["target"], r.get("error")) for r in result.report["targets"]]
    return out


def test_manifest_lists_every_file_with_size_and_sha256(external):
    report, manifest = read_report(external), read_manifest(external)
    onnx, tpu = entry(manifest, "onnx"), entry(manifest, "tpu")
    assert [f["path"] for f in onnx["files"]] == ["onnx/model.onnx", "onnx/model.onnx.data"]
    paths = [f["path"] for f in tpu["files"]]
    assert paths[:3] == ["tpu/fp32/model.jax_export", "tpu/fp32/weights.safetensors", "tpu/fp32/meta.json"]
    assert any(re.fullmatch(r"tpu/fp32/executables/.+\.tpu_exec", p) for p in paths), paths
    assert "tpu/fp32/model.stablehlo.mlir" not in paths                 # for reading, not part of the artifact
    for item in onnx["files"] + tpu["files"]:
        assert item["size_bytes"] == (external / item["path"]).stat().st_size
        assert item["sha256"] == sha256(external / item["path"])
    data = external / "onnx" / "model.onnx.data"
    assert data.stat().st_size > (external / "onnx" / "model.onnx").stat().st_size   # the weights really are there
    row = next(r for r in report["targets"] if r["target"] == "onnx")
    assert row["files"] == onnx["files"] and onnx["sha256"] == row["sha256"] == sha256(external / "onnx/model.onnx")


@pytest.mark.parametrize("side", ["onnx/model.onnx.data", "tpu/fp32/weights.safetensors"])
@pytest.mark.parametrize("damage", ["delete", "alter"])
def test_validate_fails_on_a_missing_or_altered_side_file(external, tmp_path, side, damage):
    copy = tmp_path / "dist"
    shutil.copytree(external, copy)
    path = copy / side
    if damage == "delete":
        path.unlink()
    else:
        raw = bytearray(path.read_bytes())
        raw[len(raw) // 2] ^= 0xFF                                         # same size, other bytes
        path.write_bytes(bytes(raw))
    result = run_cli("validate", copy, "--samples", "2", "--no-latency")
    assert result.returncode == 1, result.stdout + result.stderr
    report = read_report(copy)
    target = side.split("/")[0]
    row = next(r for r in report["targets"] if r["target"] == target)
    assert row["status"] == "failed" and side in row["error"] and "\n" not in row["error"], row["error"]
    assert ("missing" if damage == "delete" else "changed since conversion") in row["error"]
    other = next(r for r in report["targets"] if r["target"] != target)
    assert other["status"] == "ok"                                       # the other target's files are intact


def test_validate_passes_an_intact_directory(external, tmp_path):
    copy = tmp_path / "dist"
    shutil.copytree(external, copy)
    result = run_cli("validate", copy, "--samples", "2", "--no-latency")
    assert result.returncode == 0, result.stdout + result.stderr


def test_bundle_copies_every_file_and_refuses_an_altered_one(external, tmp_path):
    app = tmp_path / "app"
    app.mkdir()
    result = run_cli("bundle", external, "--android", app)
    assert result.returncode == 0, result.stdout + result.stderr
    assets = app / "app/src/main/assets/edgeport"
    for item in entry(read_manifest(external), "onnx")["files"] + entry(read_manifest(external), "tpu")["files"]:
        assert sha256(assets / item["path"]) == item["sha256"], item["path"]
    broken = tmp_path / "dist"
    shutil.copytree(external, broken)
    (broken / "onnx/model.onnx.data").write_bytes(b"\0" * 8)
    result = run_cli("bundle", broken, "--android", app)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "onnx/model.onnx.data" in lines[0], result.stderr
    assert sha256(assets / "onnx/model.onnx.data") == sha256(external / "onnx/model.onnx.data")   # app unchanged


def convert_cached(out: Path, cache: Path, *extra) -> dict:
    result = run_cli("convert", f"{MODELS}:mlp", "-t", "onnx", "--onnx-external-data", "--out", out, "--samples", "2",
                     "--no-latency", *extra, env={**__import__("os").environ, "EDGEPORT_CACHE": str(cache)})
    assert result.returncode == 0, result.stdout + result.stderr
    return next(r for r in read_report(out)["targets"] if r["target"] == "onnx")


def test_cache_restores_every_file_and_an_entry_without_one_is_a_miss(tmp_path):
    cache = tmp_path / "cache"
    first = convert_cached(tmp_path / "a", cache)
    assert first["cache"] == "miss"
    second = convert_cached(tmp_path / "b", cache)
    assert second["cache"] == "hit" and second["files"] == first["files"]
    assert sha256(tmp_path / "b/onnx/model.onnx.data") == sha256(tmp_path / "a/onnx/model.onnx.data")
    for meta_path in (cache / "entries").glob("*/*/meta.json"):          # an entry that lost the side file
        meta = json.loads(meta_path.read_text())
        if "onnx/model.onnx.data" in meta["files"] or "model.onnx.data" in meta["files"]:
            name = next(n for n in meta["files"] if n.endswith("model.onnx.data"))
            del meta["files"][name]
            (meta_path.parent / "files" / name).unlink()
            meta_path.write_text(json.dumps(meta))
    third = convert_cached(tmp_path / "c", cache)
    assert third["cache"] == "miss" and third["status"] == "ok"         # converted again, not half restored
    assert (tmp_path / "c/onnx/model.onnx.data").is_file()
    assert convert_cached(tmp_path / "d", cache)["cache"] == "hit"      # and stored whole again


def test_rows_in_worker_processes_bring_every_file(tmp_path):
    out = tmp_path / "out"
    result = run_cli("convert", f"{MODELS}:mlp", "-t", "onnx", "-q", "dynamic-int8", "--onnx-external-data", "-j", "2",
                     "--out", out, "--samples", "2", "--no-latency")
    assert result.returncode == 0, result.stdout + result.stderr
    manifest = read_manifest(out)
    for artifact in manifest["artifacts"]:
        for item in artifact["files"]:
            assert sha256(out / item["path"]) == item["sha256"], item["path"]
    assert "onnx/model.onnx.data" in [f["path"] for f in entry(manifest, "onnx")["files"]]


def test_a_file_lost_between_worker_and_driver_fails_its_row(tmp_path):
    from edgeport.pipeline.jobs import arrived

    (tmp_path / "onnx").mkdir()
    (tmp_path / "onnx/model.onnx").write_bytes(b"x")
    files = [{"path": "onnx/model.onnx", "size_bytes": 1, "sha256": "0" * 64},
             {"path": "onnx/model.onnx.data", "size_bytes": 4, "sha256": "0" * 64}]
    row = arrived({"target": "onnx", "variant": "fp32", "status": "ok", "files": files}, tmp_path)
    assert row["status"] == "failed" and "onnx/model.onnx.data" in row["error"]
