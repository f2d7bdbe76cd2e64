"""Reusing an earlier conversion of the same thing: the cache key of a row, convert-or-reuse, cached verdicts.

What decides a row's artifact, and so goes into its key: the exported program (graph, weights, I/O
signature: :func:`edgeport.core.program.fingerprint`), and the program the target really converts when
its rewrite passes changed it; the target, the variant and the target's own options (plus ``--dynamic``);
the calibration samples for variants that calibrate; the installed versions of torch, the target's
libraries and what those require directly; edgeport's version and a hash of its own source (an edit during
development is a new key, not a stale hit). A hit copies the artifact files back (each verified by sha256)
and the run still judges them: parity and latency are measured again unless ``--reuse-verdict``, whose key
adds the samples, the reference outputs, the budget and how the run judges.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import re
from pathlib import Path

from edgeport import __version__

LOG_PREFIX = "convert_"        # row.py's per-variant logs in the target directory: not part of an artifact


@functools.lru_cache(maxsize=1)
def source_hash() -> str:
    """sha256 over edgeport's own .py files (relative path + bytes)."""
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def edgeport_id() -> dict:
    return {"version": __version__, "source": source_hash()}


@functools.lru_cache(maxsize=32)
def library_versions(modules: tuple[str, ...]) -> dict:
    """Installed versions of the distributions providing ``modules`` and of what those require directly
    (a converter's own backends, e.g. litert-torch's converter package)."""
    from importlib import metadata

    from edgeport.validate.environment import package_versions

    versions = package_versions(list(modules))
    for dist in list(versions):
        try:
            requirements = metadata.requires(dist) or []
        except metadata.PackageNotFoundError:
            continue
        for requirement in requirements:
            if "extra ==" in requirement:
                continue
            name = re.split(r"[\s<>=!~;\[(]", requirement.strip(), maxsplit=1)[0]
            try:
                versions.setdefault(name, metadata.version(name))
            except metadata.PackageNotFoundError:
                continue
    return dict(sorted(versions.items()))


def arrays_hash(samples) -> str:
    """sha256 of a list of input tuples (numpy arrays): dtype, shape and bytes of each."""
    import numpy as np

    digest = hashlib.sha256()
    for sample in samples or []:
        for array in sample:
            array = np.ascontiguousarray(array)
            digest.update(f"{array.dtype}:{array.shape};".encode())
            digest.update(array.tobytes())
        digest.update(b"|")
    return digest.hexdigest()


def row_key_parts(target, job, session, prepared) -> dict:
    """Everything that decides the artifact of ``target`` / ``job.variant`` (see the module docstring)."""
    from edgeport.core.program import fingerprint

    options = {o.key: job.options.get(o.key) for o in target.options}
    options["dynamic"] = sorted(job.dynamic or [])
    calibrated = target.calibrated_variants is None or job.variant in target.calibrated_variants
    if calibrated:
        options["calibration"] = arrays_hash(job.calibration)
        options["calibration_is_real"] = job.calibration_is_real
    rewritten = fingerprint(prepared.program, session.signature) if prepared.applied else None
    return {"kind": "row", "program": session.program_id, "rewrites": list(target.rewrites),
            "applied": list(prepared.applied), "rewritten": rewritten, "target": target.name,
            "variant": job.variant, "options": options,
            "libraries": library_versions(("torch", "numpy", *target.requires)), "edgeport": edgeport_id()}


def row_key(target, variant: str, session, override: dict | None = None) -> str | None:
    """The key :func:`convert_or_reuse` will use for this row (with ``override`` applied to the target's
    options, for one piece of a split conversion); None with the cache off."""
    from edgeport.cache import key_of

    if session.cache is None or session.program_id is None:
        return None
    prepared = session.rewrites.for_target(target)
    job = session.convert_job(target, variant, Path("."), override=override)
    return key_of(row_key_parts(target, job, session, prepared))


def store_whole_row(cache, key: str, target_dir: Path, files: list[str], data: dict, describe: dict) -> None:
    """A row converted in pieces, stored as one entry under the key of the unsplit row: a rerun finds it
    whole (and need not split again)."""
    present = [f for f in dict.fromkeys(files) if (target_dir / f).is_file()]
    if data.get("artifact") in present:
        cache.put(key, target_dir, present, data, describe={"kind": "row", **describe})


def snapshot(directory: Path) -> dict[str, tuple]:
    """Relative path -> (size, mtime) of every file under ``directory``."""
    if not directory.is_dir():
        return {}
    found = {}
    for path in directory.rglob("*"):
        if path.is_file() and not path.is_symlink():
            stat = path.stat()
            found[str(path.relative_to(directory))] = (stat.st_size, stat.st_mtime_ns)
    return found


def produced(before: dict, directory: Path, variant: str) -> list[str]:
    """Files ``convert`` wrote or changed in the target directory: the artifact and what belongs to it
    (not a row's own log, ``convert_<variant>.log`` or a task's ``convert_<task>_<variant>.log``: it is
    being written while this runs)."""
    from edgeport.validate.sample import DIRNAME

    def is_log(rel: str) -> bool:
        return "/" not in rel and rel.startswith(LOG_PREFIX) and rel.endswith(f"{variant}.log")

    return sorted(rel for rel, stat in snapshot(directory).items()
                  if before.get(rel) != stat and not is_log(rel) and Path(rel).parts[0] != DIRNAME)


def convert_or_reuse(target, job, session, prepared, state: dict) -> tuple[object, str | None]:
    """``target.convert(job)``, or the cached result of the same conversion. Returns (Converted, key);
    ``state["cache"]`` says hit, miss or off as soon as it is known (a failed conversion is a miss too)."""
    cache = session.cache
    if cache is None or session.program_id is None:
        state["cache"] = "off"
        return target.convert(job), None
    from edgeport.cache import key_of

    key = key_of(row_key_parts(target, job, session, prepared))
    return cached_conversion(cache, key, job, lambda: target.convert(job), state, target.name), key


def cached_conversion(cache, key: str, job, convert, state: dict, target_name: str):
    """The cache's half of a row's build, for every task: on a hit the stored files come back (verified)
    and the stored details, notes and target rewrites with them; on a miss ``convert()`` runs and what it
    wrote into ``job.out_dir`` is stored (the artifact: a file, or a directory of files), unless the
    conversion says its result is not ``cacheable``."""
    data = cache.get(key, job.out_dir)
    hit = restored(data, job.out_dir)
    if data is not None and hit is None:
        cache.discard(key)
    if hit is not None:
        state["cache"] = "hit"
        job.notes.extend(n for n in hit[1].get("notes", []) if n not in job.notes)
        return hit[0]
    state["cache"] = "miss"
    before, notes_before = snapshot(job.out_dir), len(job.notes)
    converted = convert()
    files = produced(before, job.out_dir, job.variant)
    artifact = str(converted.artifact.relative_to(job.out_dir))
    side = [p.relative_to(job.out_dir).as_posix() for p in converted.files if p.is_relative_to(job.out_dir)]
    if converted.cacheable and (artifact in files or any(f.startswith(f"{artifact}/") for f in files)):
        cache.put(key, job.out_dir, list(dict.fromkeys(files + side)),
                  {"artifact": artifact, "files": side, "details": converted.details,
                   "notes": job.notes[notes_before:], "rewrites": list(converted.rewrites)},
                  describe={"kind": "row", "target": target_name, "variant": job.variant})
    return converted


def restored(data: dict | None, out_dir: Path):
    """(Converted, data) of a cache entry copied into ``out_dir``, or None: an entry whose artifact or any
    side file it declares is not there now is a miss (the conversion runs again), never half an artifact."""
    from edgeport.targets.base import Converted

    if data is None or not _relative(data.get("artifact")) or not (out_dir / data["artifact"]).exists():
        return None
    side = data.get("files")
    if not isinstance(side, list) or not all(_relative(f) and (out_dir / f).is_file() for f in side):
        return None
    return Converted(out_dir / data["artifact"], data.get("details") or {}, list(data.get("rewrites") or []),
                     files=[out_dir / f for f in side]), data


def _relative(path) -> bool:
    return isinstance(path, str) and bool(path) and not Path(path).is_absolute() and ".." not in Path(path).parts


VERDICT_FIELDS = ("status", "error", "parity", "latency_ms", "io", "diverged_at")
REUSED_NOTE = "verdict reused from the cache (--reuse-verdict): parity and latency were not measured in this run"


def verdict_key(row_key: str, session, budget: dict) -> str:
    """A verdict is the artifact judged on these inputs against this reference (what the session's task
    judges with: its session's ``verdict_inputs()``), within this budget, by this
    kind of run on this kind of machine."""
    from edgeport.cache import key_of
    from edgeport.validate.environment import cpu_info

    judge = session.judge
    return key_of({"kind": "verdict", "row": row_key, **session.verdict_inputs(), "budget": budget, "threads": judge.threads,
                   "latency": judge.latency, "cpu": cpu_info(),
                   "threads_env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "XLA_FLAGS")}})


def judged_on(session) -> dict:
    """A forward row's verdict inputs: the samples and PyTorch's outputs on them; the ``--fallback`` policy
    (a failed int8 verdict from a run without it must not stand in for the search a run with it asks for)
    and whether a failure is localized."""
    return {"samples": arrays_hash(session.samples), "reference": arrays_hash(session.reference),
            "fallback": dataclasses.asdict(session.fallback), "localize": session.judge.localize}


def reused_verdict(row, key: str | None, session, budget: dict) -> bool:
    """With ``--reuse-verdict`` and a converted-artifact hit: fill the row from the stored verdict, when it was
    earned on the same artifact bytes (whoever can write the cache could swap the artifact of a row entry
    and keep the meta's digests consistent: the verdict key, built from what decided the conversion, would
    still match)."""
    if key is None or not session.reuse_verdict or row.details.get("cache") != "hit":
        return False
    data = session.cache.peek(verdict_key(key, session, budget))
    if not data or "row" not in data:
        return False
    stored = data["row"]
    if not isinstance(stored, dict) or not artifact_digest(row) or stored.get("artifact_digest") != artifact_digest(row):
        return False  # a verdict stands only for the exact bytes it was earned on (a planted artifact is judged)
    for name in VERDICT_FIELDS:
        setattr(row, name, stored.get(name))
    row.details.update(stored.get("details") or {})
    row.note(*stored.get("notes", []), REUSED_NOTE)
    row.details["verdict"] = "cached"
    return True


def artifact_digest(row) -> list | None:
    """What the artifact's bytes are: (path, sha256) of every file of it (None when nothing was digested,
    which no stored verdict matches: ``keep_verdict`` then stores None too, and ``reused_verdict`` needs a
    list)."""
    files = [(str(f.get("path")), str(f.get("sha256"))) for f in row.files or [] if isinstance(f, dict)]
    found = sorted(files) or ([("", row.sha256)] if row.sha256 else [])
    return [list(f) for f in found] or None


def keep_verdict(row, key: str | None, session, budget: dict) -> None:
    """Store what judging found, for a later ``--reuse-verdict`` run."""
    if key is None:
        return
    stored = {name: getattr(row, name) for name in VERDICT_FIELDS}
    stored["notes"], stored["details"] = list(row.notes), {k: v for k, v in row.details.items() if k != "cache"}
    stored["artifact_digest"] = artifact_digest(row)
    session.cache.put(verdict_key(key, session, budget), Path("."), [], {"row": stored},
                      describe={"kind": "verdict", "target": row.target, "variant": row.variant})
