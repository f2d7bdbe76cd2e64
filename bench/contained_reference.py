"""What containing a file-loaded program's first run costs (issue 33): the seconds the contained probe
(a spawned child that loads the .pt2 and runs it once) adds to a `convert` of the demo's model saved as a
.pt2, printed against that convert's wall time measured in the same run.

`make demo` itself converts `samples/models/tiny_cnn.py:build` (Python source: no probe, nothing added);
the probe runs only for programs read from a file (`convert x.pt2`, and `validate`'s `exported.pt2`).

    python bench/contained_reference.py [--runs 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _demo_program(folder: Path) -> Path:
    import torch

    spec = importlib.util.spec_from_file_location("tiny_cnn", REPO / "samples" / "models" / "tiny_cnn.py")
    code = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(code)
    module, example = code.build()
    path = folder / "tiny_cnn.pt2"
    torch.export.save(torch.export.export(module.eval(), tuple(example)), path)
    return path


def _convert_seconds(archive: Path, out: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "edgeport", "convert", str(archive), "-t", "onnx", "-t", "litert",
                    "--out", str(out), "--force"], check=True, capture_output=True, cwd=REPO)
    return time.perf_counter() - start


def _probe_seconds(archive: Path) -> float:
    from edgeport.sources.contained import probe
    from edgeport.sources.pt2 import load_program

    loaded = load_program(str(archive), [])
    start = time.perf_counter()
    probe(archive, [loaded.example_inputs], 1 << 30)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp:
        archive = _demo_program(Path(tmp))
        converts = [_convert_seconds(archive, Path(tmp) / "out") for _ in range(runs)]
        probes = [_probe_seconds(archive) for _ in range(runs)]
    convert, added = statistics.median(converts), statistics.median(probes)
    print(f"convert tiny_cnn.pt2 -t onnx -t litert (probe included): {convert:.1f} s (median of {runs})")
    print(f"contained probe alone: {added:.1f} s = {added / convert:.2f}x of that convert "
          f"({added / (convert - added):.2f}x of the convert without it)")


if __name__ == "__main__":
    main()
