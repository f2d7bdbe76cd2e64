"""``--tpu-batch 1,8,32,128``: the program compiled ahead of time at several batch sizes per topology.

Why ``jax.vmap`` and not a re-export: a ``torch.export`` program is usually static (a ``view`` to
``[1, heads, ...]`` bakes the batch in), so feeding it a larger batch fails, and re-exporting needs the
module (a ``.pt2`` has none). ``vmap`` over the lowered jax function gives, for any program, B independent
copies of the exported call (B sequences each with its own KV cache, or B images) as one program: the
compiler batches the matmuls against the shared weights, so its memory and FLOPs are those of a real
batch-B program. The batch is a new leading axis; a program exported with a batch of its own keeps it
(batch here multiplies it, and the report says so).

Reuse (issue 38): each batch is lowered and serialized once (``jax.jit(...).lower`` per shape), then every
topology and every batch of a row is compiled by ONE child process (one Python start and libtpu load for
the whole sweep, not one per batch); the sweep's executables are not written (they are not shipped).
"""

from __future__ import annotations

from pathlib import Path

from edgeport.errors import UsageError

MAX_BATCH = 4096


def parse_batches(values) -> list[int]:
    """``--tpu-batch 1,8,32`` (repeatable or comma-separated) -> sorted unique positive ints; [] when unset."""
    items = [v for value in (values or []) for v in str(value).split(",") if v.strip()]
    try:
        batches = sorted({int(v) for v in items})
    except ValueError:
        raise UsageError(f"bad --tpu-batch {','.join(items)!r}: expected positive integers like 1,8,32,128") from None
    if any(b < 1 or b > MAX_BATCH for b in batches):
        raise UsageError(f"bad --tpu-batch {','.join(items)!r}: each batch must be 1..{MAX_BATCH}")
    return batches


def validate_batches(values) -> None:
    """Plan time: the batches, and the price and GPU tables the sweep will read (exit 2 before any work)."""
    from edgeport.config import load_config
    from edgeport.targets.tpu.cost import check_tables

    parse_batches(values)
    check_tables(load_config(), "the project's config")


def sweep_topologies(options: dict, topologies: list) -> list:
    """The row's topologies, or all of them in piece 0 of a split conversion (:func:`.aot.pieces`)."""
    from edgeport.targets.tpu.aot import parse_topology

    names = options.get("sweep_topology")
    return [parse_topology(n) for n in names] if names else topologies


def batched_export(fn, weight_avals: dict, input_avals: list, batch: int, precision: str) -> tuple[bytes, list]:
    """The TPU lowering of ``batch`` copies of ``fn(weights, *inputs)`` (weights shared) and the concrete
    (shape, dtype) of each batched input."""
    import jax

    batched = jax.vmap(fn, in_axes=(None, *([0] * len(input_avals))))
    avals = [jax.ShapeDtypeStruct((batch, *a.shape), a.dtype) for a in input_avals]
    with jax.default_matmul_precision(precision), jax.enable_x64(False):
        exported = jax.export.export(jax.jit(batched), platforms=("tpu",))(weight_avals, *avals)
    return exported.serialize(), [(tuple(int(d) for d in a.shape), str(a.dtype)) for a in avals]


def sweep(programs: list[dict], topologies: list, batches: list[int], precision: str, progress=lambda _s: None,
          known: list[dict] = ()) -> list[dict]:
    """Compile rows (one per program x batch x topology, with ``batch`` and ``program``) for ``programs``:
    dicts with ``name``, ``fn``, ``weight_avals``, ``input_avals`` (concrete) and ``donate`` (input
    positions updated in place, e.g. a KV cache). Batch 1 IS the row's own program: its compiles
    (``known``, the row's ``tpu_compile``) are reused, not compiled again."""
    reused = {(r.get("program") or programs[0]["name"], r["topology"]): r for r in known if r.get("ok")}
    done = [{**reused[(p["name"], t.name)], "program": p["name"], "batch": 1, "reused": True}
            for p in programs for t in topologies if 1 in batches and (p["name"], t.name) in reused]
    todo = [(p, b, t) for p in programs for b in batches for t in topologies
            if not (b == 1 and (p["name"], t.name) in reused)]
    return done + _compile_sweep(todo, precision, progress)


def _compile_sweep(todo: list, precision: str, progress) -> list[dict]:
    from edgeport.core.scratch import scratch
    from edgeport.targets.tpu.aot_process import COMPILE_TIMEOUT_S, run_compiles

    if not todo:
        return []
    with scratch("edgeport-tpu-sweep-") as tmp:
        requests, labels, exports = [], [], {}
        for program, batch, t in todo:
            key = (program["name"], batch)
            if key not in exports:  # lowered once per shape, compiled per topology
                progress(f"lowering {program['name']} at batch {batch}")
                serialized, avals = batched_export(program["fn"], program["weight_avals"], program["input_avals"],
                                                   batch, precision)
                exports[key] = (tmp / f"{program['name']}_b{batch}.jax_export", avals)
                exports[key][0].write_bytes(serialized)
            path, avals = exports[key]
            requests.append({"topology": t.name, "generation": t.generation, "shape": list(t.shape),
                             "export": str(path), "avals": [[list(s), d] for s, d in avals],
                             "donate": list(program.get("donate", ())), "executable": None})
            labels.append({"program": program["name"], "batch": batch})
        workers = compile_workers(len(requests), max(p.stat().st_size for p, _a in exports.values()))
        progress(f"compile {len(requests)} (program x batch x topology) in {workers} process(es)")
        results = _in_parallel(requests, workers, {"out": str(Path(tmp).resolve())}, run_compiles, COMPILE_TIMEOUT_S)
    return [{**label, "topology": r["topology"], "ok": False, "error": None, **result}
            for label, r, result in zip(labels, requests, results)]


# A compile child of a small program holds a few hundred MB (jax, libtpu, the program); two of them side by side
# use both cores of a CI runner. Programs this large or larger (a serialized export: StableHLO without the
# weights) compile one child at a time, as do hosts with one core.
PARALLEL_MAX_EXPORT_BYTES = 64 * 2**20


def compile_workers(requests: int, export_bytes: int) -> int:
    """Two children when two cores are idle (measured here on a host whose load average was 10 on 2 cores,
    two children were 0.83x of one: bench/TPU_COST.md), else one."""
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    idle = cores - (os.getloadavg()[0] if hasattr(os, "getloadavg") else cores)
    if export_bytes >= PARALLEL_MAX_EXPORT_BYTES or idle < 1.5:
        return 1
    return max(1, min(2, requests))


def _in_parallel(requests: list[dict], workers: int, common: dict, run, timeout: float) -> list[dict]:
    """``run(requests, b"", common, timeout)`` over ``workers`` children side by side (requests dealt round
    robin, so each child gets small and large batches); results in request order."""
    from concurrent.futures import ThreadPoolExecutor

    if workers <= 1:
        return run(requests, b"", common, timeout)
    from edgeport.targets.tpu.aot_process import CANCEL

    groups = [list(range(len(requests)))[w::workers] for w in range(workers)]
    pool = ThreadPoolExecutor(workers)
    try:
        futures = [pool.submit(run, [requests[i] for i in g], b"", common, timeout) for g in groups]
        done = [f.result() for f in futures]
    except BaseException:  # cancelled (SIGTERM, Ctrl-C): the watchers kill their children before this re-raises
        CANCEL.set()
        pool.shutdown(wait=True, cancel_futures=True)
        CANCEL.clear()
        raise
    pool.shutdown()
    results: list = [None] * len(requests)
    for group, rows in zip(groups, done):
        for i, row in zip(group, rows):
            results[i] = row
    return results
