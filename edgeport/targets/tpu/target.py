"""TPU target: the exported program -> torchax -> ``jax.export`` for ("cpu", "tpu") + libtpu AOT compiles.

Written to ``DIR/tpu/<variant>/``: ``model.jax_export`` (the deployment artifact, loaded by
:mod:`edgeport.targets.tpu.runtime`), ``weights.safetensors`` beside it, ``model.stablehlo.mlir`` for
inspection, ``meta.json`` and ``executables/<topology>.tpu_exec`` (libtpu executables compiled on this
CPU-only host with a compile-only topology, so a TPU host can skip compilation).

Why these choices:
- One lowering, checked the way it will run: parity runs the CPU lowering of the serialized bytes; the TPU
  lowering of the same StableHLO is what libtpu compiles. fp32 exports use "highest" matmul precision so
  a TPU computes what parity checked (TPUs otherwise run f32 matmuls as one bf16 pass); bf16 is its own
  variant with its own budget.
- Inputs and outputs by construction (issue 6 class 8): the jax function takes the user inputs as a flat
  positional list in the program's signature order (never a dict jit would sort), and returns exactly the
  program's USER_OUTPUT values picked by the output spec, so mutated buffers never leak in as outputs.
- TPU numbers without a TPU are estimates and labelled so: memory and FLOPs come from the compiler, the
  latency is a roofline over the chip's published peak FLOP/s and HBM bandwidth.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from edgeport.targets.base import ConvertJob, Converted, Target, TargetOption
from edgeport.targets.tpu.aot import (DEFAULT_TOPOLOGIES, NO_COMPILE_NOTE, TOPOLOGY_EXAMPLES,  # noqa: F401
                                     CompileInput, compile_cached, compile_for_topology, compile_id, merge_pieces,
                                     pieces, report_sections, topologies_of, validate_topologies)
from edgeport.targets.tpu.blockers import cuda_ties
from edgeport.targets.tpu.costpage import cost_sections
from edgeport.targets.tpu.costrun import compile_share, run_cost
from edgeport.targets.tpu.lowering import Lowered, lower_program
from edgeport.targets.tpu.deploy_parity import bf16_parity, sections as parity_sections
from edgeport.targets.tpu.runtime import JaxXlaRunner
from edgeport.targets.tpu.sweep import sweep_topologies, validate_batches
from edgeport.validate import parity
from edgeport.errors import load_json


# ------------------------------------------------------------------------------------------------ convert

def convert(job: ConvertJob) -> Converted:
    from edgeport.targets._jax import libtpu_compile_env, prefer_cpu_backend
    from edgeport.targets.tpu.runtime import EXPORT_FILE
    from edgeport.targets.tpu.device import tpu_host_status

    prefer_cpu_backend()
    libtpu_compile_env()
    import jax

    out = job.out_dir / job.variant
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    precision = "highest" if job.variant == "fp32" else "default"
    # x64 off whatever an earlier converter left on (litert-torch's jax bridge enables it globally at import):
    # with it on, int64 inputs and buffers became int64 avals, and the artifact failed to run in any fresh
    # process ("Dtype mismatch ... expected int64 and called with int32")
    with jax.default_matmul_precision(precision), jax.enable_x64(False):
        job.progress("lowering (torchax)")
        lowered = lower_program(job.program, job.variant, [i.name for i in job.signature.inputs], job.example_inputs)
        job.progress("jax.export serialization")
        exported = jax.export.export(jax.jit(lowered.fn), platforms=("cpu", "tpu"))(
            _weight_avals(lowered.weights), *lowered.input_avals)
        serialized = exported.serialize()
        lower_seconds = time.perf_counter() - start
        # artifact_only: a caller (e.g. parity localization) needs only something to run, not the TPU compiles
        topologies = [] if job.artifact_only else topologies_of(job.options)
    compile_input = CompileInput.of(serialized, lowered)
    identity = compile_id(compile_input) if job.cache is not None and topologies else None
    if topologies:
        job.progress(f"compile {', '.join(t.name for t in topologies)}")
    compiles = compile_cached(topologies, compile_input, out, job.cache, identity)
    if job.options.get("compile_only"):  # one piece of a split conversion (see tpu_aot.pieces)
        _add_notes(job, lowered, compiles)
        return Converted(out, {"tpu_compile": compiles}, cacheable=_cacheable(compiles),
                         files=[out / c["executable"] for c in compiles if c.get("executable")])
    job.progress("writing the artifact (weights.safetensors)")
    _write_artifact(out, job, exported, serialized, lowered, precision, compiles)
    _add_notes(job, lowered, compiles)
    host = tpu_host_status()
    details = {"tpu_compile": compiles, "lower_export_seconds": round(lower_seconds, 3), "matmul_precision": precision,
               "stablehlo": str((out / "model.stablehlo.mlir").relative_to(job.out_dir.parent)),
               "dynamic_dims": lowered.dynamic_dims, "tpu_host": host}
    details.update(_deployment(job, lowered, topologies, precision, compiles, out, start))
    if host["tpu_present"] and not job.artifact_only:
        details["tpu_measured"] = measure_on_tpu_host(job, out)
    return Converted(out / EXPORT_FILE, details, cacheable=_cacheable(compiles), files=side_files(out))


def _deployment(job: ConvertJob, lowered: Lowered, topologies: list, precision: str, compiles: list, out: Path,
                started: float) -> dict:
    """What a team deciding on TPUs reads: the ``--tpu-batch`` cost table, for bf16 parity against PyTorch
    fp32 and bf16, and the compiles' share of the conversion."""
    found = {}
    cost = run_cost(job.options, [{"name": "forward", "fn": lowered.fn, "weight_avals": _weight_avals(lowered.weights),
                                   "input_avals": lowered.compile_avals}], sweep_topologies(job.options, topologies),
                    precision, False, job.out_dir, job.variant, job.notes, job.progress, compiles)
    if cost is not None:
        found["tpu_cost"] = cost
    if job.variant == "bf16" and not job.artifact_only:
        job.progress("bf16 parity against PyTorch fp32 and bf16")
        found["bf16_parity"] = bf16_parity(job, out)
    share = compile_share(compiles, cost, started, job.notes)
    if share:
        found["tpu_compile_share"] = share
    return found


def side_files(out: Path) -> list[Path]:
    """What ``model.jax_export`` needs beside it: its weights, meta.json and the executables meta.json names
    (``model.stablehlo.mlir`` is for reading, not running: not part of the artifact)."""
    from edgeport.targets.tpu.runtime import META_FILE, WEIGHTS_FILE

    executables = load_json((out / META_FILE).read_text()).get("executables") or {}
    return [out / WEIGHTS_FILE, out / META_FILE, *(out / rel for rel in executables.values())]


def _cacheable(compiles: list[dict]) -> bool:
    """A compile whose process died or timed out says something about this machine and moment: the
    conversion is reported, not cached (the next run compiles again)."""
    return not any("process" in c for c in compiles)


def _write_artifact(out: Path, job: ConvertJob, exported, serialized: bytes, lowered: Lowered, precision: str,
                    compiles: list[dict]) -> None:
    from edgeport.targets.tpu.runtime import EXPORT_FILE, META_FILE, WEIGHTS_FILE
    from edgeport.targets.tpu.weights import save as save_weights

    (out / EXPORT_FILE).write_bytes(serialized)
    save_weights(lowered.weights, out / WEIGHTS_FILE, lowered.tied)
    (out / "model.stablehlo.mlir").write_text(exported.mlir_module())
    executables = {c["topology"]: c.pop("executable") for c in compiles if c.get("executable")}
    (out / META_FILE).write_text(json.dumps(_meta(job, exported, lowered, precision, executables), indent=2) + "\n")


def _add_notes(job: ConvertJob, lowered: Lowered, compiles: list[dict]) -> None:
    if job.dynamic and not lowered.dynamic_dims:
        job.notes.append(f"--dynamic {', '.join(job.dynamic)}: the program has no symbolic dims "
                         "(a saved .pt2 keeps the shapes it was exported with); the artifact is static")
    if not compiles and not job.artifact_only and not job.options.get("compile_only"):
        job.notes.append(NO_COMPILE_NOTE)
        return
    for failed in (c for c in compiles if not c["ok"]):
        job.notes.append(f"TPU compile for {failed['topology']} failed: {failed['error']}")
    job.notes.append("tpu_compile: memory and FLOPs come from libtpu's compiler; est_seconds is a roofline "
                     "estimate from published chip figures, not a measurement")


def measure_on_tpu_host(job: ConvertJob, out: Path) -> list[dict]:
    """On a TPU host: the artifact through jax on the TPU and (default variant) the program through
    torch_tpu, each in a worker subprocess; measured parity and latency beside the estimates."""
    from edgeport.core.eager import EagerRunner
    from edgeport.targets.tpu.device import run_in_worker
    from edgeport.validate.parity import compare

    samples = job.samples or job.calibration_samples()
    eager = EagerRunner(job.program.module(), [i.dtype for i in job.signature.inputs], 1)
    reference = [eager.run(s) for s in samples]
    runs = [("jax", out)] + ([("torch_tpu", job.out_dir.parent / "exported.pt2")] if job.variant == TARGET.default_variant else [])
    measured = []
    for engine, artifact in runs:
        result = run_in_worker(engine, artifact, samples)
        if result["ok"]:
            parity = compare(reference, result["outputs"], job.budget or TARGET.budget(job.variant),
                             [o.name for o in job.signature.outputs])
            result["parity"] = {k: parity[k] for k in ("passed", "max_abs_err", "max_rel_err", "cosine_min", "message")}
        else:
            job.notes.append(f"TPU host run ({engine}) failed: {result['error']}")
        measured.append({k: v for k, v in result.items() if k != "outputs"})
    return measured


def _weight_avals(weights: dict) -> dict:
    import jax

    return {k: jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in weights.items()}


def _meta(job: ConvertJob, exported, lowered: Lowered, precision: str, executables: dict) -> dict:
    """What a loader or an app needs to call the artifact, without jax or torch to read it."""
    n_weights = len(lowered.weights)
    describe = lambda info, aval: {"name": info.name, "shape": [d if isinstance(d, int) else str(d) for d in aval.shape],  # noqa: E731
                                   "dtype": str(aval.dtype)}
    return {
        "format": "jax.export", "platforms": list(exported.platforms), "variant": job.variant,
        "matmul_precision": precision, "call": "exported.call(weights, *inputs) -> tuple(outputs)",
        "inputs": [describe(i, a) for i, a in zip(job.signature.inputs, exported.in_avals[n_weights:])],
        "outputs": [describe(o, a) for o, a in zip(job.signature.outputs, exported.out_avals)],
        "dynamic_dims": lowered.dynamic_dims, "executables": executables,
        "tied": lowered.tied,   # program state name -> the weight that holds its tensor (stored once)
    }


def all_sections(row: dict) -> list:
    """The compile table, then the cost table when the row swept batch sizes."""
    return report_sections(row) + cost_sections(row) + parity_sections(row)


TARGET = Target(
    name="tpu",
    description="TPU: torchax -> jax.export (StableHLO, cpu+tpu) with libtpu AOT compiles per topology",
    variants=("fp32", "bf16"),
    budgets={"fp32": parity.FP32, "bf16": parity.BF16},
    requires=("torchax", "jax", "libtpu", "safetensors"),
    extra="tpu",
    convert=convert,
    runners=(JaxXlaRunner,),
    generative="edgeport.targets.tpu.generate",
    calibrated_variants=(),
    relative_cost=3.0,
    thread_sweep=False,
    options=(TargetOption("tpu-topology", f"tpu: AOT-compile for GEN:AxB or GEN:AxBxC (repeatable; default "
                          f"{', '.join(DEFAULT_TOPOLOGIES)}; e.g. {TOPOLOGY_EXAMPLES}; 'none': the artifact only, no compile)", multiple=True,
                          validate=validate_topologies),
             TargetOption("tpu-batch", "tpu: also AOT-compile at these batch sizes (e.g. 1,8,32,128) and report tokens/s "
                          "and $/1M tokens per generation x topology x batch beside GPU references (estimates)",
                          multiple=True, validate=validate_batches)),
    report_sections=all_sections,
    pieces=pieces,
    merge_pieces=merge_pieces,
    rewrites=("upcast_fp32", "conv_padding_numeric", "inline_custom_ops", "grouped_query_attention_matmul"),
    slow_ops=cuda_ties,   # `check --target tpu`: what ties the model to CUDA, each with its fix (.blockers)
    refuses=(("aten.conv2d.padding", "'immutable_list' object does not support mutation"),),
)
