"""One row as a job: a JSON-serializable spec in, the row's JSON out. The same code runs a row in a worker
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
# TEST-ONLY hook (tests/test_workers.py, tests/test_fleet.py): "KEY=COUNTER_FILE" makes the job named KEY
# ("litert/fp32" in a convert, "cnn/export" or "cnn/litert/fp32" in a fleet) count its attempts in
# COUNTER_FILE and kill its own process on the first one, as a segfault or an OOM kill would. Never set it
# in normal use.
CRASH_ENV = "EDGEPORT_TEST_CRASH"
# TEST-ONLY hook (tests/test_limits.py): "KEY=sleep[,KEY2=grow]" makes the task named KEY name the step "test stall" and
# sleep for an hour; "KEY=grow" makes it allocate (and touch) 64 MB more every 0.1 s: a stuck row, as a
# converter that never returns or whose memory explodes. Never set it in normal use.
STALL_ENV = "EDGEPORT_TEST_STALL"
INPUTS_FILE = "task-inputs.npz"
PROGRAM_FILE = "exported.pt2"


def test_crash(key: str) -> None:
    """The test-only hook above (does nothing unless ``EDGEPORT_TEST_CRASH`` names ``key``)."""
    wanted, _, counter = os.environ.get(CRASH_ENV, "").partition("=")
    if not counter or wanted != key:
        return
    path = Path(counter)
    attempt = (int(path.read_text() or 0) if path.is_file() else 0) + 1
    path.write_text(str(attempt))
    if attempt == 1:
        os._exit(1)


def test_stall(key: str, progress) -> None:
    """The test-only hook above (does nothing unless ``EDGEPORT_TEST_STALL`` names ``key``)."""
    import time

    wanted = dict(item.partition("=")[::2] for item in os.environ.get(STALL_ENV, "").split(","))
    how = wanted.get(key)
    if how not in ("sleep", "grow"):
        return
    progress(f"{key.replace('/', ' ')}: test stall")
    held = []
    for _ in range(36000):
        if how == "grow":
            held.append(bytearray(64 << 20))   # bytearray() zero-fills: the pages are touched
        time.sleep(0.1)


def expand(spec: dict, row_plan: dict) -> list[dict]:
    """The row's task specs: the row itself, or one per piece of its conversion (piece 0 is the row)."""
    if not row_plan["pieces"]:
        return [spec]
    return [{**spec, "target_options": {**spec["target_options"], **override}, "piece": i,
             "work_dir": f"{spec['work_dir']}.{i}"} for i, override in enumerate(row_plan["pieces"])]


def merge_split(staging: Path, target, row: dict, pieces: list[tuple[dict, object]], row_plan: dict, cache) -> dict:
    """Fold the pieces > 0 of a split row into it (their files, the target's merge of their details,
    their notes) and store the whole row in the cache under the unsplit row's key."""
    target_dir = staging / target.name
    done, files, side = [], [], []
    for spec, result in pieces:
        work = Path(spec["work_dir"])
        stopped = isinstance(result, dict) and "stopped" in result   # its half-written files stay out
        files += [] if stopped else _produced(work / target.name, spec["variant"])
        if not stopped:
            merge(work, staging, {})
        if not isinstance(result, dict) or result.get("error") or stopped:
            error = (result.get("error") or result.get("stopped")) if isinstance(result, dict) else result
            row.setdefault("notes", []).append(f"piece {spec['piece']} of the conversion failed: {error}")
            continue
        done.append(result["details"])
        side += [f for f in result.get("files") or [] if (staging / f).is_file()]
        row.setdefault("notes", []).extend(n for n in result.get("notes", []) if n not in row["notes"])
    if not row.get("artifact"):
        return row
    row = target.merge_pieces(target_dir, row["variant"], row, done)
    row["files"] = redigest(staging, [e["path"] for e in row.get("files") or []] + side)
    cacheable = all(isinstance(r, dict) and r.get("cacheable", True) for _spec, r in pieces)
    if cache is not None and row_plan.get("piece0_key") and len(done) == len(pieces) and cacheable:
        _store_whole(cache, target, target_dir, row, row_plan, done, files)
    return row


def redigest(staging: Path, paths: list[str]) -> list[dict]:
    """The row's file list again, once the pieces' files are in and the target's merge rewrote what it
    merges (e.g. a meta.json naming every executable)."""
    from edgeport.core.files import describe_files

    return describe_files(staging, [staging / p for p in dict.fromkeys(paths)])


def _store_whole(cache, target, target_dir: Path, row: dict, row_plan: dict, done: list[dict], files: list[str]) -> None:
    from edgeport.pipeline.reuse import store_whole_row

    first = cache.peek(row_plan["piece0_key"])  # piece 0's converter details, as its worker stored them
    if not first or "details" not in first:
        return
    details = target.merge_pieces(target_dir, row["variant"], first["details"], done)
    prefix = f"{target.name}/"
    side = [e["path"][len(prefix):] for e in row["files"] if e["path"].startswith(prefix) and e["path"] != row["artifact"]]
    data = {**first, "details": details, "files": side}
    store_whole_row(cache, row_plan["key"], target_dir, cache.files(row_plan["piece0_key"]) + files, data,
                    {"target": target.name, "variant": row["variant"]})


def collect(staging: Path, rows: list, plans: list[dict], specs: list[dict], results: list, cache) -> list[dict]:
    """Rows in plan order from their tasks' results (``specs[i]`` -> ``results[i]``: row JSON, a piece's
    dict, an error line when its process died, ``{"stopped": error, ...}`` for one killed past its limits
    or cancelled), merged into ``staging``."""
    from edgeport.pipeline.row import Row

    out = []
    for index, ((target, variant), row_plan) in enumerate(zip(rows, plans)):
        mine = [(s, r) for s, r in zip(specs, results) if s["row"] == index]
        (spec, result), pieces = mine[0], mine[1:]
        if not isinstance(result, dict):
            row = Row(target.name, variant, status="failed", error=f"worker: {result}", required=spec["required"]).to_json()
        elif "stopped" in result:   # killed past its limits, or cancelled: what it half-wrote stays out
            details = {k: v for k, v in result.items() if k != "stopped"}
            row = Row(target.name, variant, status="failed", error=result["stopped"], required=spec["required"],
                      details=details).to_json()
        else:
            row = arrived(merge(Path(spec["work_dir"]), staging, result), staging)
        out.append(merge_split(staging, target, row, pieces, row_plan, cache) if pieces else row)
    return out


def arrived(row: dict, staging: Path) -> dict:
    """The row, failed if any file of its artifact did not arrive from its worker (process or Ray node):
    checked by presence and size, the sha256 stays for ``validate``."""
    from edgeport.core.files import file_problem

    problem = file_problem(staging, row.get("files"), check_sha=False)
    if problem and row.get("status") != "failed":
        row["status"], row["error"] = "failed", f"{problem} (lost between the worker and the driver)"
    return row


def _produced(directory: Path, variant: str) -> list[str]:
    from edgeport.pipeline.reuse import produced

    return [f for f in produced({}, directory, variant) if not f.endswith(".log")]


def row_spec(shared: dict, target: str, variant: str, budget: dict, required: bool, work_dir: Path,
             log: Path | None, index: int = 0, limits: dict | None = None) -> dict:
    return {**shared, "target": target, "variant": variant, "budget": budget, "required": required,
            "work_dir": str(work_dir), "log": str(log) if log else None, "row": index, "limits": limits or {}}


def job_specs(shared: dict, the_plan, plans: list[dict], work: Path, log: Path | None,
               weight_bytes: int | None = None) -> list[dict]:
    """Every task of one model: its rows (split into pieces where planned), longest first (split rows,
    then by the target's ``relative_cost``): started first, they end with the rest. ``weight_bytes``
    (the model's fp32 weights): each row's limits (:mod:`edgeport.pipeline.limits`), none without it."""
    from edgeport.pipeline.limits import row_limits

    specs = []
    for index, ((target, variant), row_plan) in enumerate(zip(the_plan.rows, plans)):
        limits = row_limits(the_plan.limits, target, variant, weight_bytes) if weight_bytes is not None else None
        policy = the_plan.policy(target, variant)
        spec = row_spec(shared, target.name, variant, policy.budget, policy.required, work / str(index), log, index,
                        limits)
        specs += [{**s, "cost": target.relative_cost} for s in expand(spec, row_plan)]
    return sorted(specs, key=lambda s: ("piece" not in s, -s["cost"]))


def run_job(spec: dict, progress=None) -> dict:
    """Run one row from its spec; returns the row's JSON. Library output goes to the spec's log; the row's
    steps to ``progress`` (the driver's, through the worker's pipe), if given."""
    import dataclasses

    from edgeport.targets.registry import get_target
    from edgeport.core.proc import redirected
    from edgeport.pipeline.row import run_row
    from edgeport.pipeline.tasks import default_task, get_task

    if spec.get("schema") != SCHEMA:
        raise ValueError(f"not an {SCHEMA} task spec")
    work = Path(spec["work_dir"])
    work.mkdir(parents=True, exist_ok=True)
    log = Path(spec["log"]) if spec.get("log") else work / "worker.log"
    the_task = get_task(spec["task"]) if spec.get("task") else default_task()
    with redirected(log):
        session = dataclasses.replace(the_task.jobs.restore(spec), progress=progress)
        target = get_target(spec["target"])
        if spec.get("piece"):
            return json.loads(json.dumps(run_piece(target, spec, session, work), default=_json_default))
        row = run_row(target, spec["variant"], session, work, spec["budget"], spec["required"], the_task)
    return json.loads(json.dumps(row.to_json(), default=_json_default))


def run_piece(target, spec: dict, session, work: Path) -> dict:
    """A piece > 0 of a split conversion: convert only (no judging), report its details and notes."""
    from edgeport.diagnostics import first_line
    from edgeport.core.proc import redirected

    out_dir = work / target.name
    out_dir.mkdir(parents=True, exist_ok=True)
    job = session.convert_job(target, spec["variant"], out_dir)
    try:
        with redirected(out_dir / f"convert_{spec['variant']}.piece{spec['piece']}.log"):
            converted = target.convert(job)
    except Exception as exc:
        return {"piece": spec["piece"], "error": first_line(exc), "notes": job.notes}
    files = [p.relative_to(work).as_posix() for p in converted.files if p.is_relative_to(work)]
    return {"piece": spec["piece"], "details": converted.details, "notes": job.notes, "files": files,
            "cacheable": converted.cacheable}


def judge_json(judge) -> dict:
    """The run's JudgeOptions as a spec carries them (paths as strings)."""
    import dataclasses

    return {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(judge).items()}


def restore_judge(fields: dict):
    """:func:`judge_json` read back in the worker."""
    import dataclasses

    from edgeport.pipeline.options import JudgeOptions

    judge = JudgeOptions(**{k: (Path(v) if k in ("config", "baseline") and v else v) for k, v in fields.items()
                            if k in JudgeOptions.__dataclass_fields__})
    return dataclasses.replace(judge, budgets=tuple(judge.budgets))


def open_cache(settings: dict):
    if not settings.get("enabled"):
        return None
    from edgeport.cache import Cache

    return Cache(settings.get("root"))


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

    own = {row.get("artifact"), *(e.get("path") for e in row.get("files") or [] if isinstance(e, dict))}
    if work.is_dir():
        for path in sorted(work.rglob("*")):
            rel = path.relative_to(work)
            if path.is_dir() or path.is_symlink() or DIRNAME in rel.parts[:-1]:
                continue
            _place(path, staging / rel, replace=rel.as_posix() in own)
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
