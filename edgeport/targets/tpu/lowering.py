"""The exported program through torchax's aten -> jax lowering: one jax function ``fn(weights, *inputs)``
whose I/O follows the program's signature, the weights converted once per storage, and the bf16 variant's
dtypes kept where torch keeps them (see :func:`_same_dtypes`, :func:`_boundary_dtypes`). Split from
:mod:`.target` so the target module keeps to converting, compiling and reporting.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from edgeport.core.memory import storage_key
from edgeport.diagnostics import first_line, user_source, with_location
from edgeport.targets._jax import keep_torch_accelerator_honest


class LoweringError(RuntimeError):
    """torchax could not lower one node: names the aten op and the user's source line."""


@dataclass
class Lowered:
    fn: object                  # fn(weights: dict, *inputs) -> tuple of user outputs
    weights: dict               # name -> jax array, in the exported program's state
    input_avals: list           # jax.ShapeDtypeStruct per user input, symbolic dims where the program has them
    compile_avals: list         # the same at the example shapes (a TPU executable needs concrete shapes)
    dynamic_dims: dict          # input name -> [dims kept symbolic]
    tied: dict                  # state name -> the name in ``weights`` holding its tensor (tied parameters)


def lower_program(program, variant: str, input_names: list[str], example_inputs: tuple = (),
                  converted: dict | None = None, state_io: tuple[str, ...] = ()) -> Lowered:
    """The program through torchax's aten -> jax lowering, wrapped so I/O follows the program's signature.
    ``state_io``: names of floating inputs and outputs that cross the boundary in the variant's compute dtype
    (bf16) instead of the program's (a KV cache: state kept on the device between steps; see
    :func:`_boundary_dtypes`). ``converted``: a dict kept across the programs of one model (prefill, decode):
    each weight storage is converted to a jax array once (torchax's ``t2j`` copies a mapped weight: its offset is not 64-byte
    aligned), not once per program (Qwen3-0.6B held 2.4 GB more per signature); with it, the programs'
    tensors are made to view the copies (:mod:`.share`), so the mapped weights are not held beside them."""
    import jax.numpy as jnp
    import torchax
    from torch.export.graph_signature import InputKind, OutputKind
    from torchax import decompositions
    from torchax.ops import mappings

    from edgeport.targets.tpu.share import view_converted

    keep_torch_accelerator_honest()
    torchax.default_env()  # builds torchax's op table (the interpreter looks ops up there)
    original = {**program.state_dict, **program.constants}
    with warnings.catch_warnings():  # torch's own pytree deprecation noise while copying the program
        warnings.filterwarnings("ignore", category=FutureWarning, message=".*LeafSpec.*")
        program = program.run_decompositions(_keeping_linear()).run_decompositions(decompositions.DECOMPOSITIONS)
    signature = program.graph_signature
    state = {**program.state_dict, **program.constants}
    state_names = [s.target for s in signature.input_specs if s.kind != InputKind.USER_INPUT]
    user_positions = [i for i, s in enumerate(signature.output_specs) if s.kind == OutputKind.USER_OUTPUT]
    tied = tied_names(state, state_names)
    compute = jnp.bfloat16 if variant == "bf16" else None
    cache = {} if converted is None else converted
    weights = {name: _to_jax(state[name], cache, compute) for name in state_names if name not in tied}
    if converted is not None:  # the programs' tensors read the copies from now on: the weights held once
        view_converted([original, state], state_names, weights, tied, cache, compute)
    interpreter_class = _node_reporting_interpreter()
    out_dtypes = [jnp.dtype(mappings.t2j_dtype(_output_dtype(program, i))) for i in user_positions]
    input_avals, out_dtypes = _boundary_dtypes(program, _input_avals(program), input_names, out_dtypes, compute, state_io)
    compile_avals = [_concrete(a, x) for a, x in zip(input_avals, example_inputs)] if example_inputs else input_avals

    def fn(weights: dict, *inputs):
        if compute is not None:
            inputs = [x.astype(compute) if jnp.issubdtype(x.dtype, jnp.floating) else x for x in inputs]
        state_args = [weights[tied.get(n, n)] for n in state_names]
        results = interpreter_class(program.graph_module).run(*state_args, *inputs, enable_io_processing=False)
        return tuple(results[i].astype(out_dtypes[k]) for k, i in enumerate(user_positions))

    dynamic = {name: [d for d, size in enumerate(a.shape) if not isinstance(size, int)]
               for name, a in zip(input_names, input_avals)}
    return Lowered(fn, weights, input_avals, compile_avals, {k: v for k, v in dynamic.items() if v}, tied)


def _boundary_dtypes(program, input_avals: list, input_names: list[str], out_dtypes: list, compute, state_io) -> tuple:
    """Input avals and output dtypes with the ``state_io`` names' floating ones in ``compute``.

    Why: the bf16 variant computes in bf16, but a float32 cache at the boundary made every decode step read the
    whole cache in f32, convert it, and write all of it back in f32 (the output cast), twice the bytes of a bf16
    cache and a full rewrite where a server updates one slot in place (bench/TPU_COST.md, "Where the compiler's
    bytes went"). In bf16 at both ends, the donated cache aliases its output and stays bf16 on the device; a
    float32 feed is cast on the way in, as any feed is, and the values are the same (bf16 -> f32 -> bf16 is exact)."""
    import jax

    names = set(state_io) if compute is not None else set()
    if not names:
        return input_avals, out_dtypes
    floating = lambda dtype: jax.numpy.issubdtype(dtype, jax.numpy.floating)  # noqa: E731
    avals = [jax.ShapeDtypeStruct(a.shape, compute) if n in names and floating(a.dtype) else a
             for n, a in zip(input_names, input_avals)]
    outputs = list(program.call_spec.out_spec.context or [])
    dtypes = [compute if k < len(outputs) and outputs[k] in names and floating(d) else d for k, d in enumerate(out_dtypes)]
    return avals, dtypes


def tied_names(state: dict, names: list[str]) -> dict:
    """Names of the program's state that are the same tensor as an earlier name (same storage, offset,
    shape, strides and dtype: a head tied to the embedding) -> that earlier name. The jax program takes
    such a tensor once, so the weights file, a loaded artifact and the compiler's HBM count hold it once
    (Qwen3-0.6B's 0.62 GB table was written, mapped and compiled twice; bench/LARGE_GENERATION.md)."""
    first, tied = {}, {}
    for name in names:
        key = storage_key(state[name])
        if key is not None:
            tied[name] = first.setdefault(key, name)
    return {name: other for name, other in tied.items() if other != name}


def _to_jax(t, cache: dict, compute=None):
    """``t`` as a jax array (floating weights cast to ``compute`` when given), converted once per storage while
    ``cache`` lives; the cache keeps the tensor too, so a freed temporary's address can not come back as
    another tensor's key."""
    import jax.numpy as jnp
    from torchax.ops import mappings

    def convert():
        array = mappings.t2j(t.detach())
        return array.astype(compute) if compute is not None and jnp.issubdtype(array.dtype, jnp.floating) else array

    key = storage_key(t)
    if key is None:
        return convert()
    key = (*key, compute)
    if key not in cache:
        cache[key] = (t, convert())
    return cache[key][1]


def _input_avals(program) -> list:
    """User-input avals; a torch symbolic dim becomes a jax symbolic dim (torchax maps the constraints).
    64-bit dtypes follow jax's setting (int64 ids become int32 unless x64 is on), as the artifact will."""
    import jax
    from torchax.export import extract_avals

    return [jax.ShapeDtypeStruct(a.shape, jax.dtypes.canonicalize_dtype(a.dtype)) for a in extract_avals(program)]


def _concrete(aval, example):
    import jax

    return jax.ShapeDtypeStruct(tuple(int(d) for d in example.shape), aval.dtype)


def _output_dtype(program, index: int):
    output_node = next(n for n in program.graph.nodes if n.op == "output")
    return output_node.args[0][index].meta["val"].dtype


def _node_reporting_interpreter():
    """torchax's interpreter, but a failing node raises :class:`LoweringError` with the aten op and the
    FX node's source location instead of a bare assertion from deep inside torchax."""
    from torchax.export import JaxInterpreter

    class NodeReportingInterpreter(JaxInterpreter):
        def call_function(self, target, args, kwargs):
            args = _same_dtypes(target, args)
            if _is_linear(target, args, kwargs):
                return _linear(*args)
            return super().call_function(target, args, kwargs)

        def run_node(self, node):
            try:
                return super().run_node(node)
            except LoweringError:
                raise
            except Exception as exc:
                raise LoweringError(describe_node_failure(node, exc)) from exc

    return NodeReportingInterpreter


def _same_dtypes(target, args: tuple) -> tuple:
    """The operands torch requires to share a dtype, made to share one again after the bf16 variant's cast.

    The exported program had them equal (torch refuses an ``index_put`` or a ``bmm`` of mixed dtypes); under the
    bf16 variant, values computed from a float32 rotary table (queries, new keys) meet bf16 weights and a bf16
    KV cache, and torchax then promotes the bf16 side to float32. For the KV cache that is the whole cache per
    step: converted to float32, one slot written and converted back (``index_put``), or converted and broadcast
    over the query heads in float32 for attention (``bmm``), where torch writes one slot in place and a bf16
    model multiplies in bf16 (bench/TPU_COST.md, "Where the compiler's bytes went"). So: an indexed write takes
    the destination's dtype, as torch does; a matmul of two float dtypes runs in the narrower one, the
    variant's compute dtype, as the same model exported in bf16 would."""
    import torch

    aten = torch.ops.aten
    if target in (aten.index_put.default, aten.index_put_.default, aten.index_copy.default, aten.index_copy_.default):
        position = 2 if "index_put" in target.name() else 3
        if len(args) > position and _floats(args[0], args[position]) and args[0].dtype != args[position].dtype:
            return (*args[:position], args[position].astype(args[0].dtype), *args[position + 1:])
    elif target in (aten.mm.default, aten.bmm.default, aten.matmul.default) and len(args) >= 2:
        a, b = args[:2]
        if _floats(a, b) and a.dtype != b.dtype:
            narrow = min((a.dtype, b.dtype), key=lambda d: d.itemsize)
            return (a.astype(narrow), b.astype(narrow), *args[2:])
    return args


def _keeping_linear():
    """torch.export's default decompositions but ``aten.linear``, which :func:`_linear` lowers whole."""
    import torch

    table = torch.export.default_decompositions()
    table.pop(torch.ops.aten.linear.default, None)
    return table


def _is_linear(target, args: tuple, kwargs: dict) -> bool:
    import torch

    return target is torch.ops.aten.linear.default and not kwargs and 2 <= len(args) <= 3 and args[1].ndim == 2


def _linear(x, weight, bias=None):
    """``x @ weight.T (+ bias)`` as one ``dot_general``, in the form XLA:CPU runs fastest for its shapes.

    torchax lowers ``aten.linear`` as ``x @ transpose(weight)``. TPU's layout pass may absorb the transpose, but
    XLA:CPU, which runs the artifact's parity and latency here, materializes it: every weight is copied
    transposed on every call (a ``transpose_copy_fusion`` per linear in the compiled decode), so a 1B-class decode
    step moved the weights three times over and ran ~3x slower than the bytes it has to read. Contracting
    ``weight``'s dim 1 directly computes the same product with nothing to copy on either backend.

    A bf16 (any non-f32) weight times one row (decode) is the exception: :func:`_row_times_weight`."""
    import math

    import jax
    import jax.numpy as jnp

    if math.prod(x.shape[:-1]) == 1 and weight.dtype != jnp.float32:
        out = _row_times_weight(x.reshape(1, x.shape[-1]), weight).reshape(*x.shape[:-1], weight.shape[0])
    else:
        out = jax.lax.dot_general(x, weight, (((x.ndim - 1,), (1,)), ((), ())))
    return out if bias is None else out + bias


# XLA:CPU fuses a matrix-vector dot into one loop over the matrix only while the vector, as f32, is under
# 16 KiB (its CPU fusion pass's threshold): rows of up to 2048 elements
CPU_FUSED_ROW = 2048


def _row_times_weight(row, weight):
    """``row (1, K) @ weight.T`` for a non-f32 ``weight`` (N, K), written as XLA:CPU runs it without converting
    the whole weight to f32 first.

    XLA:CPU has no bf16 GEMM: a dot on a bf16 weight contracting its dim 1 becomes a conversion of the whole
    weight to f32 (``wrapped_convert``) and an f32 dot, 28 ms for 8192 x 2048 where fp32 takes 2.3. A 2-D row
    times the transposed weight is emitted as one loop reading the bf16 weight in place (0.8 ms), if the row is
    at most :data:`CPU_FUSED_ROW` long. A longer row (an MLP's down projection: K = 8192 at 1B; 32 ms as a dot)
    is, on CPU only (``platform_dependent``), each weight row times the row, summed in f32: one reduction
    over the bf16 weight in place (3.1 ms), the sum a dot computes in another order. TPU runs the one dot.
    ``bench/tpu_bf16_linear.py``."""
    import jax
    import jax.numpy as jnp

    def whole(row, weight):
        return jax.lax.dot_general(row, weight.T, (((1,), (0,)), ((), ())))

    def reduced(row, weight):
        dtype = jax.eval_shape(whole, row, weight).dtype
        products = weight.astype(jnp.float32) * row.astype(jnp.float32)
        return jnp.sum(products, axis=-1)[None, :].astype(dtype)

    if row.shape[1] <= CPU_FUSED_ROW:
        return whole(row, weight)
    return jax.lax.platform_dependent(row, weight, cpu=reduced, default=whole)


def _floats(*arrays) -> bool:
    import jax.numpy as jnp

    return all(getattr(a, "dtype", None) is not None and jnp.issubdtype(a.dtype, jnp.floating) for a in arrays)


def describe_node_failure(node, exc: BaseException) -> str:
    op = getattr(node.target, "name", lambda: str(node.target))() if node.op == "call_function" else node.op
    message = f"torchax cannot lower {op} (node {node.name}): {first_line(exc, 260)}"
    return with_location(message, user_source(node.meta.get("stack_trace")))
