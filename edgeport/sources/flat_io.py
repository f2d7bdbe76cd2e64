"""One adapter between a model's own calling convention and what every converter wants: positional tensors
in, a flat tuple of tensors out.

Models take dicts, keyword-only arguments and ``None`` options, and return dicts, dataclasses and
``ModelOutput``s; converters and runtimes each pick their own order for those (jax.jit sorts dict keys,
LiteRT sorts output names). :class:`FlatIO` fixes the order once, at the source: inputs in the model's own
``forward`` signature order, outputs in pytree order.
"""

from __future__ import annotations

import inspect

from edgeport.diagnostics import first_line
from edgeport.errors import UsageError
from edgeport.sources.spec import InputSpec, LoadedModel


def from_factory_result(spec: str, made, inputs: list[InputSpec]) -> LoadedModel:
    """A factory returns an ``nn.Module`` (examples from ``--input``) or ``(module, example_inputs)``."""
    import torch

    if isinstance(made, torch.nn.Module):
        if not inputs:
            raise UsageError(f"{spec} returned an nn.Module without example inputs: pass --input NAME:SHAPE:DTYPE")
        return wrap(spec, made, examples_from_specs(made, inputs))
    if isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], torch.nn.Module):
        module, example = made
        if inputs:
            example = examples_from_specs(module, inputs)
        if isinstance(example, torch.Tensor):
            example = (example,)
        if not isinstance(example, (tuple, list, dict)):
            raise UsageError(f"{spec}: example inputs must be a tensor, a tuple or a dict, got {type(example).__name__}")
        return wrap(spec, module, example)
    raise UsageError(f"{spec} must return an nn.Module or (nn.Module, example_inputs), got {type(made).__name__}")


def examples_from_specs(module, inputs: list[InputSpec]):
    """``--input`` tensors by name when every name is a ``forward`` parameter (keyword-only ones too),
    else by position."""
    example = {i.name: i.example() for i in inputs}
    return example if set(example) <= set(forward_parameters(module)) else tuple(example.values())


def forward_parameters(module) -> list[str]:
    try:
        return [p for p in inspect.signature(module.forward).parameters]
    except (TypeError, ValueError):
        return []


def wrap(spec: str, module, example) -> LoadedModel:
    """Plain tensors in and tensors out stay as they are; anything else goes through :class:`FlatIO`.
    A forward that returns no tensor at all (a string, a number) is bad input, said before tracing."""
    import torch

    args, kwargs = (tuple(example), {}) if isinstance(example, (tuple, list)) else ((), dict(example))
    _only_dense(spec, args, kwargs)
    out = _try_forward(module, args, kwargs)
    if out is not None and not _tensor_leaves(out):
        raise UsageError(f"{spec}: forward returned {type(out).__name__}, which holds no tensor to convert")
    plain_in = not kwargs and all(isinstance(x, torch.Tensor) for x in args)
    plain_out = isinstance(out, torch.Tensor) or (type(out) is tuple and all(isinstance(o, torch.Tensor) for o in out))
    if plain_in and (plain_out or out is None):
        return LoadedModel(spec, module, args)
    adapter, tensors, names = flat_io(module, args, kwargs)
    if not tensors:
        raise UsageError(f"{spec}: the example inputs hold no tensors")
    return LoadedModel(spec, adapter, tensors, input_names=names)


def _only_dense(spec: str, args: tuple, kwargs: dict) -> None:
    """Every target takes dense (strided) tensors: a sparse, nested or mkldnn example input is bad input,
    said here in one line (torch.export fails on it deep inside, and sparse kernels trust their indices)."""
    import torch
    from torch.utils._pytree import tree_leaves

    for leaf in tree_leaves((args, kwargs)):
        if isinstance(leaf, torch.Tensor) and (leaf.layout != torch.strided or leaf.is_nested):
            raise UsageError(f"{spec}: an example input is a {leaf.layout} tensor"
                             f"{' (nested)' if leaf.is_nested else ''}; edgeport converts dense tensors only")


def _try_forward(module, args: tuple, kwargs: dict):
    """One eager call to see the output's structure; a failure is left for torch.export to report with
    the user's line (None here)."""
    import torch

    try:
        with torch.no_grad():
            return module.eval()(*args, **kwargs)
    except Exception:
        return None


def _tensor_leaves(out) -> list:
    from edgeport.core.eager import flatten_outputs

    try:
        return flatten_outputs(out)
    except Exception as exc:  # an output type pytree cannot walk
        raise UsageError(f"forward returned {type(out).__name__} that cannot be flattened: {first_line(exc)}") from exc


def flat_io(module, args: tuple, kwargs: dict):
    """(adapter, example tensors, input names): keyword inputs sorted by the model's forward signature."""
    import torch
    from torch.utils._pytree import tree_flatten_with_path

    params = forward_parameters(module)
    position = {name: i for i, name in enumerate(params)}
    kwargs = dict(sorted(kwargs.items(), key=lambda kv: position.get(kv[0], len(params))))
    with_paths, spec = tree_flatten_with_path((tuple(args), kwargs))
    leaves = [leaf for _, leaf in with_paths]
    slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    names = tuple(_leaf_name(with_paths[i][0], params) for i in slots)
    constants = [None if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
    adapter = _flat_io_class()(module, constants, slots, spec)
    return adapter, tuple(leaves[i] for i in slots), _unique(names)


def _leaf_name(path, params: list[str]) -> str:
    keys = [str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k)))) for k in path]
    if keys and keys[0] == "0" and len(keys) > 1 and keys[1].isdigit() and int(keys[1]) < len(params):
        keys = [params[int(keys[1])], *keys[2:]]  # a positional argument: its parameter name
    else:
        keys = keys[1:]
    return "_".join(keys) or "input"


def _unique(names: tuple[str, ...]) -> tuple[str, ...]:
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}_{seen[name] - 1}")
    return tuple(out)


def _flat_io_class():
    import torch

    class FlatIO(torch.nn.Module):
        """Positional tensors in (non-tensor arguments such as ``None`` kept as constants), the model's
        outputs flattened by pytree (dict, ModelOutput, dataclass, nested tuples) out."""

        def __init__(self, model, constants, slots, spec):
            super().__init__()
            self.model = model
            self.constants, self.slots, self.spec = constants, slots, spec

        def forward(self, *tensors):
            from torch.utils._pytree import tree_unflatten

            from edgeport.core.eager import flatten_outputs

            leaves = list(self.constants)
            for slot, tensor in zip(self.slots, tensors):
                leaves[slot] = tensor
            args, kwargs = tree_unflatten(leaves, self.spec)
            return tuple(flatten_outputs(self.model(*args, **kwargs)))

    return FlatIO
