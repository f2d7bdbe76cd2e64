"""report.json for any task: the rows, the reference, the environment, the task's block and the tables only
some rows have (the task's and each target's, stored so renderers need no registry)."""

from __future__ import annotations


def assemble(spec: str, rows: list[dict], session, task, timings: dict | None, threads, baseline=None,
             program: dict | None = None, params: int | None = None, config: dict | None = None) -> dict:
    from edgeport.validate import payoff, speed
    from edgeport.validate.environment import environment
    from edgeport.validate.report import build_report, finish_report

    rows = payoff.apply(rows)  # ratios to each target's fp32 row, and their budgets: needs every row
    rows = speed.apply(rows, session.reference_latency if session else None)  # slower than eager: why, who is faster
    program = dict(program or {})
    params = program.pop("params", params)
    libraries = sorted({m for r in rows for m in target_requires(r["target"])}) + list(task.libraries)
    report = build_report(spec, params, rows, session.reference_latency if session else None,
                          session.data if session else None, timings, environment(threads, libraries), program or None)
    if session is not None and task.report_block is not None:
        report[task.block_key] = task.report_block(session)
    report["sections"] = tables(report, task.sections)
    return finish_report(report, baseline, config)


def tables(report: dict, task_sections=None) -> list[dict]:
    """The task's tables (``task_sections(report)``), then each row's target's own (same-titled ones merged)."""
    from edgeport.targets.registry import get_target, target_names
    from edgeport.validate.sections import merge_sections

    found = list(task_sections(report)) if task_sections else []
    for row in report["targets"]:
        if row.get("target") in target_names():
            found += get_target(row["target"]).report_sections(row)
    return [s.to_json() for s in merge_sections(found)]


def target_requires(name: str) -> tuple[str, ...]:
    from edgeport.targets.registry import get_target, target_names

    return get_target(name).requires if name in target_names() else ()
