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
import warnings
from dataclasses import dataclass
from pathlib import Path

from edgeport.core.memory import storage_key
from edgeport.diagnostics import first_line, user_source, with_location
from edgeport.targets._jax import keep_torch_accelerator_honest
from edgeport.targets.base import ConvertJob, Converted, Target, TargetOption
from edgeport.targets.tpu.aot import (DEFAULT_TOPOLOGIES, NO_COMPILE_NOTE, TOPOLOGY_EXAMPLES,  # noqa: F401
                                     CompileInput, compile_cached, compile_for_topology, compile_id, merge_pieces,
                                     pieces, report_sections, topologies_of, validate_topologies)
from edgeport.targets.tpu.blockers import cuda_ties
from edgeport.targets.tpu.costpage import cost_sections
from edgeport.targets.tpu.costrun import compile_share, run_cost
from edgeport.targets.tpu.deploy_parity import bf16_parity, sections as parity_sections
from edgeport.targets.tpu.runtime import JaxXlaRunner
from edgeport.targets.tpu.sweep import sweep_topologies, validate_batches
from edgeport.validate import parity
from edgeport.errors import load_json


# ----------------------------------------------------------------------------------------------- lowering

class LoweringError(RuntimeError):
    """torchax could not lower one node: names the aten op and the user's source line."""


@dataclass
class Lowered:
    fn: object                  # fn(weights: dict, *inputs) -> tuple of user outputs
    weights: dict               # name -> jax array, in the exported program's state
    input_avals: list           # jax.ShapeDtypeStruct per user input, symbolic dims where the program has them
    compile_avals: list         # the same at the example shapes (a TPU executable needs concrete shapes)
    dynamic_dims: dict          # input name -> [dims kept symbolic]
    tied: dict                  # state name -> the name in ``weights`` holding its tensor (tied parameters)


def lower_program(program, variant: str, input_names: list[str], example_inputs: tuple = (),
                  converted: dict | None = None, state_io: tuple[str, ...] = ()) -> Lowered:
    """The program through torchax's aten -> jax lowering, wrapped so I/O follows the program's signature.
    ``state_io``: names of floating inputs and outputs that cross the boundary in the variant's compute dtype
    (bf16) instead of the program's (a KV cache: state kept on the device between steps; see
    :func:`_boundary_dtypes`). ``converted``: a dict kept across the programs of one model (prefill, decode):
    each weight storage is converted to a jax array once (torchax's ``t2j`` copies a mapped weight: its offset is not 64-byte
    aligned), not once per program (Qwen3-0.6B held 2.4 GB more per signature); with it, the programs'
    tensors are made to view the copies (:mod:`.share`), so the mapped weights are not held beside them."""
    import jax.numpy as jnp
    import torchax
    from torch.export.graph_signature import InputKind, OutputKind
    from torchax import decompositions
    from torchax.ops import mappings

    from edgeport.targets.tpu.share import view_converted

    keep_torch_accelerator_honest()
    torchax.default_env()  # builds torchax's op table (the interpreter looks ops up there)
    original = {**program.state_dict, **program.constants}
    with warnings.catch_warnings():  # torch's own pytree deprecation noise while copying the program
        warnings.filterwarnings("ignore", category=FutureWarning, message=".*LeafSpec.*")
        program = program.run_decompositions().run_decompositions(decompositions.DECOMPOSITIONS)
    signature = program.graph_signature
    state = {**program.state_dict, **program.constants}
    state_names = [s.target for s in signature.input_specs if s.kind != InputKind.USER_INPUT]
    user_positions = [i for i, s in enumerate(signature.output_specs) if s.kind == OutputKind.USER_OUTPUT]
    tied = tied_names(state, state_names)
    compute = jnp.bfloat16 if variant == "bf16" else None
    cache = {} if converted is None else converted
    weights = {name: _to_jax(state[name], cache, compute) for name in state_names if name not in tied}
    if converted is not None:  # the programs' tensors read the copies from now on: the weights held once
        view_converted([original, state], state_names, weights, tied, cache, compute)
    interpreter_class = _node_reporting_interpreter()
    out_dtypes = [jnp.dtype(mappings.t2j_dtype(_output_dtype(program, i))) for i in user_positions]
    input_avals, out_dtypes = _boundary_dtypes(program, _input_avals(program), input_names, out_dtypes, compute, state_io)
    compile_avals = [_concrete(a, x) for a, x in zip(input_avals, example_inputs)] if example_inputs else input_avals

    def fn(weights: dict, *inputs):
        if compute is not None:
            inputs = [x.astype(compute) if jnp.issubdtype(x.dtype, jnp.floating) else x for x in inputs]
        state_args = [weights[tied.get(n, n)] for n in state_names]
        results = interpreter_class(program.graph_module).run(*state_args, *inputs, enable_io_processing=False)
        return tuple(results[i].astype(out_dtypes[k]) for k, i in enumerate(user_positions))

    dynamic = {name: [d for d, size in enumerate(a.shape) if not isinstance(size, int)]
               for name, a in zip(input_names, input_avals)}
    return Lowered(fn, weights, input_avals, compile_avals, {k: v for k, v in dynamic.items() if v}, tied)


def _boundary_dtypes(program, input_avals: list, input_names: list[str], out_dtypes: list, compute, state_io) -> tuple:
    """Input avals and output dtypes with the ``state_io`` names' floating ones in ``compute``.

    Why: the bf16 variant computes in bf16, but a float32 cache at the boundary made every decode step read the
    whole cache in f32, convert it, and write all of it back in f32 (the output cast), twice the bytes of a bf16
    cache and a full rewrite where a server updates one slot in place (bench/TPU_COST.md, "Where the compiler's
    bytes went"). In bf16 at both ends, the donated cache aliases its output and stays bf16 on the device; a
    float32 feed is cast on the way in, as any feed is, and the values are the same (bf16 -> f32 -> bf16 is exact)."""
    import jax

    names = set(state_io) if compute is not None else set()
    if not names:
        return input_avals, out_dtypes
    floating = lambda dtype: jax.numpy.issubdtype(dtype, jax.numpy.floating)  # noqa: E731
    avals = [jax.ShapeDtypeStruct(a.shape, compute) if n in names and floating(a.dtype) else a
             for n, a in zip(input_names, input_avals)]
    outputs = list(program.call_spec.out_spec.context or [])
    dtypes = [compute if k < len(outputs) and outputs[k] in names and floating(d) else d for k, d in enumerate(out_dtypes)]
    return avals, dtypes


def tied_names(state: dict, names: list[str]) -> dict:
    """Names of the program's state that are the same tensor as an earlier name (same storage, offset,
    shape, strides and dtype: a head tied to the embedding) -> that earlier name. The jax program takes
    such a tensor once, so the weights file, a loaded artifact and the compiler's HBM count hold it once
    (Qwen3-0.6B's 0.62 GB table was written, mapped and compiled twice; bench/LARGE_GENERATION.md)."""
    first, tied = {}, {}
    for name in names:
        key = storage_key(state[name])
        if key is not None:
            tied[name] = first.setdefault(key, name)
    return {name: other for name, other in tied.items() if other != name}


def _to_jax(t, cache: dict, compute=None):
    """``t`` as a jax array (floating weights cast to ``compute`` when given), converted once per storage while
    ``cache`` lives; the cache keeps the tensor too, so a freed temporary's address can not come back as
    another tensor's key."""
    import jax.numpy as jnp
    from torchax.ops import mappings

    def convert():
        array = mappings.t2j(t.detach())
        return array.astype(compute) if compute is not None and jnp.issubdtype(array.dtype, jnp.floating) else array

    key = storage_key(t)
    if key is None:
        return convert()
    key = (*key, compute)
    if key not in cache:
        cache[key] = (t, convert())
    return cache[key][1]


def _input_avals(program) -> list:
    """User-input avals; a torch symbolic dim becomes a jax symbolic dim (torchax maps the constraints).
    64-bit dtypes follow jax's setting (int64 ids become int32 unless x64 is on), as the artifact will."""
    import jax
    from torchax.export import extract_avals

    return [jax.ShapeDtypeStruct(a.shape, jax.dtypes.canonicalize_dtype(a.dtype)) for a in extract_avals(program)]


def _concrete(aval, example):
    import jax

    return jax.ShapeDtypeStruct(tuple(int(d) for d in example.shape), aval.dtype)


def _output_dtype(program, index: int):
    output_node = next(n for n in program.graph.nodes if n.op == "output")
    return output_node.args[0][index].meta["val"].dtype


def _node_reporting_interpreter():
    """torchax's interpreter, but a failing node raises :class:`LoweringError` with the aten op and the
    FX node's source location instead of a bare assertion from deep inside torchax."""
    from torchax.export import JaxInterpreter

    class NodeReportingInterpreter(JaxInterpreter):
        def call_function(self, target, args, kwargs):
            return super().call_function(target, _same_dtypes(target, args), kwargs)

        def run_node(self, node):
            try:
                return super().run_node(node)
            except LoweringError:
                raise
            except Exception as exc:
                raise LoweringError(describe_node_failure(node, exc)) from exc

    return NodeReportingInterpreter


def _same_dtypes(target, args: tuple) -> tuple:
    """The operands torch requires to share a dtype, made to share one again after the bf16 variant's cast.

    The exported program had them equal (torch refuses an ``index_put`` or a ``bmm`` of mixed dtypes); under the
    bf16 variant, values computed from a float32 rotary table (queries, new keys) meet bf16 weights and a bf16
    KV cache, and torchax then promotes the bf16 side to float32. For the KV cache that is the whole cache per
    step: converted to float32, one slot written and converted back (``index_put``), or converted and broadcast
    over the query heads in float32 for attention (``bmm``), where torch writes one slot in place and a bf16
    model multiplies in bf16 (bench/TPU_COST.md, "Where the compiler's bytes went"). So: an indexed write takes
    the destination's dtype, as torch does; a matmul of two float dtypes runs in the narrower one, the
    variant's compute dtype, as the same model exported in bf16 would."""
    import torch

    aten = torch.ops.aten
    if target in (aten.index_put.default, aten.index_put_.default, aten.index_copy.default, aten.index_copy_.default):
        position = 2 if "index_put" in target.name() else 3
        if len(args) > position and _floats(args[0], args[position]) and args[0].dtype != args[position].dtype:
            return (*args[:position], args[position].astype(args[0].dtype), *args[position + 1:])
    elif target in (aten.mm.default, aten.bmm.default, aten.matmul.default) and len(args) >= 2:
        a, b = args[:2]
        if _floats(a, b) and a.dtype != b.dtype:
            narrow = min((a.dtype, b.dtype), key=lambda d: d.itemsize)
            return (a.astype(narrow), b.astype(narrow), *args[2:])
    return args


def _floats(*arrays) -> bool:
    import jax.numpy as jnp

    return all(getattr(a, "dtype", None) is not None and jnp.issubdtype(a.dtype, jnp.floating) for a in arrays)


def describe_node_failure(node, exc: BaseException) -> str:
    op = getattr(node.target, "name", lambda: str(node.target))() if node.op == "call_function" else node.op
    message = f"torchax cannot lower {op} (node {node.name}): {first_line(exc, 260)}"
    return with_location(message, user_source(node.meta.get("stack_trace")))


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
