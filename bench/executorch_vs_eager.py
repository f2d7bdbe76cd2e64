"""ExecuTorch (.pte, XNNPACK) latency vs PyTorch eager on the demo model, beside ONNX and LiteRT, in one run.

    python bench/executorch_vs_eager.py [--threads N] [--model samples/models/tiny_cnn.py:build]

Prints p50 per row, the ratio eager_p50 / row_p50 (>1 = faster than eager), parity and, for ExecuTorch, the
share of FLOPs XNNPACK runs. Uses the library (edgeport.api.convert) exactly as the CLI does; artifacts go to a
temporary directory.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]


def main() -> None:
    from edgeport import api

    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--model", default=str(ROOT / "samples" / "models" / "tiny_cnn.py") + ":build")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        opts = api.convert_options(model=args.model, out=Path(tmp) / "out", targets=["executorch", "onnx", "litert"],
                                   quantize=["int8"], threads=args.threads)
        report = api.convert(opts).report
    eager = report["reference"]["latency_ms"]["p50"]
    print(f"model {args.model}, {args.threads} thread(s); PyTorch eager p50 {eager:.4f} ms")
    print(f"{'row':20} {'p50 ms':>9} {'vs eager':>9} {'max_abs_err':>12} {'XNNPACK FLOPs':>14}")
    for row in report["targets"]:
        lat, parity = row.get("latency_ms") or {}, row.get("parity") or {}
        share = (row.get("delegation") or {}).get("flops_share")
        print(f"{row['target'] + ' ' + row['variant']:20} {lat.get('p50', float('nan')):9.4f} "
              f"{(eager / lat['p50']) if lat else float('nan'):8.2f}x {parity.get('max_abs_err', float('nan')):12.3g} "
              f"{'' if share is None else f'{100 * share:.1f}%':>14}  {row['status']}")


if __name__ == "__main__":
    main()
