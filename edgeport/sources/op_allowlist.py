"""The operators a program read from a file may call: those some edgeport target converts, nothing else.

Every target lowers the same thing: the program after ``run_decompositions`` with torch's core-ATen table,
so what any of them accepts is (1) an ATen overload torch tags ``core``, (2) one with a decomposition in
that table, or (3) one whose kernel is ``CompositeImplicitAutograd`` (it decomposes into other ATen ops on
the way); plus (4) the in-place form of an allowed overload (a saved program writes its buffers with them;
:mod:`edgeport.sources.program_policy` checks what they write) and (5) :data:`EXTRA`, what torch.export
itself emits outside those sets (seen in the programs the test suite's models export:
``tests/test_op_allowlist.py``). :data:`NEVER` takes back what no target converts and whose kernels trust
their arguments or touch the world: sparse, nested/jagged and mkldnn/cuDNN layouts, autograd's backward
kernels, storage swaps. ``quantized_decomposed`` (pt2e's Python-defined ops) is allowed whole; a namespace
the user named with ``--decompositions`` is theirs to trust.

:data:`INVARIANTS` holds, per allowed operator whose kernel takes an argument on trust, the check its
node's declared arguments must pass (``program_policy`` runs it before anything runs).
"""

from __future__ import annotations

import functools
import re

# torch.export emits these outside core / decomposition table / CompositeImplicitAutograd.
EXTRA = frozenset({"aten::_assert_tensor_metadata", "aten::lift_fresh_copy", "aten::_conj", "aten::polar",
                   "aten::view_as_complex", "aten::view_as_real", "aten::histc", "aten::empty_permuted",
                   "aten::alias", "aten::_assert_async", "aten::_assert_scalar", "aten::sym_constrain_range",
                   "aten::sym_constrain_range_for_size", "aten::_functional_assert_async",
                   "aten::_functional_assert_scalar", "aten::sym_size", "aten::sym_numel", "aten::sym_stride",
                   "aten::sym_storage_offset"})
# No target converts these, and their kernels trust their arguments (sparse indices, jagged offsets,
# ``unsafe=`` flags) or reach beyond the tensors (storage swaps, resizes, device/library state).
NEVER = re.compile(r"sparse|nested|jagged|mkldnn|cudnn|miopen|fbgemm|cufft|vulkan|backward|pin_memory|"
                   r"segment_reduce|resize|^set_|set_data|storage$|^_?to_dense|_cslt|_mps|_cuda|quantized_.*_cell|"
                   r"from_file|^save$|^load$|_print|record_stream|_make_dep_token|_unsafe_set_version")
OPEN_NAMESPACES = frozenset({"quantized_decomposed"})


def is_allowed(op, namespaces=frozenset()) -> bool:
    """Whether ``op`` (an OpOverload) is one some target converts (or in a namespace the user trusts)."""
    namespace = op.namespace
    if namespace in namespaces or namespace in OPEN_NAMESPACES:
        return True
    return namespace == "aten" and _aten_allowed(op._schema.name, op._overloadname)


@functools.lru_cache(maxsize=None)
def _aten_allowed(name: str, overload: str) -> bool:
    base = name.split("::", 1)[1]
    if NEVER.search(base):
        return False
    if name in EXTRA or _convertible(name, overload):
        return True
    return base.endswith("_") and not base.endswith("__") and _convertible(name[:-1], overload)


def _convertible(name: str, overload: str) -> bool:
    """Core-tagged, decomposed by torch's core-ATen table, or CompositeImplicitAutograd."""
    import torch

    packet = getattr(torch.ops.aten, name.split("::", 1)[1], None)
    op = getattr(packet, overload or "default", None) if packet is not None else None
    if op is None:
        return False
    if torch.Tag.core in op.tags or op in _decomposed():
        return True
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")
    except RuntimeError:
        return False


@functools.lru_cache(maxsize=1)
def _decomposed() -> frozenset:
    from torch._decomp import core_aten_decompositions

    return frozenset(core_aten_decompositions().keys())


def all_allowed() -> list[str]:
    """Every allowed ATen overload, ``aten::name.overload`` (for the README and the tests)."""
    import torch

    found = []
    for name in dir(torch.ops.aten):
        packet = getattr(torch.ops.aten, name, None)
        if isinstance(packet, torch._ops.OpOverloadPacket):
            found += [f"aten::{name}.{o}" for o in packet.overloads() if _aten_allowed(f"aten::{name}", o)]
    return sorted(found)


# ------------------------------------------------------------------ argument invariants (kernels that trust)

def _extent(shape, strides, offset) -> int | None:
    """Elements of storage a view reaches (offset + last index + 1), or None if any of it is symbolic."""
    values = [*shape, *strides, offset]
    if not all(isinstance(v, int) for v in values):
        return None
    if any(s == 0 for s in shape):
        return 0
    return offset + sum((s - 1) * st for s, st in zip(shape, strides)) + 1


def as_strided_within(args: list, kwargs: dict) -> str | None:
    """``as_strided(self, size, stride, offset)``: the view may not reach past what ``self`` covers."""
    source = getattr(args[0], "meta", {}).get("val") if args else None
    size, stride = (list(args[1:3]) + [None, None])[:2]
    offset = args[3] if len(args) > 3 else kwargs.get("storage_offset", 0) or 0
    if source is None or size is None or stride is None or len(size) != len(stride):
        return "its size/stride arguments or its input's shape are not declared"
    if any(not isinstance(s, int) or s < 0 for s in [*size, *stride, offset]):
        return "its size, stride or offset is symbolic or negative"
    have = _extent(list(source.shape), list(source.stride()), source.storage_offset())
    need = _extent(size, stride, offset)
    if have is None or need is None or need > have:
        return f"the view reaches element {need} of a tensor covering {have}"
    return None


def reshape_alias_within(args: list, kwargs: dict) -> str | None:
    """``_reshape_alias(self, size, stride)``: an as_strided view at ``self``'s own offset, which its kernel
    does not check against the storage either."""
    source = getattr(args[0], "meta", {}).get("val") if args else None
    offset = source.storage_offset() if source is not None else 0
    return as_strided_within([*list(args[:3]), offset], {})


def no_unsafe_flag(args: list, kwargs: dict) -> str | None:
    """An ``unsafe=True`` argument skips the kernel's own checks."""
    return "unsafe=True skips the kernel's bounds checks" if kwargs.get("unsafe") is True else None


# name (no overload) -> check(args, kwargs) -> reason or None; applied to every overload of that name
INVARIANTS = {"aten::as_strided": as_strided_within, "aten::as_strided_": as_strided_within,
              "aten::as_strided_copy": as_strided_within, "aten::as_strided_scatter": as_strided_within,
              "aten::_reshape_alias": reshape_alias_within, "aten::_reshape_alias_copy": reshape_alias_within}
# argument name -> check, applied to any allowed op whose schema has it
ARGUMENT_INVARIANTS = {"unsafe": no_unsafe_flag}
# operators that return a view of an argument although their schema does not say so
HIDDEN_ALIASES = frozenset({"aten::_unsafe_view", "aten::_reshape_alias", "aten::_reshape_alias_copy"})
