"""Coverage benchmark: every zoo model x every target, edgeport vs the raw library path, in one run.

    python bench/coverage.py --targets litert[,onnx,tpu] [--models a,b] [--timeout 420] [--realistic-timeout 1500]

Per (model, target), each in its own subprocess with a timeout, peak RSS from ``os.wait4`` (the child's own
rusage):
  * edgeport: ``python -m edgeport convert bench/zoo.py:MODEL --target T`` (the real CLI and exit code);
  * verify: when edgeport said ok, a separate process runs the artifact on NEW random inputs (another seed)
    against PyTorch eager and recomputes the error: "exit 0 but numbers wrong" shows up here;
  * raw: the bare library path a user would write (litert_torch.convert + run, torch.onnx.export +
    onnxruntime, torchax + jax.jit), its error on the example input against eager.
Results go to bench/coverage.json (merged across runs, so batches can be run separately) and bench/COVERAGE.md.
A target edgeport does not know is recorded as "unknown target", not an error of the benchmark.
"""

from __future__ import annotations

import argparse
import json
import re
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "coverage.json"
BUDGET = {"float32": 1e-4, "float16": 2e-2, "bfloat16": 5e-2}   # max |err| / max |ref|, as edgeport's fp32/fp16/bf16


# ---------------------------------------------------------------------------------------------------------
# children
# ---------------------------------------------------------------------------------------------------------

def run_child(argv: list[str], timeout: float, cwd: Path) -> dict:
    """Run one child; wall seconds, exit code, peak RSS (MiB) of that child alone, tail of its stderr."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LITERT_TORCH_SHOW_PROGRESS": "n", "TF_CPP_MIN_LOG_LEVEL": "3"}
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=err, start_new_session=True)
        timed_out, rusage, status = False, None, 0
        while True:
            pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - start > timeout:
                os.killpg(proc.pid, 9)
                _, status, rusage = os.wait4(proc.pid, 0)
                timed_out = True
                break
            time.sleep(0.2)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    return {"rc": None if timed_out else proc.returncode, "timed_out": timed_out,
            "seconds": round(time.perf_counter() - start, 1), "rss_mb": round(rusage.ru_maxrss / 1024),
            "stdout": stdout, "stderr": stderr[-3000:]}


def child_json(result: dict) -> dict | None:
    for line in reversed(result["stdout"].splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None


# ---------------------------------------------------------------------------------------------------------
# in-child work: raw library paths and independent verification
# ---------------------------------------------------------------------------------------------------------

def _zoo_entry(name: str):
    sys.path.insert(0, str(HERE))
    import zoo

    module, example = zoo.ZOO[name][0]()
    args, kwargs = (tuple(example), {}) if isinstance(example, (tuple, list)) else ((), dict(example))
    return module.eval(), args, kwargs


def _flat_tensors(value) -> list:
    import torch
    from torch.utils._pytree import tree_flatten

    return [x for x in tree_flatten(value)[0] if isinstance(x, torch.Tensor)]


def scaled_error(reference: list, outputs: list) -> float:
    """max |out - ref| / max |ref| over outputs (inf on a count or shape mismatch or a non-finite value)."""
    import numpy as np

    if len(reference) != len(outputs):
        return float("inf")
    worst = 0.0
    for ref, out in zip(reference, outputs):
        ref, out = np.asarray(ref, dtype=np.float64), np.asarray(out, dtype=np.float64)
        if ref.shape != out.shape or not np.all(np.isfinite(out[np.isfinite(ref)])):
            return float("inf")
        scale = max(float(np.max(np.abs(ref))) if ref.size else 0.0, 1e-12)
        worst = max(worst, float(np.max(np.abs(out - ref))) / scale if ref.size else 0.0)
    return worst


def _median_ms(fn, runs: int = 10) -> float:
    fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return round(sorted(times)[len(times) // 2], 3)


def raw_litert(module, args, kwargs, workdir: Path):
    import litert_torch

    start = time.perf_counter()
    edge = litert_torch.convert(module, args, kwargs or None)
    edge.export(str(workdir / "raw.tflite"))
    seconds = time.perf_counter() - start
    return seconds, lambda: edge(*args, **kwargs), _litert_timed(workdir / "raw.tflite")


def _litert_timed(path: Path):
    """One-thread Interpreter call on the raw .tflite (zeros of the right shapes: timing only), the same
    runtime and thread count edgeport's latency uses."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=str(path), num_threads=1).get_signature_runner()
    feed = {n: np.zeros(d["shape"], d["dtype"]) for n, d in runner.get_input_details().items()}
    return lambda: runner(**feed)


def raw_onnx(module, args, kwargs, workdir: Path):
    import onnxruntime as ort
    import torch

    start = time.perf_counter()
    program = torch.onnx.export(module, args, kwargs=kwargs or None, dynamo=True)
    program.save(str(workdir / "raw.onnx"))
    seconds = time.perf_counter() - start
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(workdir / "raw.onnx"), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    feed = {n: t.numpy() for n, t in zip(names, _flat_tensors((args, kwargs)))}
    run = lambda: session.run(None, feed)  # noqa: E731
    return seconds, run, run


def raw_tpu(module, args, kwargs, workdir: Path):
    """torchax on the CPU lowering (what a user checks before deploying to a TPU)."""
    import jax
    import torch
    import torchax.export

    start = time.perf_counter()
    program = torch.export.export(module, args, kwargs, strict=False)
    weights, fn = torchax.export.exported_program_to_jax(program)
    jitted = jax.jit(fn)
    jax_args = tuple(_to_jax(t) for t in _flat_tensors((args, kwargs)))
    jitted(weights, jax_args)
    seconds = time.perf_counter() - start
    run = lambda: jax.block_until_ready(jitted(weights, jax_args))  # noqa: E731
    return seconds, run, run


def _to_jax(t):
    """numpy has no bfloat16: go through float32 and cast back (jax has the dtype), as a jax user would."""
    import jax

    if str(t.dtype) == "torch.bfloat16":
        return jax.numpy.asarray(t.float().numpy()).astype(jax.numpy.bfloat16)
    return jax.numpy.asarray(t.numpy())


def raw_executorch(module, args, kwargs, workdir: Path):
    """torch.export + to_edge_transform_and_lower(XNNPACK) + to_executorch, run by executorch.runtime: the
    path ExecuTorch's own docs give a user."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.runtime import Runtime

    start = time.perf_counter()
    program = torch.export.export(module, args, kwargs, strict=False)
    with torch.no_grad():
        edge = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch()
    (workdir / "raw.pte").write_bytes(edge.buffer)
    seconds = time.perf_counter() - start
    from executorch.extension.pybindings import portable_lib

    portable_lib._unsafe_reset_threadpool(1)  # one thread, as edgeport's latency and the other raw paths
    method = Runtime.get().load_program(workdir / "raw.pte").load_method("forward")
    flat = _flat_tensors((args, kwargs))
    run = lambda: method.execute(flat)  # noqa: E731
    return seconds, run, run


RAW_PATHS = {"litert": raw_litert, "onnx": raw_onnx, "tpu": raw_tpu, "executorch": raw_executorch}


def do_raw(name: str, target: str, workdir: Path) -> dict:
    import numpy as np
    import torch

    torch.set_num_threads(1)  # edgeport's latency runs eager and the artifact on --threads 1 too
    module, args, kwargs = _zoo_entry(name)
    with torch.no_grad():
        structure = module(*args, **kwargs)
        reference = [t.detach().float().numpy() for t in _flat_tensors(structure)]
        eager_ms = _median_ms(lambda: module(*args, **kwargs))
    dtype = next((str(t.dtype).removeprefix("torch.") for t in _flat_tensors(module(*args, **kwargs))), "float32")
    try:
        seconds, run, timed = RAW_PATHS[target](module, args, kwargs, workdir)
    except Exception as exc:
        return {"status": "convert failed", "error": _line(exc)}
    try:
        outputs = [np.asarray(o.float() if isinstance(o, torch.Tensor) else o, dtype=np.float64)
                   for o in _flat_any(_like(run(), structure))]
    except Exception as exc:
        return {"status": "run failed", "error": _line(exc), "convert_seconds": round(seconds, 2)}
    err = scaled_error(reference, outputs)
    ok = err <= BUDGET.get(dtype, 1e-4)
    return {"status": "ok" if ok else "WRONG numbers", "max_rel_err": err, "convert_seconds": round(seconds, 2),
            "latency_ratio": round(_median_ms(timed) / eager_ms, 2) if ok else None,
            "error": None if ok else f"scaled error {err:.3g} over budget"}


def _like(out, structure):
    """A raw runtime that returns a dict is read by key, as its user would (not by its key order)."""
    if isinstance(out, dict) and hasattr(structure, "keys") and set(structure.keys()) <= set(out):
        return [out[k] for k in structure.keys()]
    return out


def _flat_any(value) -> list:
    from torch.utils._pytree import tree_flatten

    leaves = tree_flatten(value)[0]
    return [x for x in leaves if hasattr(x, "shape")]


def do_verify(name: str, target: str, out_dir: Path) -> dict:
    """Run edgeport's artifact on 3 new random inputs (seed 123) against eager; an error over the budget the
    report used means edgeport's exit 0 was a lie."""
    from edgeport.targets.registry import get_target
    from edgeport.sources import SourceOptions, load_model
    from edgeport.core.eager import EagerRunner, flatten_inputs, to_numpy
    from edgeport.validate.data import make_samples

    report = json.loads((out_dir / "report.json").read_text())
    row = next(r for r in report["targets"] if r["target"] == target)
    loaded = load_model(SourceOptions(model=f"{HERE / 'zoo.py'}:{name}"))
    example = [to_numpy(x) for x in flatten_inputs(loaded.example_inputs)]
    samples = make_samples(example, 4, 123)[1:]
    dtypes = [str(x.dtype).removeprefix("torch.") for x in flatten_inputs(loaded.example_inputs)]
    eager = EagerRunner(loaded.module.eval(), dtypes, 1)
    runner = get_target(target).load_runner(out_dir / row["artifact"], 1)
    worst = max(scaled_error([r.astype("float64") for r in eager.run(s)], runner.run(s)) for s in samples)
    budget = (row.get("parity") or {}).get("budget", {}).get("max_rel_err", 1e-4)
    return {"ok": worst <= budget, "max_rel_err": worst, "budget": budget}


def _line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:300]


# ---------------------------------------------------------------------------------------------------------
# coordinator
# ---------------------------------------------------------------------------------------------------------

def edgeport_row(name: str, target: str, timeout: float, work: Path) -> dict:
    out = work / f"{name}-{target}"
    argv = [sys.executable, "-m", "edgeport", "convert", f"{HERE / 'zoo.py'}:{name}", "--target", target,
            "--out", str(out), "--samples", "4", "--force"]
    result = run_child(argv, timeout, ROOT)
    row = {"rc": result["rc"], "wall_seconds": result["seconds"], "rss_mb": result["rss_mb"]}
    if result["timed_out"]:
        return {**row, "status": f"timeout ({timeout:.0f} s)"}
    if result["rc"] == 2:
        last = (result["stderr"].strip().splitlines() or [""])[-1]
        return {**row, "status": "unknown target" if "unknown target" in last else "bad input", "error": last[:300]}
    report_path = out / "report.json"
    if not report_path.exists():
        return {**row, "status": "crashed", "error": (result["stderr"].strip().splitlines() or [""])[-1][:300]}
    report = json.loads(report_path.read_text())
    target_row = next(r for r in report["targets"] if r["target"] == target)
    parity = target_row.get("parity") or {}
    eager = (report.get("reference") or {}).get("latency_ms") or {}
    latency = target_row.get("latency_ms") or {}
    ratio = None
    if latency.get("p50") and eager.get("p50"):
        ratio = round(latency["p50"] / eager["p50"], 2)
    row.update(status=target_row["status"], error=target_row.get("error"), rewrites=target_row.get("rewrites", []),
               convert_seconds=target_row.get("convert_seconds"), max_rel_err=_worst(parity), latency_ratio=ratio)
    if target_row.get("tpu_compile"):  # libtpu AOT compiles raw tpu does not do: kept apart for a like-for-like ratio
        row["aot_compile_seconds"] = round(sum(c.get("compile_seconds") or 0 for c in target_row["tpu_compile"]), 2)
    if result["rc"] == 0:
        check = run_child([sys.executable, str(HERE / "coverage.py"), "--verify", name, target, str(out)], timeout, ROOT)
        row["verify"] = child_json(check) or {"ok": False, "error": (check["stderr"].strip().splitlines() or [""])[-1][:300]}
    return row


def _worst(parity: dict):
    values = [o.get("max_rel_err") for o in parity.get("outputs", []) if isinstance(o, dict)]
    values = [v for v in values if v is not None]
    return max(values) if values else parity.get("max_rel_err")


def raw_row(name: str, target: str, timeout: float, work: Path) -> dict:
    if target not in RAW_PATHS:
        return {"status": "no raw path"}
    workdir = work / f"raw-{name}-{target}"
    workdir.mkdir(parents=True, exist_ok=True)
    result = run_child([sys.executable, str(HERE / "coverage.py"), "--raw", name, target, str(workdir)], timeout, ROOT)
    row = {"wall_seconds": result["seconds"], "rss_mb": result["rss_mb"]}
    if result["timed_out"]:
        return {**row, "status": f"timeout ({timeout:.0f} s)"}
    data = child_json(result)
    if data is None:
        return {**row, "status": "crashed", "error": (result["stderr"].strip().splitlines() or [""])[-1][:300]}
    return {**row, **data}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--targets", default="litert")
    parser.add_argument("--models", default="")
    parser.add_argument("--timeout", type=float, default=420)
    parser.add_argument("--realistic-timeout", type=float, default=1500)
    parser.add_argument("--skip-realistic", action="store_true")
    parser.add_argument("--raw-only", action="store_true", help="recompute only the raw rows (edgeport rows kept)")
    parser.add_argument("--no-raw", action="store_true", help="edgeport rows only (raw rows recorded as not run)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="merge rows into this JSON (default bench/coverage.json)")
    parser.add_argument("--raw", nargs=3)
    parser.add_argument("--verify", nargs=3)
    ns = parser.parse_args()
    if ns.raw:
        print(json.dumps(do_raw(ns.raw[0], ns.raw[1], Path(ns.raw[2]))))
        return
    if ns.verify:
        print(json.dumps(do_verify(ns.verify[0], ns.verify[1], Path(ns.verify[2]))))
        return
    sys.path.insert(0, str(HERE))
    import zoo

    names = [n for n in (ns.models.split(",") if ns.models else zoo.ZOO) if n]
    results = json.loads(ns.results.read_text()) if ns.results.exists() else {}
    with tempfile.TemporaryDirectory(prefix="edgeport-coverage-") as tmp:
        for name in names:
            covers, realistic = zoo.ZOO[name][1], zoo.ZOO[name][2]
            if realistic and ns.skip_realistic:
                continue
            timeout = ns.realistic_timeout if realistic else ns.timeout
            for target in ns.targets.split(","):
                previous = results.get(f"{name}|{target}")
                if ns.raw_only and previous:
                    ep = previous["edgeport"]
                else:
                    ep = edgeport_row(name, target, timeout, Path(tmp))
                raw = {"status": "not run"} if ns.no_raw else raw_row(name, target, timeout, Path(tmp))
                results[f"{name}|{target}"] = {"model": name, "covers": covers, "target": target, "edgeport": ep, "raw": raw}
                print(f"{name:18s} {target:7s} edgeport={ep['status']:10s} raw={raw['status']}", flush=True)
                ns.results.write_text(scrub_paths(json.dumps(results, indent=1, default=str)))
    write_markdown(results)


def _fmt(value, digits=2):
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.1e}" if value and (abs(value) < 1e-2 or abs(value) > 1e4) else f"{value:.{digits}f}"
    return str(value)


# What the numbers do not say by themselves (read from the rows above; keep in step when re-running).
NOTES = {
    "executorch": [
        "Run on the branch that added real_dft and sort_by_rank to ExecuTorch's rewrites, 2 loaded cores (load "
        "average 12-15 from other jobs). The raw ExecuTorch path (torch.export + to_edge_transform_and_lower with "
        "XnnpackPartitioner + executorch.runtime, `raw_executorch`) ran for the first four models only; the rest "
        "ran with `--no-raw` to fit the time (raw 'not run').",
        "Fixed on the way: rfft_features and audio_stft (edge dialect refuses complex64: 'SpecViolationError: "
        "operators taking Tensor inputs with mismatched dtypes: aten.abs complex64 -> float32') now pass with "
        "real_dft; argsort_post converted but its .pte did not load ('Failed to load method forward, error 0x14' = "
        "OperatorMissing: the runtime has no sort kernel) and passes with sort_by_rank. The DFT matrices and ranks "
        "then run on the portable kernels (the delegation table names them).",
        "Slower than eager where the others are faster: audio_stft (185x) and rfft_features (2.1x) run real_dft's "
        "DFT basis (arange, remainder, cos/sin) and its matmuls on the portable kernels at every call — rfft's "
        "delegation table lists aten.mm x2, arange x2, remainder on portable: XNNPACK takes no matmul whose weight "
        "is computed in the graph. Next step: fold the basis into constants in real_dft (then XNNPACK takes them as "
        "linear/conv weights). argsort_post (3.2x): sort_by_rank's compare-and-count runs on the portable kernels "
        "(eq/gt/lt/sum/where, the delegation table lists them). conv_transpose (1.7x) and kv_cache_step (0.97x) "
        "are not analysed yet.",
        "custom_op_opaque fails on every target (a numpy-bodied custom op has no out variant: 'Missing out "
        "variants: zoo::np_square'), with the --decompositions hint.",
    ],
    "onnx": [
        "Only raw failures on onnx: MoE (transformers' grouped_mm custom op; edgeport's batched_experts module pass "
        "fixes it), bf16 (onnxruntime CPU has no bf16 Gemm; upcast_fp32), the custom ops (inline_custom_ops for the "
        "traceable one; the numpy-bodied one is diagnosed with the --decompositions hint). Classes 3-6 and 10 need no "
        "pass on onnx (the dynamo exporter handles stft/rfft, ConvTranspose output_padding, int64 sort, scatter_add, "
        "padding='valid'), so no pass was added to the onnx target's rewrites.",
    ],
    "tpu": [
        "raw tpu = torchax + jax.jit on the CPU backend (what parity needs); edgeport additionally runs jax.export "
        "and 3 libtpu AOT compiles (v5e:1x1, v5e:2x2, v6e:1x1), so its convert seconds and RSS are not like for like "
        "with raw here; bench/multi_target.py compares against a raw path that does the same compiles. "
        "mobilenet_v2 was re-run with the AOT seconds recorded: without them edgeport's convert is 0.59x raw; the raw "
        "path WITH the same 3 compiles (`python bench/multi_target.py --raw tpu bench/zoo.py:mobilenet_v2 DIR` under "
        "/usr/bin/time) peaked at 1615 MiB vs edgeport's 1851 MiB (1.15x; edgeport also holds the eager reference "
        "and parity samples). The libtpu compiles dominate: ResNet-50 426 s of 452 s wall on this loaded 2-core host.",
        "Raw failures on tpu: MoE (grouped_mm), HF BERT called with None token_type_ids (class 7), custom ops, "
        "Conv2d(padding='valid') ('immutable_list' mutation, class 10: edgeport's conv_padding_numeric pass). "
        "No failure class is left that a further pass in tpu's rewrites would fix; the opaque custom op is "
        "diagnosed with the --decompositions hint.",
    ],
}


def scrub_paths(text: str) -> str:
    """Results name files relative to the repository or site-packages, never this machine's paths."""
    text = re.sub(r"/\S*?/site-packages/", "<site-packages>/", text)
    text = text.replace(str(HERE.parent) + "/", "")
    text = re.sub(r"/\S*?/(bench|tests|samples)/", r"\1/", text)
    return re.sub(r"/(?:root|home|work|tmp)/[^\s\"'`]*", "<path>", text)  # what truncation left of a path


def write_markdown(results: dict) -> None:
    rows = list(results.values())
    lines = ["# Coverage: edgeport vs the raw library path", "",
             "Generated by `python bench/coverage.py --targets litert,onnx,tpu,executorch` (targets may run in separate batches; each (model, target) in its own subprocess; "
             "edgeport = the CLI, raw = the bare converter + its runtime, same machine, same run). "
             "err = max |artifact - eager| / max |eager| (edgeport: over its parity samples; raw: on the example "
             "input). verify = edgeport's artifact re-run on 3 new random inputs in a separate process. "
             "RSS = peak of the child process (os.wait4). latency ratio = artifact median ÷ PyTorch eager median. "
             "convert s: edgeport = rewrites + target conversion (the shared torch.export is outside it); raw = "
             "the library's convert call (which exports inside); for tpu, edgeport also AOT-compiles for 3 TPU "
             "topologies while raw is torchax + jax.jit on CPU only, so tpu convert seconds are not like for like. "
             "process wall s = the whole child: edgeport also "
             "runs the eager reference, parity samples and latency; raw runs the example once. Rows are merged "
             "across runs (bench/coverage.json; `--models`, `--raw-only`) on 2 shared cores with other jobs running: "
             "timings are noisy, and only rows whose two sides ran back to back (the realistic-size ones) compare "
             "seconds fairly.", ""]
    for target in sorted({r["target"] for r in rows}):
        mine = [r for r in rows if r["target"] == target]
        ok_ep = sum(r["edgeport"]["status"] == "ok" for r in mine)
        ok_raw = sum(r["raw"]["status"] == "ok" for r in mine)
        silent = sum(r["edgeport"].get("rc") == 0 and not (r["edgeport"].get("verify") or {}).get("ok") for r in mine)
        raw_wrong = sum(r["raw"]["status"] == "WRONG numbers" for r in mine)
        unknown = sum(r["edgeport"]["status"] == "unknown target" for r in mine)
        worse = [r["model"] for r in mine if r["raw"]["status"] == "ok"
                 and r["edgeport"]["status"] not in ("ok", "unknown target")]
        lines += [f"## {target}", "",
                  f"- models: {len(mine)}; edgeport ok: **{ok_ep}**; raw ok: **{ok_raw}**; "
                  f"edgeport failed where raw worked: {', '.join(worse) or 'none'}"
                  + (f"; edgeport does not know this target (not on this branch): {unknown} rows" if unknown else ""),
                  f"- edgeport exit 0 with wrong numbers (verify failed): **{silent}**; "
                  f"raw runs that gave wrong numbers without any error: **{raw_wrong}**", "",
                  "| model | covers | edgeport | rewrites | err | verify | raw | raw err | convert s ep / raw | "
                  "process wall s ep / raw | peak RSS MiB ep / raw | latency ÷ eager ep / raw |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in mine:
            ep, raw = r["edgeport"], r["raw"]
            verify = ep.get("verify")
            verify_text = "—" if verify is None else ("ok" if verify.get("ok") else f"FAILED {_fmt(verify.get('max_rel_err'))}")
            lines.append("| " + " | ".join([
                r["model"], r["covers"], ep["status"], ", ".join(ep.get("rewrites") or []) or "—",
                _fmt(ep.get("max_rel_err")), verify_text, raw["status"], _fmt(raw.get("max_rel_err")),
                f"{_fmt(ep.get('convert_seconds'))} / {_fmt(raw.get('convert_seconds'))}",
                f"{_fmt(ep.get('wall_seconds'))} / {_fmt(raw.get('wall_seconds'))}",
                f"{_fmt(ep.get('rss_mb'))} / {_fmt(raw.get('rss_mb'))}",
                f"{_fmt(ep.get('latency_ratio'))} / {_fmt(raw.get('latency_ratio'))}"]) + " |")
        realistic = [r for r in mine if r["covers"].startswith("realistic")]
        if realistic:
            lines += ["", "Realistic-size models, edgeport ÷ raw (goal ≤ 1.2×; raw must have converted):", ""]
            for r in realistic:
                ep, raw = r["edgeport"], r["raw"]
                ratio = lambda key: (f"{ep[key] / raw[key]:.2f}×" if ep.get(key) and raw.get(key) else "—")  # noqa: E731
                lines.append(f"- {r['model']}: convert seconds {ratio('convert_seconds')}, peak RSS {ratio('rss_mb')}, "
                             f"process wall {ratio('wall_seconds')} (raw: {raw['status']})")
                if ep.get("aot_compile_seconds") is not None and raw.get("convert_seconds"):
                    lines[-1] += (f"; convert seconds without edgeport's AOT compiles "
                                  f"{(ep['convert_seconds'] - ep['aot_compile_seconds']) / raw['convert_seconds']:.2f}×")
        lines += [""] + [f"Note: {note}" for note in NOTES.get(target, [])]
        lines += ["", "Errors:", ""]
        for r in mine:
            for side in ("edgeport", "raw"):
                if r[side].get("error") and r[side]["status"] != "ok":
                    lines.append(f"- {r['model']} {side}: `{r[side]['error'][:400]}`")
        lines.append("")
    lines += versus(rows, "executorch")
    (HERE / "COVERAGE.md").write_text(scrub_paths("\n".join(lines) + "\n"))


def versus(rows: list[dict], target: str) -> list[str]:
    """One model per line: ``target``'s edgeport row beside every other target's (status, p50 ÷ eager), and
    for a model ``target`` fails where another passes, the rewrite or the named reason (``WHY``)."""
    mine = {r["model"]: r["edgeport"] for r in rows if r["target"] == target}
    if not mine:
        return []
    others = sorted({r["target"] for r in rows} - {target})
    by = {(r["model"], r["target"]): r["edgeport"] for r in rows}
    cell = lambda ep: "—" if ep is None else (f"ok {_fmt(ep.get('latency_ratio'))}×" if ep["status"] == "ok" else ep["status"])  # noqa: E731
    lines = [f"## {target} vs the other targets", "",
             f"Same zoo, edgeport rows only: status and p50 ÷ PyTorch eager (each row's own eager, measured in its "
             f"process: lower is faster). The {target} rows ran on this branch in one batch; the other targets' "
             "rows are the ones above. Where it fails and another target passes, the reason or the rewrite that "
             "would fix it.", "",
             f"| model | {target} | " + " | ".join(others) + " | why, where it fails and another passes |",
             "|---|---|" + "---|" * len(others) + "---|"]
    for model, ep in mine.items():
        passes_elsewhere = any((by.get((model, o)) or {}).get("status") == "ok" for o in others)
        why = WHY.get(target, {}).get(model, "not named yet") if ep["status"] != "ok" and passes_elsewhere else ""
        lines.append(f"| {model} | {cell(ep)} | " + " | ".join(cell(by.get((model, o))) for o in others) + f" | {why} |")
    return lines + [""]


# target -> model -> why that target fails where another passes (a rewrite to add, or a named limit)
WHY: dict[str, dict[str, str]] = {"executorch": {
    "argsort_post": "the .pte does not load: 'Failed to load method forward, error 0x14' (OperatorMissing: no sort "
                    "kernel in the runtime); fixed by sort_by_rank in ExecuTorch's rewrites (this row predates it; "
                    "the fixed convert passes: `edgeport convert bench/zoo.py:argsort_post -t executorch`)",
}}


if __name__ == "__main__":
    main()
