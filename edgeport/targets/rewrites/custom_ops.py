"""Custom ops (``torch.library.custom_op``) are opaque to every converter: inline a traceable Python body,
apply the user's ``--decompositions``, or say precisely which op is left, where the model calls it, and
how to fix it."""

from __future__ import annotations

from edgeport.diagnostics import user_source
from edgeport.errors import UsageError
from edgeport.targets.rewrites.registry import node_rewrite, program_pass

NATIVE_NAMESPACES = ("aten", "prims", "quantized_decomposed", "quantized", "higher_order")
program_pass("user_decompositions", "custom ops nothing else can fix: the user's DECOMPOSITIONS table")


@node_rewrite("inline_custom_ops", fixes="torch.library.custom_op is opaque to every converter: inline its Python body")
def inline_custom_op(_gm, node) -> bool:
    """Replace a ``torch.library.custom_op`` call by its own Python implementation (CPU kernel), so the
    re-export traces whatever torch code is inside it. Untraceable bodies fail at re-export and are then
    diagnosed by :func:`describe_custom_ops`."""
    opdef = custom_op_definition(node)
    if opdef is None:
        return False
    body = opdef._backend_fns.get("cpu") or opdef._init_fn
    if not runs_on_meta(body, node):
        return False
    node.target = body
    return True


def runs_on_meta(body, node) -> bool:
    """Probe the body on meta tensors before inlining it. A body that leaves torch (``x.numpy()``, C
    extensions) must never be traced with fake tensors: numpy would read a fake tensor's non-existent data
    (seen: bad_alloc and segfaults later in the process). On meta tensors it fails cleanly instead."""
    import torch

    def meta(arg):
        val = arg.meta.get("val") if hasattr(arg, "meta") else None
        if isinstance(val, torch.Tensor):
            return torch.empty(val.shape, dtype=val.dtype, device="meta")
        return arg

    try:
        body(*[meta(a) for a in node.args], **{k: meta(v) for k, v in node.kwargs.items()})
    except Exception:
        return False
    return True


def custom_op_definition(node):
    target = node.target
    if not hasattr(target, "namespace") or target.namespace in NATIVE_NAMESPACES:
        return None
    from torch._library.custom_ops import OPDEFS

    return OPDEFS.get(target.name().split(".")[0])


def foreign_op(node) -> bool:
    target = node.target
    return node.op == "call_function" and hasattr(target, "namespace") and target.namespace not in NATIVE_NAMESPACES


def call_site(node) -> str:
    return user_source(node.meta.get("stack_trace")) or "unknown location"


def describe_custom_ops(program) -> list[str]:
    """One line per custom op left in a program: its name, where the model calls it, and the fix."""
    lines = []
    for node in program.graph.nodes:
        if foreign_op(node):
            name = op_key(node.target)
            lines.append(f"custom op {name} (called at {call_site(node)}) is opaque to converters; register a "
                         f"decomposition: --decompositions my_decomps.py with DECOMPOSITIONS = {{'{name}': fn}} "
                         "(fn in traceable torch)")
    return lines


def load_decompositions(path_text: str) -> dict:
    """``--decompositions file.py``: the file defines ``DECOMPOSITIONS = {"ns::op": fn, ...}``; each fn takes
    the op's arguments and is written in traceable torch code."""
    from edgeport.sources.pyfile import import_file

    if not path_text.endswith(".py"):
        raise UsageError(f"--decompositions {path_text!r}: expected a .py file defining DECOMPOSITIONS")
    module = import_file(path_text, what="--decompositions file")
    table = getattr(module, "DECOMPOSITIONS", None)
    if not isinstance(table, dict) or not all(callable(f) for f in table.values()):
        raise UsageError(f"{path_text} must define DECOMPOSITIONS = {{'namespace::op': function, ...}}")
    return {(k if isinstance(k, str) else op_key(k)): f for k, f in table.items()}


def apply_decompositions(gm, decompositions: dict) -> bool:
    changed = False
    for node in gm.graph.nodes:
        if node.op != "call_function" or not hasattr(node.target, "name"):
            continue
        key = op_key(node.target)
        function = decompositions.get(key) or decompositions.get(key.split(".")[0])
        if function is not None:
            node.target = function
            changed = True
    return changed


def op_key(target) -> str:
    """``namespace::name.overload`` for an OpOverload (what --decompositions keys use)."""
    name = target.name()  # "ns::op" or "ns::op.overload"
    return name if "." in name or not hasattr(target, "_overloadname") else f"{name}.{target._overloadname}"
