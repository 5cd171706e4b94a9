"""Long fuzz run of every event decoder (issue 7).

Runs the harness of the CI fuzz test (``tests/formats/fuzz_decoders.py``) for a fixed
time per decoder, with fresh random seeds: Hypothesis generates valid messages over a
schema holding every supported type (with and without a sequence column, small and
4-byte column ids), each is mutated (truncation at every offset, byte flips, invalid
UTF-8 and NUL bytes, structural JSON mutations with hostile values and 10k-level
nesting, rowv2 header fields), and every batch is checked against the oracle: nothing
raises, every message is decoded, rejected or skipped exactly once, every accepted value
is in range, every reject has a reason, valid neighbours decode as they do alone.

Run:  nice .venv/bin/python benchmarks/fuzz_decoders.py --seconds 200
      [--formats json,debezium,rowv2] [--mutations 30] [--failures-file PATH]

Prints, per decoder: fuzzed inputs tried, batches, how many were accepted, rejected and
skipped, failures and wall time. Exits with status 1 when the oracle failed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from cdc_sink.formats import FORMATS
from tests.formats.fuzz_decoders import Case, FuzzFailure, Stats, fuzz_case, valid_cases


def fuzz_format(fmt: Any, seconds: float, mutations: int, failures: list[str]) -> Stats:
    """Fuzzes one decoder for ``seconds``; appends failure reports to ``failures``."""
    stats = Stats()
    stop = time.monotonic() + seconds

    @settings(
        max_examples=20,
        deadline=None,
        database=None,
        derandomize=False,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=valid_cases(fmt), seed=st.integers(0, 2**32 - 1))
    def run(case: Case, seed: int) -> None:
        if time.monotonic() >= stop:
            return
        try:
            fuzz_case(
                case, seed, mutations, stats=stats, rowv2_matrix=fmt == "rowv2" and seed % 2 == 0
            )
        except FuzzFailure as exc:
            failures.append(f"[{fmt} seed={seed} options={case.options}] {exc}")

    while time.monotonic() < stop:
        run()
    return stats


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=60.0, help="fuzzing time per decoder")
    p.add_argument("--formats", default=",".join(FORMATS))
    p.add_argument(
        "--mutations", type=int, default=30, help="mutations of each family per valid message"
    )
    p.add_argument(
        "--failures-file",
        default=None,
        help="write every failure report (with the message bytes) here",
    )
    args = p.parse_args(argv)
    failures: list[str] = []
    total_inputs = 0
    t_all = time.perf_counter()
    print(
        f"{'decoder':<10} {'inputs':>9} {'batches':>8} {'accepted':>9} {'rejected':>9} "
        f"{'skipped':>8} {'failures':>9} {'wall s':>7}"
    )
    for fmt in args.formats.split(","):
        before = len(failures)
        t0 = time.perf_counter()
        s = fuzz_format(fmt, args.seconds, args.mutations, failures)
        wall = time.perf_counter() - t0
        total_inputs += s.inputs
        print(
            f"{fmt:<10} {s.inputs:>9} {s.batches:>8} {s.accepted:>9} {s.rejected:>9} "
            f"{s.skipped:>8} {len(failures) - before:>9} {wall:>7.1f}",
            flush=True,
        )
    print(
        f"total: {total_inputs} inputs, {len(failures)} failures, "
        f"{time.perf_counter() - t_all:.1f} s"
    )
    for f in failures[:5]:
        print("\n" + f[:2000])
    if args.failures_file:
        with open(args.failures_file, "w", encoding="utf-8") as fh:
            fh.write("\n\n".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
