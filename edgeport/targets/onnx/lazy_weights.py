"""onnxruntime's quantizer reading a graph's external weights one at a time, not holding them all (twice).

Why: ``quantize_dynamic(path)`` loads the fp32 graph with all its external data, and its ``ONNXQuantizer``
then deep-copies the model, saves it and loads it back for shape inference while the first copy is still
referenced: Qwen3-0.6B's quantization held ~3x its 2.4 GB of weights (+6 GB; bench/LARGE_GENERATION.md).
Inside :func:`weights_read_lazily`, the quantizer's model loads keep external tensors external (the graph
alone: those copies are kilobytes), a weight it quantizes is read from the file into a temporary copy (the
graph keeps pointing at the file), and the weights it left as they were (an embedding: Gather is not
quantized) are read into the graph just before it is saved. The quantizer's code and math are untouched, so
the output is the same bytes (tests/test_onnx_shared_weights.py checks it against the plain quantizer).
"""

from __future__ import annotations

import contextlib
import importlib


@contextlib.contextmanager
def weights_read_lazily():
    """For the ``quantize_dynamic`` calls inside: the source graph's external weights read on demand, from
    the folder of the first graph a call loads (the one it was given)."""
    import onnx
    from onnx.external_data_helper import uses_external_data

    utils = importlib.import_module("onnxruntime.quantization.quant_utils")
    quantize = importlib.import_module("onnxruntime.quantization.quantize")
    base = importlib.import_module("onnxruntime.quantization.base_quantizer")
    quantizer = importlib.import_module("onnxruntime.quantization.onnx_quantizer")
    model_cls = importlib.import_module("onnxruntime.quantization.onnx_model").ONNXModel
    folder: list[str] = []   # the source graph's folder: its tensors' locations are relative to it
    plain_array, plain_save = utils.tensor_proto_to_array, model_cls.save_model_to_file

    def load(model_path):
        inferred = utils.generate_identified_filename(model_path, "-inferred")
        onnx.shape_inference.infer_shapes_path(str(model_path), str(inferred))
        model = onnx.load(inferred.as_posix(), load_external_data=False)
        utils.add_infer_metadata(model)
        inferred.unlink()
        folder[:] = folder or [str(model_path.parent)]   # later loads are the quantizer's own temporary copies
        return model

    def to_array(tensor):
        return plain_array(inline_tensor(tensor, folder[0], copy=True) if uses_external_data(tensor) else tensor)

    def save(self, *args, **kwargs):
        for tensor in self.model.graph.initializer:
            if uses_external_data(tensor):
                inline_tensor(tensor, folder[0], copy=False)
        return plain_save(self, *args, **kwargs)

    patches = [(utils, "load_model_with_shape_infer", load), (quantize, "load_model_with_shape_infer", load),
               (base, "tensor_proto_to_array", to_array), (quantizer, "tensor_proto_to_array", to_array),
               (model_cls, "save_model_to_file", save)]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    try:
        for owner, name, value in patches:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


def transposed_tensor(tensor, folder: str, name: str):
    """A 2-D ``tensor`` read in and transposed, as a new tensor called ``name`` (what the MatMul quantizers pack
    for a weight stored (N, K): a Gemm's ``transB``, a head tied to the embedding table)."""
    from onnx import numpy_helper

    return numpy_helper.from_array(numpy_helper.to_array(inline_tensor(tensor, folder, copy=True)).T.copy(), name)


def inline_tensor(tensor, folder: str, copy: bool):
    """``tensor`` (or a copy of it) with its external bytes read in (``folder``: where its location is relative
    to); one already inline is returned as it is (or copied)."""
    import onnx
    from onnx.external_data_helper import load_external_data_for_tensor, uses_external_data

    if copy:
        tensor, original = onnx.TensorProto(), tensor
        tensor.CopyFrom(original)
    if not uses_external_data(tensor):
        return tensor
    load_external_data_for_tensor(tensor, folder)
    tensor.data_location = onnx.TensorProto.DEFAULT
    del tensor.external_data[:]
    return tensor
