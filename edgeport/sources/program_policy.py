"""What a program read from a file may do, checked on every node before any of it runs.

A ``.pt2`` is data a stranger can hand the gate (a pull request, a swapped ``exported.pt2`` in a DIR, a
generative folder). Its graph names operators as strings, and torch resolves any registered operator:
``aten.from_file(path, shared=True)`` maps a file into a tensor and ``aten.copy_`` into it writes the file,
with no pickle involved. The promise: a program loaded from a file only computes. So, before
``program.module()``, ``run_decompositions`` or any reference run, :func:`check_program` walks every node of
every graph (nested bodies of ``cond`` / ``while_loop`` / ``map`` / ``scan`` included) and refuses, as one
:class:`UsageError` naming the node and the op:

- an operator not on the allowlist (:mod:`edgeport.sources.op_allowlist`: only what some target converts;
  a namespace the user named with ``--decompositions`` is code they chose to run), or one whose arguments
  break the invariant its kernel trusts (``as_strided`` past its input, ``unsafe=True``);
- an operator packet or any plain function but ``getitem`` and symbolic-size arithmetic;
- I/O and side-effect operators (file, print, save, profiler, warnings, ``with_effects``, torchbind calls,
  storage swaps), by name and by torch's own side-effect registry;
- an in-place write (any argument the schema marks ``(a!)``) whose target is, through its views, a
  parameter, a constant or a nested graph's input (``_unsafe_view`` counts as the view it is): only buffers, the input tensors edgeport allocates for
  the run (a KV-cache step writes its cache input) and tensors the graph itself created may change;
- a dialect edgeport does not write, and graph node kinds a deserialized program never has.

Programs traced from Python source keep their custom ops: that code is the user's own and is not checked.
"""

from __future__ import annotations

import operator

from edgeport.errors import UsageError
from edgeport.sources.op_allowlist import ARGUMENT_INVARIANTS, HIDDEN_ALIASES, INVARIANTS, is_allowed

DIALECTS = ("TRAINING", "ATEN")          # what torch.export.export / run_decompositions write
NAMESPACES = frozenset({"aten", "prims", "quantized", "quantized_decomposed", "edgeport"})
# Operators that touch the world outside the tensors: files, the terminal, the profiler, storage swaps.
DENIED_NAMES = frozenset({"from_file", "save", "load", "_print", "print", "warn", "set_", "_set_item",
                          "swap_", "_unsafe_set_version_counter", "resize_", "resize_as_", "record_stream",
                          "_record_function_enter", "_record_function_enter_new", "_record_function_exit",
                          "Delete", "_nested_view_from_buffer", "_make_dep_token"})
DENIED_WORDS = ("file", "record_function", "profiler", "print")
# Asserts and shape constraints are side-effect ops in torch's registry but only refuse bad inputs.
HARMLESS_EFFECTS = frozenset({"_assert_async", "_assert_scalar", "_assert_tensor_metadata", "sym_constrain_range",
                              "sym_constrain_range_for_size", "_functional_assert_async", "_functional_assert_scalar"})
CONTROL_FLOW = frozenset({"cond", "while_loop", "map_impl", "scan", "associative_scan", "invoke_subgraph",
                          "wrap_with_set_grad_enabled", "wrap_with_autocast", "auto_functionalized",
                          "auto_functionalized_v2"})


class Refused(Exception):
    """One node's reason, before the path is prefixed."""


def check_program(program, where: str, namespaces=()) -> None:
    """Refuse (UsageError, exit 2) a program that could do anything but compute; see the module docstring.
    ``namespaces``: operator namespaces the user named with ``--decompositions``."""
    dialect = getattr(program, "dialect", None)
    if dialect not in DIALECTS:
        raise UsageError(f"{where}: dialect {dialect!r} is not one edgeport writes ({', '.join(DIALECTS)}); "
                         "refusing to run this program")
    allowed = NAMESPACES | {str(n) for n in namespaces}
    signature = program.graph_signature  # buffers and the inputs edgeport itself allocates (KV-cache steps)
    buffers = set(signature.inputs_to_buffers) | set(signature.user_inputs)
    writable = {"": buffers}  # per graph: placeholders an in-place write may target
    try:
        for path, gm in _graphs(program.graph_module):
            for node in gm.graph.nodes:
                try:
                    _check_node(node, allowed, writable.get(path, set()))
                    writable.update(_nested_writable(node, gm, path, writable.get(path, set())))
                except Refused as exc:
                    graph = f" (in nested graph {path})" if path else ""
                    raise Refused(f"node {node.name!r}{graph} {exc}") from None
    except Refused as exc:
        raise UsageError(f"{where}: {exc}; a program read from a file may only compute, refusing to run it") from None


def user_namespaces(path_text: str | None) -> set[str]:
    """The operator namespaces a ``--decompositions`` file names (importing it, as the run will anyway:
    it is code the user chose, and it registers the custom ops a program needs before it can load)."""
    if not path_text:
        return set()
    from edgeport.sources.pyfile import import_file

    if not path_text.endswith(".py"):
        raise UsageError(f"--decompositions {path_text!r}: expected a .py file defining DECOMPOSITIONS")
    table = getattr(import_file(path_text, what="--decompositions file"), "DECOMPOSITIONS", None)
    if not isinstance(table, dict):
        raise UsageError(f"{path_text} must define DECOMPOSITIONS = {{'namespace::op': function, ...}}")
    return {(k if isinstance(k, str) else str(getattr(k, "namespace", ""))).split("::")[0] for k in table}


def _graphs(root):
    """(dotted path, GraphModule) for the root graph and every nested graph module under it."""
    import torch

    for name, module in root.named_modules():
        if isinstance(module, torch.fx.GraphModule):
            yield name, module
        elif name:
            raise Refused(f"the program holds a submodule {name!r} of type {type(module).__name__}, not a graph")


def _nested_writable(node, gm, path: str, writable: set) -> dict[str, set]:
    """For a control-flow call (``cond``, ``while_loop``, a no-grad/autocast region ...): the placeholders of
    each body it calls that stand for an operand an in-place write may target here. Operands follow the
    last body argument; the bodies' placeholders take them in order."""
    bodies = [a for a in node.args if getattr(a, "op", None) == "get_attr"] if node.op == "call_function" else []
    if not bodies:
        return {}
    last = max(i for i, a in enumerate(node.args) if getattr(a, "op", None) == "get_attr")
    operands = [a for a in _flat(node.args[last + 1:]) if hasattr(a, "op")]
    fine = [(r := _root(a)) is not None and (r.op != "placeholder" or r.name in writable) for a in operands]
    found = {}
    for body in bodies:
        try:
            graph = gm.get_submodule(body.target).graph
        except (AttributeError, TypeError):
            continue
        names = [n.name for n in graph.nodes if n.op == "placeholder"]
        found[f"{path}.{body.target}" if path else body.target] = {n for n, ok in zip(names, fine) if ok}
    return found


def _flat(values) -> list:
    out = []
    for value in values:
        out += _flat(value) if isinstance(value, (list, tuple)) else [value]
    return out


def _check_node(node, allowed: frozenset, buffers: set) -> None:
    if node.op in ("placeholder", "output", "get_attr"):
        return
    if node.op != "call_function":
        raise Refused(f"is a {node.op} node ({node.target}), which a saved program never has")
    target = node.target
    import torch

    if isinstance(target, torch._ops.HigherOrderOperator):
        _check_higher_order(node, target, allowed)
    elif isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        _check_operator(node, target, allowed)
        _check_writes(node, target, buffers)
    elif not _symbolic(target):
        raise Refused(f"calls {getattr(target, '__module__', '?')}.{getattr(target, '__name__', target)}, "
                      "which is not an operator")


def _check_higher_order(node, target, allowed: frozenset) -> None:
    name = target.name()
    if name not in CONTROL_FLOW:
        raise Refused(f"calls torch.ops.higher_order.{name} (side effects or opaque objects)")
    if name.startswith("auto_functionalized"):  # wraps a mutating custom op: that op is what runs
        _check_operator(node, node.args[0], allowed)


def _check_operator(node, target, allowed: frozenset) -> None:
    """``target`` must be on the allowlist (:mod:`edgeport.sources.op_allowlist`: what some target converts,
    or a namespace the user trusts), not a side-effect op, and its arguments must pass the invariants its
    kernel relies on."""
    import torch

    if not isinstance(target, torch._ops.OpOverload):
        raise Refused(f"calls {target}, an operator packet a saved program never holds")
    label = f"calls {target.namespace}.{target._overloadpacket.__name__}.{target._overloadname}"
    user = allowed - NAMESPACES
    if target.namespace not in NAMESPACES | user:
        raise Refused(f"{label}: namespace {target.namespace!r} is not ATen/prims/quantized/edgeport "
                      "(name it with --decompositions if you trust it)")
    if not is_allowed(target, frozenset(user)):
        raise Refused(f"{label}, which no edgeport target converts (not on the operator allowlist)")
    name = target._overloadpacket.__name__
    if name not in HARMLESS_EFFECTS and target.namespace not in user and (
            name in DENIED_NAMES or any(w in name.lower() for w in DENIED_WORDS) or _side_effect(target)):
        raise Refused(f"{label}, an I/O or side-effect operator")
    reason = _invariant_broken(node, target)
    if reason:
        raise Refused(f"{label}: {reason}")


def _invariant_broken(node, target) -> str | None:
    """The first argument invariant of ``target`` (by name, or by argument name) its node breaks."""
    checks = [INVARIANTS.get(target._schema.name)]
    checks += [ARGUMENT_INVARIANTS.get(a.name) for a in target._schema.arguments]
    kwargs = dict(node.kwargs)
    for index, argument in enumerate(target._schema.arguments):
        if index < len(node.args):
            kwargs.setdefault(argument.name, node.args[index])
    for check in filter(None, checks):
        reason = check(list(node.args), kwargs)
        if reason:
            return reason
    return None


def _side_effect(target) -> bool:
    import torch

    try:
        from torch.fx.node import _side_effectful_functions
    except ImportError:  # pragma: no cover - older torch
        _side_effectful_functions = set()
    if target in _side_effectful_functions:
        return True
    try:
        from torch._higher_order_ops.effects import _get_effect

        return isinstance(target, torch._ops.OpOverload) and _get_effect(target) is not None
    except ImportError:  # pragma: no cover - older torch
        return False


def _check_writes(node, target, buffers: set) -> None:
    """Every argument the schema writes to must be a buffer or a tensor the graph made itself."""
    schema = getattr(target, "_schema", None)
    if schema is None:
        return
    for index, argument in enumerate(schema.arguments):
        info = argument.alias_info
        if info is None or not info.is_write:
            continue
        value = node.kwargs.get(argument.name) if index >= len(node.args) else node.args[index]
        for written in value if isinstance(value, (list, tuple)) else [value]:
            root = _root(written)
            if root is not None and root.op == "placeholder" and root.name not in buffers:
                raise Refused(f"calls {target} writing into {root.name!r} in place; only buffers and tensors "
                              "the graph made may change")


def _root(value, depth: int = 0):
    """The node whose memory ``value`` views (following aliasing returns and getitem), or None."""
    import torch

    node = value
    while hasattr(node, "op") and depth < 10_000:
        depth += 1
        if node.op != "call_function":
            return node
        target = node.target
        if target is operator.getitem:
            node = node.args[0]
            continue
        schema = getattr(target, "_schema", None) if isinstance(target, torch._ops.OpOverload) else None
        if schema is not None and schema.name in HIDDEN_ALIASES and node.args:
            node = node.args[0]  # a view whose schema does not say so (``_unsafe_view``)
            continue
        source = _aliased_argument(node, schema) if schema is not None else None
        if source is None:
            return node
        node = source
    return node if hasattr(node, "op") else None


def _aliased_argument(node, schema):
    """The argument a return of ``schema`` aliases (a view, or an in-place op's self), or None."""
    sets = {s for r in schema.returns if r.alias_info is not None for s in r.alias_info.before_set}
    if not sets:
        return None
    for index, argument in enumerate(schema.arguments):
        if argument.alias_info is not None and set(argument.alias_info.before_set) & sets:
            return node.kwargs.get(argument.name) if index >= len(node.args) else node.args[index]
    return None


def _symbolic(target) -> bool:
    """Integer arithmetic on symbolic sizes and ``getitem``: the only plain functions a saved graph holds."""
    if target is operator.getitem:
        return True
    try:
        from torch._export.serde.serialize import _SYM_OPS
    except ImportError:  # pragma: no cover - older torch
        _SYM_OPS = set()
    return target in _SYM_OPS or getattr(target, "__module__", None) == "math"
