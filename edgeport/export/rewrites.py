"""Rewrites: small named passes that turn a program a converter refuses into an equivalent one it accepts.

Why a table and not fixes inside each target: the same failure (an op a backend has no lowering for, a
complex tensor, a custom op) shows up on several targets, and the fix is the same graph change. Each
target declares the passes it needs (``Target.rewrites``); a pass runs only when its ops are in the graph,
and every pass that changed the program is recorded in the report row (``"rewrites": [...]``).

How a program pass works: take ``program.module()`` (a plain GraphModule), point the offending nodes at a
Python function built from ops the target supports, and ``torch.export`` the result again. Re-export
traces through that function, so the new graph holds ordinary ATen ops and every target still starts from
a real ExportedProgram. Module passes (``MODULE_REWRITES``) run on the eager model before the one export,
when the fix has to choose a different implementation rather than rewrite ops (Hugging Face MoE experts).

Each replacement is exact math (not an approximation) unless its docstring says otherwise; parity
against the user's own eager model still judges every artifact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from edgeport.errors import UsageError


class RewriteFailed(Exception):
    """A pass could not produce an exportable program; the message says which pass and why."""


@dataclass(frozen=True)
class Rewrite:
    name: str
    fixes: str                              # the failure class, as a user would see it
    ops: tuple[str, ...]                    # str(node.target) of the nodes this pass replaces
    rewrite: Callable                       # (graph_module, node) -> bool: True if the node was changed


# ---------------------------------------------------------------------------------------------------------
# Replacement functions: called with the ATen op's own arguments, traced by the re-export.
# ---------------------------------------------------------------------------------------------------------

def histc_onehot(x, bins=100, min=0, max=0):
    """``torch.histc`` as compare-with-bin-index + sum. Same binning as ATen: bin = floor((x-lo)/(hi-lo)*bins),
    x == hi lands in the last bin, values outside [lo, hi] are dropped; lo == hi means the data's range."""
    import torch

    flat = x.reshape(-1).float()
    if min == max:
        lo, hi = flat.min(), flat.max()
        same = hi == lo
        lo, hi = torch.where(same, lo - 1, lo), torch.where(same, hi + 1, hi)
    else:
        lo, hi = torch.tensor(float(min)), torch.tensor(float(max))
    inside = (flat >= lo) & (flat <= hi)
    index = torch.floor((flat - lo) / (hi - lo) * bins).clamp(0, bins - 1).to(torch.int32)
    hits = (index.unsqueeze(-1) == torch.arange(bins, dtype=torch.int32)) & inside.unsqueeze(-1)
    return hits.to(x.dtype).sum(0)


def _dft_parts(x, n: int):
    """Real and imaginary parts of the one-sided DFT of the last dim, as two matmuls. The angle index
    k*t mod n is computed in integers so large n keeps full float precision."""
    import torch

    k = torch.arange(n // 2 + 1, dtype=torch.int32)
    t = torch.arange(n, dtype=torch.int32)
    angle = (torch.remainder(t.unsqueeze(-1) * k.unsqueeze(0), n).to(torch.float32)) * (2 * math.pi / n)
    x = x.to(torch.float32)
    return x @ torch.cos(angle), -(x @ torch.sin(angle))


_NORM_SCALE = {None: lambda n: 1.0, "backward": lambda n: 1.0, "ortho": lambda n: n ** -0.5, "forward": lambda n: 1.0 / n}


def rfft_pair(x, n=None, dim=-1, norm=None):
    """``torch.fft.rfft`` as a real DFT, returned as ``(..., 2)`` (real, imag) like ``view_as_real``."""
    import torch

    x = x.movedim(dim, -1)
    size = x.shape[-1] if n is None else n
    if n is not None and n != x.shape[-1]:
        x = x[..., :n] if n < x.shape[-1] else torch.nn.functional.pad(x, (0, n - x.shape[-1]))
    re, im = _dft_parts(x, size)
    scale = _NORM_SCALE[norm](size)
    return torch.stack([re * scale, im * scale], -1).movedim(-2, dim - 1 if dim < 0 else dim)


def stft_pair(x, n_fft, hop_length=None, win_length=None, window=None, normalized=False, onesided=None,
              return_complex=None, align_to_window=None):
    """``torch.stft`` (center padding already lowered to ``pad`` by export) as one strided conv1d whose
    kernels are window * cos / window * -sin: framing, windowing and the DFT in one op every backend has.
    Returns ``(..., freq, frames, 2)`` like ``view_as_real(stft(...))``."""
    import torch

    hop = hop_length or n_fft // 4
    win = win_length or n_fft
    if window is None:
        window = torch.ones(win)
    if win < n_fft:
        left = (n_fft - win) // 2
        window = torch.nn.functional.pad(window, (left, n_fft - win - left))
    k = torch.arange(n_fft // 2 + 1, dtype=torch.int32)
    t = torch.arange(n_fft, dtype=torch.int32)
    angle = torch.remainder(k.unsqueeze(-1) * t.unsqueeze(0), n_fft).to(torch.float32) * (2 * math.pi / n_fft)
    kernels = torch.cat([torch.cos(angle) * window, -torch.sin(angle) * window]).unsqueeze(1)  # (2F, 1, n_fft)
    batch_shape = x.shape[:-1]
    frames = torch.nn.functional.conv1d(x.reshape(-1, 1, x.shape[-1]).float(), kernels, stride=hop)
    if normalized:
        frames = frames * n_fft ** -0.5
    freq = n_fft // 2 + 1
    pair = torch.stack([frames[:, :freq], frames[:, freq:]], -1)
    return pair.reshape(*batch_shape, freq, pair.shape[-2], 2)


def pair_abs(pair):
    return (pair[..., 0] * pair[..., 0] + pair[..., 1] * pair[..., 1]).sqrt()


def pair_real(pair):
    return pair[..., 0]


def pair_imag(pair):
    return pair[..., 1]


def pair_itself(pair):
    return pair


def conv_transpose_cropped(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """Transposed conv with ``output_padding`` as: full transposed conv (padding 0), crop ``padding`` at
    the start and ``padding - output_padding`` at the end (zero-pad if negative), then add the bias."""
    import torch
    import torch.nn.functional as F

    dims = x.dim() - 2
    conv = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[dims]
    as_list = lambda v: list(v) if isinstance(v, (list, tuple)) else [v] * dims  # noqa: E731
    pads, extra = as_list(padding), as_list(output_padding)
    y = conv(x, weight, None, stride, 0, 0, groups, dilation)
    for axis in range(dims):
        size = y.shape[2 + axis]
        end = size - pads[axis] + extra[axis]
        if end > size:
            widths = [0, 0] * (dims - 1 - axis) + [0, end - size]
            y = F.pad(y, widths)
        y = y.narrow(2 + axis, pads[axis], end - pads[axis])
    if bias is not None:
        y = y + bias.reshape(1, -1, *([1] * dims))
    return y


RANK_SORT_MAX = 2048   # above this, the n x n comparison of sort_by_rank costs too much: topk instead


def sort_by_rank(x, dim=-1, descending=False, stable=None):
    """``sort`` without a sort op: each element's rank is the count of elements that go before it (ties by
    position, i.e. a stable sort), and the inverse permutation comes from a rank == position mask. Exact
    and stable on every backend; O(n^2) compares, so rows longer than RANK_SORT_MAX use topk(k = n)
    (TFLite TOPK_V2: int32 indices; ties may then come out in another order)."""
    import torch

    n = x.shape[dim]
    if n > RANK_SORT_MAX:
        values, indices = torch.topk(x if descending else -x, n, dim=dim, largest=True, sorted=True)
        return (values if descending else -values), indices.to(torch.int64)
    v = x.movedim(dim, -1)
    mine, other = v.unsqueeze(-1), v.unsqueeze(-2)                    # x_i down, x_j across
    position = torch.arange(n, dtype=torch.int32)
    goes_first = (other > mine) if descending else (other < mine)
    tie_first = (other == mine) & (position.unsqueeze(0) < position.unsqueeze(-1))
    rank = (goes_first | tie_first).to(torch.int32).sum(-1)          # (..., n)
    at_rank = rank.unsqueeze(-1) == position                          # (..., i, r)
    order = (at_rank.to(torch.int32) * position.unsqueeze(-1)).sum(-2)  # index i holding rank r
    values = torch.where(at_rank, v.unsqueeze(-1), torch.zeros((), dtype=v.dtype)).sum(-2).to(v.dtype)
    return values.movedim(-1, dim), order.to(torch.int64).movedim(-1, dim)


def sort_stable_by_rank(x, *, stable=None, dim=-1, descending=False):
    return sort_by_rank(x, dim, descending)


def argsort_by_rank(x, dim=-1, descending=False, stable=None):
    return sort_by_rank(x, dim, descending)[1]


def argsort_stable_by_rank(x, *, stable=None, dim=-1, descending=False):
    return sort_by_rank(x, dim, descending)[1]


def scatter_add_onehot(base, dim, index, src):
    """``scatter_add`` as base + sum over a one-hot mask (compare + where + sum: no scatter op).
    Memory grows as index.numel() * base.size(dim): meant for post-processing sizes, not embeddings."""
    import torch

    dim = dim % base.dim()
    src = src[tuple(slice(0, s) for s in index.shape)]
    positions = torch.arange(base.shape[dim], dtype=index.dtype)
    hits = index.unsqueeze(-1) == positions                           # (..., m at dim, ..., n)
    added = torch.where(hits, src.unsqueeze(-1), torch.zeros((), dtype=src.dtype)).sum(dim)
    # no transpose of the index: LiteRT folds expand + transpose into a BROADCAST_TO that cannot run
    return base + added.movedim(-1, dim)


def conv_numeric_padding(x, weight, bias=None, stride=1, padding="valid", dilation=1, groups=1):
    """``conv(padding="valid"|"same")`` as explicit integer padding (asymmetric "same" pads first), the
    form torchax and converters that expect ints accept."""
    import torch.nn.functional as F

    dims = x.dim() - 2
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[dims]
    if padding == "valid":
        return conv(x, weight, bias, stride, 0, dilation, groups)
    dil = list(dilation) if isinstance(dilation, (list, tuple)) else [dilation] * dims
    totals = [d * (k - 1) for d, k in zip(dil, weight.shape[2:])]
    if all(t % 2 == 0 for t in totals):
        return conv(x, weight, bias, stride, [t // 2 for t in totals], dilation, groups)
    widths = []
    for total in reversed(totals):
        widths += [total // 2, total - total // 2]
    return conv(F.pad(x, widths), weight, bias, stride, 0, dilation, groups)


# ---------------------------------------------------------------------------------------------------------
# Node rewriters
# ---------------------------------------------------------------------------------------------------------

def swap_to(function: Callable, when: Callable | None = None) -> Callable:
    """A rewriter that points the node at ``function`` (optionally only when ``when(node)`` holds)."""

    def rewrite(_gm, node) -> bool:
        if when is not None and not when(node):
            return False
        node.target = function
        return True

    return rewrite


def _has_output_padding(node) -> bool:
    value = node.kwargs.get("output_padding", node.args[5] if len(node.args) > 5 else 0)
    return any(value) if isinstance(value, (list, tuple)) else bool(value)


def _scatter_shapes_fit(node) -> bool:
    """The one-hot form needs index and base to agree on every dim but ``dim``."""
    base, dim, index = (node.args[i].meta.get("val") if hasattr(node.args[i], "meta") else node.args[i] for i in range(3))
    if base is None or index is None:
        return False
    dim = dim % base.dim()
    return all(index.shape[i] == base.shape[i] for i in range(base.dim()) if i != dim)


COMPLEX_USERS = {
    "aten.abs.default": pair_abs,
    "aten.view_as_real.default": pair_itself,
    "aten.real.default": pair_real,
    "aten.imag.default": pair_imag,
}


def real_dft(_gm, node) -> bool:
    """Replace a complex-producing FFT node with a real (real, imag) pair when every user can take the
    pair: abs, view_as_real, real, imag. Anything else (angle, complex mul) keeps the complex op and its error."""
    users = list(node.users)
    plan = []
    for user in users:
        name = str(user.target)
        if name in COMPLEX_USERS:
            plan.append((user, COMPLEX_USERS[name]))
        else:
            return False
    node.target = stft_pair if str(node.target).startswith("aten.stft") else rfft_pair
    for user, function in plan:
        user.target = function
    return True


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


NATIVE_NAMESPACES = ("aten", "prims", "quantized_decomposed", "quantized", "higher_order")


REWRITES: dict[str, Rewrite] = {r.name: r for r in [
    Rewrite("histc_onehot", "aten.histc has no lowering (MoE token counts): compare-with-bin + sum",
            ("aten.histc.default",), swap_to(histc_onehot)),
    Rewrite("real_dft", "complex intermediates (stft/rfft -> abs): real DFT as matmul / strided conv1d",
            ("aten.stft.default", "aten.fft_rfft.default"), real_dft),
    Rewrite("conv_transpose_output_padding", "ConvTranspose with output_padding fails to legalize: "
            "transposed conv without padding + crop + bias",
            ("aten.conv_transpose1d.default", "aten.conv_transpose2d.input", "aten.conv_transpose3d.input"),
            swap_to(conv_transpose_cropped, when=_has_output_padding)),
    Rewrite("sort_by_rank", "sort/argsort lower to an int64 comparator the converter rejects: stable rank by "
            "compare + count", ("aten.sort.default", "aten.sort.stable", "aten.argsort.default", "aten.argsort.stable"),
            lambda gm, node: swap_to({"aten.sort.default": sort_by_rank, "aten.sort.stable": sort_stable_by_rank,
                                      "aten.argsort.default": argsort_by_rank,
                                      "aten.argsort.stable": argsort_stable_by_rank}[str(node.target)])(gm, node)),
    Rewrite("scatter_add_onehot", "scatter_add converts to STABLEHLO_SCATTER, which the runtime cannot run: "
            "one-hot compare + sum", ("aten.scatter_add.default",), swap_to(scatter_add_onehot, when=_scatter_shapes_fit)),
    Rewrite("conv_padding_numeric", "Conv(padding='valid'/'same') breaks torchax ('immutable_list' ...): "
            "explicit integer padding", ("aten.conv1d.padding", "aten.conv2d.padding", "aten.conv3d.padding"),
            swap_to(conv_numeric_padding)),
    Rewrite("inline_custom_ops", "torch.library.custom_op is opaque to every converter: inline its Python body",
            (), inline_custom_op),
]}


# ---------------------------------------------------------------------------------------------------------
# Applying passes to a program
# ---------------------------------------------------------------------------------------------------------

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


def apply_rewrites(program, example_inputs: tuple, names, decompositions: dict | None = None) -> Rewritten:
    """Apply the named passes that are needed (plus the user's --decompositions) and re-export once."""
    gm, example, applied, notes, precision = None, tuple(example_inputs), [], [], None
    if "upcast_fp32" in names and low_precision_of(program):
        precision = low_precision_of(program)
        gm, example = upcast_fp32(program.module(), example)
        applied.append("upcast_fp32")
        notes.append(f"model is {precision}: converted in float32; parity is judged against the {precision} "
                     f"eager model with the {precision} budget")
    if decompositions:
        gm = gm or program.module()
        if _apply_decompositions(gm, decompositions):
            applied.append("user_decompositions")
    for name in names:
        rewrite = REWRITES.get(name)
        if rewrite is None or not any(_matches(rewrite, node) for node in program.graph.nodes):
            continue  # unlifting a big program costs seconds: only when a pass has work
        gm = gm or program.module()
        changed = [rewrite.rewrite(gm, node) for node in list(gm.graph.nodes) if _matches(rewrite, node)]
        if any(changed):
            applied.append(name)
    if not applied:
        return Rewritten(program, example, [], [])
    gm.recompile()
    try:
        new_program = reexport(gm, example)
    except Exception as exc:
        raise RewriteFailed(f"re-export after rewrites {', '.join(applied)} failed: {exc}") from exc
    return Rewritten(new_program, example, applied, notes, precision)


def reexport(gm, example: tuple):
    """``torch.export`` of the rewritten GraphModule (already in inference form: no .eval() on it)."""
    import torch

    with torch.no_grad():
        return torch.export.export(gm, tuple(example), strict=False)


def _apply_decompositions(gm, decompositions: dict) -> bool:
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


# ---------------------------------------------------------------------------------------------------------
# Precision: bf16/fp16 models are converted in fp32
# ---------------------------------------------------------------------------------------------------------

def low_precision_of(program) -> str | None:
    """"bf16"/"fp16" when the program's weights or float inputs are half precision, else None."""
    import torch

    names = {torch.bfloat16: "bf16", torch.float16: "fp16"}
    tensors = list(program.state_dict.values()) + list(program.constants.values())
    vals = [n.meta.get("val") for n in program.graph.nodes if n.op == "placeholder"]
    for t in tensors + vals:
        if isinstance(t, torch.Tensor) and t.dtype in names:
            return names[t.dtype]
    return None


def upcast_fp32(gm, example: tuple):
    """Every half-precision weight, input and dtype argument becomes float32. Fixes 'unsupported ScalarType
    BFloat16' and fp16 LayerNorm element-type errors; the artifact is more precise than the model."""
    import torch

    low = (torch.bfloat16, torch.float16)
    for module in gm.modules():  # new tensors: the user's eager model (the reference) keeps its own
        for key, value in list(module._parameters.items()):
            if value is not None and value.dtype in low:
                module._parameters[key] = torch.nn.Parameter(value.detach().float(), requires_grad=False)
        for key, value in list(module._buffers.items()):
            if value is not None and value.dtype in low:
                module._buffers[key] = value.float()
        for key, value in list(vars(module).items()):
            if isinstance(value, torch.Tensor) and value.dtype in low:
                setattr(module, key, value.float())
    swap = lambda v: torch.float32 if v in low else v  # noqa: E731
    for node in gm.graph.nodes:
        node.args = tuple(swap(a) for a in node.args)
        node.kwargs = {k: swap(v) for k, v in node.kwargs.items()}
    gm.recompile()
    return gm, tuple(x.float() if x.dtype in low else x for x in example)


# ---------------------------------------------------------------------------------------------------------
# Module passes (before the one export) and user decompositions
# ---------------------------------------------------------------------------------------------------------

def batched_experts(module) -> bool:
    """Hugging Face MoE layers default to grouped-mm experts: ``aten.histc`` for token counts and the
    ``transformers::grouped_mm_fallback`` custom op with a data-dependent loop (fails on LiteRT, TPU and
    ONNX). The "batched_mm" experts implementation is the same math with static shapes; "eager" is not
    exportable (data-dependent expert loop)."""
    experts = [m for m in module.modules() if hasattr(m, "_is_expert_parallel") and hasattr(m, "config")]
    if not experts or all(m.config._experts_implementation == "batched_mm" for m in experts):
        return False
    owner = next((m for m in module.modules() if hasattr(m, "set_experts_implementation")), None)
    if owner is None:
        return False
    try:
        owner.set_experts_implementation("batched_mm")
    except Exception:  # an experts class that does not offer batched_mm: leave it, histc_onehot may still help
        return False
    return all(m.config._experts_implementation == "batched_mm" for m in experts)


MODULE_REWRITES: dict[str, Callable] = {"batched_experts": batched_experts}


def apply_module_rewrites(module) -> list[str]:
    """Module passes are exact re-selections of an implementation, so they run for every target."""
    if module is None:
        return []
    return [name for name, rewrite in MODULE_REWRITES.items() if rewrite(module)]


def load_decompositions(path_text: str) -> dict:
    """``--decompositions file.py``: the file defines ``DECOMPOSITIONS = {"ns::op": fn, ...}``; each fn takes
    the op's arguments and is written in traceable torch code."""
    from edgeport.model_source import _import_file

    if not path_text.endswith(".py"):
        raise UsageError(f"--decompositions {path_text!r}: expected a .py file defining DECOMPOSITIONS")
    module = _import_file(path_text)
    table = getattr(module, "DECOMPOSITIONS", None)
    if not isinstance(table, dict) or not all(callable(f) for f in table.values()):
        raise UsageError(f"{path_text} must define DECOMPOSITIONS = {{'namespace::op': function, ...}}")
    return {(k if isinstance(k, str) else op_key(k)): f for k, f in table.items()}


def describe_custom_ops(program) -> list[str]:
    """One line per custom op left in a program: its name, where the model calls it, and the fix."""
    lines = []
    for node in program.graph.nodes:
        if _foreign_op(node):
            name = op_key(node.target)
            where = _call_site(node)
            lines.append(f"custom op {name} (called at {where}) is opaque to converters; register a decomposition: "
                         f"--decompositions my_decomps.py with DECOMPOSITIONS = {{'{name}': fn}} (fn in traceable torch)")
    return lines


def _foreign_op(node) -> bool:
    target = node.target
    return node.op == "call_function" and hasattr(target, "namespace") and target.namespace not in NATIVE_NAMESPACES


def _call_site(node) -> str:
    trace = (node.meta.get("stack_trace") or "").strip().splitlines()
    frames = [ln.strip() for ln in trace if ln.strip().startswith("File ")]
    return frames[-1].removeprefix("File ") if frames else "unknown location"


# An op listed in a target's ``refuses`` is refused only when its condition holds (default: always).
REFUSED_WHEN = {
    "aten.conv_transpose1d.default": _has_output_padding,
    "aten.conv_transpose2d.input": _has_output_padding,
    "aten.conv_transpose3d.input": _has_output_padding,
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
        elif _foreign_op(node):
            add(op_key(node.target), f"custom op (called at {_call_site(node)})")
    precision = low_precision_of(program)
    dtype = {"bf16": "bfloat16", "fp16": "float16"}.get(precision)
    if dtype in table:
        add(dtype, table[dtype])
    return found
