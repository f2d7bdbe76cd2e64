"""``edgeport bundle``: copy what a sample app reads (manifest.json, the models, the parity samples) from an
output directory into the app's assets, keeping the manifest's relative paths valid there."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from edgeport.errors import UsageError

# platform -> the app's asset folder (relative to the app directory) that the sample app reads from
ASSET_DIRS = {
    "android": Path("app/src/main/assets/edgeport"),
    "ios": Path("EdgeportSample/edgeport"),
}


def files_to_bundle(out_dir: Path) -> list[Path]:
    """Paths relative to out_dir: manifest.json, each artifact that exists, each parity sample's files."""
    manifest_path = out_dir / "manifest.json"
    if not manifest_path.is_file():
        raise UsageError(f"{out_dir} has no manifest.json; give an edgeport convert --out directory")
    manifest = json.loads(manifest_path.read_text())
    files = [Path("manifest.json")]
    files += [Path(a["path"]) for a in manifest["artifacts"] if (out_dir / a["path"]).is_file()]
    for index in dict.fromkeys(a["parity_sample"] for a in manifest["artifacts"] if a.get("parity_sample")):
        entries = json.loads((out_dir / index).read_text())
        files += [Path(index)] + [Path(index).parent / e["file"] for e in entries["inputs"] + entries["outputs"]]
    return list(dict.fromkeys(files))


def bundle(out_dir: Path, app_dir: Path, platform: str) -> Path:
    """Replace the app's bundled edgeport assets with out_dir's; returns the asset folder."""
    if not app_dir.is_dir():
        raise UsageError(f"app directory {app_dir} does not exist")
    files = files_to_bundle(out_dir)
    assets = app_dir / ASSET_DIRS[platform]
    if assets.exists():
        shutil.rmtree(assets)
    for rel in files:
        (assets / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(out_dir / rel, assets / rel)
    return assets
