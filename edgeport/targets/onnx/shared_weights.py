"""One weights file for all of a generative artifact's graphs (``prefill_<L>.onnx`` ..., ``decode.onnx``).

Why: each graph is exported on its own and carries every weight, so a 1B model in fp32 with one prefill
length took 2 x 4.9 GB on disk (and one more copy per extra ``--prefill-len``), and past 2 GB each graph
needs external data anyway (protobuf's limit). Here every initializer of every graph is moved into ONE
``weights.data`` beside the graphs, each distinct content (same bytes, whatever the tensor's name) written
once; the graphs keep only offsets into it (ONNX external data: ``location``, ``offset``, ``length``),
which onnxruntime and ``onnx.load`` resolve relative to the graph's own directory. Small tensors (under ``MIN_BYTES``: shapes,
scalars) stay inline, where onnxruntime's constant folding expects them.
"""

from __future__ import annotations

from pathlib import Path

WEIGHTS_FILE = "weights.data"
MIN_BYTES = 1024
ALIGN = 64  # offsets aligned so onnxruntime can map tensors in place


def share_weights(graphs: list[Path]) -> dict:
    """Rewrite ``graphs`` (all in one directory) to read their initializers from one shared file; returns
    ``{"weights_file", "bytes", "tensors", "bytes_saved"}`` for the row's details.

    Streamed: a graph is read without its external data and each tensor's bytes are copied from the
    exporter's file to the shared one in chunks (hashed first), so this never holds a graph's weights in
    memory (loading each graph with its data held 2.4 GB for Qwen3-0.6B, beside the programs)."""
    import onnx

    folder = graphs[0].parent
    target = folder / WEIGHTS_FILE
    partial = target.with_name(WEIGHTS_FILE + ".partial")  # a graph may still read the old shared file
    written: dict[str, tuple[int, int]] = {}
    saved = 0
    old_data: set[str] = set()
    with open(partial, "wb") as sink, Sources(folder) as sources:
        for graph in graphs:
            model = onnx.load(str(graph), load_external_data=False)
            old_data |= _inline_other_external_tensors(model, folder)
            for tensor in model.graph.initializer:
                saved += _externalize(tensor, sink, written, sources)
            onnx.save(model, str(graph))  # the graph alone: every large tensor now points into the shared file
            del model
    partial.replace(target)
    for name in old_data - {WEIGHTS_FILE}:  # the exporter's own per-graph data files are superseded
        (folder / name).unlink(missing_ok=True)
    return {"weights_file": WEIGHTS_FILE, "bytes": target.stat().st_size, "tensors": len(written),
            "bytes_saved": saved}


class WeightsWriter:
    """The shared file written as the graphs are exported: :meth:`save` writes an exported graph (an onnx_ir
    model, its initializers still the program's tensors) with each large initializer's bytes appended to
    ``weights.data`` once (by content, as :func:`share_weights` keys them) and the graph pointing at them.

    Why: saved on its own, each graph first wrote every weight to its own data file, which
    :func:`share_weights` then read back and copied into the shared one: at Llama-3.2-1B two graphs wrote
    9.9 GB, read 9.9 GB and wrote 4.9 GB again, about a third of the fp32 conversion. The file and the graphs
    are the ones :func:`share_weights` writes from the same tensors."""

    # onnx_ir dtypes whose numpy view holds the bytes ONNX stores (little-endian): hashed and written in place
    VIEWED = ("FLOAT", "FLOAT16", "DOUBLE", "INT64", "INT32", "INT8", "UINT8", "BOOL")

    def __init__(self, folder: Path):
        self.folder, self.written, self.saved = folder, {}, 0
        self.sink = open(folder / WEIGHTS_FILE, "wb")

    def __enter__(self) -> "WeightsWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.sink.close()

    def save(self, model, path: Path) -> None:
        import onnx_ir as ir

        for value in model.graph.initializers.values():
            tensor = value.const_value
            if tensor is None or tensor.nbytes < MIN_BYTES or isinstance(tensor, ir.ExternalTensor):
                continue
            offset, length = self._append(self._bytes(tensor))
            value.const_value = ir.ExternalTensor(WEIGHTS_FILE, offset, length, dtype=tensor.dtype, shape=tensor.shape,
                                                  name=value.name, base_dir=str(self.folder))
        self.sink.flush()
        ir.save(model, str(path))   # external tensors saved as they point (onnx_ir: "saved unmodified")

    def _bytes(self, tensor):
        import numpy as np

        if tensor.dtype.name in self.VIEWED:
            return memoryview(np.ascontiguousarray(tensor.numpy())).cast("B")
        return tensor.tobytes()

    def _append(self, data) -> tuple[int, int]:
        import hashlib

        offset, repeat = _placed(self.sink, self.written, hashlib.sha256(data).hexdigest(), len(data), lambda: [data])
        self.saved += len(data) if repeat else 0
        return offset, len(data)

    def details(self) -> dict:
        """What :func:`share_weights` returns for the row."""
        return {"weights_file": WEIGHTS_FILE, "bytes": (self.folder / WEIGHTS_FILE).stat().st_size,
                "tensors": len(self.written), "bytes_saved": self.saved}


def _placed(sink, written: dict, key: str, length: int, pieces) -> tuple[int, bool]:
    """(the offset of the blob ``key`` in ``sink``, whether it was there already): the first time, ``pieces()``
    appended at the next ``ALIGN``ed offset and ``written[key]`` set to (offset, ``length``)."""
    repeat = key in written
    if not repeat:
        sink.write(b"\0" * (-sink.tell() % ALIGN))
        written[key] = (sink.tell(), length)
        for chunk in pieces():
            sink.write(chunk)
    return written[key][0], repeat


class Sources:
    """The external data files the graphs point into, opened once each; a tensor's bytes read in chunks."""

    CHUNK = 1 << 26

    def __init__(self, folder: Path):
        self.folder, self.files = folder, {}

    def __enter__(self) -> "Sources":
        return self

    def __exit__(self, *exc) -> None:
        for f in self.files.values():
            f.close()

    def chunks(self, location: str, offset: int, length: int):
        f = self.files.get(location) or self.files.setdefault(location, open(self.folder / location, "rb"))
        f.seek(offset)
        left = length
        while left > 0:
            chunk = f.read(min(left, self.CHUNK))
            if not chunk:
                raise ValueError(f"{location}: {length} bytes at offset {offset} run past the end of the file")
            left -= len(chunk)
            yield chunk


def _location(tensor) -> tuple[str, int, int | None]:
    info = {e.key: e.value for e in tensor.external_data}
    return info["location"], int(info.get("offset", 0)), int(info["length"]) if "length" in info else None


def _inline_other_external_tensors(model, folder: Path) -> set[str]:
    """Tensors outside the initializers (a Constant node's value) that point into an exporter's file are
    loaded inline (that file goes); returns every data file the graph named."""
    from onnx import TensorProto
    from onnx.external_data_helper import _get_all_tensors, _get_attribute_tensors, load_external_data_for_tensor

    named = {_location(t)[0] for t in _get_all_tensors(model) if t.data_location == TensorProto.EXTERNAL}
    for tensor in _get_attribute_tensors(model):
        if tensor.data_location == TensorProto.EXTERNAL:
            load_external_data_for_tensor(tensor, str(folder))
            tensor.data_location = TensorProto.DEFAULT
            del tensor.external_data[:]
    return named


def _externalize(tensor, sink, written: dict, sources: Sources) -> int:
    """Point ``tensor`` at its bytes in ``sink`` (appending them the first time); returns the bytes a
    repeat saved (0 the first time or for a tensor kept inline)."""
    import hashlib

    from onnx import TensorProto

    external = tensor.data_location == TensorProto.EXTERNAL
    if external:
        location, offset, length = _location(tensor)
        length = (sources.folder / location).stat().st_size - offset if length is None else length
    else:
        length = len(tensor.raw_data)
    if length < MIN_BYTES:  # small (or typed fields, not raw bytes): inline, where onnxruntime folds it
        if external:
            tensor.raw_data = b"".join(sources.chunks(location, offset, length))
            tensor.data_location = TensorProto.DEFAULT
            del tensor.external_data[:]
        return 0
    pieces = (lambda: sources.chunks(location, offset, length)) if external else (lambda: [tensor.raw_data])
    # by content, not name: torch.onnx names the weights it folds (a transposed Linear weight) val_<n>, a
    # different n in each graph, so a key with the name stored Qwen3-0.6B's layers twice (4.19 GB, not 2.4)
    digest = hashlib.sha256()
    for chunk in pieces():
        digest.update(chunk)
    offset_out, repeat = _placed(sink, written, digest.hexdigest(), length, pieces)
    tensor.ClearField("raw_data")
    del tensor.external_data[:]
    for k, v in (("location", WEIGHTS_FILE), ("offset", str(offset_out)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = k, v
    tensor.data_location = TensorProto.EXTERNAL
    return length if repeat else 0
