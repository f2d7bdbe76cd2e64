"""CPU seconds per test file and the costliest tests, from a `make test` run with a CPU log:

    EDGEPORT_TEST_CPU_LOG=/tmp/cpu.tsv make test && python bench/test_cpu.py /tmp/cpu.tsv

CPU, not wall: `make test` runs on two workers, so the suite's wall time is about half its CPU seconds on a
quiet machine, and CPU seconds move much less than wall time with other load (bench/TEST_TIME.md)."""

from __future__ import annotations

import sys
from collections import defaultdict


def main(path: str, top: int = 40) -> None:
    per_test = []
    for line in open(path):
        seconds, nodeid = line.rstrip("\n").split("\t", 1)
        per_test.append((float(seconds), nodeid))
    per_file = defaultdict(float)
    for seconds, nodeid in per_test:
        per_file[nodeid.split("::")[0]] += seconds
    total = sum(per_file.values())
    print(f"total {total:.0f} CPU-s over {len(per_test)} tests\n\n| CPU-s | share | file |\n|---:|---:|---|")
    for name, seconds in sorted(per_file.items(), key=lambda kv: -kv[1]):
        print(f"| {seconds:.1f} | {seconds / total:.1%} | {name} |")
    print("\n| CPU-s | test (fixtures' setup counts for the first test that uses them) |\n|---:|---|")
    for seconds, nodeid in sorted(per_test, reverse=True)[:top]:
        print(f"| {seconds:.1f} | {nodeid} |")


if __name__ == "__main__":
    main(*sys.argv[1:2], *(int(a) for a in sys.argv[2:3]))
