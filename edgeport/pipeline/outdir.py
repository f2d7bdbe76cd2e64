"""The output directory: edgeport replaces only what it wrote, never an input, and swaps a run in atomically.

- :func:`check_output_dir` runs before any work. ``--force`` may replace only a directory edgeport wrote:
  its :data:`MARKER` lists every path edgeport put there and nothing else is in it
  (:mod:`edgeport.pipeline.marker`; a report.json proves nothing, anyone can copy one); ``--out`` may not
  be the working directory, one of its parents, or hold an input (model file, data, config); a symlink or a file is refused;
  the parent must be writable. A mistake is exit 2 before minutes of conversion, not a loss after.
- :func:`staging_dir` makes the hidden ``.NAME.staging-XXXX`` directory a run writes into (beside ``--out``,
  on the same file system, with this process's pid), after removing stale ones of runs that died (SIGKILL,
  a reboot) — only directories of that pattern holding our pid file, of a pid that is gone.
- :func:`publish` swaps the finished directory in under a lock (an flock on the parent directory, so no
  lock file is left beside the user's output): old -> trash, staging -> out, then the trash is deleted. Two concurrent runs each end with a complete directory (the
  last one wins); nobody ever renames onto a non-empty directory.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import tempfile
from pathlib import Path

from edgeport.errors import UsageError

from edgeport.pipeline.marker import MARKER, check_replaceable, claim, foreign_entries, write_marker

PID_FILE = ".edgeport-run.pid"       # in staging and trash directories: "<pid> <host>" of the run owning it
WRITABLE = os.W_OK | os.X_OK


def check_output_dir(out: Path, force: bool, inputs: list[Path] = ()) -> None:
    """Refuse (UsageError) an --out this run must not write or replace; see the module docstring."""
    out = Path(out)
    if out.is_symlink():
        raise UsageError(f"--out {out} is a symlink; give the directory itself")
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} exists and is not a directory")
    target, cwd = out.resolve(), Path.cwd().resolve()
    if target == cwd or target in cwd.parents:
        raise UsageError(f"--out {out} is the working directory or one of its parents; give a directory of its own")
    for path in inputs:
        resolved = Path(path).resolve()
        if resolved == target or target in resolved.parents:
            raise UsageError(f"--out {out} holds an input of this run ({path}); give a directory of its own")
    if out.is_dir() and any(out.iterdir()):
        if force or foreign_entries(out) is None:
            check_replaceable(out, "--out")
        if not force:
            raise UsageError(f"--out {out} is not empty; pass --force to replace it")
    check_writable(out)


def is_ours(directory: Path) -> bool:
    """An output directory edgeport wrote, every entry of it (its marker's list; see
    :mod:`edgeport.pipeline.marker`)."""
    return foreign_entries(directory) == []


def check_own_files(directory: Path, names) -> None:
    """``validate``/``report``/``fleet --force`` write these names into a directory they did not create: one that is a symlink
    (or not a regular file), or a hard link (a file with another name, maybe outside it), would carry the write
    outside it, so it is bad input (exit 2), before any work. (The writers also replace rather than write through:
    :mod:`edgeport.core.replace`, so DIR itself must be writable.)"""
    names = list(names)
    if names and Path(directory).is_dir() and not os.access(directory, WRITABLE):
        raise UsageError(f"cannot write into {directory}: edgeport writes its files there as new files renamed "
                         "over the old ones, and the directory is not writable")
    for name in names:
        path = Path(directory) / name
        if path.is_symlink() or (path.exists() and not path.is_file()):
            raise UsageError(f"{path} is a symlink or not a regular file; edgeport writes only its own files "
                             f"inside {directory}")
        if path.exists() and path.stat().st_nlink > 1:
            raise UsageError(f"{path} is a hard link ({path.stat().st_nlink} names for one file, maybe outside "
                             f"{directory}); edgeport writes only its own files inside {directory}")
    claim(directory, names)  # about to be written: a later --force may replace them (and only them)


def check_writable(out: Path) -> None:
    """The run will create its staging directory beside --out (and missing parents): the nearest existing
    ancestor must be a writable directory."""
    existing = Path(out).resolve().parent
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, WRITABLE):
        raise UsageError(f"cannot write --out {out}: {existing} is not a writable directory")


def check_junit(junit: Path | None) -> None:
    """A relative --junit lands in the output directory (a plain file name); an absolute one needs an
    existing, writable directory. Checked before converting, not when writing at the end."""
    if junit is None:
        return
    junit = Path(junit)
    if not junit.is_absolute():
        if junit.parent != Path(".") or junit.name in ("", ".", ".."):
            raise UsageError(f"--junit {junit}: a relative path is a file name inside the output directory; "
                             "give an absolute path to write it elsewhere")
        return
    if not junit.parent.is_dir():
        raise UsageError(f"--junit {junit}: directory {junit.parent} does not exist")
    if junit.is_dir() or not os.access(junit.parent, WRITABLE):
        raise UsageError(f"--junit {junit} cannot be written (a directory, or {junit.parent} is not writable)")


def input_paths(model: str, *others) -> list[Path]:
    """Files and directories a run reads, as far as they exist: the model (``file.py`` of ``file.py:fn``, a
    ``.pt2``, an ``hf:`` directory, the package of ``package.module:fn``) and the other path options
    (--data, --calibration-data, --config, --baseline, --decompositions; ``file.py:fn`` forms too)."""
    paths = []
    for spec in (model, *others):
        if spec is None:
            continue
        text = str(spec)
        text = text[3:] if text.startswith("hf:") else text.removeprefix("gguf:")
        where, sep, _ = text.rpartition(":")
        if sep and where.endswith(".py"):
            text = where
        elif sep and where and not Path(text).exists():
            text = _package_dir(where) or text
        if Path(text).exists():
            paths.append(Path(text))
    return paths


def _package_dir(module: str) -> str | None:
    """Where ``module``'s top-level package lives, found without importing (running) anything."""
    import importlib.machinery
    import sys

    try:
        found = importlib.machinery.PathFinder.find_spec(module.split(".")[0], [os.getcwd(), *sys.path])
    except (ImportError, ValueError):
        return None
    if found is None:
        return None
    locations = list(found.submodule_search_locations or [])
    return locations[0] if locations else found.origin


def staging_dir(out: Path, mark: bool = True) -> Path:
    """A new hidden directory beside ``out`` for this run, holding our pid (and with ``mark``, the marker
    that lets a later --force replace it)."""
    parent = Path(out).resolve().parent
    try:  # os.access says yes to root everywhere; /proc or a read-only mount still refuse the write
        parent.mkdir(parents=True, exist_ok=True)
        clean_stale(parent, Path(out).name)
        staging = Path(tempfile.mkdtemp(prefix=f".{Path(out).name}.staging-", dir=parent))
    except OSError as exc:
        raise UsageError(f"cannot write --out {out}: {exc.strerror or exc}") from None
    os.chmod(staging, 0o777 & ~_umask())  # mkdtemp's 0700 would become the output's mode
    _claim(staging)
    if mark:
        write_marker(staging)  # rewritten with the full list when published
    return staging


def clean_stale(parent: Path, name: str) -> list[Path]:
    """Remove ``.NAME.staging-*`` / ``.NAME.trash-*`` directories left by runs that died (their pid file
    names a process of this host that no longer exists), first putting back an old output a dead run had
    moved to its trash when NAME itself is gone. Anything else is left alone."""
    pattern = re.compile(rf"\.{re.escape(name)}\.(staging|trash)-\w+")
    removed = []
    for entry in parent.iterdir():
        if not pattern.fullmatch(entry.name) or entry.is_symlink() or not entry.is_dir():
            continue
        owner = _owner(entry)
        if owner is None or owner[1] != socket.gethostname() or _alive(owner[0]):
            continue
        old, dest = entry / "old", parent / name
        if ".trash-" in entry.name and old.is_dir() and not old.is_symlink() and not os.path.lexists(dest):
            os.rename(old, dest)  # the run died between publish's two renames: the old output comes back
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def publish(staging: Path, out: Path, only_ours: bool = True) -> None:
    """Swap the finished ``staging`` in as ``out`` under the lock; see the module docstring. ``only_ours``:
    refuse to replace a non-empty directory without edgeport's marker (a sample app's asset folder, named
    for edgeport, is replaced regardless)."""
    from edgeport.core.guard import check_owner

    check_owner()  # a copy of the process forked by user code never publishes (edgeport.core.guard)
    dest = staging.parent / Path(out).name
    trash = None
    if (staging / MARKER).is_file():
        write_marker(staging)  # everything in it now is what edgeport wrote
    with _locked(staging.parent):
        if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
            raise UsageError(f"--out {out} was replaced by a symlink or a file during the run; left it as it is")
        if dest.exists():
            if only_ours and any(dest.iterdir()) and not is_ours(dest):
                raise UsageError(f"--out {out} was filled by something other than edgeport during the run; left it as it is")
            trash = Path(tempfile.mkdtemp(prefix=f".{dest.name}.trash-", dir=staging.parent))
            _claim(trash)
            os.rename(dest, trash / "old")
        try:
            os.rename(staging, dest)
        except OSError:
            if trash is not None:
                os.rename(trash / "old", dest)  # put the old one back: a failed run changes nothing
            raise
        (dest / PID_FILE).unlink(missing_ok=True)
    if trash is not None:
        shutil.rmtree(trash, ignore_errors=True)


@contextlib.contextmanager
def _locked(directory: Path):
    """An exclusive flock on ``directory`` itself: nothing is left beside the user's files (a lock file
    cannot be removed safely while others may wait on it). Where a directory cannot be flocked (some
    network file systems), a ``.edgeport.lock`` file in it is locked instead."""
    import fcntl

    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        os.close(fd)
        fd = os.open(directory / ".edgeport.lock", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
    try:
        yield
    finally:
        os.close(fd)  # releases the lock


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _claim(directory: Path) -> None:
    (directory / PID_FILE).write_text(f"{os.getpid()} {socket.gethostname()}\n")


def _owner(directory: Path) -> tuple[int, str] | None:
    try:
        pid, host = (directory / PID_FILE).read_text().split(maxsplit=1)
        return int(pid), host.strip()
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    if pid <= 0 or pid == os.getpid():
        return True  # (0 and negatives would address process groups)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, another user's
    return True
