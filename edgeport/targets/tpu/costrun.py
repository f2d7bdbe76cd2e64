"""What a TPU row does for ``--tpu-batch``: sweep the batch sizes (:mod:`.sweep`), build the ``tpu_cost``
block (:mod:`.costtable`) and write the standalone page ``DIR/tpu/cost_<variant>.html`` (:mod:`.costpage`).

Prices and GPU references come from ``[tpu.prices]`` / ``[gpu.references]`` in the project's config file
(edgeport.toml or pyproject.toml in the working directory, as the run reads it without ``--config``).
"""

from __future__ import annotations

import time
from pathlib import Path


def project_config(notes: list) -> dict:
    """The tables from the working directory's config; a bad one is a note (the plan already refused it when
    it was the run's config), the defaults are used."""
    from edgeport.config import load_config
    from edgeport.errors import UsageError

    try:
        return load_config()
    except UsageError as exc:
        notes.append(f"tpu_cost: default prices used: {exc}")
        return {}


# what the report keeps of each sweep compile: enough to recompute its table row (the memory sizes are the
# roofline's bytes, cost.traffic_bytes)
SWEEP_KEYS = ("program", "batch", "topology", "ok", "peak_bytes", "flops", "bytes_accessed", "argument_bytes",
              "output_bytes", "alias_bytes", "temp_bytes", "compiler_est_seconds", "compile_seconds", "reused", "devices",
              "sharding", "hbm_bytes_per_device", "fits_hbm")


def run_cost(options: dict, programs: list[dict], topologies: list, precision: str, generative: bool,
             out_dir: Path, label: str, notes: list, progress=lambda _s: None, known: list[dict] = ()) -> dict | None:
    """The ``tpu_cost`` block for ``programs`` (see :func:`.sweep.sweep`), or None without ``--tpu-batch``
    or topologies. Writes ``out_dir/cost_<label>.html``."""
    from edgeport.targets.tpu.costpage import write_page
    from edgeport.targets.tpu.costtable import cost_block
    from edgeport.targets.tpu.sweep import parse_batches, sweep

    batches = parse_batches(options.get("tpu_batch"))
    if not batches:
        return None
    if not topologies:
        notes.append("--tpu-batch needs at least one --tpu-topology: no sweep without a compile")
        return None
    start = time.perf_counter()
    rows = sweep(programs, topologies, batches, precision, progress, known)
    seconds = time.perf_counter() - start
    for failed in (r for r in rows if not r.get("ok")):
        notes.append(f"tpu_cost: {failed['program']} at batch {failed['batch']} on {failed['topology']} "
                     f"did not compile: {failed.get('error')}")
    block = cost_block(rows, project_config(notes), generative, _base_batch(programs))
    block.update(batches=batches, sweep_compile_seconds=round(seconds, 3),
                 sweep=[{k: r.get(k) for k in SWEEP_KEYS} for r in rows])
    page = out_dir / f"cost_{label}.html"
    write_page(block, page, label)
    block["page"] = str(page.relative_to(out_dir.parent))
    notes.append(f"tpu_cost: tokens/s and $/1M {block['unit']} are roofline ESTIMATES at list prices; "
                 f"see {block['page']}")
    return block


def _base_batch(programs: list[dict]) -> int:
    """The batch each program already has (the sweep's batch multiplies it): the shared leading dim of the
    step's inputs when they all have one, else 1."""
    leading = {tuple(a.shape)[0] if len(a.shape) else None for a in programs[-1]["input_avals"]}
    value = leading.pop() if len(leading) == 1 else None
    return value if isinstance(value, int) and value > 0 else 1


def compile_share(compiles: list[dict], cost: dict | None, started: float, notes: list) -> dict | None:
    """How much of the row's conversion the libtpu compiles took (issue 38: on small models they dominate):
    the row's own compiles (the first includes the compile child's start) plus the batch sweep."""
    seconds = sum(c.get("compile_seconds") or 0.0 for c in compiles) + ((cost or {}).get("sweep_compile_seconds") or 0.0)
    total = time.perf_counter() - started
    if not seconds or total <= 0:
        return None
    share = min(1.0, seconds / total)
    notes.append(f"libtpu AOT compiles took {seconds:.1f} s of this row's {total:.1f} s conversion ({share:.0%}); "
                 "--tpu-topology none skips them; the cache keeps them for the next run")
    return {"compile_seconds": round(seconds, 3), "convert_seconds": round(total, 3), "share": round(share, 3)}
