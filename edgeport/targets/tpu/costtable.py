"""The ``tpu_cost`` block of a TPU row: per generation x topology x batch (and per GPU reference x batch),
step time from the roofline, tokens/s per chip and per slice, prefill tokens/s, $/1M output tokens, whether
it fits HBM (and by how much it does not), the best configuration per generation marked.

Text generation counts output tokens (one per sequence per decode step); a forward model counts inferences
(one per batch item per call), so "$/1M" is per million inferences there.
"""

from __future__ import annotations

import re

from edgeport.targets.tpu.cost import CHIP_SOURCES, gpus, per_million, prices, roofline, traffic_bytes

METHOD = ("ESTIMATE: step time = max(FLOPs / peak FLOP/s, bytes moved / HBM bandwidth) per device. FLOPs from libtpu's "
          "cost analysis; bytes moved = the step's arguments read once (weights, KV cache, inputs) + its outputs not "
          "written in place into a donated input + its temporary buffers written and read once, all from libtpu's "
          "memory analysis (see traffic_bytes); the cost analysis' own 'bytes accessed' is shown beside it, not used. "
          "tokens/s per slice = batch / step time (data-parallel slices split the batch; a replicated one computes it "
          "on every chip); $/1M = price per hour x chips / (tokens/s x 3600) x 1e6. No host dispatch, collectives or "
          "scheduling; GPU rows use the same FLOPs and bytes.")
# Why not the cost analysis' "bytes accessed": it sums every top-level op's operand and result bytes in every
# memory space. On a TPU the compiler stages weights and the KV cache through on-chip VMEM (copy-start /
# slice-start into S(1) buffers, then the fusion reads them), so each weight byte is counted about three times
# (HBM read, VMEM write, VMEM read) and per-sequence on-chip intermediates are counted as if they were HBM
# traffic: 3.3x the weights at batch 1 on the 1B shape (bench/TPU_COST.md, "Where the compiler's bytes went").
def cost_block(rows: list[dict], config: dict, generative: bool, base_batch: int = 1) -> dict:
    """The block from the sweep's compile rows (``program``, ``batch``, ``topology`` + the compiler's analysis)."""
    from edgeport.targets.tpu.aot import GENERATIONS, parse_topology

    price, gpu = prices(config), gpus(config)
    step = "decode" if generative else "forward"
    table = []
    for row in (r for r in rows if r["program"] == step):
        prefill = next((p for p in rows if p["program"].startswith("prefill") and p["batch"] == row["batch"]
                        and p["topology"] == row["topology"]), None)
        topo = parse_topology(row["topology"])
        table.append(_tpu_entry(row, prefill, GENERATIONS[topo.generation], price.get(topo.generation), base_batch))
    table += [_gpu_entry(name, spec, rows, step, batch, base_batch) for name, spec in gpu.items()
              for batch in sorted({r["batch"] for r in rows if r["program"] == step})]
    _mark_best(table)
    return {"unit": "output tokens" if generative else "inferences", "step": step, "base_batch": base_batch,
            "method": METHOD, "rows": table,
            "chips": {g: {"peak_flops": s.peak_flops, "hbm_bytes": s.hbm_bytes, "hbm_bytes_per_s": s.hbm_bytes_per_s,
                          "devices_per_chip": s.devices_per_chip, "source": CHIP_SOURCES.get(g)}
                      for g, s in GENERATIONS.items()},
            "prices": price, "gpus": {n: {k: v for k, v in s.items()} for n, s in gpu.items()}}


def _tpu_entry(row: dict, prefill: dict | None, gen, price: dict | None, base_batch: int) -> dict:
    entry = {"hardware": row["topology"], "kind": "tpu", "generation": row["topology"].split(":")[0],
             "batch": row["batch"], "ok": row.get("ok", False), "estimate": "roofline"}
    if not row.get("ok"):
        return {**entry, "error": row.get("error")}
    devices = row.get("devices") or 1
    chips = max(1, devices // gen.devices_per_chip)
    peak, bandwidth = gen.peak_flops / gen.devices_per_chip, gen.hbm_bytes_per_s / gen.devices_per_chip
    moved, basis = traffic_bytes(row)
    seconds, bound = roofline(row["flops"], moved, peak, bandwidth)
    items = row["batch"] * base_batch
    slice_rate = items / seconds if seconds > 0 else 0.0
    usd = price["usd_per_chip_hour"] * chips if price else None
    entry.update(chips=chips, sharding=row.get("sharding"), peak_bytes=row["peak_bytes"],
                 hbm_bytes=row["hbm_bytes_per_device"], fits=bool(row["fits_hbm"]),
                 over_hbm_bytes=max(0, row["peak_bytes"] - row["hbm_bytes_per_device"]),
                 flops=row["flops"], bytes_moved=moved, bytes_basis=basis, bytes_accessed=row["bytes_accessed"],
                 step_seconds=seconds, bound=bound,
                 compiler_step_seconds=row.get("compiler_est_seconds"), tokens_per_s=slice_rate,
                 tokens_per_s_per_chip=slice_rate / chips, usd_per_hour=usd, usd_per_million=per_million(usd, slice_rate),
                 price_source=price["source"] if price else "no list price: set [tpu.prices]")
    if prefill and prefill.get("ok"):
        p_seconds, p_bound = roofline(prefill["flops"], traffic_bytes(prefill)[0], peak, bandwidth)
        tokens = items * _prefill_len(prefill)
        entry.update(prefill_tokens_per_s=tokens / p_seconds if p_seconds > 0 else None, prefill_bound=p_bound,
                     prefill_fits=bool(prefill["fits_hbm"]))
    return entry


def _prefill_len(row: dict) -> int:
    match = re.search(r"(\d+)$", row["program"])
    return int(match.group(1)) if match else 1


def _gpu_entry(name: str, spec: dict, rows: list[dict], step: str, batch: int, base_batch: int) -> dict:
    """One GPU at one batch: the whole batch's FLOPs and bytes (a one-device compile's, else the per-device
    figures times the devices that split it) through the GPU's roofline; a measured rate replaces it."""
    single = [r for r in rows if r["program"] == step and r["batch"] == batch and r.get("ok")]
    entry = {"hardware": name, "kind": "gpu", "generation": name, "batch": batch, "chips": 1, "ok": bool(single),
             "estimate": "roofline", "price_source": spec.get("source")}
    if not single:
        return {**entry, "error": "no TPU compile at this batch to take FLOPs and bytes from"}
    row = min(single, key=lambda r: r.get("devices") or 1)
    scale = (row.get("devices") or 1) if row.get("sharding") == "data-parallel" else 1
    (moved, basis), accessed = traffic_bytes(row), row["bytes_accessed"] * scale
    flops, moved, peak = row["flops"] * scale, moved * scale, row["peak_bytes"] * scale
    seconds, bound = roofline(flops, moved, spec["peak_flops"], spec["hbm_bytes_per_s"])
    rate = batch * base_batch / seconds if seconds > 0 else 0.0
    measured = (spec.get("tokens_per_s") or {}).get(str(batch))
    if measured:
        rate, entry["estimate"], bound = float(measured), "measured", "measured by the user"
    prefill = [r for r in rows if r["program"].startswith("prefill") and r["batch"] == batch and r.get("ok")
               and r["topology"] == row["topology"]]
    if prefill:
        p_seconds, _bound = roofline(prefill[0]["flops"] * scale, traffic_bytes(prefill[0])[0] * scale,
                                     spec["peak_flops"], spec["hbm_bytes_per_s"])
        entry["prefill_tokens_per_s"] = batch * base_batch * _prefill_len(prefill[0]) / p_seconds if p_seconds > 0 else None
    entry.update(peak_bytes=peak, hbm_bytes=spec["memory_bytes"], fits=peak <= spec["memory_bytes"],
                 over_hbm_bytes=max(0, int(peak - spec["memory_bytes"])), flops=flops, bytes_moved=moved,
                 bytes_basis=basis, bytes_accessed=accessed,
                 step_seconds=batch * base_batch / rate if rate else None, bound=bound, tokens_per_s=rate,
                 tokens_per_s_per_chip=rate, usd_per_hour=spec["usd_per_hour"],
                 usd_per_million=per_million(spec["usd_per_hour"], rate))
    return entry


def _mark_best(table: list[dict]) -> None:
    """Per generation (or GPU): the fitting configuration with the lowest $/1M (then the highest tokens/s)."""
    for generation in dict.fromkeys(e["generation"] for e in table):
        fitting = [e for e in table if e["generation"] == generation and e.get("ok") and e.get("fits")]
        priced = [e for e in fitting if e.get("usd_per_million") is not None]
        pool = priced or fitting
        if pool:
            best = min(pool, key=lambda e: (e.get("usd_per_million") or 0.0, -e["tokens_per_s"]))
            best["best"] = True
