"""Edge ops XNNPACK has no node for, rewritten as ones it has, before partitioning: one partition, not hundreds.

``torch.export`` unrolls a recurrent layer: an ``nn.LSTM`` of 3 layers over 100 frames is 300 cells, each
splitting its gate pre-activations (``split_with_sizes_copy``), squeezing a step out of the sequence
(``squeeze_copy``, ``select_copy``) and adding it back (``unsqueeze_copy`` on a middle dim). XNNPACK's
partitioner takes none of those, so every cell is cut out of the delegate and back in: a 2-layer LSTM over 20
frames lowered as 44 partitions in 61 s, and ``to_backend`` costs grow with partitions x graph size — the
issue's 1.4M-parameter speaker encoder ran >16 min at 7.2 GB. With static shapes each of those ops is a slice or
a reshape, which XNNPACK runs (``slice_copy`` with stride 1, ``view_copy``): rewritten here, the whole recurrence
is one partition (bench/executorch_int8.py --lstm measures before/after). The same rewrite delegates the odd
squeeze/unsqueeze of any model (CREPE's ``audio[:, None, :, None]``).

A mean over the last dimension (every RMSNorm: two per transformer layer) is the same: XNNPACK
averages only the two inner dimensions of a 4-D tensor, so each norm cut the layer into three partitions and
ran on the portable kernels. As a view to ``(rows, 1, last, 1)``, a mean over dims 2 and 3 and a view back it
is XNNPACK's global average pooling (a channel dimension of 1: no layout change); a 6-layer SmolLM2's two
methods went from 42 XNNPACK partitions to 18 (bench/LARGE_GENERATION.md, "ExecuTorch conversion time").
"""

from __future__ import annotations


def _static_shape(node) -> list[int] | None:
    value = node.meta.get("val")
    shape = getattr(value, "shape", None)
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return [int(d) for d in shape]


def delegable_views(graph_module):
    """The ExecuTorch pass (a ``PassResult``): splits -> slices, squeezes/unsqueezes/selects -> view copies."""
    from executorch.exir.dialects._ops import ops as exir_ops
    from executorch.exir.pass_base import PassResult

    aten = exir_ops.edge.aten
    changed = False
    for node in list(graph_module.graph.nodes):
        if node.op != "call_function":
            continue
        if node.target == aten.split_with_sizes_copy.default:
            changed |= _split_to_slices(graph_module.graph, node, aten)
        elif node.target in (aten.squeeze_copy.dims, aten.squeeze_copy.dim, aten.squeeze_copy.default,
                             aten.unsqueeze_copy.default):
            changed |= _to_view(graph_module.graph, node, node.args[0], aten)
        elif node.target == aten.select_copy.int:
            changed |= _select_to_slice(graph_module.graph, node, aten)
        elif node.target == aten.mean.dim:
            changed |= _last_dim_mean_to_pool(graph_module.graph, node, aten)
    if changed:
        graph_module.graph.eliminate_dead_code()
        graph_module.recompile()
    return PassResult(graph_module, changed)


def _to_view(graph, node, source, aten) -> bool:
    """``node`` (a squeeze or unsqueeze of ``source``) as a ``view_copy`` to its static output shape."""
    shape = _static_shape(node)
    if shape is None or _static_shape(source) is None:
        return False
    with graph.inserting_before(node):
        view = graph.call_function(aten.view_copy.default, (source, shape))
    view.meta = dict(node.meta)
    node.replace_all_uses_with(view)
    graph.erase_node(node)
    return True


def _split_to_slices(graph, node, aten) -> bool:
    """Each ``getitem`` of a ``split_with_sizes_copy`` as a ``slice_copy`` of the same range."""
    import operator

    source, sizes = node.args[0], list(node.args[1])
    dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
    shape = _static_shape(source)
    users = list(node.users)
    if shape is None or not all(u.op == "call_function" and u.target is operator.getitem for u in users):
        return False
    dim = dim % len(shape)
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    for user in users:
        index = user.args[1]
        with graph.inserting_before(user):
            piece = graph.call_function(aten.slice_copy.Tensor, (source, dim, starts[index], starts[index] + sizes[index], 1))
        piece.meta = dict(user.meta)
        user.replace_all_uses_with(piece)
        graph.erase_node(user)
    graph.erase_node(node)
    return True


def _select_to_slice(graph, node, aten) -> bool:
    """``select_copy(x, dim, i)`` as ``view_copy(slice_copy(x, dim, i, i + 1))``."""
    source, dim, index = node.args
    shape, out = _static_shape(source), _static_shape(node)
    if shape is None or out is None:
        return False
    dim = dim % len(shape)
    index = index % shape[dim]
    with graph.inserting_before(node):
        piece = graph.call_function(aten.slice_copy.Tensor, (source, dim, index, index + 1, 1))
        view = graph.call_function(aten.view_copy.default, (piece, out))
    value = node.meta.get("val")
    piece.meta = {**node.meta, "val": value.unsqueeze(dim) if value is not None else None}
    view.meta = dict(node.meta)
    node.replace_all_uses_with(view)
    graph.erase_node(node)
    return True


def _last_dim_mean_to_pool(graph, node, aten) -> bool:
    """``mean(x, [-1])`` of a float tensor as ``view(mean(view(x, (rows, 1, last, 1)), [2, 3], keepdim))``."""
    import math

    source = node.args[0]
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    shape, out = _static_shape(source), _static_shape(node)
    value = source.meta.get("val")
    if shape is None or out is None or not shape or node.kwargs.get("dtype") is not None \
            or not getattr(value, "is_floating_point", lambda: False)() \
            or list(dims or ()) not in ([-1], [len(shape) - 1]):
        return False
    rows = math.prod(shape[:-1])
    with graph.inserting_before(node):
        flat = graph.call_function(aten.view_copy.default, (source, [rows, 1, shape[-1], 1]))
        pooled = graph.call_function(aten.mean.dim, (flat, [2, 3], True))
        view = graph.call_function(aten.view_copy.default, (pooled, out))
    flat.meta = {**source.meta, "val": value.reshape(rows, 1, shape[-1], 1)}
    pooled.meta = {**node.meta, "val": flat.meta["val"].mean(dim=(2, 3), keepdim=True)}
    view.meta = dict(node.meta)
    node.replace_all_uses_with(view)
    graph.erase_node(node)
    return True


def linears_beside_their_input(graph_module):
    """The ExecuTorch pass (a ``PassResult``): the linears that read one dynamically quantized activation (a
    layer's q, k and v projections share one ``choose_qparams`` -> quantize -> dequantize chain) moved, with
    the weight dequantizations they need, to right after that chain, ahead of the float ops that use their
    outputs. Same graph, another topological order. Why: XNNPACK's partitioner takes each such group of
    linears as one unit, and ExecuTorch's group partitioner merges units in one pass in reverse node order;
    with a float op of ``q``'s between ``q`` and ``v`` (export orders each op after its inputs), the group
    came before that op in the pass, its merge was refused (the op, not merged yet, sat between), and every
    dynamic-int8 layer was cut after its q/k/v and gate/up groups: a 6-layer SmolLM2's two methods lowered
    as 40 partitions against fp32's and int4-block32's 18 (bench/LARGE_GENERATION.md)."""
    from executorch.exir.pass_base import PassResult

    changed = False
    for node in list(graph_module.graph.nodes):
        linears = [u for u in node.users if "linear" in str(u.target)]
        if node.op == "call_function" and "dequantize" in str(node.target) and len(linears) > 1:
            changed |= _move_after(graph_module.graph, node, linears)
    if changed:
        graph_module.graph.lint()
        graph_module.recompile()
    return PassResult(graph_module, changed)


def _move_after(graph, anchor, linears) -> bool:
    """``linears`` and their ancestors placed after ``anchor`` moved to right after it, in their order."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    moved, stack = set(), list(linears)
    while stack:
        node = stack.pop()
        if node in moved or order[node] <= order[anchor] or node.op != "call_function":
            continue
        moved.add(node)
        stack.extend(node.all_input_nodes)
    if not moved:
        return False
    last = anchor
    for node in sorted(moved, key=order.get):
        last.append(node)
        last = node
    return True
