"""libtpu ahead-of-time compiles in a child process (``python -m edgeport.targets.tpu.aot_child REQUEST``),
started and watched by :mod:`edgeport.targets.tpu.aot_process`.

Why a child: libtpu aborts the whole process on some inputs (a ``CHECK`` failure is SIGABRT, rc 134) and a
compile can run away; in edgeport's own process either would lose every row, the report and the staging
folder. In a child, the abort or a timeout fails that topology's compile entry only: the row goes on, the
other topologies compile, the report is written.

What crosses the boundary is data, never a pickle: the serialized ``jax.export`` (bytes in a file), the
input shapes and dtypes to compile at, the topology name and the paths to write to (JSON). The child
writes each executable and compile row (JSON) as it finishes; the parent reads the rows back. edgeport's
own process no longer loads libtpu at all.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

STARTED = time.perf_counter()  # the first compile's time includes the child's start (imports, libtpu)


def child_main(argv: list[str]) -> None:
    """Compile the program for each item in turn, writing each row (JSON) as soon as it is known: the
    parent reads progress from them, and a death from the first item without one."""
    import resource

    from edgeport.core.proc import redirected
    from edgeport.targets._jax import prefer_cpu_backend
    from edgeport.targets.tpu.aot import Topology, _analysis, _compile_error, _write_executable

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # an abort leaves its reason on stderr, not a core file
    request = json.loads(Path(argv[0]).read_text())
    prefer_cpu_backend()
    out, started, programs = Path(request["out"]), STARTED, {}
    for item in request["items"]:
        topology = Topology(item["topology"], item["generation"], tuple(item["shape"]))
        item = {**request, **item}  # an item may name its own program (a batch of the sweep): one child for all
        serialized = programs.setdefault(item["export"], Path(item["export"]).read_bytes())
        row = {"ok": False, "error": None}
        # libtpu's messages go to a file beside the row: the parent quotes it when this compile aborts
        with redirected(Path(item["result"] + ".log"), fds=(2,)) as noise:
            try:
                compiled, sharding, devices = _compile(topology, serialized, item["avals"], tuple(item["donate"]))
                row.update(ok=True, sharding=sharding, devices=devices, **_analysis(compiled, topology, devices))
                if item.get("executable"):  # a sweep's compile is measured, not shipped
                    row["executable"] = _write_executable(compiled, out / item["executable"], out)
            except Exception as exc:
                row["error"] = _compile_error(exc, noise)
        row["compile_seconds"] = round(time.perf_counter() - started, 3)
        Path(item["result"] + ".tmp").write_text(json.dumps(row))
        os.replace(item["result"] + ".tmp", item["result"])  # whole rows only: the parent polls for them
        started = time.perf_counter()


def _compile(topology, serialized: bytes, avals: list, donate: tuple[int, ...] = ()):
    """The deserialized export compiled for a compile-only topology: weights replicated, inputs sharded on
    the batch when every input's leading dim divides over the devices."""
    import jax
    from jax.experimental import topologies
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    _abort_for_tests(topology.name)
    exported = jax.export.deserialize(bytearray(serialized))
    gen = topology.spec
    shape3 = (*topology.shape, 1, 1)[:3]
    topo = topologies.get_topology_desc(topology.name, platform="tpu", chip_config_name=gen.chip_config,
                                        chips_per_host_bounds=shape3, num_slices=1, wrap=(gen.wrap,) * 3)
    devices = len(topo.devices)
    mesh = topologies.make_mesh(topo, (devices,), ("data",))
    shapes = [tuple(shape) for shape, _dtype in avals]
    data_parallel = devices > 1 and _batch_divides(shapes, devices)
    replicated, batch = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    n_weights = len(exported.in_avals) - len(avals)
    flat = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=replicated) for a in exported.in_avals[:n_weights]]
    flat += [jax.ShapeDtypeStruct(shape, dtype, sharding=batch if data_parallel else replicated)
             for shape, (_s, dtype) in zip(shapes, avals)]
    args, _kwargs = jax.tree_util.tree_unflatten(exported.in_tree, flat)
    call = jax.jit(exported.call, donate_argnums=tuple(1 + i for i in donate))
    compiled = call.lower(*args).compile()
    return compiled, "data-parallel" if data_parallel else "replicated", devices


def _batch_divides(shapes: list[tuple], devices: int) -> bool:
    """Shard the batch when every input has the same leading dim and it splits evenly over the devices."""
    leading = {s[0] if len(s) else None for s in shapes}
    return len(leading) == 1 and isinstance(b := leading.pop(), int) and b % devices == 0


# TEST-ONLY hook (tests/test_tpu.py): a topology named here makes its compile child abort as libtpu does on
# a CHECK failure, for topologies the parser lets through. Never set it in normal use.
ABORT_ENV = "EDGEPORT_TEST_TPU_COMPILE_ABORT"


def _abort_for_tests(topology: str) -> None:
    if topology in os.environ.get(ABORT_ENV, "").split(","):
        os.abort()


if __name__ == "__main__":
    child_main(sys.argv[1:])
