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

import hashlib
from pathlib import Path

WEIGHTS_FILE = "weights.data"
MIN_BYTES = 1024
ALIGN = 64  # offsets aligned so onnxruntime can map tensors in place


def share_weights(graphs: list[Path]) -> dict:
    """Rewrite ``graphs`` (all in one directory) to read their initializers from one shared file; returns
    ``{"weights_file", "bytes", "tensors", "bytes_saved"}`` for the row's details."""
    import onnx

    folder = graphs[0].parent
    target = folder / WEIGHTS_FILE
    written: dict[str, tuple[int, int]] = {}
    saved = 0
    old_data = set()
    with open(target, "wb") as sink:
        for graph in graphs:
            model = onnx.load(str(graph), load_external_data=False)
            old_data |= {e.value for t in model.graph.initializer for e in t.external_data if e.key == "location"}
            onnx.load_external_data_for_model(model, str(folder))
            saved += sum(_externalize(tensor, sink, written) for tensor in model.graph.initializer)
            onnx.save(model, str(graph))  # the graph alone: every large tensor now points into the shared file
            del model
    for name in old_data - {WEIGHTS_FILE}:  # the exporter's own per-graph data files are superseded
        (folder / name).unlink(missing_ok=True)
    return {"weights_file": WEIGHTS_FILE, "bytes": target.stat().st_size, "tensors": len(written),
            "bytes_saved": saved}


def _externalize(tensor, sink, written: dict) -> int:
    """Point ``tensor`` at its bytes in ``sink`` (appending them the first time); returns the bytes a
    repeat saved (0 the first time or for a tensor kept inline)."""
    from onnx import TensorProto

    data = tensor.raw_data
    if tensor.data_location == TensorProto.EXTERNAL or len(data) < MIN_BYTES:
        return 0  # not loaded (no raw bytes) or small: stays as it is
    # by content, not name: torch.onnx names the weights it folds (a transposed Linear weight) val_<n>, a
    # different n in each graph, so a key with the name stored Qwen3-0.6B's layers twice (4.19 GB, not 2.4)
    key = hashlib.sha256(data).hexdigest()
    repeat = key in written
    if not repeat:
        pad = -sink.tell() % ALIGN
        sink.write(b"\0" * pad)
        written[key] = (sink.tell(), len(data))
        sink.write(data)
    offset, length = written[key]
    tensor.ClearField("raw_data")
    del tensor.external_data[:]
    for k, v in (("location", WEIGHTS_FILE), ("offset", str(offset)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = k, v
    tensor.data_location = TensorProto.EXTERNAL
    return length if repeat else 0
