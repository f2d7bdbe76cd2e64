"""The one ``torch.export`` every target starts from, and the signature read off it.

Exporting once (rather than letting each converter trace the user's module again) is what makes the
targets comparable: they all convert the same graph, and parity failures are the converter's, not the
tracer's.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass
from pathlib import Path

from edgeport.diagnostics import summary, user_frame, with_location
from edgeport.errors import ExportFailed


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    dtype: str

    def to_json(self) -> dict:
        return {**asdict(self), "shape": list(self.shape)}


@dataclass(frozen=True)
class Signature:
    """User-visible inputs and outputs of the exported program, in the model's own flattened order."""

    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]


def capture_mode():
    """The autograd state the program is captured in, and the one every later trace of it must use.

    Kernel choices baked into the graph depend on it: on CPU, ``scaled_dot_product_attention`` takes the
    flash kernel only when its ``attn_mask`` does not require grad. Captured under ``no_grad``, a relative
    position bias (T5, Swin, BEiT) does not, the output is laid out (B, S, H, D) and ``reshape`` after
    ``transpose(1, 2)`` is recorded as a ``view``. A converter that re-runs that graph with grad enabled
    (the program's parameters require grad) picks the math kernel, gets another layout, and the ``view``
    fails ("Cannot view a tensor with shape ... and strides ..."). So capture and conversion share this."""
    import torch

    return torch.no_grad()


def export_program(module, example_inputs: tuple, dynamic_shapes=None):
    """``torch.export.export`` in eval mode; failures become :class:`ExportFailed` naming the user's line."""
    import torch

    module.eval()
    try:
        with capture_mode():
            return torch.export.export(module, tuple(example_inputs), dynamic_shapes=_bind(module, dynamic_shapes),
                                       strict=False)
    except Exception as exc:
        raise ExportFailed(describe_export_error(exc)) from exc


def _bind(module, dynamic_shapes):
    """torch.export matches ``dynamic_shapes`` to ``forward``'s parameters, so a ``forward(*tensors)`` (the
    FlatIO adapter every dict/keyword/hf: model goes through) takes one entry holding all the inputs'."""
    import inspect

    if not isinstance(dynamic_shapes, tuple):
        return dynamic_shapes
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return dynamic_shapes
    varargs_only = len(params) == 1 and params[0].kind is inspect.Parameter.VAR_POSITIONAL
    return (dynamic_shapes,) if varargs_only else dynamic_shapes


DYNAMIC_DIMS = ("batch",)


def batch_dynamic(example_inputs: tuple) -> tuple[tuple, tuple]:
    """``--dynamic batch``: (inputs to trace with, dynamic_shapes) making dim 0 of every tensor input one
    symbol. A batch of 1 would be specialized by torch.export (0/1 are never symbolic), so the trace uses
    the examples repeated to batch 2; the program keeps the symbol, the examples stay as given."""
    import torch
    from torch.utils._pytree import tree_map

    batch = torch.export.Dim("batch", min=1)
    is_batched = lambda x: isinstance(x, torch.Tensor) and x.dim() > 0  # noqa: E731
    trace = tree_map(lambda x: torch.cat([x, x]) if is_batched(x) and x.shape[0] == 1 else x, tuple(example_inputs))
    shapes = tree_map(lambda x: {0: batch} if is_batched(x) else None, tuple(example_inputs))
    return trace, shapes


def describe_export_error(exc: BaseException) -> str:
    """torch's message (its meaningful lines, not its boilerplate) plus the user's line that failed."""
    return with_location(f"torch.export failed: {summary(exc)}", user_frame(exc))


def signature_of(program, input_names: tuple[str, ...] | None = None) -> Signature:
    """Names, shapes and dtypes of user inputs/outputs, from the program's graph signature."""
    from torch.export.graph_signature import InputKind, OutputKind

    nodes = {n.name: n for n in program.graph.nodes}
    user_inputs = [s.arg.name for s in program.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    names = list(input_names) if input_names and len(input_names) == len(user_inputs) else user_inputs
    inputs = tuple(_info(name, nodes[arg].meta.get("val")) for name, arg in zip(names, user_inputs))
    user_outputs = [s.arg for s in program.graph_signature.output_specs if s.kind == OutputKind.USER_OUTPUT]
    outputs = tuple(_info(f"output_{i}", nodes[a.name].meta.get("val") if hasattr(a, "name") and a.name in nodes else None)
                    for i, a in enumerate(user_outputs))
    return Signature(inputs, outputs)


def _info(name: str, val) -> TensorInfo:
    if val is None or not hasattr(val, "shape"):
        return TensorInfo(name, (), "unknown")
    shape = tuple(int(d) if str(d).isdigit() else -1 for d in val.shape)
    return TensorInfo(name, shape, str(val.dtype).removeprefix("torch."))


def save_program(program, path: Path) -> None:
    import torch

    with _weights_written_in_place():
        torch.export.save(program, path)


@contextlib.contextmanager
def _weights_written_in_place():
    """``torch.export.save`` copies each weight into a Python ``bytes`` before writing it (torch 2.13's
    ``pt2_archive._package._get_raw_tensor_bytes``): for a 2 GB embedding, a second 2 GB at the run's peak.
    Its zip writer also takes a storage and its size, so the weight's own storage is written instead. Where
    torch's internals differ from these, torch's own path runs unchanged."""
    try:
        from torch.export.pt2_archive import _package as package

        raw_bytes, write_bytes = package._get_raw_tensor_bytes, package.PT2ArchiveWriter.write_bytes
    except (ImportError, AttributeError):
        yield
        return

    class InPlace:
        def __init__(self, tensor):
            self.tensor = tensor   # keeps the storage alive until written
            self.storage = tensor.untyped_storage()

    def raw(value):
        plain = value.device.type == "cpu" and not package._is_fake_tensor(value) and value.data_ptr()
        return InPlace(value) if plain else raw_bytes(value)

    def write(self, name, data):
        if isinstance(data, InPlace):
            return self.archive_file.write_record(name, data.storage, data.storage.nbytes())
        return write_bytes(self, name, data)

    package._get_raw_tensor_bytes, package.PT2ArchiveWriter.write_bytes = raw, write
    try:
        yield
    finally:
        package._get_raw_tensor_bytes, package.PT2ArchiveWriter.write_bytes = raw_bytes, write_bytes


def fingerprint(program, signature: Signature) -> dict:
    """What identifies the program for a baseline or a cache: its I/O signature, a hash of the graph
    (FX text: ops and their wiring, no file paths) and a hash of every weight and constant."""
    import hashlib

    import torch

    graph = hashlib.sha256(str(program.graph).encode()).hexdigest()
    weights = hashlib.sha256()
    state = {**program.state_dict, **program.constants}
    for name in sorted(state):
        value = state[name]
        if isinstance(value, torch.Tensor):
            tensor = value.detach().cpu().contiguous()
            weights.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
            flat = tensor.reshape(-1)  # 0-dim ints (BatchNorm's num_batches_tracked) have no byte view
            # the array's own buffer, not .tobytes(): a copy of the largest weight would set the run's peak
            weights.update(flat.view(torch.uint8).numpy() if tensor.numel() else b"")
    return {"graph_sha256": graph, "weights_sha256": weights.hexdigest(),
            "signature": {"inputs": [i.to_json() for i in signature.inputs],
                          "outputs": [o.to_json() for o in signature.outputs]}}
