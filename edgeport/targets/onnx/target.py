"""ONNX target: the exported program -> ``.onnx`` via ``torch.onnx.export(program, dynamo=True)``.

``torch.onnx.export`` takes the ExportedProgram itself (verified on torch 2.13), so ONNX converts exactly the
graph every other target converts. Only where it cannot take that program does it capture the eager module
itself (``own_capture`` in the row's rewrites), so edgeport is never worse than torch.onnx on its own.
Dynamic dims the user exported with ``torch.export.Dim`` stay symbolic in the ONNX graph and are listed in
the report (``dynamic_inputs``). Quantized variants run onnxruntime's own quantizer on the fp32 model:
``dynamic-int8`` (int8 weights, activations quantized at run time — no calibration) and ``int8`` (static
QDQ, activation ranges calibrated on ``--calibration-data`` or, with a warning, on the parity samples),
and ``int4-block32`` (onnxruntime's block-wise int4 weights, ``MatMulNBits``: :mod:`.nbits`).

int8 is built for every x86-64 CPU by default (``--onnx-int8 portable``): onnxruntime's int8 kernels take a
different path on CPUs without VNNI (most AVX2 machines), where VPMADDUBSW's 16-bit intermediate saturates
when weights use the full 8-bit range, so an artifact accurate on a VNNI machine is garbage on another
(measured on a two-input MLP: min cosine 0.937 without VNNI vs 0.9995 with). 7-bit weights
(``reduce_range``) cannot saturate on any of them, cost no speed, and lose ~2 dB of SNR; ``--onnx-int8 vnni``
keeps the full range for fleets known to have VNNI. The row records which (``int8_kernels``).
"""

from __future__ import annotations

import logging
from pathlib import Path

from edgeport.diagnostics import histogram, summary
from edgeport.errors import UsageError
from edgeport.targets.onnx import quantize as onnx_quant, recurrent as onnx_recurrent, share as onnx_share
from edgeport.targets.onnx.quantize import exclusions
from edgeport.targets.base import ConvertJob, Converted, FallbackSupport, Target, TargetOption
from edgeport.targets.onnx.runtime import OnnxRunner
from edgeport.validate import parity

FP32_NAME = "model.onnx"
OWN_CAPTURE = "own_capture"         # the row's rewrites entry when torch.onnx captured the module itself
CAPTURE_KEY = "edgeport.capture"    # ...and the artifact's metadata entry that says so
INT8_KERNELS = {
    "portable": {"activation_type": "uint8", "weight_type": "int8", "reduce_range": True},
    "vnni": {"activation_type": "int8", "weight_type": "int8", "reduce_range": False},
}


def int8_kernels(job: ConvertJob) -> dict:
    name = job.options.get("onnx_int8") or "portable"
    return {"built_for": name, **INT8_KERNELS[name]}


def scheme_details(job) -> dict:
    """What a quantized forward row records about how it was built: the int8 kernels, or the int4 blocks."""
    from edgeport.targets.onnx.nbits import INT4

    return {"int4": INT4} if job.variant == "int4-block32" else {"int8_kernels": int8_kernels(job)}


def check_int8_kernels(value: str) -> None:
    if value not in INT8_KERNELS:
        raise UsageError(f"--onnx-int8 {value!r}: expected one of {', '.join(INT8_KERNELS)}")


def convert(job: ConvertJob) -> Converted:
    fp32 = job.out_dir / FP32_NAME
    if job.variant == "fp32" or not fp32.is_file():  # quantized variants start from the fp32 model (re-export only if it is missing)
        export_fp32(job, fp32)
    path = fp32
    if job.variant != "fp32":
        path = job.out_dir / f"model_{job.variant}.onnx"
        job.progress(f"quantization ({job.variant})")
        QUANTIZERS[job.variant](fp32, path, job, **exclusions(fp32, job))
    details = describe(path)
    own = details.pop("capture", None) == "module"
    if job.variant != "fp32":
        details.update(scheme_details(job))
        if own:
            job.notes.append(f"quantized from {FP32_NAME}, which torch.onnx captured from the module itself")
    return Converted(path, details, rewrites=[OWN_CAPTURE] if own else [], files=external_files(path))


def external_files(path: Path) -> list[Path]:
    """The external data files ``path``'s tensors live in (``model.onnx.data``: torch.onnx writes one above
    1.5 GB of weights, or always with ``--onnx-external-data``): without them the model does not load."""
    import onnx
    from onnx.external_data_helper import ExternalDataInfo, _get_all_tensors, uses_external_data

    model = onnx.load(str(path), load_external_data=False)
    names = {ExternalDataInfo(t).location for t in _get_all_tensors(model) if uses_external_data(t)}
    return [path.parent / name for name in sorted(names)]


def export_fp32(job: ConvertJob, path: Path) -> None:
    """Under the program's own capture mode: torch.onnx re-runs the decomposed graph (its type-promotion
    pass) with the program's parameters, and with grad enabled it would pick other kernels than the ones
    the graph was recorded with (see :func:`edgeport.core.program.capture_mode`)."""
    from edgeport.core.memory import program_weight_bytes
    from edgeport.core.program import capture_mode

    logging.getLogger("torch.onnx").setLevel(logging.ERROR)  # "torchvision is not installed. Skipping ..." per op
    job.progress("torch.onnx export")
    with capture_mode():
        try:
            onnx_program = _export_shared(job)
        except Exception as exc:
            if job.eager_module() is None:
                raise
            onnx_program = _own_capture(job, exc)
    job.progress("serialization")
    external = job.options.get("onnx_external_data") or program_weight_bytes(job.program) > EXTERNAL_ABOVE
    onnx_program.save(str(path), external_data=True if external else None)


# fp32 weights above which model.onnx keeps its weights in model.onnx.data (torch.onnx does so itself above
# 2 GB): saved inline, the protobuf is built and serialized in memory and onnxruntime parses a copy of it,
# 4.4x the weights of peak RSS on a 1.12 GB model against 1.4x with external data (bench/LARGE.md);
# --onnx-external-data asks for it at any size
EXTERNAL_ABOVE = 1 << 30


def _export_shared(job: ConvertJob):
    from edgeport.targets.onnx.exporter import onnx_export

    return onnx_export(job.program, tuple(job.example_inputs), dynamo=True, verbose=False)


def _own_capture(job: ConvertJob, shared_error: Exception):
    """Where torch.onnx cannot take the shared program, its own capture of the eager module (its own
    export strategies and decompositions), so edgeport is never worse than calling torch.onnx directly.
    Same module, inputs in the program's order and under its names, judged against the same reference;
    the row says so (``own_capture``), and the artifact too (its metadata), for the variants built on it."""
    from edgeport.targets.onnx.exporter import onnx_export

    inputs, outputs = _io_names(job.program)
    try:
        onnx_program = onnx_export(job.module, tuple(job.example_inputs), dynamo=True, verbose=False,
                                         input_names=inputs, output_names=outputs)
    except Exception as exc:
        job.notes.append(f"torch.onnx's own capture of the module failed too: {summary(exc)}")
        raise shared_error
    onnx_program.model.metadata_props[CAPTURE_KEY] = "module"
    static = ", at the example shapes" if job.dynamic else ""
    job.notes.append(f"the shared program did not convert ({summary(shared_error)}); converted torch.onnx's "
                     f"own capture of the module instead{static}")
    return onnx_program


def _io_names(program) -> tuple[list[str] | None, list[str] | None]:
    """The names the shared program's ONNX graph would have had (its user placeholders and outputs), so
    the manifest reads the same whichever capture converted; None where they would clash."""
    from torch.export.graph_signature import InputKind, OutputKind

    signature = program.graph_signature
    inputs = [s.arg.name for s in signature.input_specs if s.kind == InputKind.USER_INPUT]
    outputs = [getattr(s.arg, "name", None) for s in signature.output_specs if s.kind == OutputKind.USER_OUTPUT]
    if None in outputs or len(set(inputs + outputs)) != len(inputs) + len(outputs):
        outputs = None
    return inputs, outputs


def _dynamic_int8(src: Path, dst: Path, job: ConvertJob, **layers) -> None:
    """int8 weights of MatMul/Gemm, one scale per output channel, activations quantized at run time.
    Convolutions stay float: onnxruntime's dynamic ConvInteger runs several times slower than its fp32 Conv
    (static int8 is the CNN variant). Per-channel, not ``quantize_dynamic``'s per-tensor default: one scale
    for a whole LLM weight matrix let its outlier columns set everyone's step (SmolLM2-135M, teacher-forced:
    mean KLD 0.20 per-tensor, 0.068 per-channel; bench/LLM_QUALITY.md). ``layers``: ``nodes_to_exclude`` /
    ``nodes_to_quantize`` (layers kept float, :mod:`onnx_quant`)."""
    from onnxruntime.quantization import quantize_dynamic

    kernels = int8_kernels(job)
    with _quiet_quantizer():  # LSTMs too, once their weights are folded (onnx_recurrent)
        onnx_recurrent.quantize_from(src, lambda model: quantize_dynamic(
            str(model), str(dst), weight_type=_quant_type(kernels["weight_type"]), reduce_range=kernels["reduce_range"],
            per_channel=True, op_types_to_quantize=["MatMul", "Gemm", *onnx_recurrent.RECURRENT_ONNX], **layers))


def _static_int8(src: Path, dst: Path, job: ConvertJob, **layers) -> None:
    """Static QDQ int8: per-channel weights, activation ranges from MinMax over the calibration samples.
    ``layers``: ``nodes_to_exclude`` / ``nodes_to_quantize`` and a ``calibration_cache_path`` (the fallback
    search calibrates once and re-quantizes many times)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    from edgeport.targets.onnx.runtime import feed_dict, load

    samples = job.calibration_samples()
    if not job.calibration_is_real:
        job.notes.append("int8 calibrated on random samples (no --calibration-data): ranges may not match real inputs")
    session = load(src, 1).session

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([feed_dict(session, s) for s in samples])

        def get_next(self):
            return next(self.feeds, None)

    with _quiet_quantizer():
        kernels = int8_kernels(job)
        onnx_recurrent.quantize_from(src, lambda model: quantize_static(
            str(model), str(dst), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
            activation_type=_quant_type(kernels["activation_type"]),
            weight_type=_quant_type(kernels["weight_type"]), reduce_range=kernels["reduce_range"], **layers))
        onnx_recurrent.quantize_recurrent(dst, _quant_type(kernels["weight_type"]), kernels["reduce_range"],
                                          layers.get("nodes_to_exclude") or (), layers.get("nodes_to_quantize"))


def _int4_block32(src: Path, dst: Path, job: ConvertJob, **layers) -> None:
    """int4 weights in blocks of 32 (onnxruntime's MatMulNBits, :mod:`.nbits`); ``layers`` as for int8."""
    from edgeport.targets.onnx.nbits import INT4, quantize_nbits

    if not quantize_nbits(src, dst, INT4, **layers):
        job.notes.append("int4-block32: no MatMul/Gemm with a constant 2-D weight to quantize")


def _quant_type(name: str):
    from onnxruntime.quantization import QuantType

    return {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8}[name]


QUANTIZERS = {"dynamic-int8": _dynamic_int8, "int8": _static_int8, "int4-block32": _int4_block32}


def prepare_fallback(job: ConvertJob) -> onnx_quant.OnnxLayerQuantizer:
    """The fallback search's candidates, quantized by the same functions as ``convert``."""
    return onnx_quant.OnnxLayerQuantizer(job, QUANTIZERS[job.variant], export_fp32, job.out_dir / FP32_NAME)


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
    capture = next((p.value for p in model.metadata_props if p.key == CAPTURE_KEY), None)
    return {"opset": opset, "ops": histogram(node.op_type for node in model.graph.node),
            "dynamic_inputs": {k: v for k, v in dynamic.items() if v}, **({"capture": capture} if capture else {})}


TARGET = Target(
    name="onnx",
    description="ONNX for onnxruntime (torch.onnx dynamo exporter; onnxruntime quantization)",
    variants=("fp32", "dynamic-int8", "int8", "int4-block32"),
    budgets={"fp32": parity.FP32, "dynamic-int8": parity.DYNAMIC_INT8, "int8": parity.STATIC_INT8,
             "int4-block32": parity.INT4_BLOCK},
    requires=("onnx", "onnxruntime", "onnxscript"),
    extra="onnx",
    convert=convert,
    runners=(OnnxRunner,),
    generative="edgeport.targets.onnx.generate",
    options=(TargetOption("onnx-int8", "onnx: CPUs the forward int8 variants are built for: portable (default: "
                          "accurate on every x86-64 CPU) or vnni (full 8-bit weights; saturate on CPUs without VNNI)",
                          validate=check_int8_kernels),
             TargetOption("onnx-external-data", "onnx: store the weights in model.onnx.data beside model.onnx "
                          "(torch.onnx does so by itself above 1.5 GB of weights)", kind=bool)),
    calibrated_variants=("int8",),
    read_quantization=onnx_share.read,
    dynamic_dims=True,
    float_fallback=FallbackSupport(onnx_quant.SCHEMES, onnx_quant.layers, prepare_fallback),
    rewrites=("upcast_fp32", "inline_custom_ops", "complex_pairs"),
    refuses=(("bfloat16", "onnxruntime CPU has no bf16 Mul"),
             ("aten.view_as_complex.default", "No decompositions registered for the complex-valued input")),
)
