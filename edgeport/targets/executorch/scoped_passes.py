"""XNNPACK's passes run only on the partitions they can change.

XNNPACK's ``preprocess`` runs its 17 passes over every partition it lowers, and each pass ends by re-tracing
the partition's whole graph (``ExportPass.call``) whether it changed anything or not. Five of them act
only on ops a language model has none of (batch norm, 1-D convolution, PReLU, a decomposed bilinear
upsample): at Llama-3.2-1B, with 38 partitions over its two methods, they were 26 s of a profiled
dynamic-int8 lowering's 264 (16 of fp32's 182), every one of them a re-trace that changed nothing.

:data:`ACTS_ON` says, for each of those passes, the ops its own code looks for (read from ExecuTorch 1.5.1's
source); a partition with none of them is not given to the pass. Every other pass runs as before. A pass
that meets one of its ops runs as before too, so a CNN's partitions are lowered exactly as ExecuTorch
lowers them (tests/test_executorch_scoped_passes.py: the same ``.pte``, byte for byte, with the five
passes' ops present and absent).
"""

from __future__ import annotations

import contextlib

BATCH_NORM = ("aten.native_batch_norm.default", "aten._native_batch_norm_legit_no_training.default")
# pass class name -> the edge ops (``__name__``) its ``call`` acts on; None: the ops of its patterns
ACTS_ON = {
    "FuseBatchNormPass": BATCH_NORM,                     # conv/linear -> batch norm
    "DecomposeBatchNorm": BATCH_NORM,
    "Conv1dUnsqueezePass": ("aten.convolution.default",),
    "PReLUReshapePass": ("aten._prelu_kernel.default",),
    "ConvertToUpsampleBilinear2d": None,                 # a SubgraphMatcher over bilinear_2d's graphs
}


def op_names(graph_module) -> set[str]:
    return {getattr(n.target, "__name__", str(n.target)) for n in graph_module.graph.nodes if n.op == "call_function"}


def upsample_patterns() -> list[set[str]]:
    """The ops of each decomposed bilinear upsample the pass matches (every op of one is needed for a match)."""
    from executorch.backends.xnnpack.partition.graphs import bilinear_2d

    return [op_names(g) for g in bilinear_2d.get_graphs_dict()]


def inert(pass_, graph_module, patterns) -> bool:
    """Whether ``pass_`` (an instance) can change nothing in ``graph_module``."""
    name = type(pass_).__name__
    if name not in ACTS_ON:
        return False
    present = op_names(graph_module)
    if ACTS_ON[name] is None:
        return not any(pattern <= present for pattern in patterns())
    return not present.intersection(ACTS_ON[name])


@contextlib.contextmanager
def inert_passes_skipped():
    """While lowering, XNNPACK's pass manager skips a pass of :data:`ACTS_ON` on a partition without its ops."""
    import functools

    from executorch.backends.xnnpack import _passes

    original = _passes._transform
    patterns = functools.lru_cache(maxsize=1)(upsample_patterns)

    def transform(program, *passes, **kwargs):
        if len(passes) == 1 and inert(passes[0], program.graph_module, patterns):
            return program
        return original(program, *passes, **kwargs)

    _passes._transform = transform
    try:
        yield
    finally:
        _passes._transform = original
