"""Applying passes to a program: the ones a target declares, only where their ops are present, then one
re-export, so every target still starts from a real ExportedProgram.

How a program pass works: take ``program.module()`` (a plain GraphModule), point the offending nodes at a
Python function built from ops the target supports, and ``torch.export`` the result again. Re-export
traces through that function, so the new graph holds ordinary ATen ops.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgeport.targets.rewrites.conv import has_output_padding
from edgeport.targets.rewrites.custom_ops import apply_decompositions, call_site, custom_op_definition, foreign_op, op_key
from edgeport.targets.rewrites.precision import low_precision_of, upcast_example, upcast_fp32
from edgeport.targets.rewrites.registry import REWRITES, Rewrite, RewriteFailed


@dataclass
class Rewritten:
    program: object
    example_inputs: tuple
    applied: list[str]
    notes: list[str]
    reference_precision: str | None = None   # "bf16"/"fp16" when the model was upcast to fp32


def _matches(rewrite: Rewrite, node) -> bool:
    if node.op != "call_function":
        return False
    if rewrite.ops:
        return str(node.target) in rewrite.ops
    return custom_op_definition(node) is not None


def apply_rewrites(program, example_inputs: tuple, names, decompositions: dict | None = None,
                   example_kwargs: dict | None = None) -> Rewritten:
    """Apply the named passes that are needed (plus the user's --decompositions) and re-export once
    (``example_kwargs``: a program called with named inputs, e.g. a prefill/decode signature)."""
    gm, example, applied, notes, precision = None, tuple(example_inputs), [], [], None
    if "upcast_fp32" in names and low_precision_of(program):
        precision = low_precision_of(program)
        gm, example = upcast_fp32(program.module(), example)
        if example_kwargs:   # a signature called by name (text generation) is re-exported with these
            example_kwargs = dict(zip(example_kwargs, upcast_example(tuple(example_kwargs.values()))))
        applied.append("upcast_fp32")
        notes.append(f"model is {precision}: converted in float32; parity is judged against the {precision} "
                     f"eager model with the {precision} budget")
    if decompositions:
        gm = gm or program.module()
        if apply_decompositions(gm, decompositions):
            applied.append("user_decompositions")
    for name in names:
        rewrite = REWRITES.get(name)
        if rewrite is None or not any(_matches(rewrite, node) for node in program.graph.nodes):
            continue  # a program pass (handled above), or no work: unlifting a big program costs seconds
        gm = gm or program.module()
        changed = [rewrite.rewrite(gm, node) for node in list(gm.graph.nodes) if _matches(rewrite, node)]
        if any(changed):
            applied.append(name)
    if not applied:
        return Rewritten(program, example, [], [])
    gm.recompile()
    try:
        new_program = reexport(gm, example, example_kwargs)
    except Exception as exc:
        raise RewriteFailed(f"re-export after rewrites {', '.join(applied)} failed: {exc}") from exc
    return Rewritten(new_program, example, applied, notes, precision)


def pending(programs, names) -> list[str]:
    """The node passes among ``names`` with work in any of ``programs`` (their ops occur): what a
    conversion that skips the programs (a target building from the model's own files) would leave out."""
    found = {str(n.target) for p in programs for n in p.graph.nodes if n.op == "call_function"}
    return [n for n in names if n in REWRITES and (set(REWRITES[n].ops) & found if REWRITES[n].ops else
                                                   any(_matches(REWRITES[n], node) for p in programs for node in p.graph.nodes))]


def rewrite_for_target(program, names, example: tuple = (), decompositions: dict | None = None,
                       example_kwargs: dict | None = None) -> Rewritten:
    """The one way a target's declared passes reach a program, whatever the task (forward's one program,
    every prefill/decode signature of text generation): all of them in one re-export; if that breaks, one
    pass at a time, each kept only if its re-export works, so a pass that breaks this program (an
    untraceable custom op body, an attention shape a pass did not expect) costs only itself, with a note,
    and the others (e.g. ``sort_by_rank``, without which the artifact does not load) still apply."""
    from edgeport.diagnostics import first_line

    try:
        return apply_rewrites(program, example, tuple(names), decompositions, example_kwargs)
    except RewriteFailed as exc:
        notes = [f"rewrite skipped: {first_line(exc)}"]
    program, example, applied, precision = program, tuple(example), [], None
    steps = [((name,), None) for name in names] + ([((), decompositions)] if decompositions else [])
    for step_names, step_decompositions in steps:
        try:
            step = apply_rewrites(program, example, step_names, step_decompositions, example_kwargs)
        except RewriteFailed as exc:
            notes.append(f"rewrite skipped: {first_line(exc)}")
            continue
        program, example, precision = step.program, step.example_inputs, precision or step.reference_precision
        applied, notes = applied + step.applied, notes + step.notes
    return Rewritten(program, example, applied, notes, precision)


def reexport(gm, example: tuple, kwargs: dict | None = None):
    """``torch.export`` of the rewritten GraphModule (already in inference form: no .eval() on it)."""
    import torch

    from edgeport.core.program import capture_mode

    with capture_mode():
        return torch.export.export(gm, tuple(example), kwargs=dict(kwargs) if kwargs else None, strict=False)


# An op listed in a target's ``refuses`` is refused only when its condition holds (default: always).
REFUSED_WHEN = {
    "aten.conv_transpose1d.default": has_output_padding,
    "aten.conv_transpose2d.input": has_output_padding,
    "aten.conv_transpose3d.input": has_output_padding,
}


def refused_ops(program, refuses) -> dict[str, tuple[int, str]]:
    """{op: (count, why)} for what ``refuses`` (a target's table) says this program will hit, plus custom
    ops (no converter takes an opaque op) and half-precision weights/inputs."""
    table = dict(refuses)
    found: dict[str, tuple[int, str]] = {}

    def add(op, why):
        count = found.get(op, (0, why))[0]
        found[op] = (count + 1, why)

    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        op = str(node.target)
        if op in table and REFUSED_WHEN.get(op, lambda n: True)(node):
            add(op, table[op])
        elif foreign_op(node):
            add(op_key(node.target), f"custom op (called at {call_site(node)})")
    precision = low_precision_of(program)
    dtype = {"bf16": "bfloat16", "fp16": "float16"}.get(precision)
    if dtype in table:
        add(dtype, table[dtype])
    return found
