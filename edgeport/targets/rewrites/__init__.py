"""Rewrites: small named passes that turn a program a converter refuses into an equivalent one it accepts.

Why a table and not fixes inside each target: the same failure (an op a backend has no lowering for, a
complex tensor, a custom op) shows up on several targets, and the fix is the same graph change. Each
target declares the passes it needs (``Target.rewrites``, checked against this table at import); a pass
runs only when its ops are in the graph, and every pass that changed the program is recorded in the
report row. One module per family; each registers its passes where it defines them
(:mod:`edgeport.targets.rewrites.registry`). Each replacement is exact math unless its docstring says
otherwise; parity against the user's own eager model still judges every artifact.
"""

from edgeport.targets.rewrites import attention, cache_write, complex, conv, custom_ops, dft, experts, functional_cache, grouped_attention, histc, matmul_attention, precision, reduce, scatter, sort  # noqa: F401
from edgeport.targets.rewrites.apply import REFUSED_WHEN, Rewritten, apply_rewrites, pending, refused_ops, rewrite_for_target
from edgeport.targets.rewrites.custom_ops import describe_custom_ops, load_decompositions
from edgeport.targets.rewrites.experts import apply_module_rewrites
from edgeport.targets.rewrites.precision import low_precision_of
from edgeport.targets.rewrites.registry import REWRITES, PROGRAM_PASSES, Rewrite, RewriteFailed, check_known

__all__ = ["REFUSED_WHEN", "REWRITES", "PROGRAM_PASSES", "Rewrite", "RewriteFailed", "Rewritten", "apply_module_rewrites",
           "apply_rewrites", "check_known", "describe_custom_ops", "load_decompositions", "low_precision_of",
           "pending", "refused_ops", "rewrite_for_target"]
