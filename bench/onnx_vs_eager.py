"""ONNX Runtime and LiteRT latency vs PyTorch eager on the tiny test models, measured in one run.

    python bench/onnx_vs_eager.py [--threads N]

Prints p50 per runtime and the ratio eager_p50 / runtime_p50 (>1 = faster than eager), plus ONNX parity.
Uses the library (edgeport.api.convert) exactly as the CLI does; artifacts go to a temporary directory.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def main() -> None:
    from edgeport import api

    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    print(f"{'model':12} {'row':22} {'p50 ms':>9} {'eager ms':>9} {'vs eager':>9} {'max_rel_err':>12}")
    for name in ("cnn", "mlp", "transformer", "two_io"):
        with tempfile.TemporaryDirectory() as tmp:
            opts = api.convert_options(model=f"{ROOT / 'tests' / 'models.py'}:{name}", out=Path(tmp) / "out",
                                      targets=["onnx", "litert"], quantize=["dynamic-int8"], threads=args.threads)
            report = api.convert(opts).report
        eager = report["reference"]["latency_ms"]["p50"]
        for row in report["targets"]:
            lat = row.get("latency_ms") or {}
            err = (row.get("parity") or {}).get("max_rel_err")
            ratio = f"{eager / lat['p50']:.2f}x" if lat else "-"
            err_text = f"{err:.3g}" if isinstance(err, float) else "-"
            print(f"{name:12} {row['target'] + ' ' + row['variant']:22} {lat.get('p50', float('nan')):9.4f} "
                  f"{eager:9.4f} {ratio:>9} {err_text:>12}  {row['status']}")


if __name__ == "__main__":
    main()
