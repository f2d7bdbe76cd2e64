"""Reading a ``.tflite`` through the schema's lazy accessors over the mapped file: op counts, unrolled loops
and the judge's kernel choice read the operator list without copying a weight (unpacking the model with
``flatbuffer_utils.read_model`` would hold a copy of every one)."""

from __future__ import annotations


def opcode_names(model) -> list[str]:
    """The builtin operator name of each operator code, by index (opcode = max(builtin, deprecated builtin):
    the schema kept the old 8-bit field beside the new one)."""
    from ai_edge_litert import schema_py_generated as schema

    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    return [names.get(max(code.BuiltinCode(), code.DeprecatedBuiltinCode()), "?")
            for code in (model.OperatorCodes(i) for i in range(model.OperatorCodesLength()))]


def is_constant(model, tensor) -> bool:
    """The tensor has data in the file: in its buffer, or past the flatbuffer (offset > 1, the schema's mark
    for buffers stored after it, as ai-edge-quantizer writes large models)."""
    buffer = model.Buffers(tensor.Buffer()) if tensor.Buffer() > 0 else None
    return buffer is not None and (buffer.DataLength() > 0 or buffer.Offset() > 1)
