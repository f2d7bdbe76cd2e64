"""A run stopped from outside (SIGTERM: a CI job cancelled or past its timeout, ``timeout``, ``kill``)
publishes what had finished instead of nothing (once at least one row has finished): the finished rows with their artifacts, every other row
``failed`` with ``"cancelled": true`` and the step it was in, and the report marked ``"incomplete": true``
with a ``stopped`` block (signal, exit code, when). The exit code stays the shell's for the signal
(128 + 15 = 143): a CI script tells "killed" from "a budget failed" (1) the way it always could, and the
log's last lines and ``--out`` say what finished. Ctrl-C (SIGINT) still just stops.

Also here: the one line per finished row the CI log gets as rows finish (:func:`verdict_line`), so a job
killed before the summary table still shows in its log what passed.
"""

from __future__ import annotations

import contextlib
import signal
import time
from pathlib import Path

CANCELLED_PREFIX = "cancelled: "


class Watch:
    """Follows a run's progress: the last step named (to say where a cancelled row was) and the rows
    finished so far (``done``, row JSON, filled by whoever runs the rows)."""

    def __init__(self, progress):
        self.outer, self.last, self.start = progress, None, time.monotonic()
        self.done: list[dict] = []
        self.final: list[dict] | None = None    # every row, once a stopped run's rows are settled

    def progress(self, step: str) -> None:
        self.last = str(step)
        self.outer(step)

    def finished(self, row: dict) -> None:
        """A row is finished: kept for a stopped run, and its verdict shown (a line of the CI log)."""
        self.done.append(row)
        self.outer(verdict_line(row))


def verdict_line(row: dict) -> str:
    """``onnx int8: failed — parity: cosine_min 0.661 < 0.99`` / ``litert fp32: ok (cosine 1.000000, p50 0.41 ms)``."""
    name = f"{row.get('target')} {row.get('variant')}"
    status = row.get("status") or "failed"
    if status != "ok":
        error = str(row.get("error") or "").splitlines()[0] if row.get("error") else ""
        return f"{name}: {status}" + (f" — {error[:200]}" if error else "")
    parity, latency, took = row.get("parity") or {}, row.get("latency_ms") or {}, row.get("convert_seconds")
    facts = [f"cosine_min {parity['cosine_min']:.6f}" if isinstance(parity.get("cosine_min"), (int, float)) else "",
             f"p50 {latency['p50']:.3f} ms" if isinstance(latency.get("p50"), (int, float)) else "",
             f"converted in {took:.1f}s" if isinstance(took, (int, float)) else ""]
    facts = [f for f in facts if f]
    return f"{name}: ok" + (f" ({', '.join(facts)})" if facts else "")


def stopped_block(exc, watch: Watch, rows: list) -> dict:
    """report.json's ``stopped``: which signal, the exit code, after how long, how many of the plan's
    ``rows`` ((target, variant) pairs) finished."""
    planned = {(t.name, v) for t, v in rows}
    return {"signal": signal.Signals(exc.exit_code - 128).name,
            "exit_code": exc.exit_code, "after_seconds": round(time.monotonic() - watch.start, 1),
            "during": watch.last, "rows": len(rows),
            "finished_rows": len({(r["target"], r["variant"]) for r in watch.done} & planned)}


def cancelled_row(target: str, variant: str, required: bool, block: dict, stage: str | None,
                  seconds: float | None = None) -> dict:
    """A row the stopped run did not finish: failed, ``cancelled``, saying where it was."""
    from edgeport.core.progress import duration
    from edgeport.pipeline.row import Row

    where = "it had just started" if stage == "start" else f"it was in '{stage}'" if stage else "it had not started"
    spent = f" after {duration(seconds)} on it" if seconds else ""
    error = (f"{CANCELLED_PREFIX}the run was stopped by {block['signal']} at +{duration(block['after_seconds'])}; "
             f"{where}{spent}")
    return Row(target, variant, status="failed", error=error, required=required, details={"cancelled": True}).to_json()


def stage_of(last: str | None, target: str, variant: str) -> str | None:
    """The step ``last`` (a progress line) names for the row ``target variant``, if it is about that row."""
    prefix = f"{target} {variant}"
    if not last or not last.startswith(prefix):
        return None
    return last[len(prefix):].lstrip(" :") or "start"


def settle(the_plan, watch: Watch, block: dict, skipped: list[dict]) -> list[dict]:
    """Every row of the plan for a stopped in-process run, in plan order: finished ones as they are, the
    rest cancelled; then the rows the plan skipped (``skipped``), as always."""
    done = {(r["target"], r["variant"]): r for r in watch.done}
    rows = [done.get((target.name, variant)) or cancelled_row(
            target.name, variant, the_plan.policy(target, variant).required, block,
            stage_of(watch.last, target.name, variant)) for target, variant in the_plan.rows]
    return rows + skipped


def prune(staging: Path, rows: list[dict], targets: set | None = None) -> None:
    """Remove what a cancelled in-process row (or one stopped past its limits: ``targets``) half-wrote in its
    target's folder: files no finished row lists, except logs and the target's parity sample (written only
    by a finished row)."""
    from edgeport.validate.sample import DIRNAME

    kept = {e["path"] for r in rows for e in r.get("files") or [] if isinstance(e, dict)}
    for target in {r["target"] for r in rows if r.get("cancelled")} | set(targets or ()):
        folder = staging / target
        for path in sorted(folder.rglob("*"), reverse=True) if folder.is_dir() else []:
            rel = path.relative_to(staging).as_posix()
            if path.is_file() and rel not in kept and not path.name.endswith(".log") and DIRNAME not in path.parts:
                path.unlink()
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()


@contextlib.contextmanager
def held():
    """SIGTERM waits while the output is published (a rename and a few small files): a second one from an
    impatient CI runner must not leave half a directory. Outside the main thread, nothing to hold."""
    try:
        previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def exit_code(report: dict) -> int:
    if report.get("incomplete"):
        return int((report.get("stopped") or {}).get("exit_code") or 143)
    return 0 if report["passed"] else 1
