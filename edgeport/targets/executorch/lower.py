"""Programs -> one ``.pte``: ``to_edge_transform_and_lower`` with the XNNPACK partitioner, then
``to_executorch``. One method per program (``forward``; or ``prefill_<L>`` and ``decode``), weights
stored once.

A ``.pte`` keeps no tensor names, only positions, so each artifact carries its own I/O names as a constant
method (``edgeport_io``, a JSON string): the runner feeds and returns tensors by those names, and an app can
ask the file itself. Both steps run under ``no_grad``: ExecuTorch's write-back of a mutated input (the KV
cache a prefill or decode program updates in place) is an in-place copy that autograd refuses on a leaf
that requires grad.
"""

from __future__ import annotations

import contextlib
import functools
import json
from pathlib import Path

from edgeport.targets._jax import cpu_tracing

IO_METHOD = "edgeport_io"


def io_names(program) -> dict:
    """``{"inputs": [...], "outputs": [...]}``: the program's user input names (kwarg names for the flat
    generative programs) and output names (a dict output's keys, else ``output_<i>``)."""
    from torch.export.graph_signature import OutputKind

    spec = program.call_spec.out_spec
    users = [s for s in program.graph_signature.output_specs if s.kind == OutputKind.USER_OUTPUT]
    outputs = list(spec.context) if spec is not None and spec.type is dict else [f"output_{i}" for i in range(len(users))]
    return {"inputs": list(program.graph_signature.user_inputs), "outputs": outputs}


def edge_program(programs: dict, io: dict | None = None, dynamic_quant: bool = False):
    """The EdgeProgramManager of ``programs`` (method name -> ExportedProgram) lowered to XNNPACK, with the
    I/O names as a constant method when given; ``dynamic_quant``: see :func:`partitioners` (a lowering one
    partitioner refuses with a dependency cycle is lowered again the split way). Splits, squeezes and selects
    become slices and reshapes XNNPACK takes first (:mod:`.views`: an unrolled LSTM is one partition). What
    the lowering leaves in module-level state is dropped whether it succeeds or not (a failed lowering kept
    its graphs, with their weights, alive through the other rows' judges: 3.8x the weights at Qwen3-0.6B)."""
    constants = {IO_METHOD: json.dumps(io)} if io is not None else None
    try:
        return lowered(programs, constants, partitioners(dynamic_quant))
    except Exception as exc:  # noqa: BLE001  (only the partitioner's cycle is retried; the rest is re-raised)
        if not dynamic_quant or CYCLE not in str(exc):
            raise
        forget_lowered_graphs()
        return lowered(programs, constants, partitioners(dynamic_quant, split=True))
    finally:
        forget_lowered_graphs()


# what torch's fuser raises for a partition whose nodes leave it and come back (:func:`partitioners`)
CYCLE = "found dependency cycles"


def lowered(programs: dict, constants: dict | None, partitioner: list, verify: bool = False, passes: list | None = None):
    """``to_edge_transform_and_lower`` under the house's lowering context (no grad, CPU tracing, weights
    shared with the copies, provenance shared, XNNPACK's passes and ExecuTorch's re-decompositions only where
    they can act: :mod:`.scoped_passes`) with ``passes`` first (by default :func:`.views.delegable_views` and
    :func:`.views.linears_beside_their_input`), then the tied tables tagged for the ``.ptd``
    (:mod:`.tied`: XNNPACK writes a tagged weight to that file as it lowers, so :func:`save` must write it).

    ``verify``: ExecuTorch's IR validity checks, off by default as ExecuTorch's own LLM export runs them
    (``EdgeCompileConfig(_check_ir_validity=False)``): they check that every op is core ATen / edge with
    dtypes its kernels take, re-running each node's fake kernel, at every edge program built and every pass
    over it. They change nothing in the result; an op the runtime has no kernel for still fails the row
    (the ``.pte`` is loaded and run by its judge). ~17% of a quantized lowering's profile
    (bench/LARGE_GENERATION.md)."""
    import warnings

    import torch
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    from edgeport.core.provenance import shared_provenance
    from edgeport.targets.executorch.scoped_passes import inert_passes_skipped, redundant_decompositions_skipped
    from edgeport.targets.executorch.tied import tag_tied, tied_placeholders
    from edgeport.targets.executorch.views import delegable_views, linears_beside_their_input

    config = EdgeCompileConfig(_check_ir_validity=verify)
    with torch.no_grad(), warnings.catch_warnings(), cpu_tracing(), weights_not_copied(), shared_provenance(), \
            inert_passes_skipped(), redundant_decompositions_skipped():
        warnings.simplefilter("ignore")  # torch/pytree deprecation and ExecuTorch "experimental" noise, per node
        passes = [delegable_views, linears_beside_their_input] if passes is None else list(passes)
        passes.append(tag_tied(tied_placeholders(programs)))
        return to_edge_transform_and_lower(programs, transform_passes=passes, partitioner=partitioner,
                                           constant_methods=constants, compile_config=config)


def partitioners(dynamic_quant: bool, split: bool = False) -> list:
    """One XNNPACK partitioner, over float ops and dynamically quantized linears alike, so a layer's linears
    and the float ops between them are one delegate (:func:`.views.linears_beside_their_input` keeps a
    q/k/v group from being cut off): SmolLM2-135M's two quantized methods lowered as 544 partitions the split
    way, and XNNPACK's per-partition work (its preprocess re-traces every partition
    through ~15 passes; ExecuTorch re-legalizes the whole graph once per partition) was most of the lowering
    (bench/executorch_lowering.py; bench/LARGE_GENERATION.md, "ExecuTorch conversion time").

    ``split``: the dynamically quantized linears partitioned first, on their own, then the float ops (what
    ExecuTorch's own LLM export does). One partitioner over both groups a layer's shared activation-
    quantization chain (the q, k and v projections read one ``choose_qparams``) with the float ops around
    it; when ops XNNPACK leaves outside sit between them the group can leave and re-enter itself, and the
    lowering fails ("Invalid partition, found dependency cycles"): Qwen3's per-head q/k norms did, before
    the attention and cache-write rewrites (:mod:`edgeport.targets.rewrites`); not reproduced since, on a
    tiny Qwen3 with or without the last-dim mean delegated. :func:`edge_program` then lowers the split way."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
        XnnpackDynamicallyQuantizedPartitioner, XnnpackPartitioner)

    return [XnnpackDynamicallyQuantizedPartitioner(), XnnpackPartitioner()] if split and dynamic_quant \
        else [XnnpackPartitioner()]


def lower(programs: dict, dynamic_quant: bool = False):
    """``programs`` lowered to XNNPACK, each carrying its I/O names (see the module docstring)."""
    return edge_program(programs, {name: io_names(program) for name, program in programs.items()}, dynamic_quant)


def save(edge, path: Path) -> Path | None:
    """``to_executorch`` and the ``.pte`` written to ``path``, piece by piece (``.buffer`` would first join
    every weight into one bytes object: a second copy of the weights at the run's peak); a tied table once,
    in the ``.ptd`` beside it (:mod:`.tied`), whose path is returned (None: the ``.pte`` is the artifact)."""
    import warnings

    import torch

    from edgeport.core.provenance import shared_provenance
    from edgeport.targets.executorch.tied import backend_config, write_data

    try:
        with torch.no_grad(), warnings.catch_warnings(), cpu_tracing(), shared_provenance():
            warnings.simplefilter("ignore")
            program = edge.to_executorch(backend_config())
            with open(path, "wb") as f:
                program.write_to_file(f)
            data = write_data(program, path)
        del program
    finally:
        forget_lowered_graphs()
    return data


@contextlib.contextmanager
def weights_not_copied():
    """While lowering, the copies ExecuTorch makes of a program share its weight tensors instead of cloning
    them. ``to_backend`` deep-copies every partition's program, weights included, for every method at once
    before XNNPACK's preprocess reads them ("in case backends change graph inside preprocess": the graph,
    not the weights; no XNNPACK pass writes a weight in place), and ``duplicate_constant_node`` deep-copies a
    constant that a partition shares with a node outside it (a head tied to the embedding: the whole table,
    once per method). Probe on qwen3-small (0.37 GB of weights): +0.73 GB for the partition copies of its two
    methods and +0.15 GB per method for the table, at the lowering's peak. The graph and its metadata are
    still copied; a tensor is the same tensor in both copies (bench/LARGE_GENERATION.md, seventh session)."""
    import copy

    from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend
    from executorch.exir.backend.canonical_partitioners import duplicate_constant_node_pass as duplicates

    def isolated(cls, edge_program, compile_specs):
        tensors = (*edge_program.state_dict.values(), *edge_program.constants.values())
        return copy.deepcopy(edge_program, {id(t): t for t in tensors})

    saved = XnnpackBackend.__dict__.get("copy_exported_program_for_preprocess"), duplicates.copy
    XnnpackBackend.copy_exported_program_for_preprocess = classmethod(isolated)
    duplicates.copy = _SharingTensors()
    try:
        yield
    finally:
        if saved[0] is None:
            del XnnpackBackend.copy_exported_program_for_preprocess
        else:
            XnnpackBackend.copy_exported_program_for_preprocess = saved[0]
        duplicates.copy = saved[1]


class _SharingTensors:
    """The ``copy`` module as ``duplicate_constant_node`` uses it, but ``deepcopy`` of a tensor is a new tensor
    over the same storage (a parameter stays a parameter): see :func:`weights_not_copied`."""

    @staticmethod
    def deepcopy(value, memo=None):
        import copy

        import torch

        if not isinstance(value, torch.Tensor):
            return copy.deepcopy(value, memo)
        alias = value.detach()
        return torch.nn.Parameter(alias, value.requires_grad) if isinstance(value, torch.nn.Parameter) else alias


@contextlib.contextmanager
def weights_on_disk(folder: Path, programs: dict | None = None):
    """While lowering and saving, the serialized weights are not copied into memory: the ``.pte`` writer streams
    each one from where it already is (ExecuTorch's own ``FileBackedData``), and the artifact is byte-identical.
    A weight of ``programs`` (method name -> ExportedProgram, whose tensors outlive the lowering) is read from
    the program's own tensor; any other blob (one the lowering made) from a file in a temporary folder under
    ``folder``. Two places made ``bytes`` copies of weights:
    - XNNPACK copies every delegated weight into its partition's named data, and each method is lowered apart:
      the prefill and decode methods each held all the weights (2x beside the programs, until
      ``to_executorch`` merged the stores);
    - the emitter copies every constant left outside the delegates (the embedding table the gather reads: a
      quarter of Qwen3-0.6B) into ``bytes``, once per method that reads it (the second copy only to hash it
      and find the first), and keeps one until the file is written.
    Each blob is hashed once and kept once (blobs with the same sha256 share one); the folder goes on exit.
    Writing the programs' own weights to files first, then reading them back into the ``.pte``, was 4.9 GB
    each way for Llama-3.2-1B's fp32 row."""
    import shutil
    import tempfile

    spill = _Spill(Path(tempfile.mkdtemp(prefix=".weights_", dir=folder)), programs or {})
    with spill.named_data(), spill.constants_as_files():
        try:
            yield
        finally:
            shutil.rmtree(spill.folder, ignore_errors=True)


class _Spill:
    """The blobs of :func:`weights_on_disk`, one per distinct blob of at least ``SPILL_MIN_BYTES``: a program's
    tensor where the blob is one's whole storage, else a file."""

    def __init__(self, folder: Path, programs: dict):
        import torch

        self.folder, self.blobs = folder, {}
        self.storages = {}   # (address, bytes) of each program tensor's storage -> the tensor
        for program in programs.values():
            for tensor in (*program.state_dict.values(), *program.constants.values()):
                if type(tensor) in (torch.Tensor, torch.nn.Parameter):   # not a subclass (torchao's int4 weights)
                    storage = tensor.untyped_storage()
                    self.storages[storage.data_ptr(), storage.nbytes()] = tensor

    def blob(self, data, address: int | None = None):
        """``data`` (anything with the buffer protocol; at ``address``, when known) as a ``FileBackedData``: the
        program tensor whose whole storage it is, else written to a file without a copy."""
        import hashlib

        from executorch.exir._serialize._cord import FileBackedData

        digest = hashlib.sha256(data).digest()
        if digest not in self.blobs:
            view = memoryview(data).cast("B")
            tensor = self.storages.get((address, len(view)))
            if tensor is not None:
                self.blobs[digest] = tensor_data_class()(tensor, view, digest)
            else:
                target = self.folder / f"{len(self.blobs)}.bin"
                target.write_bytes(data)
                self.blobs[digest] = FileBackedData(str(target), sha256=digest)
        return self.blobs[digest]

    @contextlib.contextmanager
    def named_data(self):
        from executorch.exir._serialize._named_data_store import NamedDataStore

        original = NamedDataStore._add_named_data_to_map

        def add(store, key, data, *args, **kwargs):
            if isinstance(data, bytes) and len(data) >= SPILL_MIN_BYTES:
                data = self.blob(data)
            return original(store, key, data, *args, **kwargs)

        NamedDataStore._add_named_data_to_map = add
        try:
            yield
        finally:
            NamedDataStore._add_named_data_to_map = original

    @contextlib.contextmanager
    def constants_as_files(self):
        """Two modules read a weight as ``bytes(<ctypes array over the tensor's storage>)`` and hash it with
        ``hashlib.sha256``: the emitter (a constant left outside the delegates) and XNNPACK's node visitor
        (every delegated weight, read twice: once to hash it, once for the named data). In both, ``bytes``
        and ``hashlib`` become ones that hand a large array to :meth:`blob` instead (the program's tensor
        itself, or the memory written straight to disk; hashed once) and answer its hash by its digest: at
        Llama-3.2-1B this was five sha256 and four copies of the 4.9 GB of weights per lowering. Everything
        else passes through to the builtins."""
        import builtins
        import ctypes
        import hashlib

        from executorch.backends.xnnpack.operators import node_visitor
        from executorch.exir._serialize._cord import FileBackedData
        from executorch.exir.emit import _emitter

        last = [None, None]   # the array read last and its file: XNNPACK reads each array twice in a row

        def constant_bytes(value=b"", *args, **kwargs):
            if not args and not kwargs and isinstance(value, ctypes.Array) and ctypes.sizeof(value) >= SPILL_MIN_BYTES:
                if last[0] is not value:
                    last[:] = value, self.blob(memoryview(value).cast("B"), ctypes.addressof(value))
                return last[1]
            return builtins.bytes(value, *args, **kwargs)

        class Hashes:
            @staticmethod
            def sha256(data=b"", **kwargs):
                if isinstance(data, FileBackedData):
                    return _KnownDigest(data.sha256())
                return hashlib.sha256(data, **kwargs)

        modules = (_emitter, node_visitor)
        for module in modules:
            module.bytes, module.hashlib = constant_bytes, Hashes
        try:
            yield
        finally:
            last[:] = None, None
            for module in modules:
                del module.bytes
                module.hashlib = hashlib


class _KnownDigest:
    """A sha256 already computed, as ``hashlib``'s object answers for it."""

    def __init__(self, digest: bytes):
        self._digest = digest

    def digest(self) -> bytes:
        return self._digest

    def hexdigest(self) -> str:
        return self._digest.hex()


@functools.lru_cache(maxsize=None)
def tensor_data_class():
    """:class:`TensorData`, defined once ExecuTorch is imported (it subclasses ExecuTorch's ``FileBackedData``)."""
    from executorch.exir._serialize._cord import FileBackedData

    class TensorData(FileBackedData):
        """A program tensor's memory as ExecuTorch's file-backed data (the writer streams it; its digest is
        known), the tensor held so the memory stays its."""

        def __init__(self, tensor, view: memoryview, digest: bytes):
            self._tensor, self._view = tensor, view
            self._path, self._size, self._sha256, self._finalizer = None, len(view), digest, None

        def prefix(self, size: int) -> bytes:
            return bytes(self._view[:size])

        def to_bytes(self) -> bytes:
            return bytes(self._view)

        def write_to_file(self, outfile) -> None:
            outfile.write(self._view)

        def __deepcopy__(self, memo):
            """Itself: the data is never written (a copy of a ``FileBackedData`` reads the same file too).
            The ``.pte`` writer deep-copies the program, constants and all, before serializing it."""
            return self

    return TensorData


# blobs below this stay in memory (scales, biases, norms: thousands of small files otherwise)
SPILL_MIN_BYTES = 1 << 20


def forget_lowered_graphs() -> None:
    """Drop the references the lowering leaves in module-level state, which kept every lowered graph (and
    its delegates' serialized weights: 2x the weights at Qwen3-0.6B) alive after the ``.pte`` was written,
    through every judge: XNNPACK's partitioner configs each keep a ``WhyNoPartition`` holding the last node
    it rejected (node -> graph -> graph module -> lowered modules), ``is_same_node``'s unbounded
    ``lru_cache`` keeps every node pair it compared, and torch's fake-tensor dispatch cache keys hold the
    ``executorch_call_delegate`` arguments (the lowered modules themselves)."""
    import sys

    from executorch.exir.backend.utils import is_same_node
    from torch._subclasses.fake_tensor import FakeTensorMode

    FakeTensorMode.cache_clear()
    is_same_node.cache_clear()
    for name, module in list(sys.modules.items()):
        why = getattr(module, "why", None) if name.startswith("executorch.backends.") else None
        if why is not None and type(why).__name__ == "WhyNoPartition":
            why.node = None
