"""Probe text generation on LLM families outside the test matrix (tests/tiny_lm.py UNSEEN): one tiny random-init
model per family, converted for every generative target with the test suite's generation flags, one row per
family x target (converted? token-exact fp32? the error's first line). Writes bench/FAMILIES_UNSEEN.json.

    python bench/families_unseen.py [family ...] [--work DIR]

One conversion at a time (each is a subprocess with its own timeout): LiteRT's multi-signature conversion
alone takes tens of seconds per model on two cores.
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
OUT = REPO / "bench" / "FAMILIES_UNSEEN.json"
TARGETS = ("litert", "onnx", "tpu", "executorch")
GEN_ARGS = ("--prefill-len", "8", "--cache-len", "24", "--gen-tokens", "5", "--samples", "2",
            "--tpu-topology", "v5e:1x1", "--no-latency")


def first_line(text: str | None) -> str | None:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[0][:300] if lines else None


def cells(report: dict) -> dict:
    """fp32 row of every target: converted, token-exact, worst logits error, the error's first line."""
    found = {}
    for row in report.get("targets", []):
        if row.get("variant") != "fp32":
            continue
        g = row.get("generation") or {}
        found[row["target"]] = {"status": row.get("status"), "token_agreement": g.get("token_agreement"),
                                "exact": g.get("token_agreement") == 1.0 and g.get("first_divergence") is None,
                                "logits_max_rel_err": g.get("logits_max_rel_err"),
                                "rewrites": row.get("rewrites"), "error": first_line(row.get("error"))}
    return found


def probe(family: str, work: Path, timeout: int) -> dict:
    import tiny_lm

    model_dir = tiny_lm.save(tiny_lm.build(family), work / family)
    out = work / f"{family}_out"
    args = [a for t in TARGETS for a in ("-t", t)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    start = time.time()
    try:
        done = subprocess.run([sys.executable, "-m", "edgeport", "convert", f"hf:{model_dir}", *args, *GEN_ARGS,
                               "--out", str(out)], capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"family": family, "exit": None, "error": f"timeout after {timeout} s", "targets": {}}
    entry = {"family": family, "exit": done.returncode, "seconds": round(time.time() - start, 1), "targets": {}}
    report = out / "report.json"
    if report.is_file():
        entry["targets"] = cells(json.loads(report.read_text()))
    if not entry["targets"]:
        entry["error"] = first_line(done.stderr) or first_line(done.stdout)
    return entry


def cell(entry: dict, target: str) -> str:
    c = entry.get("targets", {}).get(target)
    if not c:
        return f"not converted: {entry.get('error') or 'no row'}"
    if c["status"] != "ok" and c["token_agreement"] is None:
        return f"not converted: {c['error']}"
    verdict = "token-exact" if c["exact"] else f"tokens {c['token_agreement']:.2f}"
    return f"{verdict} (logits rel {c['logits_max_rel_err']:.1e})"


def markdown(results: dict) -> str:
    """The matrix as a markdown table, one line per probed family."""
    lines = ["| family | " + " | ".join(TARGETS) + " |", "|---" * (len(TARGETS) + 1) + "|"]
    for family, entry in results.items():
        lines.append(f"| {family} | " + " | ".join(cell(entry, t) for t in TARGETS) + " |")
    return "\n".join(lines)


def main() -> int:
    import tiny_lm

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", nargs="*", default=list(tiny_lm.UNSEEN))
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--timeout", type=int, default=1200)
    parser.add_argument("--markdown", action="store_true", help="print the stored matrix as a table, convert nothing")
    opts = parser.parse_args()
    if opts.markdown:
        print(markdown(json.loads(OUT.read_text())))
        return 0
    work = opts.work or Path(tempfile.mkdtemp(prefix="families_"))
    results = json.loads(OUT.read_text()) if OUT.is_file() else {}
    for family in opts.families:
        entry = probe(family, work, opts.timeout)
        results[family] = entry
        OUT.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
        print(json.dumps(entry), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
