"""Real-size models (issue 21): time, peak memory and artifact bytes of one `edgeport convert` per target, and
the raw converters on the same model for contrast. Results: bench/LARGE.md.

Section "forward" (this file): bench/large_forward_model.py (a 200k x 2800 fp32 embedding + a small head,
2.24 GB of weights) through `edgeport convert -t TARGET` one target per process, then each raw converter
called as its docs show. Peak RSS is the sum over the process tree, polled every 0.1 s (children included).
Other sections (1B-class generation) keep their own functions beside this one.

    python bench/large.py forward [--rows N] [--target T ...] [--no-raw] [--work DIR] [--json FILE]

Set EDGEPORT_BENCH_LOCK to a lock file to run each conversion under `flock` (a machine shared by runs that
must not overlap their memory peaks).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODEL = HERE / "large_forward_model.py"
TARGETS = ("onnx", "litert", "tpu", "executorch")


# ------------------------------------------------------------------------------------------ measuring

def tree_memory(root: int) -> int:
    """Memory of ``root`` and every descendant (workers and compiler subprocesses count): the sum of their Pss,
    as the row limits sample it (:func:`edgeport.pipeline.limits.tree_pss`). Not the sum of RSS: that counts a
    page twice when two processes of the tree share it (a fork's copy-on-write pages, a weights file both map),
    so an overlap of a compile child with its parent read as memory nobody used."""
    from edgeport.pipeline.limits import tree_pss

    return tree_pss(root)


def measured(cmd: list[str], env: dict | None = None, log: Path | None = None, timeout: float = 3600) -> dict:
    """Run ``cmd``; wall seconds, exit code and the peak RSS of its process tree."""
    lock = os.environ.get("EDGEPORT_BENCH_LOCK")
    cmd = (["flock", lock] if lock else []) + cmd
    out = open(log, "w") if log else subprocess.DEVNULL
    start, peak = time.time(), 0
    proc = subprocess.Popen(cmd, env={**os.environ, **(env or {})}, stdout=out, stderr=subprocess.STDOUT)
    while proc.poll() is None:
        peak = max(peak, tree_memory(proc.pid))
        if time.time() - start > timeout:
            proc.kill()
        time.sleep(0.1)
    return {"seconds": round(time.time() - start, 1), "exit": proc.returncode, "peak_rss": peak}


def artifact_bytes(directory: Path) -> int:
    """Every file of a target's output (external data, weights, executables), logs and parity samples aside."""
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file() and not p.name.endswith(".log")
               and "parity_sample" not in p.parts)


# ------------------------------------------------------------------------------------------ forward

def forward_edgeport(target: str, work: Path, env: dict, weights: int) -> dict:
    """One `edgeport convert -t target` of the forward model: seconds, peak RSS / fp32 weights, bytes, parity."""
    out = work / f"edgeport-{target}"
    cmd = [sys.executable, "-m", "edgeport", "convert", f"{MODEL}:build", "-t", target, "--out", str(out), "--force",
           "--no-cache", "--samples", "3", "--threads", "2"]
    run = measured(cmd, env, work / f"edgeport-{target}.log")
    row = {"model": "forward", "how": "edgeport", "target": target, "variant": "fp32", **run,
           "rss_ratio": round(run["peak_rss"] / weights, 2)}
    report = out / "report.json"
    if report.is_file():
        data = json.loads(report.read_text())
        for r in data["targets"]:
            row.update(variant=r["variant"], status=r["status"], convert_seconds=r.get("convert_seconds"),
                       parity=(r.get("parity") or {}).get("passed"), max_abs_err=(r.get("parity") or {}).get("max_abs_err"),
                       artifact_bytes=artifact_bytes(out / target))
    return row


RAW = {
    # what each converter's docs show, on the eager model: no shared export, no parity run
    "onnx": "torch.onnx.export(model, example, dynamo=True).save(str(out / 'model.onnx'))",
    "litert": "import litert_torch; litert_torch.convert(model, example).export(str(out / 'model.tflite'))",
    "tpu": ("import jax, torchax, torchax.export; from safetensors.flax import save_file\n"
            "program = torch.export.export(model, example)\n"
            "weights, fn = torchax.export.exported_program_to_jax(program)\n"
            "inputs = tuple(torchax.ops.mappings.t2j(x) for x in example)\n"
            "exp = jax.export.export(jax.jit(fn))(weights, inputs)\n"
            "(out / 'model.jax_export').write_bytes(exp.serialize())\n"
            "leaves = jax.tree_util.tree_leaves(weights)\n"
            "save_file({str(i): w for i, w in enumerate(leaves)}, str(out / 'weights.safetensors'))"),
    "executorch": ("from executorch.exir import to_edge_transform_and_lower\n"
                   "from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner\n"
                   "program = torch.export.export(model, example)\n"
                   "pte = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch()\n"
                   "(out / 'model.pte').write_bytes(pte.buffer)"),
}


def forward_raw(target: str, work: Path, env: dict, weights: int) -> dict:
    out = work / f"raw-{target}"
    out.mkdir(parents=True, exist_ok=True)
    script = (f"import sys, torch; from pathlib import Path; sys.path.insert(0, {str(HERE)!r})\n"
              f"import large_forward_model as m\nout = Path({str(out)!r})\nmodel, example = m.build()\n"
              f"with torch.no_grad():\n" + "".join(f"    {line}\n" for line in RAW[target].splitlines()))
    run = measured([sys.executable, "-c", script], env, work / f"raw-{target}.log")
    return {"model": "forward", "how": "raw", "target": target, "variant": "fp32", **run,
            "rss_ratio": round(run["peak_rss"] / weights, 2), "status": "ok" if run["exit"] == 0 else "failed",
            "artifact_bytes": artifact_bytes(out)}


def forward(rows: int | None, targets, work: Path, raw: bool = True) -> list[dict]:
    """The "forward" section: every target through edgeport, then (``raw``) through its converter alone."""
    sys.path.insert(0, str(HERE))
    import large_forward_model

    env = {"EDGEPORT_LARGE_ROWS": str(rows)} if rows else {}
    weights = large_forward_model.fp32_weight_bytes(rows)
    work.mkdir(parents=True, exist_ok=True)
    results = []
    for target in targets:
        results.append(forward_edgeport(target, work, env, weights))
        print(json.dumps(results[-1]), flush=True)
    for target in targets if raw else ():
        results.append(forward_raw(target, work, env, weights))
        print(json.dumps(results[-1]), flush=True)
    return [{**r, "fp32_weight_bytes": weights} for r in results]


def table(results: list[dict]) -> str:
    lines = ["| model | how | target | variant | convert s (wall s) | peak RSS | ÷ fp32 weights | artifact bytes | parity |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        convert = f"{r['convert_seconds']:.0f} ({r['seconds']:.0f})" if r.get("convert_seconds") else f"– ({r['seconds']:.0f})"
        parity = {True: "pass", False: "FAIL", None: "–"}[r.get("parity")] if r["how"] == "edgeport" else "not checked"
        status = "" if r.get("status") == "ok" else f" ({r.get('status') or 'exit ' + str(r['exit'])})"
        lines.append(f"| {r['model']} | {r['how']}{status} | {r['target']} | {r['variant']} | {convert} | "
                     f"{r['peak_rss'] / 1e9:.2f} GB | {r['rss_ratio']:.2f}× | {r.get('artifact_bytes', 0) / 1e9:.2f} GB | {parity} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("section", choices=["forward"])
    parser.add_argument("--rows", type=int, help="embedding rows (default 200000: 2.24 GB of fp32 weights)")
    parser.add_argument("--target", action="append", choices=TARGETS)
    parser.add_argument("--no-raw", action="store_true")
    parser.add_argument("--work", type=Path, default=Path("dist/bench-large"))
    parser.add_argument("--json", type=Path)
    parser.add_argument("--write-measured", action="store_true",
                        help="set each converted target's memory_factor in edgeport/targets/<name>/measured.toml")
    args = parser.parse_args()
    results = forward(args.rows, args.target or TARGETS, args.work, raw=not args.no_raw)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(table(results))
    if args.write_measured:
        write_measured(results)


def write_measured(results: list[dict]) -> None:
    """The pre-flight's forward factor of each target edgeport converted: its peak RSS / fp32 weights, rounded
    up to a tenth (the factor is a ceiling the check refuses above, not an average)."""
    import math

    from edgeport.targets.measured import update

    for row in results:
        if row["how"] == "edgeport" and row.get("status") == "ok":
            path = update(row["target"], memory_factor=math.ceil(row["rss_ratio"] * 10) / 10)
            print(f"{path}: memory_factor = {math.ceil(row['rss_ratio'] * 10) / 10:g}")


if __name__ == "__main__":
    main()
