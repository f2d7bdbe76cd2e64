"""Pre-flight: will a conversion fit this machine's memory and the output's disk? Asked once the weights are
loaded and before any export or conversion, so a model that cannot fit is refused with the estimate (exit 2)
instead of being killed by the OOM killer halfway, or filling the disk with a partial artifact.

The estimate is the model's fp32 weight bytes times each target's measured peak factor
(``Target.measured.memory_factor``, from the target's ``measured.toml``: peak RSS of one ``convert`` of that target / fp32 weight bytes, bench/LARGE.md),
plus the interpreter and converters' own footprint. Rows run one after another in one process, so the
largest factor sets the peak; with ``-j N`` every worker holds its own copy of the program.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from edgeport.errors import UsageError

GB = 1e9
# what the interpreter, torch and a converter's libraries hold before any weight: measured with a 4 MB model
# (peak RSS of one target's `convert`: 0.5 to 0.9 GB, by the converter's libraries), rounded up
BASE_BYTES = int(1.0 * GB)
# bytes of an artifact per fp32 weight byte, by the precision a variant name states (fp32 when it states none)
ARTIFACT_SHARE = (("int4", 0.125), ("int8", 0.25), ("fp16", 0.5), ("bf16", 0.5))


@dataclass(frozen=True)
class Estimate:
    weight_bytes: int        # fp32 bytes of every parameter and buffer (tied weights once)
    memory: int              # estimated peak RSS of the run
    disk: int                # bytes the artifacts (and exported.pt2) will take in --out
    factor: float            # the largest per-target factor in the plan
    by: str                  # the target (or "-j N") whose factor sets the peak
    intermediate_bytes: int = 0   # a loaded program's largest declared intermediate, per process that runs it
    intermediate_holders: int = 1  # processes that hold it at once (the driver's reference, each row worker)

    def describe_memory(self) -> str:
        times = f" x {self.intermediate_holders} processes" if self.intermediate_holders > 1 else ""
        middle = (f" + {self.intermediate_bytes / GB:.2f} GB largest intermediate the program declares{times}"
                  if self.intermediate_bytes else "")
        return (f"{self.memory / GB:.1f} GB ({self.weight_bytes / GB:.2f} GB fp32 weights x {self.factor:g} "
                f"for {self.by}{middle} + {BASE_BYTES / GB:.1f} GB runtime)")


def storage_key(t):
    """What makes two tensors the same values (a head tied to the embedding: two names, one tensor):
    (storage, offset, shape, strides, dtype); None when it can not be told (not a dense tensor with a
    storage: fake, meta or empty)."""
    import torch

    if not isinstance(t, torch.Tensor) or t.layout != torch.strided or t.device.type == "meta" or not t.numel():
        return None
    try:
        return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)
    except (RuntimeError, NotImplementedError):   # fake tensors have no storage to share
        return None


def fp32_weight_bytes(tensors) -> int:
    """fp32 bytes of ``tensors`` (an iterable of torch tensors): every floating weight counted at 4 bytes
    (converters upcast bf16/fp16 weights), others at their size; a storage shared by several names once."""
    seen, total = set(), 0
    for tensor in tensors:
        key = storage_key(tensor) or id(tensor)
        if key in seen:
            continue
        seen.add(key)
        total += tensor.numel() * (4 if tensor.is_floating_point() else tensor.element_size())
    return total


def model_weight_bytes(loaded) -> int:
    """fp32 weight bytes of a loaded model: its module's parameters and buffers, or a .pt2 program's state."""
    if loaded.module is not None:
        module = loaded.module
        return fp32_weight_bytes([*module.parameters(), *module.buffers()])
    return program_weight_bytes(loaded.program)


def program_weight_bytes(program) -> int:
    """fp32 weight bytes of an ExportedProgram's state (parameters, buffers, tensor constants)."""
    return fp32_weight_bytes(program_tensors([program]))


def artifact_share(variant: str) -> float:
    return next((share for tag, share in ARTIFACT_SHARE if tag in variant), 1.0)


def estimate(weight_bytes: int, rows, jobs: int = 1, programs: int = 1, generative: bool = False,
             intermediate_bytes: int = 0, workers: bool = False) -> Estimate:
    """Peak memory and disk of converting ``rows`` ((target, variant) pairs) of a model of ``weight_bytes``;
    ``programs``: how many saved programs each hold every weight (``exported.pt2``; a text-generation
    model saves one per signature: prefill per length, decode). ``generative``: the targets' text-generation
    factors (their rows hold far more beside the model than a forward row: 4-6x the weights at 0.6B), and the
    disk a judge's runtime writes while it runs (``generation_judge_disk_factor``). ``intermediate_bytes``: a
    loaded program's largest intermediate (:func:`program_intermediate_bytes`), held by the reference run
    and by each process running a row at once. ``workers``: rows run in
    worker processes even at ``jobs`` 1 (per-row limits), each holding its own copy beside the driver's."""
    factors = sorted(((_factor(t, generative, v), t.name) for t, v in rows), reverse=True) or [(1.0, "load")]
    if jobs > 1 or workers:   # the main process keeps its program; each worker loads one and converts
        top = factors[:jobs]
        factor = 1.0 + sum(f for f, _n in top)
        by = f"-j {jobs}" if jobs > 1 else "a row worker beside the driver; --row-timeout none --row-memory none runs rows in-process"
        base = BASE_BYTES * (1 + len(top))
    else:
        (factor, by), base = factors[0], BASE_BYTES
    judging = max((t.measured.generation_judge_disk_factor * artifact_share(v) for t, v in rows if generative), default=0.0)
    disk = weight_bytes * (programs + sum(t.measured.disk_factor * artifact_share(v) for t, v in rows) + judging)  # + exported
    holders = 1 + (max(jobs, 1) if jobs > 1 or workers else 0)
    return Estimate(weight_bytes, int(base + weight_bytes * factor + intermediate_bytes * holders), int(disk),
                    round(factor, 2), by, intermediate_bytes, holders)


def _factor(target, generative: bool, variant: str) -> float:
    factors = target.measured
    if not generative:
        return factors.memory_factor
    found = factors.generation_variant_memory_factors.get(variant, factors.generation_memory_factor)
    return found if found is not None else factors.memory_factor


# below this many fp32 weight bytes a model's leftovers are not worth a full collection (~0.5 s each)
RELEASE_MIN_BYTES = 64 << 20


def release(weight_bytes: int | None = None) -> None:
    """Give memory a finished phase no longer uses back to the system: collect cycles, drop the sources of
    generated code now gone (:func:`forget_dead_graph_code`), then ``malloc_trim``.
    A conversion frees gigabytes in tensors of 4-32 MB, which glibc serves from its heap (below its mmap
    threshold): freed, they stay in the process's RSS until trimmed, under the next phase's peak.
    ``weight_bytes`` (the model's, when known): a small model skips it."""
    import ctypes

    if weight_bytes is not None and weight_bytes < RELEASE_MIN_BYTES:
        return
    collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


def collect() -> None:
    """Collect cycles, then drop what torch.fx still keeps of the code that collection freed
    (:func:`forget_dead_graph_code`): what every finished row leaves, in a process that runs many."""
    import gc

    gc.collect()
    forget_dead_graph_code()


def forget_dead_graph_code() -> None:
    """Drop the Python source torch.fx keeps for every GraphModule it generated code for, once that code is gone.

    torch.fx registers each generated ``forward`` in a private cache (``_loader.eval_cache``) and a lazy
    ``linecache`` entry (with a copy of the code's globals) so tracebacks can show it, and never removes
    them. A conversion regenerates its graphs' code at every pass and for every partition, tens of
    thousands of times: the sources of graphs long freed stayed, 67 MB after ExecuTorch's dynamic-int8
    conversion of a 23M-parameter model and 1.4 GB at Qwen3-0.6B, under every later row and judge.
    Code still alive (a function compiled from an entry: a live GraphModule's ``forward``) keeps its entry."""
    import gc
    import linecache
    import sys
    import types

    loader = getattr(sys.modules.get("torch.fx.graph_module"), "_loader", None)
    cache = getattr(loader, "eval_cache", None)
    if not cache:
        return
    alive = {o.__code__.co_filename for o in gc.get_objects() if type(o) is types.FunctionType}
    for key in [k for k in cache if k not in alive]:
        del cache[key]
        linecache.cache.pop(key, None)


def available_memory() -> int:
    """What this process may still use: MemAvailable, capped by a cgroup (container) limit when there is one."""
    limits = [_meminfo("MemAvailable")]
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        limit, usage = _read_int(limit_file), _read_int(usage_file)
        if limit is not None and usage is not None and limit < 1 << 60:
            limits.append(max(0, limit - usage))
    known = [n for n in limits if n is not None]
    return min(known) if known else 1 << 62


def free_disk(path: Path) -> int:
    """Free bytes on the filesystem ``path`` is (or will be) on: its nearest existing ancestor's."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def check(est: Estimate, out: Path, max_memory: int | None) -> None:
    """Refuse (UsageError, exit 2) a run whose estimate exceeds the memory it may use (``--max-memory``, else
    what is available now) or the free disk at ``out``."""
    limit = max_memory if max_memory is not None else available_memory()
    if est.memory > limit:
        source = "--max-memory" if max_memory is not None else "available memory"
        raise UsageError(f"refusing to convert: estimated peak memory {est.describe_memory()} exceeds "
                         f"{limit / GB:.1f} GB ({source}); --max-memory SIZE overrides")
    free = free_disk(out)
    if est.disk > free:
        raise UsageError(f"refusing to convert: the artifacts need about {est.disk / GB:.1f} GB "
                         f"({est.weight_bytes / GB:.2f} GB fp32 weights) but {out} has {free / GB:.1f} GB free")


def _meminfo(field: str) -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _read_int(path: str) -> int | None:
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def parse_memory(text: str) -> int:
    """``--max-memory`` as bytes: 8G, 6.5GB, 512M or a byte count."""
    from edgeport.cache import parse_size

    return parse_size(text, "--max-memory")


def in_child(fn, *args, idle=()):
    """``fn(*args)`` in a fresh (spawned) Python process: its return value, or its exception raised here.

    For a library step that leaves gigabytes behind in the process that ran it (its imports, graphs and
    constants that no ``gc.collect``/``malloc_trim`` returns): they go when the child exits. Spawned, not
    forked: the child shares no thread or lock state with this process (torch's thread pools), and reads
    only what ``args`` carry. ``fn`` must be importable by name; fds 1/2 are inherited (the run's log). A
    daemonic process may not start children: there it runs in the process itself. ``idle``: tensors this
    process keeps but will not touch while the child works (:func:`page_out`)."""
    import multiprocessing

    if multiprocessing.current_process().daemon:
        return fn(*args)
    page_out(idle)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(fn, args)


MADV_PAGEOUT = 21   # linux/mman.h (Linux 5.4+); Python's mmap module does not name it before 3.12


def page_out(tensors) -> int:
    """Hand the resident pages of ``tensors`` back to the kernel (``madvise(MADV_PAGEOUT)``); the bytes asked.

    A model's weights are mapped from its ``model.safetensors``: once an export and the reference have read
    them, all of them stay resident in this process (Qwen3-0.6B: 2.4 GB) though a child process now does
    the work from the model's own files. Paged out, clean file pages leave this process's memory and fault
    back in from the file if a later step reads them; nothing is lost (pages written since the load, and
    anonymous memory on a machine without swap, stay where they are). A kernel without MADV_PAGEOUT refuses
    the advice, which changes nothing but memory."""
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    asked, seen = 0, set()
    for tensor in tensors:
        if storage_key(tensor) is None or tensor.device.type != "cpu":
            continue
        storage = tensor.untyped_storage()
        start, size = storage.data_ptr(), storage.nbytes()
        if start in seen:
            continue
        seen.add(start)
        first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE    # whole pages inside the storage only
        length = (start + size - first) // mmap.PAGESIZE * mmap.PAGESIZE
        if length > 0 and libc.madvise(first, length, MADV_PAGEOUT) == 0:
            asked += length
    return asked


def program_tensors(programs) -> list:
    """Every state tensor and tensor constant of ``programs`` (ExportedPrograms): the weights they hold."""
    return [t for p in programs for t in (*p.state_dict.values(), *p.constants.values()) if hasattr(t, "untyped_storage")]


def program_intermediate_bytes(program) -> int:
    """The largest tensor any node of ``program`` (nested graphs included) declares it makes, from its
    ``meta["val"]`` shape and dtype, before anything runs: a 10 KB file calling ``aten.full((5e8,))`` is a
    2 GB intermediate the pre-flight check must see. A symbolic size counts at its example value (its hint),
    or 1 when it has none."""
    import torch

    largest = 0
    for module in program.graph_module.modules():
        graph = getattr(module, "graph", None)
        for node in graph.nodes if isinstance(graph, torch.fx.Graph) else ():
            if node.op not in ("call_function", "call_method", "call_module"):
                continue
            values = node.meta.get("val")
            for value in values if isinstance(values, (list, tuple)) else [values]:
                if isinstance(value, torch.Tensor):
                    largest = max(largest, _declared_bytes(value))
    return largest


def _declared_bytes(value) -> int:
    count = 1
    for dim in value.shape:
        hint = dim if isinstance(dim, int) else getattr(getattr(dim, "node", None), "hint", None)
        count *= hint if isinstance(hint, int) and hint >= 0 else 1
    return count * value.dtype.itemsize
