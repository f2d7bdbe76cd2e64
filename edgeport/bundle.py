"""``edgeport bundle``: copy what a sample app reads (manifest.json, the models, the parity samples) from an
output directory into the app's assets, keeping the manifest's relative paths valid there.

manifest.json and the parity sample indexes are input files like any other: every path they name must stay
inside the output directory (no absolute path, no ``..``, no symlink leading out), or nothing is copied.
The new asset folder is built beside the old one and swapped in by rename, so a failure leaves the app as
it was. Every error is one line (UsageError, exit 2).
"""

from __future__ import annotations

import shutil
from pathlib import Path, PurePosixPath

from edgeport.errors import UsageError, json_object

# platform -> the app's asset folder (relative to the app directory) that the sample app reads from
ASSET_DIRS = {
    "android": Path("app/src/main/assets/edgeport"),
    "ios": Path("EdgeportSample/edgeport"),
}


def inside(root: Path, text, what: str) -> Path:
    """``text`` as a path relative to ``root`` that stays inside it once resolved (symlinks included);
    anything else is a UsageError naming ``what``."""
    if not isinstance(text, str) or not text:
        raise UsageError(f"{what} {text!r} is not a relative path")
    rel = PurePosixPath(text.replace("\\", "/"))
    if rel.is_absolute() or Path(text).is_absolute() or ".." in rel.parts or ":" in "".join(rel.parts[:1]):
        raise UsageError(f"{what} {text!r} is absolute or leaves {root} ('..'); refusing to bundle")
    resolved = (root / rel).resolve()
    if resolved != root.resolve() and root.resolve() not in resolved.parents:
        raise UsageError(f"{what} {text!r} leads outside {root} (a symlink); refusing to bundle")
    return Path(rel)


def _json(path: Path, what: str) -> dict:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {what} {path}: {exc}") from None
    return json_object(raw, f"cannot read {what} {path}: it")


def files_to_bundle(out_dir: Path) -> list[Path]:
    """Paths relative to out_dir: manifest.json, each artifact that exists, each parity sample's files."""
    manifest_path = out_dir / "manifest.json"
    if not manifest_path.is_file():
        raise UsageError(f"{out_dir} has no manifest.json; give an edgeport convert --out directory")
    inside(out_dir, "manifest.json", "manifest.json")
    artifacts = _json(manifest_path, "manifest").get("artifacts")
    if not isinstance(artifacts, list) or not all(isinstance(a, dict) for a in artifacts):
        raise UsageError(f"{manifest_path} has no list of artifacts")
    files = [Path("manifest.json")]
    for artifact in artifacts:
        rel = inside(out_dir, artifact.get("path"), "artifact path")
        if (out_dir / rel).exists():  # a failed row's artifact may be gone: nothing of it is bundled then
            files += artifact_files(out_dir, artifact, rel)
    for index_text in dict.fromkeys(a["parity_sample"] for a in artifacts if a.get("parity_sample")):
        index = inside(out_dir, index_text, "parity_sample")
        entries = _json(out_dir / index, "parity sample index")
        tensors = [e for key in ("inputs", "outputs") for e in entries.get(key) or []]
        if not all(isinstance(e, dict) for e in tensors):
            raise UsageError(f"{out_dir / index} lists something other than tensors")
        files.append(index)
        for entry in tensors:
            rel = inside(out_dir, (PurePosixPath(index_text).parent / str(entry.get("file"))).as_posix(), "parity sample file")
            if not (out_dir / rel).is_file():
                raise UsageError(f"{out_dir / index} names {entry.get('file')!r}, which {out_dir} does not have")
            files.append(rel)
    return list(dict.fromkeys(files))


def artifact_files(out_dir: Path, artifact: dict, rel: Path) -> list[Path]:
    """Every file the manifest lists for an artifact (its ``files``: external data, weights, executables,
    tokenizer), each present with the size and sha256 recorded; a manifest without the list (older
    edgeport) names only ``path``."""
    from edgeport.core.files import file_problem

    entries = artifact.get("files")
    if not entries:
        return [rel] if (out_dir / rel).is_file() else []
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise UsageError(f"{out_dir / 'manifest.json'}: the files of {artifact.get('path')!r} are not a list of files")
    paths = [inside(out_dir, e.get("path"), "artifact file") for e in entries]
    problem = file_problem(out_dir, entries)
    if problem:
        raise UsageError(f"{out_dir}: {problem}; refusing to bundle an incomplete artifact")
    return paths


def asset_dir(app_dir: Path, platform: str) -> Path:
    """The app's edgeport asset folder; it (and the folders above it) must stay inside the app directory."""
    if not app_dir.is_dir():
        raise UsageError(f"app directory {app_dir} does not exist")
    assets = app_dir / ASSET_DIRS[platform]
    if assets.is_symlink():
        raise UsageError(f"{assets} is a symlink; refusing to replace it")
    inside(app_dir, ASSET_DIRS[platform].as_posix(), "asset folder")
    return assets


def bundle(out_dir: Path, app_dir: Path, platform: str) -> Path:
    """Replace the app's bundled edgeport assets with out_dir's; returns the asset folder."""
    from edgeport.pipeline.marker import check_replaceable
    from edgeport.pipeline.outdir import publish, staging_dir

    assets = asset_dir(app_dir, platform)
    files = files_to_bundle(out_dir)
    if assets.is_dir() and not assets.is_symlink() and any(assets.iterdir()):
        check_replaceable(assets, "asset folder")  # only what an earlier bundle wrote is replaced
    try:
        staging = staging_dir(assets)
    except OSError as exc:
        raise UsageError(f"cannot write into {assets.parent}: {exc}") from None
    try:
        for rel in files:
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(out_dir / rel, staging / rel)
        publish(staging, assets)
    except OSError as exc:
        raise UsageError(f"bundling into {assets} failed, the app is unchanged: {exc}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone already when published
    return assets
