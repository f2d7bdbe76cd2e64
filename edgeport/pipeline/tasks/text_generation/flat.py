"""transformers' exported prefill/decode programs -> flat programs every target takes.

``export_for_generation`` returns programs whose inputs are the model's forward kwargs with a
``StaticCache`` object inside (3 leaves per layer: keys, values and ``cumulative_length``, the write slot),
in an order that follows each family's forward signature (GPT-2 puts the cache before the mask; Qwen2's
mask is a dict, ``None`` in prefill). Their cache updates are in-place mutations as well as outputs.
Re-exporting each through :class:`Named` gives plain tensor inputs named by role, a dict of outputs
(``logits``, then the updated cache), no ``None`` input and no transformers class in the program's spec,
so a saved program loads without transformers and every converter names the I/O the same way.
"""

from __future__ import annotations

import re

import torch

from edgeport.errors import UsageError

CACHE_FIELDS = (("keys", "k"), ("values", "v"), ("cumulative_length", "len"))


def _cache_names(ctx) -> list[str]:
    """StaticCache pytree context -> leaf names in leaf order: ``cache_k_<l>``, ``cache_v_<l>``, ``cache_len_<l>``."""
    names = {}
    for layer_index, layer in enumerate(ctx["s"]["layers"]):
        if not any(field in layer["s"] for field, _ in CACHE_FIELDS):  # (prefill's keys are still None leaves)
            raise UsageError(f"--task text-generation supports attention key/value caches only; layer {layer_index} of "
                             f"this model caches a {layer.get('p', '?').rpartition(':')[2]} (recurrent state, no keys/values)")
        for field, short in CACHE_FIELDS:
            value = layer["s"].get(field)
            if isinstance(value, dict) and value.get("_t") == "tensor":
                names[value["i"]] = f"cache_{short}_{layer_index}"
    return [names[i] for i in sorted(names)]


def io_names(program) -> tuple[list[str | None], list[str]]:
    """(input leaf names in pytree order, ``None`` for None leaves; output leaf names) of a raw program.
    Roles come from the leaf paths and the StaticCache context, never from positions."""
    from torch.utils._pytree import keystr, tree_flatten_with_path

    leaves = tree_flatten_with_path(program.example_inputs)[0]
    kw_spec = program.call_spec.in_spec.child(1)
    cache_names = iter(_cache_names(kw_spec.child(kw_spec.context.index("cache")).context))
    inputs: list[str | None] = []
    for path, value in leaves:
        key = keystr(path)
        if value is None:
            inputs.append(None)
        elif "['cache']" in key:
            inputs.append(next(cache_names))
        else:
            inputs.append("_".join(re.findall(r"\['(\w+)'\]", key)))
    return inputs, ["logits"] + _cache_names(program.call_spec.out_spec.child(1).context)


class Named(torch.nn.Module):
    """A raw program called with named tensors (None leaves re-inserted, the StaticCache rebuilt from the
    program's in_spec), returning ``{output name: tensor}``."""

    def __init__(self, program):
        super().__init__()
        self.gm = program.module()
        self.spec = program.call_spec.in_spec
        self.in_names, self.out_names = io_names(program)
        self.names = [n for n in self.in_names if n is not None]
        self.training = False  # ep.module() refuses .eval() (NotImplementedError); converters warn on training

    def forward(self, **kw):
        from torch.utils._pytree import tree_leaves, tree_unflatten

        flat = [None if n is None else kw[n] for n in self.in_names]
        args, kwargs = tree_unflatten(flat, self.spec)
        return dict(zip(self.out_names, tree_leaves(self.gm(*args, **kwargs))))


def sample_kwargs(named: Named, program) -> dict:
    """The program's own example inputs by role; distinct tensors (a shared ``cumulative_length`` tensor
    would be written by every layer: the in-place update makes aliasing visible)."""
    from torch.utils._pytree import tree_leaves

    values = [v for v in tree_leaves(program.example_inputs) if v is not None]
    return {name: value.detach().clone() for name, value in zip(named.names, values)}


def flatten(program) -> tuple[object, dict]:
    """(flat program, its sample kwargs): plain named tensors in, dict out."""
    import warnings

    named = Named(program)
    kwargs = sample_kwargs(named, program)
    with warnings.catch_warnings():  # torch's own pytree deprecation noise while copying the program
        warnings.filterwarnings("ignore", category=FutureWarning)
        flat = torch.export.export(named, (), kwargs={k: v.clone() for k, v in kwargs.items()}, strict=False)
    return flat, kwargs


def run_flat(module, feeds: dict) -> dict:
    """One call of a flat program's module on numpy feeds -> numpy outputs (inputs copied: the program
    writes its cache inputs in place)."""
    import numpy as np

    with torch.no_grad():
        out = module(**{k: torch.from_numpy(np.array(v, copy=True)) for k, v in feeds.items()})
    return {k: v.detach().numpy() for k, v in out.items()}
