"""TPU generations, topologies and libtpu ahead-of-time compiles: what the TPU target knows about chips.

A compile for a topology runs on this CPU-only host with a compile-only libtpu topology; memory and FLOPs
come from the compiler, and the latency is a roofline over the chip's published peak FLOP/s and HBM
bandwidth: an estimate, labelled so in every rendering (:func:`report_sections`).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

from edgeport.errors import UsageError, load_json
from edgeport.targets.base import ReportSection

GIB = 2**30


@dataclass(frozen=True)
class Generation:
    """Per-chip figures. A "device" is what jax sees: a chip, or one TensorCore where a chip has two
    exposed separately (tpu7x); per-device numbers divide by ``devices_per_chip``."""

    hbm_bytes: int
    peak_flops: float          # dense bf16 FLOP/s (f32 matmuls run on the same MXUs: still an estimate)
    hbm_bytes_per_s: float
    dims: int                  # topology rank: 2 = "AxB", 3 = "AxBxC"
    chip_config: str = "default"
    wrap: bool = False
    devices_per_chip: int = 1


# Source: Google Cloud TPU documentation, "TPU versions" pages (system architecture of v4, v5e, v5p,
# v6e "Trillium", TPU7x "Ironwood"): HBM capacity, peak bf16 compute and HBM bandwidth per chip.
GENERATIONS: dict[str, Generation] = {
    "v4": Generation(32 * GIB, 275e12, 1200e9, dims=3, chip_config="megacore", wrap=True),
    "v5e": Generation(16 * GIB, 197e12, 819e9, dims=2),
    "v5p": Generation(95 * GIB, 459e12, 2765e9, dims=3, chip_config="megacore", wrap=True),
    "v6e": Generation(32 * GIB, 918e12, 1640e9, dims=2),
    "tpu7x": Generation(192 * GIB, 2307e12, 7380e9, dims=3, devices_per_chip=2),
}
# What a generation's slices can be (Google Cloud TPU documentation, "TPU versions" / "topologies"): the 2D
# generations offer fixed slice shapes up to 16x16 (256 chips); the 3D ones cube-built slices up to their
# pod size. libtpu aborts the whole process (SIGABRT) on a topology outside these, so they are checked here.
SLICE_SHAPES_2D = {(1, 1), (2, 2), (2, 4), (4, 4), (4, 8), (8, 8), (8, 16), (16, 16)}
MAX_CHIPS_3D = {"v4": 4096, "v5p": 8960, "tpu7x": 9216}
DEFAULT_TOPOLOGIES = ("v5e:1x1", "v5e:2x2", "v6e:1x1")
TOPOLOGY_EXAMPLES = "v5e:1x1, v5e:2x2, v6e:1x1, v6e:2x4, v4:2x2x1, v5p:2x2x1, tpu7x:2x2x1"


@dataclass(frozen=True)
class Topology:
    name: str
    generation: str
    shape: tuple[int, ...]

    @property
    def spec(self) -> Generation:
        return GENERATIONS[self.generation]

    @property
    def slug(self) -> str:
        return self.name.replace(":", "_")


def parse_topology(text: str) -> Topology:
    """``GEN:AxB`` (v5e, v6e) or ``GEN:AxBxC`` (v4, v5p, tpu7x); bad text -> UsageError listing examples."""
    match = re.fullmatch(r"([a-z0-9]+):(\d+(?:x\d+)*)", text.strip().lower())
    bad = f"bad --tpu-topology {text!r}; valid examples: {TOPOLOGY_EXAMPLES} (generations: {', '.join(GENERATIONS)})"
    if not match or match.group(1) not in GENERATIONS:
        raise UsageError(bad)
    shape = tuple(int(d) for d in match.group(2).split("x"))
    if len(shape) != GENERATIONS[match.group(1)].dims or min(shape) < 1:
        raise UsageError(bad)
    check_slice(text, match.group(1), shape)
    return Topology(f"{match.group(1)}:{match.group(2)}", match.group(1), shape)


def check_slice(text: str, generation: str, shape: tuple[int, ...]) -> None:
    """A shape the generation does not build is exit 2 naming its real limits (libtpu would abort)."""
    if len(shape) == 2 and shape not in SLICE_SHAPES_2D:
        shapes = ", ".join("x".join(map(str, s)) for s in sorted(SLICE_SHAPES_2D))
        raise UsageError(f"--tpu-topology {text!r}: {generation} has no such slice; its slices are {shapes}")
    chips, limit = 1, MAX_CHIPS_3D.get(generation)
    for size in shape:
        chips *= size
    if len(shape) == 3 and limit is not None and chips > limit:
        raise UsageError(f"--tpu-topology {text!r}: {chips} chips, but a {generation} slice has at most {limit}")


NO_COMPILE = "none"   # --tpu-topology none: the artifact alone, no AOT compile
NO_COMPILE_NOTE = ("no TPU compile (--tpu-topology none): the artifact ran on the CPU only; no HBM or FLOPs table, "
                   "and nothing says it fits a chip")


def topologies_of(options: dict) -> list[Topology]:
    """The topologies to compile for: the ones named, the defaults when none is named, nothing for ``none``
    (a user iterating on lowering or parity need not pay libtpu's compiles each run)."""
    values = list(dict.fromkeys(options.get("tpu_topology") or DEFAULT_TOPOLOGIES))
    return [] if values == [NO_COMPILE] else [parse_topology(t) for t in values]


def validate_topologies(values: list[str]) -> None:
    """``--tpu-topology`` values, checked at plan time: a bad topology is bad input (exit 2)."""
    if NO_COMPILE in values and set(values) != {NO_COMPILE}:
        raise UsageError(f"--tpu-topology {NO_COMPILE} means no AOT compile; it cannot be combined with topologies "
                         f"({', '.join(v for v in values if v != NO_COMPILE)})")
    for value in values:
        if value != NO_COMPILE:
            parse_topology(value)


# A split costs every extra piece a jax/torchax import and a lowering (seconds); it pays when a compile
# takes longer than that. Compile time grows with the program: MobileNetV2 (152 ops) ~1 min per topology,
# a 75-op text encoder ~2 s. Programs with fewer ops than this compile every topology in one piece.
SPLIT_MIN_OPS = 100


def pieces(options: dict, program=None) -> list[dict]:
    """The conversion split per topology, so compiles run side by side: piece 0 lowers, writes the
    artifact and compiles the first topology; every other piece lowers again and only compiles its own
    topology. One topology, or a small program: nothing to split."""
    names = [t.name for t in topologies_of(options)]
    if len(names) < 2 or options.get("artifact_only"):
        return []
    if program is not None and sum(1 for n in program.graph.nodes if n.op == "call_function") < SPLIT_MIN_OPS:
        return []
    # piece 0 still sweeps --tpu-batch over every topology (one child for the whole sweep)
    first = {"tpu_topology": names[:1], **({"sweep_topology": names} if options.get("tpu_batch") else {})}
    return [first] + [{"tpu_topology": [n], "compile_only": True} for n in names[1:]]


def merge_pieces(target_dir: Path, variant: str, details: dict, others: list[dict]) -> dict:
    """Piece 0's details plus the other pieces' compiles (in topology order); meta.json names every
    executable, as when one process compiled them all."""
    import json

    from edgeport.targets.tpu.runtime import META_FILE

    compiles = list(details.get("tpu_compile") or [])
    extra = [dict(c) for other in others for c in other.get("tpu_compile") or []]
    meta_path = target_dir / variant / META_FILE
    meta = load_json(meta_path.read_text())
    for row in extra:
        executable = row.pop("executable", None)
        if executable and (target_dir / variant / executable).is_file():
            meta["executables"][row["topology"]] = executable
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    return {**details, "tpu_compile": compiles + extra}


@dataclass(frozen=True)
class CompileInput:
    """What a compile needs, as data a child process reads (no pickle): the serialized ``jax.export``
    (its TPU lowering is what libtpu compiles) and the concrete (shape, dtype) of each user input."""

    serialized: bytes
    avals: tuple

    @staticmethod
    def of(serialized: bytes, lowered) -> "CompileInput":
        return CompileInput(serialized, tuple((tuple(int(d) for d in a.shape), str(a.dtype)) for a in lowered.compile_avals))


def compile_id(compile_input: CompileInput) -> dict:
    """What decides a compile besides its topology: the serialized jax.export of the program (its StableHLO,
    weights' shapes and matmul precision), the shapes it is compiled at, the compiler's versions and the
    code here and in the child that sets up sharding."""
    import hashlib

    from edgeport.validate.environment import package_versions

    code = hashlib.sha256(b"".join(Path(__file__).with_name(f).read_bytes() for f in ("aot.py", "aot_child.py", "aot_process.py"))).hexdigest()
    return {"kind": "tpu_compile", "exported_sha256": hashlib.sha256(compile_input.serialized).hexdigest(),
            "avals": [[list(shape), dtype] for shape, dtype in compile_input.avals],
            "libraries": package_versions(["jax", "jaxlib", "libtpu"]), "code": code}


def compile_cached(topologies: list[Topology], compile_input: CompileInput, out: Path, cache=None,
                   identity: dict | None = None) -> list[dict]:
    """:func:`compile_for_topologies`, with each topology's cached result where there is one (the
    executable verified by sha256 and the compiler's analysis; the compile's row says ``"cache": "hit"``).
    Failed compiles are cached too: they are as deterministic as good ones; a compile whose process died
    or timed out is not (a timeout depends on the machine)."""
    if cache is None or identity is None:
        return compile_for_topologies(topologies, compile_input, out)
    from edgeport.cache import key_of

    rows, keys = {}, {t.name: key_of({**identity, "topology": t.name}) for t in topologies}
    for topology in topologies:
        start = time.perf_counter()
        data = cache.get(keys[topology.name], out)
        if data is not None and "row" in data:
            rows[topology.name] = {**data["row"], "cache": "hit", "compile_seconds": round(time.perf_counter() - start, 3)}
    missing = [t for t in topologies if t.name not in rows]
    for topology, row in zip(missing, compile_for_topologies(missing, compile_input, out)):
        rows[topology.name] = row
        if "process" not in row:
            files = [row["executable"]] if row.get("executable") else []
            cache.put(keys[topology.name], out, files, {"row": dict(row)},
                      describe={"kind": "tpu_compile", "topology": topology.name})
    return [rows[t.name] for t in topologies]


def compile_for_topology(topology: Topology, compile_input: CompileInput, out: Path, donate: tuple[int, ...] = (),
                         program: str | None = None, timeout: float | None = None) -> dict:
    return compile_for_topologies([topology], compile_input, out, donate, program, timeout)[0]


def compile_for_topologies(topologies: list[Topology], compile_input: CompileInput, out: Path,
                           donate: tuple[int, ...] = (), program: str | None = None,
                           timeout: float | None = None) -> list[dict]:
    """libtpu compiles of one program for each topology on this host, in a child process
    (:mod:`aot_child`, started by :mod:`aot_process`): a failure (out of HBM, unsupported op), a libtpu abort
    or a compile making no progress for ``timeout`` seconds stays in that topology's row.
    ``donate``: input positions whose buffers the outputs may reuse (a KV cache updated in place), so the
    memory analysis counts them once; ``program`` names one of several programs (generative signatures)."""
    from edgeport.targets.tpu.aot_process import COMPILE_TIMEOUT_S, run_compiles

    if not topologies:
        return []
    stems = [f"{t.slug}_{program}" if program else t.slug for t in topologies]
    requests = [{"topology": t.name, "generation": t.generation, "shape": list(t.shape),
                 "executable": f"executables/{stem}.tpu_exec"} for t, stem in zip(topologies, stems)]
    common = {"avals": [[list(shape), dtype] for shape, dtype in compile_input.avals], "donate": list(donate),
              "out": str(Path(out).resolve())}
    results = run_compiles(requests, compile_input.serialized, common, timeout or COMPILE_TIMEOUT_S)
    rows = []
    for topology, request, result in zip(topologies, requests, results):
        if not result.get("ok"):
            (Path(out) / request["executable"]).unlink(missing_ok=True)  # nothing half-written stays behind
        rows.append({"topology": topology.name, "ok": False, "error": None, **({"program": program} if program else {}),
                     "compile_seconds": None, **result})
    return rows


def _analysis(compiled, topology: Topology, devices: int) -> dict:
    """Per-device memory and cost from the compiler, the HBM check and the roofline latency estimate (its bytes
    from the memory analysis, as the cost table's: :func:`edgeport.targets.tpu.cost.traffic_bytes`)."""
    from edgeport.targets.tpu.cost import traffic_bytes

    gen = topology.spec
    memory = compiled.memory_analysis()
    cost = compiled.cost_analysis() or {}
    cost = cost[0] if isinstance(cost, list) else cost
    argument, output, temp = memory.argument_size_in_bytes, memory.output_size_in_bytes, memory.temp_size_in_bytes
    peak = getattr(memory, "peak_memory_in_bytes", 0) or (
        argument + output + temp + memory.generated_code_size_in_bytes - memory.alias_size_in_bytes)
    hbm = gen.hbm_bytes // gen.devices_per_chip
    flops, accessed = float(cost.get("flops", 0.0)), float(cost.get("bytes accessed", 0.0))
    peak_flops, bandwidth = gen.peak_flops / gen.devices_per_chip, gen.hbm_bytes_per_s / gen.devices_per_chip
    sizes = {"argument_bytes": int(argument), "output_bytes": int(output), "alias_bytes": int(memory.alias_size_in_bytes),
             "temp_bytes": int(temp)}
    moved, _basis = traffic_bytes({**sizes, "peak_bytes": int(peak)})
    return {
        "generation": topology.generation, "peak_bytes": int(peak), **sizes, "hbm_bytes_per_device": hbm,
        "fits_hbm": peak <= hbm, "flops": flops, "bytes_accessed": accessed,
        "est_seconds": max(flops / peak_flops, moved / bandwidth),
        "est_method": "roofline estimate per device: max(flops / peak FLOP/s, bytes moved / HBM bandwidth), bytes "
                      "moved = arguments + outputs - aliased + 2 x temp (memory analysis); excludes host dispatch "
                      "and launch overhead",
        "compiler_est_seconds": _compiler_estimate(cost),
    }


def _compiler_estimate(cost: dict) -> float | None:
    """libtpu's own estimate; it reports a negative sentinel for programs it cannot model (seen on sort/scatter)."""
    seconds = cost.get("optimal_seconds")
    return float(seconds) if seconds is not None and seconds >= 0 else None


def _write_executable(compiled, path: Path, out: Path) -> str | None:
    from jax.experimental.serialize_executable import serialize

    path.parent.mkdir(exist_ok=True)
    path.write_bytes(serialize(compiled)[0])
    return str(path.relative_to(out))


def _compile_error(exc: BaseException, noise) -> str:
    from edgeport.diagnostics import first_line

    text = first_line(exc)
    hint = next((ln for ln in noise.text().splitlines() if "out of memory" in ln.lower() or "error" in ln.lower()), None)
    return (text + (f" | {hint.strip()}" if hint and hint.strip() not in text else ""))[:500]


COMPILE_HEADERS = ("variant", "topology", "compiled", "sharding", "peak MiB/device", "fits HBM", "GFLOP/device",
                   "est. µs (roofline)", "est. µs (compiler)")
COMPILE_TITLE = "TPU ahead-of-time compiles (memory and FLOPs from the compiler; latencies are ESTIMATES, not measured)"


def report_sections(row: dict) -> list[ReportSection]:
    """One table row per topology the row's artifact was compiled for."""
    compiles = row.get("tpu_compile") or []
    return [ReportSection("tpu_compile", COMPILE_TITLE, COMPILE_HEADERS, [_compile_cells(row["variant"], c) for c in compiles])] if compiles else []


def _compile_cells(variant: str, c: dict) -> list[str]:
    from edgeport.validate.render import fmt

    us = lambda v: fmt(v * 1e6 if isinstance(v, (int, float)) else None, ".3g")  # noqa: E731
    return [f"{variant} {c['program']}" if c.get("program") else variant, c["topology"], "yes" if c["ok"] else f"no: {c.get('error') or ''}"[:120], c.get("sharding") or "–",
            fmt(c["peak_bytes"] / 2**20 if c.get("peak_bytes") else None, ".2f"),
            {True: "yes", False: "NO"}.get(c.get("fits_hbm"), "–"),
            fmt(c["flops"] / 1e9 if c.get("flops") is not None else None, ".3g"),
            us(c.get("est_seconds")), us(c.get("compiler_est_seconds"))]
