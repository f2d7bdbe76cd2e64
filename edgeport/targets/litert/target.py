"""LiteRT target: the exported program -> ``.tflite`` via litert-torch, in fp32 and quantized variants.

litert-torch does not take an ExportedProgram, but takes ``program.module()`` (it re-exports that graph),
so it still converts the one program every target shares. Quantized variants use litert-torch's own
recipes (fp16, dynamic-int8, weight-int8) and PT2E static int8 calibrated on the caller's samples; int8 and
dynamic-int8 can keep chosen layers float (``float_layers``, :mod:`edgeport.targets.litert.quantize`).
"""

from __future__ import annotations

import os
from pathlib import Path

from edgeport.diagnostics import histogram
from edgeport.targets.litert import hf_lowering as litert_hf, kernels as litert_kernels
from edgeport.targets.litert import over_lightweight_threshold, quantize as litert_quant, share as litert_share
from edgeport.targets.base import ConvertJob, Converted, FallbackSupport, Target, TargetOption
from edgeport.targets._pt2e import float_filter
from edgeport.targets.litert.runtime import CompiledModelRunner, LiteRTRunner
from edgeport.validate import parity

RECIPES = {
    "fp16": "full_fp16_recipe",
    "dynamic-int8": "full_dynamic_recipe",
    "weight-int8": "full_weight_only_recipe",
}


def convert(job: ConvertJob) -> Converted:
    os.environ.setdefault("LITERT_TORCH_SHOW_PROGRESS", "n")
    import litert_torch

    path = job.out_dir / f"model_{job.variant}.tflite"
    details = {"nhwc": bool(job.options.get("nhwc"))}
    job, fast = litert_kernels.with_fast_layers(job)
    details.update({"float_on_purpose": fast} if fast else {})
    if job.variant == "dynamic-int8" and job.float_layers:
        path.write_bytes(litert_quant.dynamic_with_float_layers(job))
        return Converted(path, {"ops": op_counts(path), **details})
    module, args = litert_quant.program_module(job)
    quant_config = None
    if job.variant in RECIPES:
        from litert_torch.generative.quantize import quant_recipes

        quant_config = getattr(quant_recipes, RECIPES[job.variant])()
    elif job.variant == "int8":
        if not job.calibration_is_real:
            job.notes.append("int8 calibrated on random samples (no --calibration-data): ranges may not match real inputs")
        job.progress("PT2E calibration (int8)")
        module, quant_config = litert_quant.pt2e_int8(module, job, float_filter(job.program, job.float_layers))
    job.progress("litert_torch conversion" + (f" + quantization ({job.variant})" if quant_config else ""))
    edge = litert_torch.convert(module, args, quant_config=quant_config, **large_model_options(job, quant_config))
    job.progress("serialization")
    edge.export(str(path))
    if job.variant == "int8":
        litert_kernels.quantize_recurrent(path, job)
    return Converted(path, {"ops": op_counts(path), **details})


def large_model_options(job: ConvertJob, quant_config) -> dict:
    large = quant_config is None and over_lightweight_threshold(job.program)
    return {"lightweight_conversion": True} if large else {}


def op_counts(path: Path) -> dict[str, int]:
    """Operator histogram read from the flatbuffer (opcode = max(builtin, deprecated builtin)), through the
    schema's lazy accessors over the mapped file: unpacking it (flatbuffer_utils.read_model) would hold a
    copy of every weight."""
    import mmap

    from ai_edge_litert import schema_py_generated as schema

    from edgeport.targets.litert.flatbuffer import opcode_names

    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        model = schema.Model.GetRootAs(mapped, 0)
        names = opcode_names(model)
        codes = [model.OperatorCodes(i) for i in range(model.OperatorCodesLength())]

        def op_name(op) -> str:
            code = codes[op.OpcodeIndex()]
            name = names[op.OpcodeIndex()]
            custom = code.CustomCode()
            if name == "CUSTOM" and custom:
                return f"CUSTOM:{custom.decode() if isinstance(custom, bytes) else custom}"
            return name

        found = [op_name(g.Operators(i)) for g in (model.Subgraphs(k) for k in range(model.SubgraphsLength()))
                 for i in range(g.OperatorsLength())]
        codes.clear()   # the accessors hold views of the mapping, which must close
        del model
    return histogram(found)


TARGET = Target(
    name="litert",
    description="LiteRT .tflite for Android, iOS and the web (litert-torch, ai-edge-litert)",
    variants=("fp32", "fp16", "dynamic-int8", "weight-int8", "int8"),
    budgets={"fp32": parity.FP32, "fp16": parity.FP16, "dynamic-int8": parity.DYNAMIC_INT8,
             "weight-int8": parity.WEIGHT_INT8, "int8": parity.STATIC_INT8, "int4-block32": parity.INT4_BLOCK,
             "fp32-litertlm": parity.FP32},
    requires=("litert_torch", "ai_edge_litert"),
    extra="litert",
    convert=convert,
    runners=(LiteRTRunner, CompiledModelRunner),
    generative="edgeport.targets.litert.generate",
    float_fallback=FallbackSupport(litert_quant.SCHEMES, litert_quant.layers, litert_quant.prepare),
    calibrated_variants=("int8",),
    read_quantization=litert_share.read,
    relative_cost=2.0,
    options=(TargetOption("nhwc", "litert: channel-last (NHWC) image inputs in the .tflite", kind=bool),
             TargetOption("litertlm", "litert: also write model.litertlm (LiteRT-LM bundle via litert-torch's "
                          "export_hf) for a Hugging Face causal LM, judged in litert_lm.Engine", kind=bool),
             TargetOption("litert-lowering", "litert: text-generation .tflite lowered by litert-torch's export_hf or "
                          "edgeport's own lowering: auto (default: export_hf when installed and it takes the model), "
                          "export_hf, edgeport", validate=litert_hf.validate)),
    rewrites=("upcast_fp32", "inline_custom_ops", "histc_onehot", "real_dft", "conv_transpose_output_padding",
              "sort_by_rank", "scatter_add_onehot", "grouped_query_attention", "expand_before_transpose",
              "complex_pairs", "kv_write_dynamic_update_slice"),
    refuses=(
        ("aten.histc.default", "Lowering not found: aten.histc.default"),
        ("aten.polar.default", "Lowering not found: aten.polar.default"),
        ("aten.stft.default", "Unsupported ir element type: complex<f32>"),
        ("aten.fft_rfft.default", "Unsupported ir element type: complex<f32>"),
        ("aten.fft_fft.default", "Unsupported ir element type: complex<f32>"),
        ("aten.conv_transpose2d.input", "output_padding: failed to legalize operation 'mhlo.convolution'"),
        ("aten.sort.default", "comparator block argument should be tensor<i32>, got tensor<i64>"),
        ("aten.sort.stable", "comparator block argument should be tensor<i32>, got tensor<i64>"),
        ("aten.argsort.default", "comparator block argument should be tensor<i32>, got tensor<i64>"),
        ("aten.argsort.stable", "comparator block argument should be tensor<i32>, got tensor<i64>"),
        ("aten.scatter_add.default", "converts, then the runtime refuses STABLEHLO_SCATTER"),
        ("bfloat16", "Got unsupported ScalarType BFloat16"),
        ("float16", "LayerNorm: expects operand and result to have compatible element type"),
    ),
)
