"""A content-addressed store of conversion results, shared by every run on a machine (and by concurrent ones).

An entry is a directory named by the sha256 of what decided its output (the caller builds that key: see
:mod:`edgeport.pipeline.reuse` and the TPU compiles in ``edgeport.targets.tpu``), holding files and one
``meta.json`` with each file's sha256 and the caller's JSON data. Why it is built this way:

- Atomic entries: an entry is assembled in ``tmp/`` and renamed into ``entries/`` in one step, so a reader
  sees a whole entry or none; when two processes store the same key, the first rename wins and the other
  discards its copy. Eviction renames an entry out of ``entries/`` before deleting it, for the same reason.
- Never trusted: every file is hashed while it is copied out; a wrong hash, a missing file or an unreadable
  ``meta.json`` is a miss (and the entry is dropped), never an error. A cache can only make a run faster.
- Bounded: after each store the least recently used entries go until the total is under the bound
  (``EDGEPORT_CACHE_MAX``, e.g. ``20G``; default 10 GiB). A hit touches the entry's ``meta.json``.
- Location: ``$EDGEPORT_CACHE``, else the platform's cache directory + ``edgeport/cache`` (its own
  folder: the project's virtualenvs live elsewhere under ``edgeport/``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from edgeport.errors import UsageError, load_json

SCHEMA = "edgeport.cache/1"
DEFAULT_MAX_BYTES = 10 * 2**30
UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
TMP_MAX_AGE_S = 24 * 3600      # a build directory this old belongs to a process that died
TMP_PREFIXES = ("build-", "drop-")   # what the cache stages under tmp/; nothing else there is touched
KEY = re.compile(r"[0-9a-f]{64}")    # entries/<first 2>/<key>: sha256 hex (key_of)


def default_root() -> Path:
    """``$EDGEPORT_CACHE`` or the platform cache directory (XDG on Linux, Library/Caches, LOCALAPPDATA)."""
    if os.environ.get("EDGEPORT_CACHE"):
        return Path(os.environ["EDGEPORT_CACHE"]).expanduser()
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    elif os.name == "nt":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "edgeport" / "cache"


def parse_size(text: str, what: str = "EDGEPORT_CACHE_MAX") -> int:
    """``10G``, ``500M``, ``1048576``: bytes. Bad text is bad input (exit 2) naming ``what`` it came from."""
    value = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = value[-1] if value and value[-1] in UNITS else ""
    try:
        number = float(value[: len(value) - len(unit)] if unit else value)
    except ValueError:
        number = -1
    if not number >= 0 or number == float("inf"):  # nan, inf: no size (int() of them is an internal error)
        raise UsageError(f"{what}={text!r}: expected a size such as 10G, 500M or a byte count")
    return int(number * UNITS[unit])


def default_max_bytes() -> int:
    text = os.environ.get("EDGEPORT_CACHE_MAX")
    return parse_size(text) if text else DEFAULT_MAX_BYTES


def key_of(parts: dict) -> str:
    """The key: sha256 of the parts as canonical JSON (sorted keys), so equal inputs give equal keys."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class Cache:
    def __init__(self, root: Path | None = None, max_bytes: int | None = None):
        self.root = Path(root) if root is not None else default_root()
        self.max_bytes = default_max_bytes() if max_bytes is None else max_bytes

    # ------------------------------------------------------------------------------------------- reading
    def entry_dir(self, key: str) -> Path:
        return self.root / "entries" / key[:2] / key

    def get(self, key: str, dest: Path) -> dict | None:
        """Copy the entry's files under ``dest`` (files already there are kept: another row of this run
        wrote them) and return its data, or None on a miss. Files copied before a problem is found are
        removed again, so a miss leaves ``dest`` as it was."""
        entry = self.entry_dir(key)
        meta = self._meta(entry)
        if meta is None:
            return None
        copied: list[Path] = []
        try:
            sources = {rel: _entry_file(entry, rel, info) for rel, info in meta["files"].items()}
            for rel, info in meta["files"].items():
                target = _inside(dest, rel)
                if target.exists():
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                copied.append(target)
                if _copy_hashed(sources[rel], target) != info["sha256"]:
                    raise ValueError(f"{rel}: sha256 mismatch")
        except (OSError, ValueError, KeyError, TypeError, ArithmeticError):
            for path in copied:
                path.unlink(missing_ok=True)
            self._drop(entry)
            return None
        _touch(entry / "meta.json")
        return meta.get("data") or {}

    def discard(self, key: str) -> bool:
        """Drop an entry a caller found incomplete (e.g. an artifact without a side file it needs), so the
        next store of the same key replaces it instead of losing to it."""
        return self._drop(self.entry_dir(key))

    def peek(self, key: str) -> dict | None:
        """The entry's data without its files (e.g. a cached verdict), or None."""
        meta = self._meta(self.entry_dir(key))
        if meta is None:
            return None
        _touch(self.entry_dir(key) / "meta.json")
        return meta.get("data") or {}

    def has(self, key: str) -> bool:
        """Whether a readable entry exists (its files are verified only when :meth:`get` copies them)."""
        return self._meta(self.entry_dir(key)) is not None

    def files(self, key: str) -> list[str]:
        meta = self._meta(self.entry_dir(key))
        return list(meta["files"]) if meta else []

    def _meta(self, entry: Path) -> dict | None:
        try:
            meta = load_json((entry / "meta.json").read_text(), str(entry / "meta.json"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            self._drop(entry)
            return None
        if not isinstance(meta, dict) or meta.get("schema") != SCHEMA or not isinstance(meta.get("files"), dict) \
                or not isinstance(meta.get("data") or {}, dict):
            self._drop(entry)
            return None
        return meta

    # ------------------------------------------------------------------------------------------- writing
    def put(self, key: str, src: Path, files: list[str], data: dict, describe: dict | None = None) -> bool:
        """Store ``files`` (paths relative to ``src``) and ``data`` under ``key``. False when the entry could
        not be written (disk full, read-only cache): the run goes on without it."""
        tmp = None
        if not self._sound():
            return False
        try:
            (self.root / "tmp").mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIXES[0], dir=self.root / "tmp"))
            meta = {"schema": SCHEMA, "key": key, "created": time.time(), "describe": describe or {},
                    "data": data, "files": {}}
            for rel in files:
                target = _inside(tmp / "files", rel)
                target.parent.mkdir(parents=True, exist_ok=True)
                meta["files"][rel] = {"sha256": _copy_hashed(src / rel, target), "bytes": target.stat().st_size}
            (tmp / "meta.json").write_text(json.dumps(meta, indent=1, default=str))
            stored = self._publish(tmp, key)
        except (OSError, ValueError, TypeError):
            stored = False
        finally:
            if tmp is not None and tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        if stored:
            self.evict()
        return stored

    def _publish(self, tmp: Path, key: str) -> bool:
        final = self.entry_dir(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(tmp, final)
            return True
        except OSError:
            return final.is_dir()  # another process stored the same key first: theirs is as good

    def _drop(self, entry: Path) -> bool:
        """Remove an entry: renamed away first (atomic), deleted after, so no reader sees it half gone. An
        entry holding anything its meta.json does not list is left alone (edgeport deletes only what it
        wrote, even in its cache: ``EDGEPORT_CACHE`` may name a folder that holds someone's files)."""
        if not self._sound() or _foreign(entry):
            return False
        try:
            (self.root / "tmp").mkdir(parents=True, exist_ok=True)
            away = Path(tempfile.mkdtemp(prefix=TMP_PREFIXES[1], dir=self.root / "tmp"))
            os.rename(entry, away / "entry")
        except OSError:
            return False
        shutil.rmtree(away, ignore_errors=True)
        return True

    def _sound(self) -> bool:
        """``tmp/`` and ``entries/`` are the cache's own directories, not symlinks: through one, staging,
        publishing and the clean-up of stale ``build-*`` directories would act on someone else's folder
        (a cache directory another user can write)."""
        return not any((self.root / name).is_symlink() for name in ("tmp", "entries"))

    # --------------------------------------------------------------------------------------- maintenance
    def entries(self) -> list[dict]:
        """Every readable entry: key, bytes, last use, and what it describes."""
        found = []
        for meta_path in (self.root / "entries").glob("*/*/meta.json"):
            if not KEY.fullmatch(meta_path.parent.name) or meta_path.parent.parent.name != meta_path.parent.name[:2]:
                continue  # not an entry this cache wrote
            try:
                meta, used = load_json(meta_path.read_text(), str(meta_path)), meta_path.stat().st_mtime
                size = sum(int(f["bytes"]) for f in meta["files"].values())
            except (OSError, ValueError, KeyError, TypeError, AttributeError, ArithmeticError, RecursionError):
                continue  # (a bytes of 1e999 or a files list: not ours, and no reason for every run to fail)
            if size < 0:
                continue
            found.append({"key": meta_path.parent.name, "bytes": size, "used": used,
                          "kind": (meta.get("describe") or {}).get("kind", "?"), "path": meta_path.parent})
        return found

    def evict(self) -> list[str]:
        """Drop least recently used entries until the total is within the bound; clear stale builds."""
        self._clean_tmp()
        entries = sorted(self.entries(), key=lambda e: e["used"])
        total = sum(e["bytes"] for e in entries)
        dropped = []
        while entries and total > self.max_bytes:
            oldest = entries.pop(0)
            self._drop(oldest["path"])
            total -= oldest["bytes"]
            dropped.append(oldest["key"])
        return dropped

    def _clean_tmp(self) -> None:
        now = time.time()
        for path in self._own_tmp():
            try:
                if now - path.stat().st_mtime > TMP_MAX_AGE_S:
                    shutil.rmtree(path, ignore_errors=True)
            except OSError:
                continue

    def info(self) -> dict:
        entries = self.entries()
        kinds: dict[str, int] = {}
        for e in entries:
            kinds[e["kind"]] = kinds.get(e["kind"], 0) + 1
        return {"path": str(self.root), "entries": len(entries), "bytes": sum(e["bytes"] for e in entries),
                "max_bytes": self.max_bytes, "kinds": kinds,
                "last_used": max((e["used"] for e in entries), default=None)}

    def clear(self) -> int:
        """Remove every entry (and stale builds); returns how many entries went."""
        dropped = sum(self._drop(e["path"]) for e in self.entries())
        for path in self._own_tmp():
            shutil.rmtree(path, ignore_errors=True)
        return dropped

    def _own_tmp(self) -> list[Path]:
        """What this cache staged in ``tmp/`` (its ``build-``/``drop-`` dirs) and nothing else: a mistyped
        ``EDGEPORT_CACHE`` (a home directory) must not cost the user a ``tmp`` folder of their own."""
        if not self._sound():
            return []
        return [p for p in (self.root / "tmp").glob("*") if p.name.startswith(TMP_PREFIXES) and p.is_dir()
                and not p.is_symlink()]


def _foreign(entry: Path) -> list[str]:
    """Paths in an entry directory this cache did not write: anything beside ``meta.json`` and ``files/``,
    and, when meta.json is readable, anything under ``files/`` it does not list. (A corrupt meta.json lists
    nothing reliable: such an entry is still dropped when it holds only those two names.)"""
    found = [p.name for p in entry.iterdir() if p.name not in ("meta.json", "files") or p.is_symlink()]
    try:
        listed = {f"files/{rel}" for rel in load_json((entry / "meta.json").read_text(), str(entry / "meta.json"))["files"]}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return found
    if any(".." in rel.split("/") for rel in listed):
        return found  # an escaping list is corrupt, not a claim on anything
    allowed = {"files", *listed}
    for rel in listed:  # and the folders holding them
        allowed.update(p.as_posix() for p in Path(rel).parents if p.as_posix() != ".")
    files = entry / "files"
    if files.is_dir() and not files.is_symlink():
        found += [p.relative_to(entry).as_posix() for p in files.rglob("*")
                  if p.relative_to(entry).as_posix() not in allowed or p.is_symlink()]
    return found


def _inside(root: Path, rel: str) -> Path:
    """``root/rel``, refusing absolute paths and ``..`` (an entry's meta.json is data, not instructions)."""
    path = Path(rel)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise ValueError(f"bad path in cache entry: {rel!r}")
    return root / path


def _entry_file(entry: Path, rel: str, info: dict) -> Path:
    """The stored file of ``rel``: a regular file inside the entry, of the size meta.json records. A symlink
    (to /dev/zero, a FIFO, a file elsewhere) in a cache others can write would otherwise be read without end
    or from outside the cache."""
    files = entry / "files"
    path = _inside(files, rel)
    real = path.resolve()
    if not real.is_relative_to(files.resolve()) or real != files.resolve() / Path(rel) or not real.is_file():
        raise ValueError(f"{rel}: not a regular file inside the cache entry")
    if real.stat().st_size != int(info["bytes"]):
        raise ValueError(f"{rel}: size differs from meta.json")
    return real


def _copy_hashed(src: Path, dst: Path) -> str:
    """Copy ``src`` to ``dst`` and return the sha256 of what was read: one pass for both."""
    digest = hashlib.sha256()
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        for block in iter(lambda: fin.read(1 << 20), b""):
            digest.update(block)
            fout.write(block)
    shutil.copymode(src, dst)
    return digest.hexdigest()


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:
        pass
