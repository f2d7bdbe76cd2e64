"""Writing a file edgeport owns in a directory it did not create (``validate DIR``, ``report DIR``, a fleet's
--force'd OUT) without writing through a link: the new content goes to a new file renamed over the old name,
so a hard link (or a symlink) there is replaced, and the file it shared an inode with elsewhere keeps its bytes.
``outdir.check_own_files`` refuses such links first; this holds even where a check is missed."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path


def write_replacing(path: Path, data: str | bytes) -> None:
    """``path`` holds ``data`` (text as UTF-8): written to a new file beside it, then ``os.replace``d over it."""
    path = Path(path)
    handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def unlinked_for_append(path: Path) -> None:
    """Before ``path`` is opened for appending (a run log): a hard link or a symlink there is replaced by a new
    empty file, so the append cannot reach the file it names. The other name keeps the old content."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode) or (stat.S_ISREG(info.st_mode) and info.st_nlink > 1):
        write_replacing(path, b"")
