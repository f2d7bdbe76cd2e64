"""``edgeport check``: before converting, which ops each target will refuse and which rewrite fixes them.

Table-driven: each target's ``refuses`` (op -> the error its raw converter gives) and ``rewrites`` (passes
it declares). The check runs those passes on the real exported program and looks again, so "fixed by"
means the rewritten program no longer has the op, not that a pass exists in principle.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Finding:
    target: str
    op: str
    count: int
    why: str
    fixed_by: list[str]
    slow_only: bool = False    # converts, but off the target's fast path (Target.slow_ops): advice, not a refusal

    @property
    def fixed(self) -> bool:
        return bool(self.fixed_by) or self.slow_only


def check(source, targets: list[str]) -> tuple[list[Finding], list[str]]:
    """(findings, module rewrites applied) for ``source`` (SourceOptions). Raises UsageError for bad input,
    ExportFailed if export fails. Library output goes to a temporary capture, not the terminal."""
    from edgeport.core.eager import flatten_inputs
    from edgeport.core.proc import redirected
    from edgeport.pipeline.plan import load_user_decompositions, requested_targets
    from edgeport.pipeline.run import load_and_export

    chosen = requested_targets(targets)
    with redirected():
        table = load_user_decompositions(source.decompositions)
        loaded, program, module_rewrites = load_and_export(source, lambda _m: None, {})  # honours --dynamic
        example = flatten_inputs(loaded.example_inputs)
        findings = [f for target in chosen for f in check_target(target, program, example, table)]
    return findings, module_rewrites


def check_target(target, program, example, decompositions: dict) -> list[Finding]:
    from edgeport.targets.rewrites import RewriteFailed, apply_rewrites, refused_ops

    slow = [Finding(target.name, op, count, why, [], slow_only=True)
            for op, (count, why) in (target.slow_ops(program) if target.slow_ops else {}).items()]
    before = refused_ops(program, target.refuses)
    if not before:
        return slow
    try:
        rewritten = apply_rewrites(program, example, target.rewrites, decompositions)
        after, applied = refused_ops(rewritten.program, target.refuses), rewritten.applied
    except RewriteFailed:
        after, applied = before, []
    return [Finding(target.name, op, count, why, [] if op in after else _fixers(op, applied))
            for op, (count, why) in before.items()] + slow


def _fixers(op: str, applied: list[str]) -> list[str]:
    """The applied passes that handle ``op`` (by their op list; custom ops and dtypes by kind)."""
    from edgeport.targets.rewrites import REWRITES

    if op in ("bfloat16", "float16"):
        return [n for n in applied if n == "upcast_fp32"]
    direct = [n for n in applied if n in REWRITES and op in REWRITES[n].ops]
    return direct or [n for n in applied if n in ("inline_custom_ops", "user_decompositions")] or applied
