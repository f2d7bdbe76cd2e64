"""Every file of an artifact, digested once: the one list manifest.json, report.json, ``validate``, ``bundle``,
the cache and the workers' transfer all follow.

An artifact is rarely one file: ONNX keeps large weights in ``model.onnx.data`` beside ``model.onnx``, a TPU
artifact needs ``weights.safetensors``, ``meta.json`` and its AOT executables beside ``model.jax_export``, a
generative artifact needs the tokenizer. A target declares its side files in
:class:`edgeport.targets.base.Converted` (``files``); this module turns that into entries
``{"path", "size_bytes", "sha256"}`` (paths relative to the output directory, POSIX separators) and checks a
directory against them, target-neutrally.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def artifact_files(artifact: Path, side: Iterable[Path] = ()) -> list[Path]:
    """The artifact (a file, or every file under a directory artifact) then its side files, once each."""
    artifact = Path(artifact)
    own = sorted(p for p in artifact.rglob("*") if p.is_file()) if artifact.is_dir() else [artifact]
    return list(dict.fromkeys([*own, *(Path(p) for p in side)]))


def describe_files(root: Path, paths: Iterable[Path]) -> list[dict]:
    """``{"path", "size_bytes", "sha256"}`` per file, its path relative to ``root`` (the output directory)."""
    root = Path(root)
    return [{"path": Path(p).relative_to(root).as_posix(), "size_bytes": Path(p).stat().st_size,
             "sha256": file_sha256(Path(p))} for p in paths]


def digested(converted, root: Path) -> tuple[list[dict], int, str]:
    """(file entries, bytes of every file, artifact sha256) of a :class:`~edgeport.targets.base.Converted`
    written under ``root``: what a row records, every file read once. The size covers every file a user
    ships (a TPU artifact's weights.safetensors and executables, ONNX's external data), not the main file."""
    entries = describe_files(root, converted.all_files())
    _size, sha = artifact_digest(root, converted.artifact, entries)
    return entries, sum(e["size_bytes"] for e in entries), sha


def artifact_digest(root: Path, artifact: Path, entries: list[dict]) -> tuple[int, str]:
    """(bytes, sha256) of the artifact itself, from its entries (no second read): a file's own digest, or a
    directory's digest over its files' relative paths and digests (what ``row.digest_of`` computes)."""
    artifact = Path(artifact)
    rel = artifact.relative_to(root).as_posix()
    if not artifact.is_dir():
        entry = next(e for e in entries if e["path"] == rel)
        return entry["size_bytes"], entry["sha256"]
    inside = [e for e in entries if e["path"].startswith(rel + "/")]   # in artifact_files' order: sorted paths
    digest = hashlib.sha256()
    for entry in inside:
        digest.update(f"{entry['path'][len(rel) + 1:]}\0{entry['sha256']}\n".encode())
    return sum(e["size_bytes"] for e in inside), digest.hexdigest()


def file_problem(root: Path, entries, check_sha: bool = True) -> str | None:
    """The first file of ``entries`` that ``root`` lacks or holds changed, as one line; None when all match.
    ``entries`` is data read from a directory: a path leaving ``root`` is a problem too, never followed."""
    root = Path(root).resolve()
    for entry in entries or []:
        rel = entry.get("path") if isinstance(entry, dict) else None
        path = (root / rel).resolve() if isinstance(rel, str) and rel else None
        if path is None or not path.is_relative_to(root):
            return f"artifact file list names {rel!r}, which is not a path inside the directory"
        if not path.is_file():
            return f"artifact file missing: {rel}"
        size = path.stat().st_size
        if size != entry.get("size_bytes"):
            return f"artifact file changed since conversion: {rel} ({size} bytes != recorded {entry.get('size_bytes')})"
        if check_sha and file_sha256(path) != entry.get("sha256"):
            return f"artifact file changed since conversion: {rel} (sha256 differs from the recorded one)"
    return None
