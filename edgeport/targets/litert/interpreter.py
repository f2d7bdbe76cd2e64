"""The Interpreter a generative ``.tflite`` is judged in, and why a weight-only quantized one runs on
TFLite's builtin kernels instead of XNNPACK.

ai-edge-quantizer's weight-only recipe (``weight-int8``) stores int8 weights behind DEQUANTIZE ops. XNNPACK
(applied by default) dequantizes every such weight to fp32 when a signature is first run and packs its own
copy of it, and keeps both: on Qwen3-shaped models it held 4.3x the fp32 weights for the first signature and
4.7x with prefill and decode (bench/LARGE_GENERATION.md, "Memory, fifth session"), so judging a 0.6 GB
weight-int8 file of a 2.38 GB model took 11.8 GB. TFLite's builtin kernels dequantize each constant once
per signature and multiply the fp32 result in place (no packed copy): 2x the fp32 weights with two
signatures. Measured there: decode as fast as XNNPACK's (memory-bound either way), prefill slower. The row
says which kernels judged it (``runtime_kernels``), so the latency it reports is read as what it is; an
app that runs the file with XNNPACK pays XNNPACK's memory for XNNPACK's prefill.
"""

from __future__ import annotations

import mmap
from pathlib import Path

BUILTIN = ("TFLite builtin kernels (XNNPACK off): XNNPACK holds the dequantized and the packed fp32 "
           "weights of a weight-only int8 model, ~4.7x the fp32 weights (bench/LARGE_GENERATION.md)")


def weight_only(path: Path) -> bool:
    """The file dequantizes int8 constant weights with DEQUANTIZE ops (the weight-only recipe), read
    through the schema's lazy accessors over the mapped file (no copy of a weight)."""
    from ai_edge_litert import schema_py_generated as schema

    int8, dequantize = schema.TensorType.INT8, schema.BuiltinOperator.DEQUANTIZE
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        model = schema.Model.GetRootAs(mapped, 0)
        codes = {i for i in range(model.OperatorCodesLength())
                 if max(model.OperatorCodes(i).BuiltinCode(), model.OperatorCodes(i).DeprecatedBuiltinCode()) == dequantize}
        found = bool(codes) and any(_dequantizes_int8(model, model.Subgraphs(s), codes, int8)
                                    for s in range(model.SubgraphsLength()))
        del model   # the accessors hold views of the mapping, which must close
    return found


def _dequantizes_int8(model, graph, codes: set, int8: int) -> bool:
    for i in range(graph.OperatorsLength()):
        op = graph.Operators(i)
        if op.OpcodeIndex() not in codes or op.InputsLength() < 1:
            continue
        tensor = graph.Tensors(op.Inputs(0))
        buffer = model.Buffers(tensor.Buffer()) if tensor.Buffer() > 0 else None
        if tensor.Type() == int8 and buffer is not None and (buffer.DataLength() > 0 or buffer.Offset() > 1):
            return True
    return False


def kernel_options(path: Path) -> dict:
    """Interpreter keyword arguments for judging ``path``: builtin kernels for a weight-only file (see the
    module docstring), the default (XNNPACK) otherwise."""
    if not weight_only(path):
        return {}
    from ai_edge_litert.interpreter import OpResolverType

    return {"experimental_op_resolver_type": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES}


def interpreter(path: Path, threads: int):
    """The Interpreter a generative row is judged (and ``edgeport generate`` runs) in."""
    from ai_edge_litert.interpreter import Interpreter

    return Interpreter(model_path=str(path), num_threads=threads, **kernel_options(Path(path)))
