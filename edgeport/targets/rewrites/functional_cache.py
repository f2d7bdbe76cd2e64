"""A KV-cache write into a graph input, made functional: the program returns the written cache instead of
also writing it back into its input.

Why (ExecuTorch, bench/GENERATION.md "ExecuTorch decode"): transformers' static cache writes the new
keys/values with ``index_copy_`` into the cache tensors and bumps ``cumulative_length`` with ``add_``, in
place; in the flat decode program those tensors are inputs that the program also returns. ExecuTorch keeps
the in-place semantics: per cache tensor and per step, ``index_put`` into a copy of the whole cache, an
``aten.copy`` of that copy, and a ``copy_`` of it back into the input at the end, three full-cache copies
on the portable kernels, where the caller (edgeport's loop, an app) only reads the returned cache. With the
write made functional (``index_copy``, ``add``), one copy remains: the returned cache.

Only writes into a graph input that nothing reads afterwards, and whose earlier readers are not views of
it (a view read after the write would have seen it), are rewritten: the outputs are the same tensors.
"""

from __future__ import annotations

from edgeport.targets.rewrites.registry import node_rewrite

IN_PLACE = {"aten.index_copy_.default": "index_copy", "aten.add_.Tensor": "add"}
VIEWS = ("view", "reshape", "expand", "slice", "select", "transpose", "permute", "squeeze", "unsqueeze", "alias",
         "as_strided", "narrow", "unfold", "split", "chunk", "unbind", "diagonal", "t.default")


def _only_input_write(node) -> bool:
    """``node`` writes a graph input that no later node reads and no view of it aliases."""
    target = node.args[0]
    if getattr(target, "op", None) != "placeholder":
        return False
    order = {n: i for i, n in enumerate(node.graph.nodes)}
    for user in target.users:
        if user is node:
            continue
        if order[user] > order[node] or any(v in str(user.target) for v in VIEWS):
            return False
    return True


@node_rewrite("functional_cache_write", ops=tuple(IN_PLACE),
              fixes="an in-place KV-cache write into a program input is copied back into the input every step "
                    "(three full-cache copies per layer on ExecuTorch's portable kernels)")
def functional_cache_write(_gm, node) -> bool:
    import torch

    if not _only_input_write(node):
        return False
    node.target = {"index_copy": torch.ops.aten.index_copy.default, "add": torch.ops.aten.add.Tensor}[IN_PLACE[str(node.target)]]
    return True
