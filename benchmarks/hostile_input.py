"""Hostile input: what every decoder spends per input byte (issue 38).

Decodes every case of ``tests/formats/hostile.py`` (seeded adversarial batches of each
format: rowv2, native JSON, Debezium JSON with and without the envelope; the JSON ones
on the compiled passes and on their numpy fallbacks), each in a child process forked
from a fork server, and reports its peak resident memory per input byte (``VmHWM`` after
``clear_refs``, so numpy, Arrow's pool, C buffers and Python objects alike) and its CPU
seconds per MB. Each case runs ``--runs`` times with different seeds; the figures are
the medians.

Run:  nice .venv/bin/python benchmarks/hostile_input.py [--mb 4] [--runs 3] [--all]

Prints the worst case of each format and path (by peak memory ratio, then CPU) as a
markdown table, and with ``--all`` every case.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.formats.hostile import CASES, Cost, measure, modes


def _format_key(label: str, mode: str) -> str:
    fmt = label.split(":")[0]
    return f"{fmt} ({mode})" if fmt != "rowv2" else fmt


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=float, default=4.0, help="MB of input per case")
    p.add_argument("--runs", type=int, default=3, help="runs per case (seeds 1..runs)")
    p.add_argument("--all", action="store_true", help="print every case")
    args = p.parse_args(argv)
    size = int(args.mb * 2**20)
    rows: list[tuple[str, str, int, int, float, float, int]] = []
    failures = 0
    for case in CASES:
        for mode in modes(case):
            costs: list[Cost] = [
                measure(case.label, mode, seed, size) for seed in range(1, 1 + args.runs)
            ]
            failures += sum(bool(c.problems) for c in costs)
            rows.append(
                (
                    case.label,
                    mode,
                    int(statistics.median(c.bytes_in for c in costs)),
                    int(statistics.median(c.messages for c in costs)),
                    statistics.median(c.memory_ratio for c in costs),
                    statistics.median(c.cpu_per_mb for c in costs),
                    sum(len(c.problems) for c in costs),
                )
            )
    head = "| format (path) | worst case | bytes in | messages | peak memory / input | CPU s/MB |"
    print(head)
    print("|---|---|---:|---:|---:|---:|")
    worst: dict[str, tuple[str, str, int, int, float, float, int]] = {}
    for r in rows:
        k = _format_key(r[0], r[1])
        if k not in worst or (r[4], r[5]) > (worst[k][4], worst[k][5]):
            worst[k] = r
    for k, r in worst.items():
        print(f"| {k} | {r[0].split(':')[1]} | {r[2]:,} | {r[3]:,} | {r[4]:.1f}x | {r[5]:.3f} |")
    if args.all:
        print(
            "\n| case | path | bytes in | messages | peak memory / input | CPU s/MB | differences |"
        )
        print("|---|---|---:|---:|---:|---:|---:|")
        for r in rows:
            print(f"| {r[0]} | {r[1]} | {r[2]:,} | {r[3]:,} | {r[4]:.1f}x | {r[5]:.3f} | {r[6]} |")
    print(f"\naccepted values differing from their message: {failures} run(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
