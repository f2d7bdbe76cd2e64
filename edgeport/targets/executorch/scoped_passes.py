"""XNNPACK's passes run only on the partitions they can change.

XNNPACK's ``preprocess`` runs its 17 passes over every partition it lowers, and each pass ends by re-tracing
the partition's whole graph (``ExportPass.call``) whether it changed anything or not. Eight of them act
only on ops a language model has few or none of (batch norm, 1-D convolution, PReLU, a ReLU or hardtanh to
fuse, a max with indices, a concatenation, a decomposed bilinear upsample or attention): at Llama-3.2-1B,
with 38 partitions over its two methods, the first five alone were 26 s of a profiled dynamic-int8 lowering's
264 (16 of fp32's 182), every one of them a re-trace that changed nothing.

:data:`ACTS_ON` says, for each of those passes, the ops its own code looks for (read from ExecuTorch 1.5.1's
source); a partition with none of them is not given to the pass. For the two that match whole subgraphs
(``SubgraphMatcher`` over the decomposed graphs of an upsample or of ``scaled_dot_product_attention``), a
pattern can only match where every op it has is present: without one op of each, the pass is skipped.
Every other pass runs as before; a pass that meets its ops runs as before too, so a model's partitions are
lowered exactly as ExecuTorch lowers them (tests/test_executorch_scoped_passes.py: the same ``.pte``, byte
for byte, with the passes' ops present and absent).
"""

from __future__ import annotations

import contextlib

BATCH_NORM = ("aten.native_batch_norm.default", "aten._native_batch_norm_legit_no_training.default")
# pass class name -> the edge ops (``__name__``) its ``call`` acts on; a string: the module whose graphs it matches
ACTS_ON = {
    "FuseBatchNormPass": BATCH_NORM,                     # conv/linear -> batch norm
    "DecomposeBatchNorm": BATCH_NORM,
    "Conv1dUnsqueezePass": ("aten.convolution.default",),
    "PReLUReshapePass": ("aten._prelu_kernel.default",),
    "FuseActivationPass": ("aten.relu.default", "aten.hardtanh.default"),
    "RemoveGetItemPass": ("aten.max_pool2d_with_indices.default", "aten.max.dim"),
    "DecomposeConcatenate": ("aten.cat.default",),       # one of more than 5 inputs, split
    "ConvertToUpsampleBilinear2d": "bilinear_2d",
    "ConvertToSDPAPass": "sdpa",
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
