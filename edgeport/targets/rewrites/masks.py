"""Attention masks read from the graph: their constant value when they have one, and one additive float
mask per bool mask, shared by every attention that reads it (used by :mod:`.grouped_attention`)."""

from __future__ import annotations

ADDITIVE = "_edgeport_additive_masks"   # GraphModule attribute: bool mask node -> its additive node


def shared_additive(gm, mask, dtype):
    """The node of ``additive_mask(mask)``, inserted once after ``mask`` (a float mask is returned as is)."""
    import torch

    value = mask.meta.get("val")
    if value is None or value.dtype != torch.bool:
        return mask
    made = gm.__dict__.setdefault(ADDITIVE, {})
    if mask not in made:
        with gm.graph.inserting_after(mask):
            made[mask] = gm.graph.call_function(additive_mask, (mask,), {"dtype": dtype})
    return made[mask]


def additive_mask(mask, *, dtype):
    """0 where ``mask`` allows, the dtype's lowest value elsewhere (transformers' additive mask)."""
    import torch

    return torch.where(mask, torch.zeros((), dtype=dtype), torch.finfo(dtype).min)


def live_slots(gm, mask, slots: int) -> int | None:
    """n when ``mask`` is a constant in which every row attends somewhere and no row attends a slot >= n
    (n < slots): attention over the first n slots is then the same math. A prefill from an empty cache
    masks every slot past the prompt, so it attends T slots instead of the cache length. None otherwise
    (a mask fed as an input, or computed from one)."""
    import torch

    value = constant_value(gm, mask)
    if value is None or value.dtype != torch.bool or value.dim() < 1 or value.shape[-1] != slots:
        return None
    rows = value.reshape(-1, slots)
    if not bool(rows.any(dim=-1).all()):
        return None
    n = int(torch.nonzero(rows.any(dim=0)).flatten().max()) + 1
    return n if n < slots else None


def constant_value(gm, node, limit: int = 64):
    """The value of ``node`` when it is computed from constants only (no graph input, at most ``limit``
    nodes), else None."""
    from torch.fx.node import map_arg

    order, seen, stack = [], set(), [node]
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        if getattr(current, "op", None) not in ("call_function", "get_attr") or len(seen) >= limit:
            return None
        seen.add(current)
        order.append(current)
        stack.extend(current.all_input_nodes)
    position = {n: i for i, n in enumerate(gm.graph.nodes)}
    env = {}
    try:
        for current in sorted(order, key=position.__getitem__):
            if current.op == "get_attr":
                env[current] = _attr(gm, current.target)
            else:
                args, kwargs = map_arg((current.args, current.kwargs), env.__getitem__)
                env[current] = current.target(*args, **kwargs)
    except Exception:  # an op that cannot run here: not provably constant
        return None
    return env[node]


def _attr(gm, target: str):
    from edgeport.targets.rewrites.complex import _own

    owner, name = _own(gm, target)
    return getattr(owner, name)
