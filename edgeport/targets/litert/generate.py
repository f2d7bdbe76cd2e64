"""LiteRT for generative models: ONE ``.tflite`` whose signatures are ``prefill_<L>`` per prefill length and
``decode``, the weights stored once and shared by every signature.

For a Hugging Face causal LM the fp32 ``.tflite`` is lowered by litert-torch's ``export_hf`` when it takes the
model (``--litert-lowering``, :mod:`.hf_lowering`; its signatures are driven by :mod:`.hf_runner`), and by
edgeport's own lowering of the exported programs otherwise, as below; the row says which (``built_by``,
``lowering_reason``). The quantized variants quantize whichever fp32 ``.tflite`` the run lowered.

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

A block whose weights are all zero (a padding token's embedding row, and the lm_head row it becomes in a
tied or copied head) gets scale 0 from the quantizer (with numpy's "invalid value in divide" while it
computes it), and XNNPACK refuses the whole tensor ("unsupported scale value (0.000000) in channel N for
INT4 tensor"): the artifact does not load. Such blocks are set to scale 1 with zero data here — the block
still dequantizes to exactly 0 — and the row's details count them (``zero_scale_blocks_fixed``).
"""

from __future__ import annotations

import os
from pathlib import Path

from edgeport.targets.base import BundleSupport, Converted, GenerativeFallback, GenerativeJob, GenerativeSupport
from edgeport.targets.litert.signatures import LiteRTSignatureRunner

LITERT_RECIPES = {"fp16": "full_fp16_recipe", "dynamic-int8": "full_dynamic_recipe", "weight-int8": "full_weight_only_recipe"}
BLOCKWISE = {"int4-block32": "dynamic_wi4b32_afp32"}


def artifact_path(out_dir: Path, variant: str) -> Path:
    return out_dir / f"generate_{variant}.tflite"


def convert(job: GenerativeJob) -> Converted:
    """fp32 by the chosen lowering (:mod:`.hf_lowering`: export_hf or edgeport's); a quantized variant
    quantizes that fp32 ``.tflite``, so every LiteRT row of a run comes from one lowering."""
    from edgeport.targets.litert.hf_lowering import lower

    fp32 = artifact_path(job.out_dir, "fp32")
    built_by = reason = None
    if job.variant == "fp32" or not fp32.is_file():
        built_by, reason = lower(job, fp32, _convert_fp32)
    if job.variant == "fp32":
        return described(fp32, built_by, reason)
    path = artifact_path(job.out_dir, job.variant)
    _quantize(fp32, path, job.variant)
    return quantized(fp32, path, job.variant, reason)


def quantized(fp32: Path, path: Path, variant: str, reason: str | None = None, kept_groups: int = 0,
              keep: str = "float") -> Converted:
    """The row of ``path``, quantized from ``fp32``: by ``convert``, or again with ``kept_groups`` weight
    groups kept at ``keep`` by ``--fallback float|int8`` (:mod:`.gen_fallback`)."""
    details = {"zero_scale_blocks_fixed": fix_zero_block_scales(path)} if variant in BLOCKWISE else {}
    what = f"{variant} quantized (ai-edge-quantizer) from the fp32 .tflite" + (
        f", {kept_groups} weight group(s) kept {'float' if keep == 'float' else f'at {keep}'}" if kept_groups else "")
    return described(path, lowered_by(fp32), what + (f"; fp32: {reason}" if reason else ""),
                     {**details, **judged_on(path)})


def described(path: Path, built_by: str | None, reason: str | None, details: dict | None = None) -> Converted:
    from edgeport.targets.litert.target import op_counts

    exported_hf = built_by == "export_hf"
    kv = "explicit input/output state (no resource variables)"
    if exported_hf:
        from edgeport.targets.litert.hf_runner import prefill_has_logits

        kv = ("export_hf's: kv_cache_k_<i>/kv_cache_v_<i> in and out beside tokens, input_pos and an additive mask; "
              + ("prefill returns the logits of its highest input_pos (padding rows repeat the last real position)"
                 if prefill_has_logits(path) else "prefill returns no logits"))
    return Converted(path, {"ops": op_counts(path), "built_by": built_by, "lowering_reason": reason, "kv_cache": kv,
                            **(details or {})}, from_source=exported_hf)


def judged_on(path: Path) -> dict:
    """``runtime_kernels`` when the judge runs the file off XNNPACK (:mod:`.interpreter`), so the row's latency
    is read as what it is."""
    from edgeport.targets.litert.interpreter import BUILTIN, builtin_kernels

    return {"runtime_kernels": BUILTIN} if builtin_kernels(path) else {}


def lowered_by(path: Path) -> str:
    from edgeport.targets.litert.hf_runner import is_export_hf

    return "export_hf" if is_export_hf(path) else "edgeport"


def _convert_fp32(job: GenerativeJob, path: Path) -> None:
    """edgeport's own lowering of the (rewritten) programs."""
    job.rewrite()
    os.environ.setdefault("LITERT_TORCH_SHOW_PROGRESS", "n")
    from edgeport.targets._jax import prefer_cpu_backend

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


def fix_zero_block_scales(path: Path) -> int:
    """Block-wise quantized tensors: scale 0 -> 1 and the block's data -> 0 (see the module docstring)."""
    import numpy as np
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model(str(path))
    fixed = 0
    for subgraph in model.subgraphs:
        for t in subgraph.tensors:
            details = getattr(t.quantization, "details", None)
            if not hasattr(details, "blockSize") or details.scales < 0:
                continue
            scales_tensor = subgraph.tensors[details.scales]
            dtype = np.float16 if scales_tensor.type == flatbuffer_utils.TensorType.FLOAT16 else np.float32
            scales_buffer, data_buffer = model.buffers[scales_tensor.buffer], model.buffers[t.buffer]
            if scales_buffer.data is None or data_buffer.data is None:
                continue
            scales = np.frombuffer(bytes(scales_buffer.data), dtype).copy()
            zero = np.flatnonzero(scales == 0)
            if zero.size:
                data = np.asarray(data_buffer.data, np.uint8).copy()
                per_block = details.blockSize * BITS[t.type] // 8
                for block in zero:
                    data[block * per_block:(block + 1) * per_block] = 0
                scales[zero] = 1
                scales_buffer.data, data_buffer.data = np.frombuffer(scales.tobytes(), np.uint8), data
                fixed += int(zero.size)
    if fixed:
        flatbuffer_utils.write_model(model, str(path))
    return fixed


BITS = {17: 4, 9: 8}  # TensorType INT4 = 17, INT8 = 9: bits per stored weight


def load(path: Path, threads: int):
    """The runner that speaks the artifact's signatures: export_hf's (:mod:`.hf_runner`) or edgeport's."""
    from edgeport.targets.litert.hf_runner import ExportHfRunner, is_export_hf

    return (ExportHfRunner if is_export_hf(Path(path)) else LiteRTSignatureRunner)(Path(path), threads)


def check(source, options: dict, cache_len: int) -> None:
    from edgeport.targets.litert.hf_lowering import check_plan

    check_plan(source, options, cache_len)


def from_source(job: GenerativeJob) -> bool:
    """export_hf will build this row's .tflite (or built the fp32 one it quantizes): no rewrites up front."""
    from edgeport.targets.litert.hf_lowering import will_try

    fp32 = artifact_path(job.out_dir, "fp32")
    if job.variant != "fp32" and fp32.is_file():
        return lowered_by(fp32) == "export_hf"
    return will_try(job)


# --litertlm: the .litertlm bundle LiteRT-LM runs (edgeport.targets.litert.litertlm)
LITERTLM = BundleSupport(variant="fp32-litertlm", option="litertlm", precision="fp32",
                         module="edgeport.targets.litert.litertlm")


def _prepare_fallback(artifact: Path, variant: str, threads: int, keep: str = "float"):
    """The search's quantizer, given what it needs from here: where the fp32 ``.tflite`` is, the variant's
    recipe, the zero-scale fix a candidate needs to load, the runner, and the row's details of a rebuild."""
    from types import SimpleNamespace

    from edgeport.targets.litert.gen_fallback import prepare

    fp32 = artifact_path(Path(artifact).parent, "fp32")
    steps = SimpleNamespace(fp32=fp32, recipe=lambda: _recipe(variant), load=load,
                            fix=fix_zero_block_scales if variant in BLOCKWISE else (lambda _path: 0),
                            described=lambda path, kept, how: quantized(fp32, path, variant, None, kept, how))
    return prepare(artifact, variant, threads, steps, keep)


# --fallback float|int8 on text generation (:mod:`.gen_fallback`: candidates are real artifacts of the variant's
# recipe); int8 only where it is a step up (int4 groups)
FALLBACK = GenerativeFallback({
    "dynamic-int8": "dynamic int8 (ai-edge-quantizer: channelwise int8 weights, activations quantized at run time)",
    "weight-int8": "weight-only int8 (ai-edge-quantizer: channelwise int8 weights, float compute)",
    "int4-block32": "int4 blocks of 32, symmetric (ai-edge-quantizer dynamic_wi4b32_afp32: activations quantized at run time)",
}, _prepare_fallback, keeps={"int4-block32": ("float", "int8")})
GENERATIVE = GenerativeSupport(variants=("fp32", "fp16", "dynamic-int8", "weight-int8", "int4-block32"),
                               convert=convert, load=load, bundles=(LITERTLM,), from_source=from_source,
                               check=check, float_fallback=FALLBACK)
