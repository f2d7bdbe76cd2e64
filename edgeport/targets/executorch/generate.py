"""ExecuTorch for generative models: ONE ``.pte`` whose methods are ``prefill_<L>`` per prefill length and
``decode``, lowered together (``to_edge_transform_and_lower({name: program, ...})``) so the weights are
stored once and every method shares them.

The KV cache is explicit state, as on every target: each method takes the cache tensors (``decode``; a
prefill creates them) and returns the updated ones, which the caller passes back on the next call.
ExecuTorch's own LLM export keeps the cache inside the program as mutable buffers instead; explicit I/O is
what the house's greedy loop, judge and apps drive the same way on LiteRT, ONNX and TPU. transformers' flat
programs update their cache inputs in place; the target's ``functional_cache_write`` rewrite makes those writes
out-of-place where nothing reads the input afterwards (each in-place write cost three full copies of the cache
per step). A write it leaves in place makes ExecuTorch return the written-back value ahead of the user
outputs, and the runner keeps only the user outputs (by count, from the names the file carries).

``dynamic-int8``: PT2E with the XNNPACK quantizer's dynamic config on each method (:mod:`.int8`: int8
per-channel linear weights, activations quantized per call), no calibration, the scheme ExecuTorch's LLM recipes
start from; lowered by one XNNPACK partitioner over the quantized linears and the float ops between them
(:func:`.lower.partitioners`: a layer is one delegate, not one per linear and one per float run between them).

``int4-block32``: XNNPACK's 8da4w (int4 weights in groups of 32, activations dynamically quantized to int8),
ExecuTorch's own LLM scheme, through torchao's ``quantize_`` (:mod:`.int4`); lowered the same way.

``--fallback float`` (both quantized variants, :mod:`.gen_fallback`): the same quantizers with the chosen
weight groups' linears refused (``convert``'s ``quantize``), their candidates simulated in PyTorch;
``--fallback int8`` (int4-block32): those linears in 8da8w instead (:data:`.int4.INT8_KEEP`).
"""

from __future__ import annotations

from pathlib import Path

from edgeport.targets.base import Converted, GenerativeFallback, GenerativeJob, GenerativeSupport
from edgeport.targets.executorch.delegation import summary
from edgeport.targets.executorch.int4 import GROUP, SCHEME, int4_block32
from edgeport.targets.executorch.int8 import dynamic_int8
from edgeport.targets.executorch.lower import lower, save, weights_on_disk
from edgeport.targets.executorch.runtime import ExecuTorchSignatureRunner


def artifact_path(out_dir: Path, variant: str) -> Path:
    return out_dir / f"generate_{variant}.pte"


def convert(job: GenerativeJob, quantize=None) -> Converted:
    """The row's ``.pte``; ``quantize(weight attribute) -> bool`` (None: every linear the variant takes)
    leaves the linears it refuses float: the precision search's rebuild (:mod:`.gen_fallback`)."""
    shared, kept_float = {}, []   # the methods' quantized weights, quantized once (their fp32 weights are one storage)
    quantized = job.variant != "fp32"
    if job.variant == "int4-block32":
        programs = {n: int4_block32(p, job.samples[n], shared, kept_float, quantize) for n, p in job.programs.items()}
    else:
        programs = {n: dynamic_int8(p, job.samples[n], shared, quantize) for n, p in job.programs.items()} \
            if quantized else job.programs
    path = artifact_path(job.out_dir, job.variant)
    with weights_on_disk(job.out_dir, programs):
        edge = lower(programs, dynamic_quant=quantized)
        details = {"delegation": summary(edge), "methods": list(programs),
                   "kv_cache": "explicit input/output state (each method returns the updated cache)"}
        data = save(edge, path)
    if data is not None:
        details["tied_weights"] = {"file": data.name, "why": "the tied embedding/head table stored once, beside the .pte"}
    if job.variant == "int4-block32":
        details["int4"] = {**SCHEME, "float_linears": kept_float}
        if kept_float:
            job.notes.append(f"int4-block32: {len(kept_float)} linear(s) kept float (input dimension not a multiple "
                             f"of {GROUP}, or no constant 2-D weight): {', '.join(kept_float[:5])}")
    return Converted(path, details, files=[data] if data is not None else [])


def load(path: Path, threads: int) -> ExecuTorchSignatureRunner:
    return ExecuTorchSignatureRunner(Path(path), threads)


def _prepare_fallback(artifact: Path, variant: str, threads: int, job: GenerativeJob, keep: str = "float"):
    from edgeport.targets.executorch.gen_fallback import prepare

    return prepare(artifact, variant, threads, job, convert, keep)


# --fallback float|int8 on text generation (:mod:`.gen_fallback`: candidates simulated in PyTorch with the row's
# quantizer); int8 (8da8w) only where it is a step up (int4 groups)
FALLBACK = GenerativeFallback({
    "dynamic-int8": "dynamic int8 (PT2E XNNPACK quantizer: per-channel symmetric int8 weights, activations "
                    "quantized at run time)",
    "int4-block32": "8da4w (XNNPACK: int4 weights in groups of 32, int8 dynamic activations; torchao quantize_)",
}, _prepare_fallback, keeps={"int4-block32": ("float", "int8")}, programs=True)
GENERATIVE = GenerativeSupport(variants=("fp32", "dynamic-int8", "int4-block32"), convert=convert, load=load,
                               float_fallback=FALLBACK)
