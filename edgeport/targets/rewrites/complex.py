"""Complex tensors as (real, imag) pairs: rotary embeddings written with complex numbers (Meta's Llama and
Mistral reference code, DeepSeek-V2: ``torch.polar``, ``view_as_complex``, a complex multiply,
``view_as_real``) become real arithmetic on a trailing dimension of 2.

Why: LiteRT has no lowering for ``aten.polar`` and no complex element type, ONNX exporters stop on complex
ops; only XLA takes them. The math is the textbook one (``(a+bi)(c+di) = (ac-bd) + (ad+bc)i``), so the
rewrite is exact up to float rounding. Every node whose value is complex is planned first; if one of them
is an op this table does not know, nothing is changed and the converter's own error stays.
``real_dft`` is the same idea for FFT outputs.
"""

from __future__ import annotations

from edgeport.targets.rewrites.registry import node_rewrite


def _dim(x, d: int) -> int:
    """A complex dim index on the pair tensor (one extra trailing dim)."""
    return d % (x.dim() - 1)


def pair_polar(magnitude, angle):
    import torch

    return torch.stack([magnitude * torch.cos(angle), magnitude * torch.sin(angle)], -1)


def pair_complex(real, imag):
    import torch

    return torch.stack([real, imag], -1)


def pair_itself(x, *args, **kwargs):
    return x


def pair_times_pair(a, b):
    import torch

    ar, ai, br, bi = a[..., 0], a[..., 1], b[..., 0], b[..., 1]
    return torch.stack([ar * br - ai * bi, ar * bi + ai * br], -1)


def pair_times_real(a, b):
    import torch

    return a * (b.unsqueeze(-1) if isinstance(b, torch.Tensor) else b)


def real_times_pair(a, b):
    return pair_times_real(b, a)


def pair_add(a, b, *, alpha=1):
    return a + alpha * b


def pair_sub(a, b, *, alpha=1):
    return a - alpha * b


def pair_conj(x):
    import torch

    return torch.stack([x[..., 0], -x[..., 1]], -1)


def pair_reshape(x, shape):
    return x.reshape([*shape, 2])


def pair_expand(x, size, *, implicit=False):
    return x.expand([*size, 2])


def pair_unsqueeze(x, dim):
    return x.unsqueeze(dim % x.dim())  # the new dim may be the last complex one


def pair_squeeze(x, dim=None):
    if dim is None:
        return x.reshape([s for s in x.shape[:-1] if s != 1] + [2])
    dims = dim if isinstance(dim, (list, tuple)) else [dim]
    return x.squeeze(tuple(_dim(x, d) for d in dims))


def pair_slice(x, dim=0, start=None, end=None, step=1):
    import torch

    return torch.ops.aten.slice.Tensor(x, _dim(x, dim), start, end, step)


def pair_select(x, dim, index):
    return x.select(_dim(x, dim), index)


def pair_permute(x, dims):
    return x.permute([_dim(x, d) for d in dims] + [x.dim() - 1])


def pair_transpose(x, a, b):
    return x.transpose(_dim(x, a), _dim(x, b))


def pair_flatten(x, start=0, end=-1):
    return x.flatten(_dim(x, start), _dim(x, end))


def pair_cat(tensors, dim=0):
    import torch

    return torch.cat(tensors, _dim(tensors[0], dim))


def pair_real(x):
    return x[..., 0]


def pair_imag(x):
    return x[..., 1]


def pair_abs(x):
    return (x[..., 0] * x[..., 0] + x[..., 1] * x[..., 1]).sqrt()


def pair_angle(x):
    import torch

    return torch.atan2(x[..., 1], x[..., 0])


ELEMENTWISE = {"aten.mul.Tensor": (pair_times_pair, pair_times_real, real_times_pair),
               "aten.add.Tensor": (pair_add, None, None), "aten.sub.Tensor": (pair_sub, None, None)}
COMPLEX_OPS = {  # op on complex values -> its pair function (arguments unchanged)
    "aten.polar.default": pair_polar, "aten.complex.default": pair_complex,
    "aten.view_as_complex.default": pair_itself, "aten.view_as_real.default": pair_itself,
    "aten.clone.default": pair_itself, "aten.contiguous.default": pair_itself, "aten.alias.default": pair_itself,
    "aten.to.dtype": pair_itself, "aten.to.device": pair_itself, "aten.to.dtype_layout": pair_itself,
    "aten.to.other": pair_itself, "aten._to_copy.default": pair_itself,
    "aten.type_as.default": pair_itself, "aten.detach.default": pair_itself, "aten.resolve_conj.default": pair_itself,
    "aten.lift_fresh_copy.default": pair_itself, "aten.conj.default": pair_conj, "aten._conj.default": pair_conj,
    "aten.conj_physical.default": pair_conj, "aten.reshape.default": pair_reshape, "aten.view.default": pair_reshape,
    "aten._unsafe_view.default": pair_reshape, "aten.expand.default": pair_expand,
    "aten.unsqueeze.default": pair_unsqueeze, "aten.squeeze.dim": pair_squeeze, "aten.squeeze.dims": pair_squeeze,
    "aten.squeeze.default": pair_squeeze, "aten.slice.Tensor": pair_slice, "aten.select.int": pair_select,
    "aten.permute.default": pair_permute, "aten.transpose.int": pair_transpose,
    "aten.flatten.using_ints": pair_flatten, "aten.cat.default": pair_cat,
    "aten.real.default": pair_real, "aten.imag.default": pair_imag, "aten.abs.default": pair_abs,
    "aten.angle.default": pair_angle,
}
IGNORED = {"aten._assert_tensor_metadata.default"}  # dtype asserts on complex values: dropped


def is_complex(value) -> bool:
    val = value.meta.get("val") if hasattr(value, "meta") else None
    return getattr(val, "dtype", None) is not None and val.dtype.is_complex


def _touches_complex(node) -> bool:
    operands = [a for a in node.all_input_nodes]
    return is_complex(node) or any(is_complex(a) for a in operands)


def _plan_node(node):
    """The pair function for one node that produces or reads a complex value, or None if unknown."""
    name = str(node.target)
    if name in ELEMENTWISE:
        both, left, right = ELEMENTWISE[name]
        a, b = node.args[0], node.args[1]
        if is_complex(a) and is_complex(b):
            return both
        if isinstance(b, complex) or isinstance(a, complex):
            return None
        return left if is_complex(a) else right
    function = COMPLEX_OPS.get(name)
    if function is pair_itself and name != "aten.view_as_real.default" and not is_complex(node):
        return None  # a cast from complex to real (drops the imaginary part): not planned
    return function


def plan(gm):
    """({node: pair function}, [complex get_attr nodes], [ignored nodes]) or None if a complex node is unknown."""
    functions, constants, ignored = {}, [], []
    for node in gm.graph.nodes:
        if node.op == "get_attr" and is_complex(node):
            constants.append(node)
        elif node.op == "call_function" and str(node.target) in IGNORED:
            if any(is_complex(a) for a in node.all_input_nodes):
                ignored.append(node)
        elif node.op == "call_function" and _touches_complex(node):
            function = _plan_node(node)
            if function is None:
                return None
            functions[node] = function
        elif node.op in ("placeholder", "call_module", "call_method") and is_complex(node):
            return None  # a complex model input (or an opaque call): not representable here
    return functions, constants, ignored


def _own(gm, target: str):
    owner = gm
    *path, attr = target.split(".")
    for part in path:
        owner = getattr(owner, part)
    return owner, attr


@node_rewrite("complex_pairs", ops=("aten.polar.default", "aten.view_as_complex.default", "aten.view_as_real.default",
                                    "aten.complex.default"),
              fixes="complex rotary embeddings (polar/view_as_complex/complex mul/view_as_real): real (re, im) pairs")
def complex_pairs(gm, _node) -> bool:
    """Rewrite every complex value of the graph at once (the first matching node does the work)."""
    import torch

    planned = plan(gm)
    if planned is None or not planned[0]:
        return False
    functions, constants, ignored = planned
    for node in constants:
        owner, attr = _own(gm, node.target)
        setattr(owner, attr, torch.view_as_real(getattr(owner, attr).resolve_conj()).clone())
    for node in ignored:
        gm.graph.erase_node(node)
    for node, function in functions.items():
        node.target = function
        node.meta.pop("val", None)  # no longer complex: later nodes of this pass must not replan it
    return True
