"""One 3-target edgeport convert vs the sum of the three raw converter paths, same models, same run.

    python bench/multi_target.py [--models samples/models/tiny_cnn.py:build,...] [--jobs 1,2]

``--jobs 1,2`` (default) runs the edgeport convert twice per model: rows one after another in one process
(``-j 1``, how edgeport ran before worker processes) and in worker processes (``-j 2``); both cold (each
with its own empty cache). Peak RSS is the whole process tree's (edgeport + its workers), sampled.

Per model, each in a FRESH process (imports paid every time, as a user pays them):
  * edgeport: ``python -m edgeport convert MODEL -t litert -t onnx -t tpu --no-latency``; its cost is the
    process wall minus the parity/reference phase (report.json ``timings_s.reference`` + every row's
    ``check_seconds``): what is left is load + the ONE shared torch.export + rewrites + three conversions
    + the TPU AOT compiles + writing the report;
  * raw litert: ``litert_torch.convert(module, args).export(path)``;
  * raw onnx: ``torch.onnx.export(module, args, dynamo=True).save(path)``;
  * raw tpu: ``torch.export`` + torchax ``exported_program_to_jax`` + ``jax.export`` (cpu, tpu) + the same
    libtpu AOT compiles edgeport does (its default topologies, same sharding rule), serialized to disk.
The ratio printed is edgeport ÷ (litert + onnx + tpu); goal ≤ 1.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_MODELS = ["samples/models/tiny_cnn.py:build", "samples/models/text_encoder.py:build", "bench/zoo.py:mobilenet_v2"]
TOPOLOGIES = ("v5e:1x1", "v5e:2x2", "v6e:1x1")   # edgeport's tpu DEFAULT_TOPOLOGIES (checked below)


def _load(spec: str):
    """``file.py:fn`` -> (module, args): the same contract edgeport's loader accepts, without edgeport."""
    import importlib.util

    path, fn = spec.rsplit(":", 1)
    module_spec = importlib.util.spec_from_file_location(Path(path).stem, ROOT / path)
    mod = importlib.util.module_from_spec(module_spec)
    sys.path.insert(0, str((ROOT / path).parent))
    module_spec.loader.exec_module(mod)
    model, args = getattr(mod, fn)()
    return model.eval(), tuple(args)


def raw_litert(spec: str, out: Path) -> None:
    import litert_torch

    model, args = _load(spec)
    litert_torch.convert(model, args).export(str(out / "model.tflite"))


def raw_onnx(spec: str, out: Path) -> None:
    import logging

    import torch

    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    model, args = _load(spec)
    torch.onnx.export(model, args, dynamo=True, verbose=False).save(str(out / "model.onnx"))


def raw_tpu(spec: str, out: Path) -> None:
    """What a user writes to get a jax.export artifact plus TPU executables without a TPU."""
    for key, value in (("TPU_SKIP_MDS_QUERY", "1"), ("TPU_WORKER_HOSTNAMES", "localhost"), ("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")):
        os.environ.setdefault(key, value)
    import jax

    jax.config.update("jax_platforms", "cpu")
    import torch
    import torchax.export
    from jax.experimental import topologies
    from jax.experimental.serialize_executable import serialize
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    model, args = _load(spec)
    program = torch.export.export(model, args, strict=False)
    weights, fn = torchax.export.exported_program_to_jax(program)
    avals = [jax.ShapeDtypeStruct(a.shape, jax.dtypes.canonicalize_dtype(a.dtype)) for a in torchax.export.extract_avals(program)]
    weight_avals = jax.tree_util.tree_map(lambda w: jax.ShapeDtypeStruct(w.shape, w.dtype), weights)
    call = lambda w, *xs: fn(w, xs)  # noqa: E731
    with jax.default_matmul_precision("highest"):
        exported = jax.export.export(jax.jit(call), platforms=("cpu", "tpu"))(weight_avals, *avals)
        (out / "model.jax_export").write_bytes(exported.serialize())
        for name in TOPOLOGIES:
            gen, shape = name.split(":")
            dims = tuple(int(d) for d in shape.split("x"))
            topo = topologies.get_topology_desc(name, platform="tpu", chip_config_name="default",
                                                chips_per_host_bounds=(*dims, 1, 1)[:3], num_slices=1, wrap=(False,) * 3)
            mesh = topologies.make_mesh(topo, (len(topo.devices),), ("data",))
            split = len(topo.devices) > 1 and all(len(a.shape) and a.shape[0] % len(topo.devices) == 0 for a in avals)
            rep, batch = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
            w = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep), weight_avals)
            xs = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=batch if split else rep) for a in avals]
            compiled = jax.jit(call).lower(w, *xs).compile()
            (out / f"{gen}_{shape}.tpu_exec").write_bytes(serialize(compiled)[0])


RAW = {"litert": raw_litert, "onnx": raw_onnx, "tpu": raw_tpu}


class TreeRSS:
    """Peak resident memory of a process and all its descendants (workers, Ray's processes), sampled from
    /proc every ``interval`` seconds: what the machine must hold at once."""

    def __init__(self, pid: int, interval: float = 0.25):
        import threading

        self.pid, self.interval, self.peak = pid, interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_rss(self.pid))
            self._stop.wait(self.interval)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def tree_rss(root: int) -> int:
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/statm") as f:
                rss[int(entry)] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack += children.get(pid, [])
    return total


def timed_child(argv: list[str], timeout: float, env: dict | None = None) -> tuple[float, int | None, str, int]:
    """Wall seconds, exit code, last stderr line and peak tree RSS (bytes) of a fresh process."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)  # e.g. where Ray is installed
    env = {**os.environ, "PYTHONPATH": path, "LITERT_TORCH_SHOW_PROGRESS": "n", "TF_CPP_MIN_LOG_LEVEL": "3",
           **(env or {})}
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = TreeRSS(proc.pid)
    try:
        _out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return time.perf_counter() - start, None, "timeout", sampler.stop()
    wall, peak = time.perf_counter() - start, sampler.stop()
    return wall, proc.returncode, (err.strip().splitlines() or [""])[-1], peak


def measure_edgeport(spec: str, work: Path, timeout: float, jobs: int = 1) -> dict:
    """A cold 3-target convert (its own empty cache) with ``-j jobs``."""
    out = work / f"edgeport-j{jobs}"
    argv = [sys.executable, "-m", "edgeport", "convert", spec, "-t", "litert", "-t", "onnx", "-t", "tpu",
            "--no-latency", "--out", str(out), "--force", "-j", str(jobs)]
    wall, rc, tail, peak = timed_child(argv, timeout, {"EDGEPORT_CACHE": str(work / f"cache-j{jobs}")})
    report_path = out / "report.json"
    if not report_path.exists():
        return {"wall": wall, "rc": rc, "error": tail, "peak_rss": peak}
    report = json.loads(report_path.read_text())
    timings = report.get("timings_s", {})
    checks = {r["target"]: r.get("check_seconds") or 0.0 for r in report["targets"]}
    parity_phase = timings.get("reference", 0.0) + sum(checks.values())
    return {"wall": wall, "rc": rc, "parity_phase": parity_phase, "cost": wall - parity_phase, "peak_rss": peak,
            "timings": timings, "convert_s": {r["target"]: r.get("convert_seconds") for r in report["targets"]},
            "check_s": checks, "status": {r["target"]: r["status"] for r in report["targets"]}}


def measure_raw(spec: str, target: str, work: Path, timeout: float) -> dict:
    out = work / f"raw-{target}"
    out.mkdir(parents=True, exist_ok=True)
    wall, rc, tail, peak = timed_child([sys.executable, str(HERE / "multi_target.py"), "--raw", target, spec, str(out)], timeout)
    return {"wall": wall, "rc": rc, "error": None if rc == 0 else tail, "peak_rss": peak}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS))
    parser.add_argument("--jobs", default="1,2", help="edgeport -j values to run, each cold")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--raw", nargs=3, metavar=("TARGET", "MODEL", "OUT"))
    ns = parser.parse_args()
    if ns.raw:
        RAW[ns.raw[0]](ns.raw[1], Path(ns.raw[2]))
        return
    results = run([m for m in ns.models.split(",") if m], [int(j) for j in ns.jobs.split(",")], ns.timeout)
    write_table(results)


def run(models: list[str], jobs: list[int], timeout: float) -> list[dict]:
    from edgeport.targets.tpu.target import DEFAULT_TOPOLOGIES

    assert tuple(DEFAULT_TOPOLOGIES) == TOPOLOGIES, "raw tpu must compile the topologies edgeport compiles"
    results = []
    for spec in models:
        with tempfile.TemporaryDirectory(prefix="edgeport-multi-") as tmp:
            eps = {j: measure_edgeport(spec, Path(tmp), timeout, j) for j in jobs}
            raw = {t: measure_raw(spec, t, Path(tmp), timeout) for t in RAW}
        raw_sum = sum(r["wall"] for r in raw.values())
        ok = all(r["rc"] == 0 for r in raw.values())
        ratios = {j: (ep["cost"] / raw_sum if "cost" in ep and ok else None) for j, ep in eps.items()}
        walls = {j: (ep["wall"] / raw_sum if ep.get("rc") in (0, 1) and ok else None) for j, ep in eps.items()}
        results.append({"model": spec, "edgeport": eps, "raw": raw, "raw_sum": raw_sum, "ratio": ratios, "wall_ratio": walls})
        print(json.dumps(results[-1], default=str), flush=True)
    return results


def write_table(results: list[dict]) -> None:
    text = "\n".join(table_lines(results)) + "\n"
    print(text)
    (HERE / "MULTI_TARGET.md").write_text(text)


def table_lines(results: list[dict]) -> list[str]:
    fmt = lambda v, spec=".1f": "—" if v is None else format(v, spec)  # noqa: E731
    mib = lambda v: "—" if not v else f"{v / 2**20:.0f}"  # noqa: E731
    lines = ["# 3-target convert vs the three raw paths", "",
             "Generated by `python bench/multi_target.py` (see its docstring). Every column is a fresh process's wall "
             "seconds on the same machine in the same run; edgeport cost = its wall minus the parity/reference "
             "phase (with worker processes the phases overlap: the wall ratio is the honest one). `-j 1`: rows one "
             "after another (edgeport before worker processes); `-j 2`: rows in worker processes, TPU compiles split "
             "per topology. Every edgeport run is cold (its own empty cache). Peak RSS: the whole process tree. "
             "2 shared cores with other jobs running: absolute seconds are noisy. Goals: ÷ raw sum ≤ 1; ≤ 0.5 with "
             "workers.", "",
             "| model | edgeport | wall s | cost s | peak RSS MiB | raw litert s | raw onnx s | raw tpu s | raw sum s "
             "| cost ÷ raw sum | wall ÷ raw sum |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        raw = r["raw"]
        raws = " | ".join(fmt(raw[t]["wall"]) + ("" if raw[t]["rc"] == 0 else f" ({raw[t]['error']})") for t in RAW)
        for jobs, ep in r["edgeport"].items():
            lines.append(f"| {r['model']} | -j {jobs} | {fmt(ep['wall'])} | {fmt(ep.get('cost'))} | {mib(ep.get('peak_rss'))} "
                         f"| {raws} | {fmt(r['raw_sum'])} | {fmt(r['ratio'][jobs], '.2f')} | {fmt(r['wall_ratio'][jobs], '.2f')} |")
    for r in results:
        for jobs, ep in r["edgeport"].items():
            if "timings" in ep:
                lines.append(f"\n{r['model']} -j {jobs}: edgeport timings_s {ep['timings']}, convert {ep['convert_s']}, "
                             f"parity checks {ep['check_s']}")
    return lines


if __name__ == "__main__":
    main()
