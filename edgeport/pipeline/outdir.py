"""The output directory: checked before any work, built in a hidden staging directory beside it, and put
in place only when complete, so a failed or interrupted run never leaves half a result in ``--out``."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from edgeport.errors import UsageError


def check_output_dir(out: Path, force: bool, inputs: list[Path] | None = None) -> None:
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise UsageError(f"--out {out} is not empty; pass --force to replace it")


def staging_dir(out: Path) -> Path:
    parent = out.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=parent))


def publish(staging: Path, out: Path) -> None:
    """Move the finished directory into place; the old one (checked empty or --force) goes only now."""
    if out.exists():
        shutil.rmtree(out)
    os.replace(staging, out)
