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

    @property
    def fixed(self) -> bool:
        return bool(self.fixed_by)


def check(model: str, targets: list[str], inputs: list[str], hf_task: str = "auto", seq_len: int = 16,
          decompositions: str | None = None, trust_pickle: bool = False) -> tuple[list[Finding], list[str]]:
    """(findings, module rewrites applied). Raises UsageError for bad input, ExportFailed if export fails."""
    from edgeport.errors import UsageError
    from edgeport.export.program import export_program
    from edgeport.export.registry import get_target, target_names
    from edgeport.export.rewrites import apply_module_rewrites, load_decompositions
    from edgeport.model_source import load_model, parse_input_spec

    unknown = [t for t in targets if t not in target_names()]
    if unknown:
        raise UsageError(f"unknown target {unknown[0]!r}; known targets: {', '.join(target_names())}")
    table = load_decompositions(decompositions) if decompositions else {}
    loaded = load_model(model, [parse_input_spec(t) for t in inputs], hf_task, seq_len, trust_pickle=trust_pickle)
    module_rewrites = apply_module_rewrites(loaded.module)
    program = loaded.program or export_program(loaded.module, loaded.example_inputs)
    from edgeport.runtimes.torch_eager import flatten_inputs

    example = flatten_inputs(loaded.example_inputs)
    findings = []
    for name in dict.fromkeys(targets):
        findings += check_target(get_target(name), program, example, table)
    return findings, module_rewrites


def check_target(target, program, example, decompositions: dict) -> list[Finding]:
    from edgeport.export.rewrites import RewriteFailed, apply_rewrites, refused_ops

    before = refused_ops(program, target.refuses)
    if not before:
        return []
    try:
        rewritten = apply_rewrites(program, example, target.rewrites, decompositions)
        after, applied = refused_ops(rewritten.program, target.refuses), rewritten.applied
    except RewriteFailed:
        after, applied = before, []
    return [Finding(target.name, op, count, why, [] if op in after else _fixers(op, applied))
            for op, (count, why) in before.items()]


def _fixers(op: str, applied: list[str]) -> list[str]:
    """The applied passes that handle ``op`` (by their op list; custom ops and dtypes by kind)."""
    from edgeport.export.rewrites import REWRITES

    if op in ("bfloat16", "float16"):
        return [n for n in applied if n == "upcast_fp32"]
    direct = [n for n in applied if n in REWRITES and op in REWRITES[n].ops]
    return direct or [n for n in applied if n in ("inline_custom_ops", "user_decompositions")] or applied
