"""PyTorch eager: the reference every artifact is compared against, behind the same Runner interface."""

from __future__ import annotations

from typing import Sequence

import numpy as np


def to_numpy(t) -> np.ndarray:
    """Tensor -> numpy; bf16 (which numpy lacks) goes through float32."""
    import torch

    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.numpy()


def to_torch(array: np.ndarray, dtype: str | None = None):
    import torch

    t = torch.from_numpy(np.ascontiguousarray(array))
    return t.to(getattr(torch, dtype)) if dtype and dtype != "unknown" else t


def flatten_outputs(out) -> list:
    """Model output (tensor, tuple, dict, ModelOutput, dataclass) -> flat list of tensors in pytree order,
    the order torch.export gives the program's outputs. A dataclass pytree does not know is walked by its
    fields; non-tensor leaves (numbers, strings, None) carry nothing to convert and are dropped."""
    import dataclasses

    import torch
    from torch.utils._pytree import tree_flatten

    tensors = []
    for leaf in tree_flatten(out)[0]:
        if isinstance(leaf, torch.Tensor):
            tensors.append(leaf)
        elif dataclasses.is_dataclass(leaf) and not isinstance(leaf, type):
            tensors += flatten_outputs([getattr(leaf, f.name) for f in dataclasses.fields(leaf)])
    return tensors


class EagerRunner:
    """Runs the eager module (or ``ExportedProgram.module()``) on numpy inputs."""

    def __init__(self, module, input_dtypes: Sequence[str], threads: int):
        self.module = module  # already in eval mode: export_program() set it, or it is ExportedProgram.module()
        self.input_dtypes = list(input_dtypes)
        self.threads = threads
        # a stateful model (a KV cache written in place) starts every sample from the same state, like the
        # converted artifact, whose buffers are constants
        self.initial_buffers = {name: b.detach().clone() for name, b in module.named_buffers()}

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        import torch

        torch.set_num_threads(self.threads)
        # copies: a model that updates its inputs in place (a KV cache) must not change the shared samples
        args = [to_torch(a, d).clone() for a, d in zip(inputs, self.input_dtypes)]
        with torch.no_grad():
            self._restore_buffers()
            try:
                return [to_numpy(t) for t in flatten_outputs(self.module(*args))]
            finally:
                # the exported program's state_dict aliases these buffers: leave them as found, or every
                # target converted after the reference ran would bake in the last sample's cache
                self._restore_buffers()

    def _restore_buffers(self) -> None:
        for name, buffer in self.module.named_buffers():
            if name in self.initial_buffers:
                buffer.copy_(self.initial_buffers[name])

    def io(self) -> dict:
        return {}


def flatten_inputs(example) -> tuple:
    """Example inputs -> flat tuple of tensors in pytree order, the order of the program's user inputs."""
    import torch
    from torch.utils._pytree import tree_flatten

    return tuple(x for x in tree_flatten(tuple(example))[0] if isinstance(x, torch.Tensor))
