"""ONNX target: the exported program -> ``.onnx`` via ``torch.onnx.export(program, dynamo=True)``.

``torch.onnx.export`` takes the ExportedProgram itself (verified on torch 2.13), so ONNX converts exactly the
graph every other target converts; the user's module is never traced a second time. Dynamic dims the user
exported with ``torch.export.Dim`` stay symbolic in the ONNX graph and are listed in the report
(``dynamic_inputs``). Quantized variants run onnxruntime's own quantizer on the fp32 model: ``dynamic-int8``
(int8 weights, activations quantized at run time — no calibration) and ``int8`` (static QDQ, activation
ranges calibrated on ``--calibration-data`` or, with a warning, on the parity samples).
"""

from __future__ import annotations

import logging
from pathlib import Path

from edgeport.diagnostics import histogram
from edgeport.export.registry import ConvertJob, Converted, Target
from edgeport.runtimes.onnxruntime import OnnxRunner

FP32_NAME = "model.onnx"


def convert(job: ConvertJob) -> Converted:
    fp32 = job.out_dir / FP32_NAME
    if job.variant == "fp32" or not fp32.is_file():  # quantized variants start from the fp32 model (re-export only if it is missing)
        _export_fp32(job, fp32)
    if job.variant == "fp32":
        path = fp32
    else:
        path = job.out_dir / f"model_{job.variant}.onnx"
        QUANTIZERS[job.variant](fp32, path, job)
    return Converted(path, describe(path))


def _export_fp32(job: ConvertJob, path: Path) -> None:
    """Under the program's own capture mode: torch.onnx re-runs the decomposed graph (its type-promotion
    pass) with the program's parameters, and with grad enabled it would pick other kernels than the ones
    the graph was recorded with (see :func:`edgeport.export.program.capture_mode`)."""
    import torch

    from edgeport.export.program import capture_mode

    logging.getLogger("torch.onnx").setLevel(logging.ERROR)  # "torchvision is not installed. Skipping ..." per op
    with capture_mode():
        program = torch.onnx.export(job.program, tuple(job.example_inputs), dynamo=True, verbose=False)
    program.save(str(path))


def _dynamic_int8(src: Path, dst: Path, job: ConvertJob) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _quiet_quantizer():
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)


def _static_int8(src: Path, dst: Path, job: ConvertJob) -> None:
    """Static QDQ int8: per-channel weights, activation ranges from MinMax over the calibration samples."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    from edgeport.runtimes.onnxruntime import feed_dict, load

    samples = job.options.get("calibration") or [[x.numpy() for x in job.example_inputs]]
    if not job.options.get("calibration_is_real"):
        job.notes.append("int8 calibrated on random samples (no --calibration-data): ranges may not match real inputs")
    session = load(src, 1).session

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([feed_dict(session, s) for s in samples])

        def get_next(self):
            return next(self.feeds, None)

    with _quiet_quantizer():
        quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)


QUANTIZERS = {"dynamic-int8": _dynamic_int8, "int8": _static_int8}


class _quiet_quantizer:
    """onnxruntime's quantizer logs a pre-processing hint on the root logger for every model: noise here."""

    def __enter__(self):
        self.level = logging.getLogger().level
        logging.getLogger().setLevel(logging.ERROR)

    def __exit__(self, *exc):
        logging.getLogger().setLevel(self.level)


def describe(path: Path) -> dict:
    """Report fields: opset, op histogram, and which input dims stayed symbolic."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    initializers = {i.name for i in model.graph.initializer}
    dynamic = {i.name: [d.dim_param for d in i.type.tensor_type.shape.dim if d.dim_param]
               for i in model.graph.input if i.name not in initializers}
    return {"opset": opset, "ops": histogram(node.op_type for node in model.graph.node),
            "dynamic_inputs": {k: v for k, v in dynamic.items() if v}}


TARGET = Target(
    name="onnx",
    description="ONNX for onnxruntime (torch.onnx dynamo exporter; onnxruntime quantization)",
    variants=("fp32", "dynamic-int8", "int8"),
    requires=("onnx", "onnxruntime", "onnxscript"),
    extra="onnx",
    convert=convert,
    runners=(OnnxRunner,),
    dynamic_dims=True,
    rewrites=("upcast_fp32", "inline_custom_ops"),
    refuses=(("bfloat16", "onnxruntime CPU has no bf16 Mul"),),
)
