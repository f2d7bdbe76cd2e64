"""ONNX for generative models: one graph per signature (``prefill_<L>.onnx`` per prefill length and
``decode.onnx``) in ``DIR/onnx/generate_<variant>/``, run by onnxruntime.

Why separate graphs rather than one graph with optional past key values: every shape stays static (a
prefill length, one decode token, the cache at ``--cache-len``), which is the contract LiteRT and TPU
artifacts have too, so an app drives all of them the same way; and the exported programs already are
separate. Their weights are stored once: every graph reads its initializers from one ``weights.data``
beside the graphs (:mod:`.shared_weights`; each graph exported alone carried every weight, 2 x 4.9 GB
for a 1B model in fp32).

Inputs keep the layout's role names; outputs are ``logits`` and ``present_<k|v|len>_<l>`` (onnxruntime
refuses a model whose output has an input's name: "Duplicate definition of name"), each feeding the input
``cache_<...>`` of the same suffix on the next call. Quantized variants are onnxruntime's block-wise
``MatMulNBits`` (:mod:`.nbits`, the fp32 graphs' weights read one at a time): ``dynamic-int8`` is int8
weights in blocks of 64 with activations quantized at run time per row and block (``quantize_dynamic``,
the forward variant, quantizes a whole prompt's activations with one scale: 12x the KLD on SmolLM2), and
``int4-block32`` int4 weights in blocks of 32 with float compute. ``--onnx-int8`` does not apply to them.
"""

from __future__ import annotations

import logging
from pathlib import Path

from edgeport.targets.base import Converted, GenerativeFallback, GenerativeJob, GenerativeSupport
from edgeport.targets.onnx.signatures import OnnxSignatureRunner, output_name


def artifact_dir(out_dir: Path, variant: str) -> Path:
    return out_dir / f"generate_{variant}"


def convert(job: GenerativeJob) -> Converted:
    from edgeport.core.memory import program_weight_bytes, release
    from edgeport.targets.onnx.shared_weights import WeightsWriter
    from edgeport.targets.onnx.target import describe

    fp32 = artifact_dir(job.out_dir, "fp32")
    if job.variant == "fp32" or not all((fp32 / f"{n}.onnx").is_file() for n in job.programs):
        fp32.mkdir(parents=True, exist_ok=True)
        with WeightsWriter(fp32) as weights:   # every graph's weights written once, into one file
            for name, program in job.programs.items():
                _export(program, job.samples[name], fp32 / f"{name}.onnx", weights)
                release(program_weight_bytes(program))  # torch.onnx's program (cycles holding its folded weights)
        shared = weights.details()
    if job.variant == "fp32":
        return Converted(fp32, {"graphs": {n: describe(fp32 / f"{n}.onnx") for n in job.programs},
                                "shared_weights": shared})
    out = artifact_dir(job.out_dir, job.variant)
    out.mkdir(parents=True, exist_ok=True)
    return quantize_graphs(fp32, out, list(job.programs), job.variant)


def quantize_graphs(fp32: Path, out: Path, names: list[str], variant: str, keep_float: dict | None = None,
                    keep_as: str = "float") -> Converted:
    """``out``: each fp32 graph quantized in ``variant``'s scheme, weights shared; ``keep_float`` (graph ->
    MatMul node names) leaves those nodes float (``--fallback float``, :mod:`.gen_fallback`), or quantizes
    them in int8 blocks (``keep_as`` "int8": ``--fallback int8``, :data:`.nbits.INT8_KEEP`)."""
    from edgeport.targets.onnx import nbits
    from edgeport.targets.onnx.shared_weights import share_weights
    from edgeport.targets.onnx.target import describe

    memo = {}   # the graphs read one weights.data: each weight read and quantized once for all of them
    for name in names:
        kept = (keep_float or {}).get(name, ())
        # external data: a 1B model's graph (an untied embedding table stays float: Gather is not quantized)
        # is past protobuf's 2 GB; share_weights then gathers every graph's data into one file
        nbits.quantize_nbits(fp32 / f"{name}.onnx", out / f"{name}.onnx", getattr(nbits, SCHEMES[variant]),
                             nodes_to_exclude=kept if keep_as == "float" else (), external=True,
                             node_schemes=dict.fromkeys(kept, nbits.INT8_KEEP) if keep_as == "int8" else None,
                             memo=memo)
    shared = share_weights([out / f"{n}.onnx" for n in names])
    kept_scheme = {"kept_int8": nbits.INT8_KEEP} if keep_as == "int8" and keep_float else {}
    return Converted(out, {"graphs": {n: describe(out / f"{n}.onnx") for n in names},
                           **scheme_details(variant), **kept_scheme, "shared_weights": shared})


def _export(program, sample: dict, path: Path, weights) -> None:
    from edgeport.targets.onnx.exporter import onnx_export
    from edgeport.targets.onnx.tied_head import head_as_gemm

    logging.getLogger("torch.onnx").setLevel(logging.ERROR)  # "torchvision is not installed. Skipping ..." per op
    outputs = [output_name(n) for n in _output_names(program)]
    # the program itself, as forward models are exported: its module() was traced by torch.export once more
    # (a second trace of every signature), to the same graph
    exported = onnx_export(program, (), kwargs={k: v.clone() for k, v in sample.items()}, dynamo=True,
                           verbose=False, input_names=list(sample), output_names=outputs)
    # external data whatever the size, straight into the shared weights.data (:class:`.shared_weights.WeightsWriter`;
    # a graph under 2 GB was first serialized whole in memory, its weights copied twice)
    weights.save(exported.model, path)
    head_as_gemm(path)   # a tied head reads the table as stored: no transposed copy per session (:mod:`.tied_head`)


def _output_names(program) -> list[str]:
    return list(program.call_spec.out_spec.context)


def _quantizer(scheme_name: str):
    def quantize(src: Path, dst: Path, job: GenerativeJob) -> None:
        from edgeport.targets.onnx import nbits

        nbits.quantize_nbits(src, dst, getattr(nbits, scheme_name), external=True)
    return quantize


# variant -> the nbits scheme (MatMulNBits for both: :mod:`.nbits` says why dynamic-int8 is not
# quantize_dynamic here, as it is for forward models)
SCHEMES = {"dynamic-int8": "INT8_BLOCKS", "int4-block32": "INT4"}
QUANTIZERS = {variant: _quantizer(scheme) for variant, scheme in SCHEMES.items()}


def scheme_details(variant: str) -> dict:
    from edgeport.targets.onnx import nbits

    return {"int8_blocks" if variant == "dynamic-int8" else "int4": getattr(nbits, SCHEMES[variant])}


def load(path: Path, threads: int) -> OnnxSignatureRunner:
    return OnnxSignatureRunner(Path(path), threads)


def _prepare_fallback(artifact: Path, variant: str, threads: int, keep: str = "float"):
    from edgeport.targets.onnx.gen_fallback import prepare

    return prepare(artifact, variant, threads, quantize_graphs, keep)


# --fallback float|int8 on text generation (:mod:`.gen_fallback`: int4 only, its candidates are simulated)
FALLBACK = GenerativeFallback({"int4-block32": "int4 blocks of 32, symmetric (onnxruntime MatMulNBits, float compute)"},
                              _prepare_fallback, keeps=("float", "int8"))
GENERATIVE = GenerativeSupport(variants=("fp32", "dynamic-int8", "int4-block32"), convert=convert, load=load,
                               float_fallback=FALLBACK)
