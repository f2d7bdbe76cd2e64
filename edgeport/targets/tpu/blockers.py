"""``edgeport check --target tpu``: what ties the model to CUDA, found in the exported program and in the
source lines that ran while exporting, each with its fix (issue 35 item 5).

Why these: a TPU runs XLA; it has no CUDA kernels (a custom op registered only for CUDA, a Triton kernel),
no float64 (XLA on TPU emulates or refuses it), no CUDA device (a tensor placed with ``.cuda()`` or
``device="cuda"``), and compiles one executable per shape (a dynamic dim recompiles per new size). A
``torch.cuda.*`` call or an ``is_available()`` branch leaves no node when the export ran on a CPU: it is found
in the source lines the program's nodes came from (their files, read again).
"""

from __future__ import annotations

import re

CUDA_SOURCE = re.compile(r"torch\.cuda\.|\.cuda\(|device\s*=\s*[\"']cuda|[\"']cuda(:\d+)?[\"']")
ATEN = ("aten", "prims", "higher_order")
FIX = {
    "float64": "TPUs have no float64 (XLA emulates it slowly or refuses); fix: keep tensors float32 (model.float(), "
               "dtype=torch.float32 in torch.tensor/arange/zeros)",
    "triton": "a Triton kernel: TPUs run no Triton; fix: a plain-PyTorch fallback path for export, or the kernel "
              "rewritten in Pallas (jax.experimental.pallas) registered as a decomposition",
    "cuda_only": "a custom op with a CUDA kernel only; fix: a CPU/CompositeImplicitAutograd implementation in traceable "
                 "torch (--decompositions), so XLA compiles it",
    "cuda_device": "a tensor placed on CUDA while exporting; fix: device-agnostic code (x.device, torch.get_default_device())",
    "cuda_source": "CUDA-specific code on the export path (a torch.cuda call or a 'cuda' device branch); fix: take the "
                   "device from the inputs and drop CUDA-only branches (on a TPU host they take the CPU path silently)",
    "dynamic": "a dynamic dim: a TPU compiles one executable per shape, so each new size recompiles; fix: pad to a few "
               "static buckets (e.g. batch 1/8/32, lengths 128/512) and compile each (--tpu-batch shows the cost)",
}


def cuda_ties(program) -> dict[str, tuple[int, str]]:
    """``{what: (count, why + fix)}`` for ``program`` (``Target.slow_ops``: findings ``check`` lists)."""
    found: dict[str, tuple[int, str]] = {}

    def add(key: str, why: str) -> None:
        found[key] = (found.get(key, (0, why))[0] + 1, why)

    for node in program.graph.nodes:
        for key in _node_ties(node):
            add(key, FIX.get(key, FIX["cuda_only"]))
    for name, tensor in {**program.state_dict, **program.constants}.items():
        if getattr(tensor, "dtype", None) is not None and str(tensor.dtype) == "torch.float64":
            add("float64", FIX["float64"])
        if getattr(getattr(tensor, "device", None), "type", "") == "cuda":
            add("cuda_device", FIX["cuda_device"])
    if any(not isinstance(d, int) for spec in _input_shapes(program) for d in spec):
        add("dynamic", FIX["dynamic"])
    for where in _cuda_source_lines(program):
        add(f"cuda code at {where}", FIX["cuda_source"])
    return found


def _node_ties(node) -> list[str]:
    import torch

    if node.op != "call_function":
        return []
    ties, name = [], str(getattr(node.target, "__name__", node.target))
    if "triton_kernel_wrapper" in name:
        ties.append("triton")
    elif isinstance(node.target, torch._ops.OpOverload) and node.target.namespace not in ATEN and _cuda_only(node.target):
        ties.append(f"{node.target.namespace}::{node.target._opname} (CUDA kernel only)")
    value = node.meta.get("val")
    if isinstance(value, torch.Tensor):
        if value.dtype == torch.float64:
            ties.append("float64")
        if value.device.type == "cuda":
            ties.append("cuda_device")
    return ties


def _cuda_only(op) -> bool:
    """The op has a CUDA kernel and nothing a CPU (or XLA) could run: no CPU, composite or Meta-free path."""
    import torch

    name = op.name()
    has = lambda key: torch._C._dispatch_has_kernel_for_dispatch_key(name, key)  # noqa: E731
    return has("CUDA") and not any(has(k) for k in ("CPU", "CompositeImplicitAutograd", "CompositeExplicitAutograd"))


def _input_shapes(program) -> list[tuple]:
    from torch.export.graph_signature import InputKind

    users = {s.arg.name for s in program.graph_signature.input_specs if s.kind == InputKind.USER_INPUT}
    return [tuple(n.meta["val"].shape) for n in program.graph.nodes
            if n.op == "placeholder" and n.name in users and hasattr(n.meta.get("val"), "shape")]


def _cuda_source_lines(program, limit: int = 20) -> list[str]:
    """``file:line`` of CUDA-specific source lines in the user's files the program's nodes came from
    (site-packages and torch itself are not the user's code)."""
    from pathlib import Path

    files = set()
    for node in program.graph.nodes:
        for path in re.findall(r'File "([^"]+)", line \d+', node.meta.get("stack_trace") or ""):
            if "site-packages" not in path and "/torch/" not in path and path.endswith(".py"):
                files.add(path)
    hits = []
    for path in sorted(files):
        try:
            lines = Path(path).read_text(errors="replace").splitlines()
        except OSError:
            continue
        hits += [f"{Path(path).name}:{i}" for i, text in enumerate(lines, 1)
                 if CUDA_SOURCE.search(text) and not text.lstrip().startswith("#")]
    return hits[:limit]
