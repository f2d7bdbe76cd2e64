"""torch.fx node provenance kept by reference instead of deep-copied at every pass.

Every pass that re-traces a graph through ``torch.fx.Interpreter`` (every ExecuTorch ``ExportPass``: XNNPACK's
preprocess runs about fifteen of them on each partition, ``to_edge`` and ``to_executorch`` more) gives each new
node ``meta["from_node"] = [NodeSource(old_node)]``, and ``NodeSource.__init__`` deep-copies the old node's whole
``from_node`` chain, which is one level longer after every pass. Node count x pass count copies of chains whose
length is the pass count: the deep copies were 27 s of the 117 s ``to_edge_transform_and_lower`` of a
6-layer SmolLM2 (cProfile; bench/LARGE_GENERATION.md, "ExecuTorch conversion time").

Nothing mutates a ``NodeSource`` after it is built (torch's passes build new ones; only deserialization
fills one in), so the copied chain can share its elements: ``from_node`` becomes a new list over the same
``NodeSource`` objects. The provenance recorded is the same; building it is O(1) per node and pass.
"""

from __future__ import annotations

import contextlib
import copy


class _ChainSharingCopy:
    """The ``copy`` module as ``torch.fx.traceback`` uses it, except that ``deepcopy`` of a list (only ever a
    node's ``from_node`` chain there) is a new list over the same elements."""

    copy = staticmethod(copy.copy)

    @staticmethod
    def deepcopy(value, memo=None):
        return list(value) if isinstance(value, list) else copy.deepcopy(value, memo)


@contextlib.contextmanager
def shared_provenance():
    """While inside, a node's provenance chain is shared, not deep-copied (see the module docstring)."""
    import torch.fx.traceback as fx_traceback

    saved = fx_traceback.copy
    fx_traceback.copy = _ChainSharingCopy
    try:
        yield
    finally:
        fx_traceback.copy = saved
