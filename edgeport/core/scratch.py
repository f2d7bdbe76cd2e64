"""Scratch space: where edgeport's own temporary files go during a run.

Why not the system temp dir: a ``convert`` is a CI gate that promises to write nothing outside ``--out``,
and its scratch is not small (an XNNPACK weight cache is the size of the weights: gigabytes for a
1B-class model, RAM on a tmpfs ``/tmp``). A run that fails, or is cancelled (SIGTERM ->
:class:`edgeport.errors.Terminated`), must not leave it behind. So a run points :func:`run_scratch` at a
folder inside its staging directory (beside ``--out``, on the disk the pre-flight check measures): the run's
cleanup removes it with the staging directory, and :func:`run_scratch` removes it before the staging
directory is published, so nothing scratch reaches ``--out`` or its marker.

Libraries write scratch too, through Python's ``tempfile`` (ExecuTorch serializes every program through a
temporary folder for ``flatc``; torch makes its inductor cache folder) or ``$TMPDIR`` (onnxruntime, child
processes): during the run both point at the same folder, so theirs is removed with edgeport's own. The
one exception is what outlives the run by design (:func:`outside`: multiprocessing's socket folder, which
Python removes at exit).

Where there is no run (``validate``, ``generate``, ``quantize --sensitivity``, a fleet's Ray workers)
:func:`scratch_dir` falls back to the system temp dir. The root is carried in the
environment (:data:`ENV`, and ``TMPDIR``), so the row workers and child processes a run starts inherit
it; like the run's fd redirection it is per process, one run at a time.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

ENV = "EDGEPORT_SCRATCH"
FOLDER = ".scratch"          # inside the run's staging directory
REDIRECTED = (ENV, "TMPDIR")
_BEFORE: list = []           # ($TMPDIR, tempfile.tempdir) as they were before each active run_scratch


def root() -> Path | None:
    """The current run's scratch folder, or None (no run, or its folder is gone)."""
    where = os.environ.get(ENV)
    return Path(where) if where and os.path.isdir(where) else None


def scratch_dir(prefix: str = "edgeport-") -> Path:
    """A new private folder under the run's scratch (else the system temp dir); the caller removes it."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=root()))


def scratch_file(prefix: str = "edgeport-", suffix: str = "") -> Path:
    """A new empty file under the run's scratch (else the system temp dir); the caller removes it."""
    handle, name = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=root())
    os.close(handle)
    return Path(name)


@contextlib.contextmanager
def scratch(prefix: str = "edgeport-"):
    """A :func:`scratch_dir` for the block, removed after it however the block ends."""
    folder = scratch_dir(prefix)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def run_scratch(staging: Path):
    """During the block, scratch goes to ``staging/.scratch``; the folder is removed when the block ends
    (before the caller publishes ``staging``)."""
    folder = Path(staging).resolve() / FOLDER
    folder.mkdir()
    previous = {key: os.environ.get(key) for key in REDIRECTED}
    previous_tempdir = tempfile.tempdir
    _BEFORE.append((previous["TMPDIR"], previous_tempdir))
    os.environ.update({key: str(folder) for key in REDIRECTED})
    tempfile.tempdir = str(folder)
    try:
        yield folder
    finally:
        _BEFORE.pop()
        for key, value in previous.items():
            _set_env(key, value)
        tempfile.tempdir = previous_tempdir
        shutil.rmtree(folder, ignore_errors=True)


def _set_env(key: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = value


def follow_environment() -> None:
    """In a process forked before this run (a fork server's worker): take the scratch the environment
    names now, not a folder Python's ``tempfile`` remembered from an earlier run."""
    tempfile.tempdir = str(root()) if root() is not None else None
