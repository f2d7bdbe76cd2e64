"""TPU for generative models: ``jax.export`` of every signature (``prefill_<L>``, ``decode``) for ("cpu",
"tpu"), the weights saved once beside them, and libtpu AOT compiles of each per ``--tpu-topology``.

Written to ``DIR/tpu/generate_<variant>/``: ``<signature>.jax_export``, ``weights.safetensors`` (shared:
each signature's ``meta.json`` entry lists the weights it takes), ``meta.json`` and
``executables/<topology>_<signature>.tpu_exec``.

The HBM table is where a model stops fitting: decode's arguments are the weights plus the KV cache at
``--cache-len``, so the compiler's memory analysis counts both (from the compiler, not from shapes: a
TPU tile pads a head_dim of 16). Decode is compiled with the cache donated, as a server runs it: the
updated cache reuses the input buffers instead of being counted a second time.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from edgeport.targets.base import Converted, GenerativeJob, GenerativeSupport
from edgeport.targets.tpu.aot import CompileInput
from edgeport.targets.tpu.signatures import META_FILE, WEIGHTS_FILE, JaxSignatureRunner


def convert(job: GenerativeJob) -> Converted:
    from edgeport.targets.tpu.aot import NO_COMPILE_NOTE, topologies_of
    from edgeport.targets.tpu.costrun import compile_share, run_cost
    from edgeport.targets._jax import libtpu_compile_env, prefer_cpu_backend

    prefer_cpu_backend()
    libtpu_compile_env()
    import jax

    started = time.perf_counter()
    out = job.out_dir / f"generate_{job.variant}"
    out.mkdir(parents=True, exist_ok=True)
    precision = "highest" if job.variant == "fp32" else "default"
    topologies = [] if job.artifact_only else topologies_of(job.options)
    weights, tied, meta, compiles, converted, swept = {}, {}, {}, [], {}, []
    # x64 off whatever an earlier converter set (litert-torch's jax bridge turns it on globally at import):
    # int64 ids, positions and cache lengths become int32 avals, so the artifact takes the same dtypes in
    # every process that loads it (a fresh `validate` or a server runs with jax's default, x64 off)
    with jax.enable_x64(False):
        for name, program in job.programs.items():
            job.progress(f"lowering + jax.export {name}")
            lowered, entry, serialized = _export(name, program, job, out, precision, converted)
            _merge_weights(weights, lowered.weights)
            tied.update(lowered.tied)
            caches = cache_inputs(job.samples[name]) if name == "decode" else ()
            donate = tuple(i for i, n in enumerate(job.samples[name]) if n in caches)
            if topologies:
                job.progress(f"compile {name} for {', '.join(t.name for t in topologies)}")
            compiles += _compile_all(topologies, CompileInput.of(serialized, lowered), out, donate, name)
            meta[name] = entry
            swept += _sweepable(name, lowered, donate, swept)
    job.progress("writing the artifact (weights.safetensors)")
    _write(out, weights, tied, meta, job, precision)
    for failed in (c for c in compiles if not c["ok"]):
        job.notes.append(f"TPU compile of {failed['program']} for {failed['topology']} failed: {failed['error']}")
    if compiles:
        job.notes.append("tpu_compile: decode's arguments are the weights plus the KV cache at --cache-len (donated: "
                         "updated in place); memory and FLOPs from libtpu's compiler, est. latencies are roofline ESTIMATES")
    elif not job.artifact_only:
        job.notes.append(NO_COMPILE_NOTE)
    details = {"tpu_compile": compiles, "matmul_precision": precision}
    cost = run_cost(job.options, swept, topologies, precision, True, job.out_dir, f"generate_{job.variant}",
                    job.notes, job.progress, compiles)
    if cost is not None:
        details["tpu_cost"] = cost
    share = compile_share(compiles, cost, started, job.notes)
    if share:
        details["tpu_compile_share"] = share
    return Converted(out, details, cacheable=not any("process" in c for c in compiles))


def cache_inputs(sample: dict) -> tuple[str, ...]:
    """The KV cache among a signature's inputs: donated to decode (updated in place) and kept in the variant's
    dtype across steps."""
    return tuple(n for n in sample if n.startswith("cache_"))


def _sweepable(name: str, lowered, donate: tuple, swept: list) -> list[dict]:
    """The programs a ``--tpu-batch`` sweep compiles: the first prefill (prefill tokens/s) and decode."""
    from edgeport.targets.tpu.target import _weight_avals

    if name != "decode" and any(p["name"].startswith("prefill") for p in swept):
        return []
    return [{"name": name, "fn": lowered.fn, "weight_avals": _weight_avals(lowered.weights),
             "input_avals": lowered.compile_avals, "donate": donate}]


def _export(name: str, program, job: GenerativeJob, out: Path, precision: str, converted: dict):
    import jax

    from edgeport.targets.tpu.lowering import lower_program
    from edgeport.targets.tpu.target import _weight_avals

    sample = job.samples[name]
    # the KV cache stays in the variant's dtype across steps (bf16 in, bf16 out, donated in place)
    lowered = lower_program(program, job.variant, list(sample), tuple(sample.values()), converted, cache_inputs(sample))
    with jax.default_matmul_precision(precision):
        exported = jax.export.export(jax.jit(lowered.fn), platforms=("cpu", "tpu"))(
            _weight_avals(lowered.weights), *lowered.input_avals)
    serialized = exported.serialize()
    (out / f"{name}.jax_export").write_bytes(serialized)
    outputs = list(program.call_spec.out_spec.context)
    describe = lambda n, a: {"name": n, "shape": [int(d) for d in a.shape], "dtype": str(a.dtype)}  # noqa: E731
    n_weights = len(lowered.weights)
    return lowered, {"file": f"{name}.jax_export", "weights": sorted(lowered.weights),
                     "inputs": [describe(n, a) for n, a in zip(sample, exported.in_avals[n_weights:])],
                     "outputs": [describe(n, a) for n, a in zip(outputs, exported.out_avals)]}, serialized


def _merge_weights(into: dict, weights: dict) -> None:
    """Signatures of one model share their weights: store each once (a name bound to other values is a bug)."""
    import numpy as np

    for key, value in weights.items():
        if key in into and into[key] is not value and not (
                into[key].shape == value.shape and np.array_equal(np.asarray(into[key]), np.asarray(value))):
            raise ValueError(f"weight {key!r} differs between signatures")
        into.setdefault(key, value)


def _compile_all(topologies, compile_input, out: Path, donate: tuple, name: str) -> list[dict]:
    """In a child process (a libtpu abort fails that compile only); the export's matmul precision is in
    its StableHLO already."""
    from edgeport.targets.tpu.aot import compile_for_topologies

    return compile_for_topologies(topologies, compile_input, out, donate, program=name)


def _write(out: Path, weights: dict, tied: dict, meta: dict, job: GenerativeJob, precision: str) -> None:
    """``tied``: program state names that are another weight's tensor (a head tied to the embedding) ->
    that weight's name; stored and passed once."""
    from edgeport.targets.tpu.weights import save as save_weights

    save_weights(weights, out / WEIGHTS_FILE, tied)
    (out / META_FILE).write_text(json.dumps({
        "format": "jax.export", "platforms": ["cpu", "tpu"], "variant": job.variant, "matmul_precision": precision,
        "call": "exported.call({w: weights[w] for w in signature.weights}, *inputs in signature order) -> outputs",
        "tied": tied, "signatures": meta}, indent=2) + "\n")


def load(path: Path, threads: int) -> JaxSignatureRunner:
    return JaxSignatureRunner(Path(path), threads)


GENERATIVE = GenerativeSupport(variants=("fp32", "bf16"), convert=convert, load=load)
