"""XNNPACK's passes run only on the partitions they can change, and ExecuTorch's decompositions only where there
is something to decompose (:func:`redundant_decompositions_skipped`).

XNNPACK's ``preprocess`` runs its 17 passes over every partition it lowers, and each pass ends by re-tracing
the partition's whole graph (``ExportPass.call``) whether it changed anything or not. Thirteen of them act
only on what a language model has little or none of (batch norm, 1-D convolution, PReLU, a ReLU or hardtanh
to fuse, a max with indices, a concatenation of more than five, a decomposed bilinear upsample or attention,
dim-order ops, a copy, a pad, a q/dq reading a node with custom meta): at Llama-3.2-1B, with 38 partitions over
its two methods, the first five alone were 26 s of a profiled dynamic-int8 lowering's 264 (16 of fp32's 182),
every one of them a re-trace that changed nothing.

:data:`ACTS_ON` says, for each of those passes, the ops its own code looks for, or its own condition (read from
ExecuTorch 1.5.1's source); a partition without them is not given to the pass. For the two that match whole subgraphs
(``SubgraphMatcher`` over the decomposed graphs of an upsample or of ``scaled_dot_product_attention``), a
pattern can only match where every op it has is present: without one op of each, the pass is skipped.
Every other pass runs as before; a pass that meets its ops runs as before too, so a model's partitions are
lowered exactly as ExecuTorch lowers them (tests/test_executorch_scoped_passes.py: the same ``.pte``, byte
for byte, with the passes' ops present and absent).
"""

from __future__ import annotations

import contextlib

BATCH_NORM = ("aten.native_batch_norm.default", "aten._native_batch_norm_legit_no_training.default")
DIM_ORDER = ("dim_order_ops._to_dim_order_copy.default", "dim_order_ops._empty_dim_order.default",
             "dim_order_ops._clone_dim_order.default")


def long_concatenation(graph_module) -> bool:
    """Whether a concatenation has more than 5 inputs (XNNPACK's limit; the pass splits those)."""
    return any(getattr(n.target, "__name__", "") == "aten.cat.default" and len(n.args[0]) > 5
               for n in graph_module.graph.nodes)


def custom_meta_to_copy(graph_module) -> bool:
    """Whether a quantize or dequantize node reads a node with ``meta["custom"]``, which the pass copies to it
    (the tied table's ``.ptd`` tag is one: :mod:`.tied`)."""
    import torch
    from executorch.backends.xnnpack.utils.quant_utils import is_dequant, is_quant

    return any((is_quant(n) or is_dequant(n)) and n.args and isinstance(n.args[0], torch.fx.Node)
               and "custom" in n.args[0].meta for n in graph_module.graph.nodes)


# pass class name -> the edge ops (``__name__``) its ``call`` acts on; a string: the module whose graphs it matches;
# a function: whether a graph holds what the pass changes (the pass's own condition, narrower than an op)
ACTS_ON = {
    "FuseBatchNormPass": BATCH_NORM,                     # conv/linear -> batch norm
    "DecomposeBatchNorm": BATCH_NORM,
    "Conv1dUnsqueezePass": ("aten.convolution.default",),
    "PReLUReshapePass": ("aten._prelu_kernel.default",),
    "FuseActivationPass": ("aten.relu.default", "aten.hardtanh.default"),
    "RemoveGetItemPass": ("aten.max_pool2d_with_indices.default", "aten.max.dim"),
    "DecomposeConcatenate": long_concatenation,
    "ConvertToUpsampleBilinear2d": "bilinear_2d",
    "ConvertToSDPAPass": "sdpa",
    "DimOrderOpsRevertPass": DIM_ORDER,                  # dim-order ops -> their memory-format ops
    "RemoveRedundantCopyPass": ("aten._to_copy.default",),  # a to_copy undoing a to_copy
    "InsertPadQDQPass": ("aten.constant_pad_nd.default",),  # a q/dq pair after a pad between q/dq
    "PropagateCustomMetaPass": custom_meta_to_copy,
}


def op_names(graph_module) -> set[str]:
    return {getattr(n.target, "__name__", str(n.target)) for n in graph_module.graph.nodes if n.op == "call_function"}


def patterns_of(module: str) -> list[set[str]]:
    """The ops of each graph a matching pass looks for (every op of one is needed for a match)."""
    import importlib

    graphs = importlib.import_module(f"executorch.backends.xnnpack.partition.graphs.{module}").get_graphs()
    return [op_names(g) for g in graphs]


def inert(pass_, graph_module, patterns) -> bool:
    """Whether ``pass_`` (an instance) can change nothing in ``graph_module``; ``patterns``: :func:`patterns_of`."""
    acts_on = ACTS_ON.get(type(pass_).__name__)
    if acts_on is None:
        return False
    if callable(acts_on):
        return not acts_on(graph_module)
    present = op_names(graph_module)
    if isinstance(acts_on, str):
        return not any(pattern <= present for pattern in patterns(acts_on))
    return not present.intersection(acts_on)


@contextlib.contextmanager
def inert_passes_skipped():
    """While lowering, XNNPACK's pass manager skips a pass of :data:`ACTS_ON` on a partition without its ops."""
    import functools

    from executorch.backends.xnnpack import _passes

    original = _passes._transform
    patterns = functools.lru_cache(maxsize=None)(patterns_of)

    def transform(program, *passes, **kwargs):
        if len(passes) == 1 and inert(passes[0], program.graph_module, patterns):
            return program
        return original(program, *passes, **kwargs)

    _passes._transform = transform
    try:
        yield
    finally:
        _passes._transform = original


@contextlib.contextmanager
def redundant_decompositions_skipped():
    """While lowering, a ``run_decompositions(table)`` of a program this lowering already decomposed is skipped
    when no op of ``table`` is in its graph.

    For a partitioner that checks its ops (XNNPACK does), ``to_edge_transform_and_lower`` decomposes each
    method three times: functionalized, decomposed but for the partitioner's ops, then, with the ops it takes
    renamed out of the table's reach, decomposed again for the ops it refused. When it refused none (a language
    model's linears are all taken), the third has nothing to decompose yet re-traces the whole method: 1-2 s a
    method at two layers of Llama-3.2-1B's shape. ExecuTorch skips exactly this case itself on its other path
    (a partitioner without an op check): "safe to skip when none of those targets occur in the graph"."""
    import weakref

    from executorch.exir.program._program import contains_any_call_fn_target_op
    from torch.export import ExportedProgram

    original = ExportedProgram.run_decompositions
    decomposed = weakref.WeakSet()

    def run_decompositions(self, decomp_table=None, *args, **kwargs):
        if self in decomposed and decomp_table and not contains_any_call_fn_target_op(self.graph_module, decomp_table):
            return self
        program = original(self, decomp_table, *args, **kwargs)
        decomposed.add(program)
        return program

    ExportedProgram.run_decompositions = run_decompositions
    try:
        yield
    finally:
        ExportedProgram.run_decompositions = original
