"""One row as a task: a JSON-serializable spec in, the row's JSON out. The same code runs a row in a worker
process of ``edgeport convert`` (:mod:`edgeport.pipeline.workers`) and in a Ray task of ``edgeport fleet``.

Why a spec of paths and not the session itself: a worker must not depend on how it was started (a fork
of a process that ran torch is unsafe; a Ray worker may be on another machine). Everything a row needs was
written once into the staging directory by the driver: ``exported.pt2`` (edgeport's own file, loaded
through the same no-unpickling loader as any .pt2), and ``task-inputs.npz`` (samples, PyTorch's outputs on
them, calibration samples). A worker converts into its own ``work_dir`` laid out like the staging
directory; :func:`merge` moves the result in, in plan order, so the output is the one a sequential run
writes.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

SCHEMA = "edgeport.task/1"
INPUTS_FILE = "task-inputs.npz"
PROGRAM_FILE = "exported.pt2"
_PROGRAMS: dict = {}          # path, size, mtime -> loaded program: a reused worker loads each model once


def shared_spec(session, staging: Path, source, cache_root: str | None) -> dict:
    """The part of every task spec one model's rows share; writes ``task-inputs.npz`` beside the program."""
    import dataclasses

    import numpy as np

    arrays = {}
    for prefix, groups in (("s", session.samples), ("r", session.reference), ("c", session.calibration or [])):
        for i, group in enumerate(groups):
            for j, array in enumerate(group):
                arrays[f"{prefix}{i}_{j}"] = np.asarray(array)
    np.savez(staging / INPUTS_FILE, **arrays)
    signature = {"inputs": [i.to_json() for i in session.signature.inputs],
                 "outputs": [o.to_json() for o in session.signature.outputs]}
    judge = {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(session.judge).items()}
    return {"schema": SCHEMA, "program": str(staging / PROGRAM_FILE), "inputs": str(staging / INPUTS_FILE),
            "counts": {"s": len(session.samples), "r": len(session.reference), "c": len(session.calibration or [])},
            "signature": signature, "judge": judge, "sample_origin": session.sample_origin,
            "reference_latency": session.reference_latency, "module_rewrites": list(session.module_rewrites),
            "target_options": session.target_options, "dynamic": list(session.dynamic),
            "program_id": session.program_id, "decompositions": source.decompositions,
            "trust_pickle": bool(source.trust_pickle),
            "cache": {"enabled": session.cache is not None, "root": cache_root,
                      "reuse_verdict": session.reuse_verdict}}


def row_spec(shared: dict, target: str, variant: str, budget: dict, required: bool, work_dir: Path,
             log: Path | None) -> dict:
    return {**shared, "target": target, "variant": variant, "budget": budget, "required": required,
            "work_dir": str(work_dir), "log": str(log) if log else None}


def run_task(spec: dict) -> dict:
    """Run one row from its spec; returns the row's JSON. Library output goes to the spec's log."""
    from edgeport.export.registry import get_target
    from edgeport.pipeline.proc import redirected
    from edgeport.pipeline.row import run_row

    if spec.get("schema") != SCHEMA:
        raise ValueError(f"not an {SCHEMA} task spec")
    work = Path(spec["work_dir"])
    work.mkdir(parents=True, exist_ok=True)
    log = Path(spec["log"]) if spec.get("log") else work / "worker.log"
    with redirected(log):
        session = restore_session(spec)
        row = run_row(get_target(spec["target"]), spec["variant"], session, work, spec["budget"], spec["required"])
    return json.loads(json.dumps(row.to_json(), default=_json_default))


def restore_session(spec: dict):
    """The driver's Session, rebuilt from the files and values in ``spec``."""
    from edgeport.export.program import Signature, TensorInfo
    from edgeport.pipeline.options import JudgeOptions
    from edgeport.pipeline.plan import load_user_decompositions
    from edgeport.pipeline.session import RewriteCache, Session
    from edgeport.runtimes.torch_eager import to_torch

    program = load_program(Path(spec["program"]), spec["trust_pickle"])
    info = lambda d: TensorInfo(d["name"], tuple(d["shape"]), d["dtype"])  # noqa: E731
    signature = Signature(tuple(map(info, spec["signature"]["inputs"])), tuple(map(info, spec["signature"]["outputs"])))
    groups = read_inputs(Path(spec["inputs"]), spec["counts"])
    samples = groups["s"]
    first_example = spec["sample_origin"].get("real", 0)
    example = tuple(to_torch(a, i.dtype) for a, i in zip(samples[first_example], signature.inputs))
    judge = JudgeOptions(**{k: (Path(v) if k in ("config", "baseline") and v else v) for k, v in spec["judge"].items()
                            if k in JudgeOptions.__dataclass_fields__})
    judge = _tuple_fields(judge)
    rewrites = RewriteCache(program, example, load_user_decompositions(spec.get("decompositions")))
    return Session(program, example, signature, samples, groups["r"], spec["reference_latency"], judge,
                   spec["sample_origin"], module_rewrites=tuple(spec["module_rewrites"]),
                   calibration=groups["c"] or None, target_options=spec["target_options"],
                   dynamic=tuple(spec["dynamic"]), rewrites=rewrites, program_id=spec["program_id"],
                   cache=open_cache(spec["cache"]), reuse_verdict=spec["cache"]["reuse_verdict"])


def _tuple_fields(judge):
    import dataclasses

    return dataclasses.replace(judge, budgets=tuple(judge.budgets))


def open_cache(settings: dict):
    if not settings.get("enabled"):
        return None
    from edgeport.cache import Cache

    return Cache(settings.get("root"))


def load_program(path: Path, trust_pickle: bool):
    from edgeport.sources.pt2_archive import load_exported_program

    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _PROGRAMS:
        _PROGRAMS.clear()
        _PROGRAMS[key] = load_exported_program(path, trust_pickle=trust_pickle)
    return _PROGRAMS[key]


def read_inputs(path: Path, counts: dict) -> dict[str, list]:
    import numpy as np

    with np.load(path, allow_pickle=False) as data:
        names = set(data.files)
        out = {}
        for prefix, count in counts.items():
            out[prefix] = [[data[f"{prefix}{i}_{j}"] for j in range(_width(names, prefix, i))] for i in range(count)]
    return out


def _width(names: set, prefix: str, i: int) -> int:
    j = 0
    while f"{prefix}{i}_{j}" in names:
        j += 1
    return j


def _json_default(value):
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


# ------------------------------------------------------------------------------------------ driver side

def merge(work: Path, staging: Path, row: dict) -> dict:
    """Move what a task wrote in ``work`` into ``staging``: its artifact always (it is this row's), other
    files only where staging has none yet (an earlier row of the same target wrote the same shared file,
    e.g. a parity sample or an intermediate model). Rows are merged in plan order, as a sequential run
    writes them; the row's parity sample is checked against the one that ended up in staging."""
    from edgeport.validate.sample import DIRNAME, fits

    if work.is_dir():
        for path in sorted(work.rglob("*")):
            rel = path.relative_to(work)
            if path.is_dir() or path.is_symlink() or DIRNAME in rel.parts[:-1]:
                continue
            _place(path, staging / rel, replace=str(rel) == row.get("artifact"))
        for sample_dir in work.glob(f"*/{DIRNAME}"):
            dest = staging / sample_dir.relative_to(work)
            if not dest.exists():
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.rename(sample_dir, dest)
        shutil.rmtree(work, ignore_errors=True)
    if row.get("parity_sample"):
        index = staging / row["parity_sample"]
        if not (index.is_file() and row.get("io") and fits(index, row["io"])):
            row.pop("parity_sample")
    return row


def _place(src: Path, dest: Path, replace: bool) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    if replace or not dest.exists():
        os.replace(src, dest)
