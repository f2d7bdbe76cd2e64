"""Tokens/s and $/1M tokens per TPU generation x topology x batch, beside GPU reference rows: the table an
engineering manager reads to decide whether to move a model to TPU.

Every number is traceable: FLOPs (cost analysis), the bytes a step moves and peak HBM (memory analysis) per
step come from libtpu's compiler (:mod:`.sweep`, :func:`.cost.traffic_bytes`); chip peaks from :data:`edgeport.targets.tpu.aot.GENERATIONS` (sources in
:data:`CHIP_SOURCES`); prices from :data:`DEFAULT_PRICES` or ``[tpu.prices]`` / ``[gpu.references]`` in
edgeport.toml. The speed is a roofline: step time = max(FLOPs / peak FLOP/s, bytes / HBM bandwidth) per
device, and the larger term names the bound. It is an ESTIMATE (no dispatch, no collectives, perfect
overlap); a user-measured GPU tokens/s replaces the GPU estimate and the row says "measured".
"""

from __future__ import annotations

from edgeport.errors import UsageError

READ = "2025 list (not re-read on this host: set [tpu.prices] / [gpu.references] for your contract)"
# Per-chip peak dense bf16 FLOP/s, HBM capacity and bandwidth (aot.GENERATIONS) come from these pages.
CHIP_SOURCES = {
    "v4": "cloud.google.com/tpu/docs/v4 (System architecture: 275 TFLOP/s bf16, 32 GiB HBM, 1200 GB/s)",
    "v5e": "cloud.google.com/tpu/docs/v5e (System architecture: 197 TFLOP/s bf16, 16 GiB HBM, 819 GB/s)",
    "v5p": "cloud.google.com/tpu/docs/v5p (System architecture: 459 TFLOP/s bf16, 95 GiB HBM, 2765 GB/s)",
    "v6e": "cloud.google.com/tpu/docs/v6e (System architecture: 918 TFLOP/s bf16, 32 GiB HBM, 1640 GB/s)",
    "tpu7x": "cloud.google.com/tpu/docs/tpu7x (Ironwood: 2307 TFLOP/s bf16, 192 GiB HBM, 7380 GB/s; 2 devices/chip)",
}
# On-demand list price per chip-hour, us-central regions, from cloud.google.com/tpu/pricing.
DEFAULT_PRICES = {"v4": 3.22, "v5e": 1.20, "v5p": 4.20, "v6e": 2.70}
PRICE_SOURCE = f"cloud.google.com/tpu/pricing, on-demand per chip-hour, us-central; {READ}"
GPU_DEFAULTS = {
    "H100": {"usd_per_hour": 11.06, "peak_flops": 989e12, "hbm_bytes_per_s": 3.35e12, "memory_bytes": 80e9,
             "source": "NVIDIA H100 SXM datasheet (989 TFLOP/s dense bf16, 3.35 TB/s, 80 GB); price: GCP "
                       f"a3-highgpu-8g on-demand / 8, us-central1; {READ}"},
    "A100": {"usd_per_hour": 5.07, "peak_flops": 312e12, "hbm_bytes_per_s": 2.039e12, "memory_bytes": 80e9,
             "source": "NVIDIA A100 80GB SXM datasheet (312 TFLOP/s dense bf16, 2039 GB/s, 80 GB); price: GCP "
                       f"a2-ultragpu-1g on-demand, us-central1; {READ}"},
}
GPU_KEYS = ("usd_per_hour", "peak_flops", "hbm_bytes_per_s", "memory_bytes")


def prices(config: dict) -> dict:
    """Generation -> {"usd_per_chip_hour", "source"}: ``[tpu.prices]`` (a number, or a table with
    ``usd_per_chip_hour`` and ``source``, e.g. a spot or committed price) over the defaults."""
    table = {g: {"usd_per_chip_hour": p, "source": PRICE_SOURCE} for g, p in DEFAULT_PRICES.items()}
    for generation, value in ((config.get("tpu") or {}).get("prices") or {}).items():
        value = value if isinstance(value, dict) else {"usd_per_chip_hour": value}
        table[generation] = {"usd_per_chip_hour": float(value["usd_per_chip_hour"]),
                             "source": str(value.get("source") or "edgeport.toml [tpu.prices]")}
    return table


def gpus(config: dict) -> dict:
    """Name -> figures: the defaults, then ``[gpu.references.NAME]`` (any key overrides; a new name needs
    all of :data:`GPU_KEYS`); ``tokens_per_s = {"8" = 1234.0}`` is a measured decode rate at batch 8."""
    table = {name: dict(spec) for name, spec in GPU_DEFAULTS.items()}
    for name, spec in ((config.get("gpu") or {}).get("references") or {}).items():
        merged = {**table.get(name, {}), **spec}
        merged.setdefault("source", "edgeport.toml [gpu.references]")
        table[name] = merged
    return table


def check_tables(config: dict, where: str = "config") -> None:
    """``[tpu.prices]`` and ``[gpu.references]`` as read: finite positive numbers, known keys (exit 2 otherwise)."""
    import math

    def number(value, label):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise UsageError(f"{label} in {where} must be a positive number, got {value!r}")

    for generation, value in ((config.get("tpu") or {}).get("prices") or {}).items():
        price = value.get("usd_per_chip_hour") if isinstance(value, dict) else value
        number(price, f"[tpu.prices] {generation}")
    for name, spec in ((config.get("gpu") or {}).get("references") or {}).items():
        if not isinstance(spec, dict):
            raise UsageError(f"[gpu.references.{name}] in {where} must be a table of {', '.join(GPU_KEYS)}")
        missing = [k for k in GPU_KEYS if k not in spec and name not in GPU_DEFAULTS]
        if missing:
            raise UsageError(f"[gpu.references.{name}] in {where} lacks {', '.join(missing)}")
        for key in GPU_KEYS:
            if key in spec:
                number(spec[key], f"[gpu.references.{name}] {key}")
        for batch, rate in (spec.get("tokens_per_s") or {}).items():
            number(rate, f"[gpu.references.{name}] tokens_per_s.{batch}")


def roofline(flops: float, accessed: float, peak_flops: float, bandwidth: float) -> tuple[float, str]:
    """(seconds, bound): the larger of compute time and HBM time, and which one it was."""
    compute, memory = flops / peak_flops, accessed / bandwidth
    return (compute, "compute") if compute >= memory else (memory, "HBM bandwidth")


def per_million(usd_per_hour: float | None, tokens_per_s: float) -> float | None:
    return usd_per_hour / (tokens_per_s * 3600.0) * 1e6 if usd_per_hour and tokens_per_s > 0 else None


BYTES_BASIS = "arguments + outputs - aliased + 2 x temp (memory analysis)"
COMPILER_BASIS = "bytes accessed (cost analysis: every op, every memory space)"


def traffic_bytes(row: dict) -> tuple[float, str]:
    """(bytes one step must move through HBM, its basis) for a compile row. From the memory analysis:
    arguments read once + outputs not aliased to a donated input written once + temporaries written and read
    once. A donated cache's in-place update of one slot per sequence is not counted (batch x layers x 2 x
    kv_heads x head_dim x 2 bytes: 4 MB on the 1B shape at batch 128). A temp buffer reused by several ops
    counts once, and an argument read only in part (an embedding table gathered by id) counts whole. The
    temporaries count at most what the program's HBM peak leaves beside its arguments and outputs: on a tiny
    model the analysis reports temporaries larger than the whole peak (buffers that never reach HBM at once),
    which made its batch-1 step "move" more than its batch-8 one (bench/TPU_COST.md, "Tiny Llama"). A row
    without the memory analysis' sizes (older reports) falls back to the compiler's bytes accessed."""
    sizes = [row.get(k) for k in ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes")]
    if any(v is None for v in sizes):
        return float(row["bytes_accessed"]), COMPILER_BASIS
    argument, output, alias, temp = (float(v) for v in sizes)
    written = max(0.0, output - alias)
    if row.get("peak_bytes"):
        temp = min(temp, max(0.0, float(row["peak_bytes"]) - argument - written))
    return argument + written + 2.0 * temp, BYTES_BASIS
