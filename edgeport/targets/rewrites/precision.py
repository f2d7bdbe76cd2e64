"""bf16/fp16 models: converted in float32 (converters refuse half-precision LayerNorm and bf16 scalars),
judged against the model's own half-precision output with that precision's budget."""

from __future__ import annotations

from edgeport.targets.rewrites.registry import program_pass

program_pass("upcast_fp32", "bf16/fp16 models: converted in fp32, judged with the bf16/fp16 budget")


def low_precision_of(program) -> str | None:
    """"bf16"/"fp16" when the program's weights or float inputs are half precision, else None."""
    import torch

    names = {torch.bfloat16: "bf16", torch.float16: "fp16"}
    tensors = list(program.state_dict.values()) + list(program.constants.values())
    vals = [n.meta.get("val") for n in program.graph.nodes if n.op == "placeholder"]
    for t in tensors + vals:
        if isinstance(t, torch.Tensor) and t.dtype in names:
            return names[t.dtype]
    return None


def upcast_fp32(gm, example: tuple):
    """Every half-precision weight, input and dtype argument becomes float32. Fixes 'unsupported ScalarType
    BFloat16' and fp16 LayerNorm element-type errors; the artifact is more precise than the model."""
    import torch

    low = (torch.bfloat16, torch.float16)
    for module in gm.modules():  # new tensors: the user's eager model (the reference) keeps its own
        for key, value in list(module._parameters.items()):
            if value is not None and value.dtype in low:
                module._parameters[key] = torch.nn.Parameter(value.detach().float(), requires_grad=False)
        for key, value in list(module._buffers.items()):
            if value is not None and value.dtype in low:
                module._buffers[key] = value.float()
        for key, value in list(vars(module).items()):
            if isinstance(value, torch.Tensor) and value.dtype in low:
                setattr(module, key, value.float())
    swap = lambda v: torch.float32 if v in low else v  # noqa: E731
    for node in gm.graph.nodes:
        node.args = tuple(swap(a) for a in node.args)
        node.kwargs = {k: swap(v) for k, v in node.kwargs.items()}
    gm.recompile()
    return gm, upcast_example(example)


def upcast_example(values: tuple) -> tuple:
    """Half-precision example inputs as float32 (the upcast program's inputs); anything else as it is."""
    import torch

    low = (torch.bfloat16, torch.float16)
    return tuple(x.float() if isinstance(x, torch.Tensor) and x.dtype in low else x for x in values)
