"""The ``.edgeport`` marker: the list of what edgeport wrote into a directory, so ``--force`` can keep the
promise "edgeport deletes only what it wrote".

A marker that merely exists (or a ``report.json`` of edgeport's schema, which anyone can copy into a project
to refresh a baseline) proves nothing about the other entries beside it. So the marker is a JSON list of
every path edgeport put in the directory, with its kind (file or dir), written when the finished directory
is published (and extended by ``validate`` / ``report`` / ``fleet`` for the files they add in place). A
directory may be replaced only when the marker is edgeport's and every path found in it is on that list
with the same kind; a sub-directory holding its own marker (a fleet's model directory) answers for itself.
Anything else (a user's ``.git``, ``src``, notes in a baseline folder, a file added inside an output) is a
*foreign* entry, and ``--force`` is refused with exit 2 naming it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from edgeport.core.replace import write_replacing
from edgeport.errors import UsageError, load_json

MARKER = ".edgeport"
MARKER_SCHEMA = "edgeport.out/1"
REPORT_SCHEMA = "edgeport.report/1"
# Entries edgeport's own machinery leaves while it works (a run's pid file, the lock of a file system that
# cannot flock a directory): never the user's.
TRANSIENT = frozenset({MARKER, ".edgeport-run.pid", ".edgeport.lock"})
MAX_ENTRIES = 200_000
# The run's log: an empty one is removed when the run ends and the CLI opens it again for native noise at
# exit (after the marker is written), so it is edgeport's whether or not it exists when the list is made.
RUN_LOG = "edgeport.log"


def listing(directory: Path) -> dict[str, str]:
    """Relative path -> "file" / "dir" / "other" of everything under ``directory`` (symlinks not followed),
    except the transient names at its top."""
    directory = Path(directory)
    found: dict[str, str] = {}
    for root, dirs, files in os.walk(directory):
        base = Path(root)
        for name in dirs + files:
            path = base / name
            rel = path.relative_to(directory).as_posix()
            if rel in TRANSIENT or (base == directory and _run_scratch(path)):
                continue
            found[rel] = "dir" if path.is_dir() and not path.is_symlink() else (
                "file" if path.is_file() and not path.is_symlink() else "other")
            if len(found) > MAX_ENTRIES:
                raise UsageError(f"{directory} holds more than {MAX_ENTRIES} entries; not an edgeport output")
        dirs[:] = [d for d in dirs if not (base / d).is_symlink()]
    return found


def _run_scratch(path: Path) -> bool:
    """A hidden ``.NAME.staging-*`` / ``.NAME.trash-*`` directory of an edgeport run (holding its pid file):
    edgeport's own scratch, cleaned up by the run or the next one."""
    return (path.name.startswith(".") and (".staging-" in path.name or ".trash-" in path.name)
            and path.is_dir() and not path.is_symlink() and (path / ".edgeport-run.pid").is_file())


def write_marker(directory: Path, extra: dict[str, str] | None = None) -> None:
    """Record everything now in ``directory`` (plus ``extra``: paths about to be written) as edgeport's."""
    entries = {RUN_LOG: "file", **listing(directory), **(extra or {})}
    data = {"schema": MARKER_SCHEMA, "report_schema": REPORT_SCHEMA, "entries": dict(sorted(entries.items()))}
    write_replacing(Path(directory) / MARKER, json.dumps(data, indent=1) + "\n")


def claim(directory: Path, names) -> None:
    """Add files edgeport is about to write in place (validate's reports, a JUnit file, a fleet's log) to
    the marker of a directory that is edgeport's; a directory without a valid marker stays unclaimed."""
    entries = read_marker(directory)
    if entries is None:
        return
    for name in names:
        entries.setdefault(Path(name).as_posix(), "file")
    data = {"schema": MARKER_SCHEMA, "report_schema": REPORT_SCHEMA, "entries": dict(sorted(entries.items()))}
    write_replacing(Path(directory) / MARKER, json.dumps(data, indent=1) + "\n")


def read_marker(directory: Path) -> dict[str, str] | None:
    """The marker's list, or None when there is no marker, it is not a regular file, or not edgeport's list
    (an old-style marker holding only a schema line lists nothing, so it vouches for nothing)."""
    path = Path(directory) / MARKER
    if path.is_symlink() or not path.is_file():
        return None
    try:
        data = load_json(path.read_text()[: 64 << 20], str(path))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    entries = data.get("entries") if isinstance(data, dict) and data.get("schema") == MARKER_SCHEMA else None
    if not isinstance(entries, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in entries.items()):
        return None
    return dict(entries)


def foreign_entries(directory: Path) -> list[str] | None:
    """Paths in ``directory`` edgeport did not write (sorted, outermost first); None when the directory has
    no edgeport marker at all."""
    entries = read_marker(directory)
    if entries is None:
        return None
    foreign: list[str] = []
    owned_subdirs = []
    for rel, kind in listing(directory).items():
        if any(rel.startswith(sub + "/") for sub in owned_subdirs):
            continue
        if kind == "dir" and rel not in entries and read_marker(Path(directory) / rel) is not None:
            owned_subdirs.append(rel)   # a nested output (a fleet's model) answers for itself
            inner = foreign_entries(Path(directory) / rel) or []
            foreign += [f"{rel}/{p}" for p in inner]
            continue
        if entries.get(rel) != kind or kind == "other":
            if not any(f == rel.split("/")[0] or rel.startswith(f + "/") for f in foreign):
                foreign.append(rel)
    return sorted(foreign)


def check_replaceable(directory: Path, what: str) -> None:
    """Refuse (exit 2) replacing ``directory`` unless edgeport wrote everything in it."""
    foreign = foreign_entries(directory)
    if foreign is None:
        raise UsageError(f"{what} {directory} is not empty and was not written by edgeport (no {MARKER} listing "
                         "what it wrote); give a new or empty directory (--force replaces only edgeport's own output)")
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise UsageError(f"{what} {directory} holds entries edgeport did not write ({shown}); --force replaces "
                         "only what edgeport wrote: move them out or give another directory")


def is_ours(directory: Path) -> bool:
    """Edgeport wrote ``directory`` and nothing else is in it."""
    return foreign_entries(directory) == []
