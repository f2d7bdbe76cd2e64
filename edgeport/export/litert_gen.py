"""LiteRT for generative models: ONE ``.tflite`` whose signatures are ``prefill_<L>`` per prefill length and
``decode``, the weights stored once and shared by every signature.

The KV cache is explicit state: each signature takes the cache tensors and returns the updated ones, and
the app passes them back on the next call. litert-torch cannot keep it inside the model as resource
variables on this path: its conversion drops every non-user output (buffer and input mutations: "not
supported by our inference only conversion or runtime"), and its own generative converters pass the cache
as input and output too. int64 ids, positions and cache lengths become int32 (``enable_x64=False``).

Quantized variants quantize the fp32 ``.tflite`` with ai-edge-quantizer (seconds, instead of converting all
signatures again per recipe): fp16, dynamic-int8 and weight-int8 are litert-torch's own recipes
(translated the way its ``quant_config`` path does), and ``int4-block32`` is ai-edge-quantizer's
``dynamic_wi4b32_afp32``: int4 weights in blocks of 32, activations quantized on the fly by the
fully-connected kernel. It is dynamic-range, not weight-only: ai-edge-quantizer rejects block-wise int4
with float compute ("Unsupported op for ComputePrecision.FLOAT: FULLY_CONNECTED"), and channel-wise int4
(what weight-only int4 offers) is the granularity published results show collapsing an LLM.
"""

from __future__ import annotations

import os
from pathlib import Path

from edgeport.export.registry import Converted, GenerativeJob, GenerativeSupport
from edgeport.runtimes.litert_signatures import LiteRTSignatureRunner

LITERT_RECIPES = {"fp16": "full_fp16_recipe", "dynamic-int8": "full_dynamic_recipe", "weight-int8": "full_weight_only_recipe"}
BLOCKWISE = {"int4-block32": "dynamic_wi4b32_afp32"}


def artifact_path(out_dir: Path, variant: str) -> Path:
    return out_dir / f"generate_{variant}.tflite"


def convert(job: GenerativeJob) -> Converted:
    from edgeport.export.litert import op_counts

    fp32 = artifact_path(job.out_dir, "fp32")
    if job.variant == "fp32" or not fp32.is_file():
        _convert_fp32(job, fp32)
    path = fp32
    if job.variant != "fp32":
        path = artifact_path(job.out_dir, job.variant)
        _quantize(fp32, path, job.variant)
    return Converted(path, {"ops": op_counts(path), "cache": "explicit input/output state (no resource variables)"})


def _convert_fp32(job: GenerativeJob, path: Path) -> None:
    os.environ.setdefault("LITERT_TORCH_SHOW_PROGRESS", "n")
    from edgeport.runtimes.jax_xla import prefer_cpu_backend

    prefer_cpu_backend()  # litert-torch's lowering initializes jax: keep it off libtpu (noise, a lock)
    import litert_torch

    converter = None
    for name, program in job.programs.items():
        module = program.module()
        module.training = False  # .eval() is refused on an unlifted program; the flag is what litert reads
        kwargs = {k: v.clone() for k, v in job.samples[name].items()}
        add = litert_torch.signature if converter is None else converter.signature
        converter = add(name, module, sample_kwargs=kwargs)
    converter.convert().export(str(path))


def _quantize(src: Path, dst: Path, variant: str) -> None:
    from ai_edge_quantizer import quantizer

    quant = quantizer.Quantizer(str(src), _recipe(variant))
    result = quant.quantize(enable_progress_bar=False, enable_progress_report=False)
    result.export_model(str(dst), overwrite=True)


def _recipe(variant: str):
    if variant in BLOCKWISE:
        from ai_edge_quantizer import recipe

        return getattr(recipe, BLOCKWISE[variant])()
    from litert_torch.generative.quantize import quant_recipes
    from litert_torch.quantize import translate_recipe

    config = getattr(quant_recipes, LITERT_RECIPES[variant])()
    return translate_recipe.translate_to_ai_edge_recipe(config.generative_recipe)


def load(path: Path, threads: int) -> LiteRTSignatureRunner:
    return LiteRTSignatureRunner(Path(path), threads)


GENERATIVE = GenerativeSupport(variants=("fp32", "fp16", "dynamic-int8", "weight-int8", "int4-block32"),
                               convert=convert, load=load)
