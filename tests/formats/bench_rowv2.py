"""Micro-benchmark of the ``rowv2`` decoder: 1M ten-column rows, median of 5 runs.

Run with ``python -m tests.formats.bench_rowv2 [--rows N] [--runs R]``. Not collected by
pytest (the file name does not start with ``test_``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import random
import statistics
import time

import pyarrow as pa

from cdc_sink.formats.rowv2 import Rowv2Decoder, encode_rows
from cdc_sink.schema import TableSchema

SCHEMA = TableSchema.from_dict(
    {
        "columns": [
            {"name": "id", "type": "int64"},
            {"name": "qty", "type": "int32"},
            {"name": "total", "type": "int64"},
            {"name": "name", "type": "string"},
            {"name": "price", "type": "float64"},
            {"name": "active", "type": "bool"},
            {"name": "day", "type": "date32"},
            {"name": "at", "type": "timestamp[us, UTC]"},
            {"name": "amount", "type": "decimal128(12, 2)"},
            {"name": "note", "type": "string"},
        ],
        "primary_key": ["id"],
    }
)


def random_row(rnd: random.Random, i: int) -> dict[str, object]:
    """Row ``i`` of the benchmark's ten value columns, drawn from ``rnd`` (a few nulls)."""
    return {
        "qty": rnd.randrange(-40_000, 40_000),
        "total": rnd.randrange(-(2**35), 2**35),
        "name": f"customer-{i:06d}",
        "price": rnd.random() * 1000,
        "active": rnd.random() < 0.5,
        "day": dt.date(2020, 1, 1) + dt.timedelta(days=rnd.randrange(2000)),
        "at": dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
        + dt.timedelta(microseconds=rnd.randrange(10**13)),
        "amount": decimal.Decimal(rnd.randrange(-(10**9), 10**9)).scaleb(-2),
        "note": None if i % 10 == 0 else "x" * rnd.randrange(0, 24),
    }


def make_values(
    rows: int, *, distinct: int = 20_000, seed: int = 7, partial: bool = False
) -> pa.BinaryArray:
    """``rows`` message values: ``distinct`` encoded rows (all ten columns, a few nulls)
    repeated. With ``partial``, each row leaves out or nulls random columns (thousands of
    distinct layouts, most of them rare)."""
    rnd = random.Random(seed)
    ops, keys, sets = [], [], []
    for i in range(distinct):
        ops.append("upsert")
        keys.append({"id": rnd.randrange(-(2**40), 2**40)})
        sets.append(row := random_row(rnd, i))
        if partial:
            for name in list(row):
                k = rnd.random()
                if k < 0.3:
                    del row[name]
                elif k < 0.45:
                    row[name] = None
    encoded = encode_rows(ops, keys, sets, SCHEMA)
    reps = -(-rows // distinct)
    return pa.array((encoded * reps)[:rows], pa.binary())


def main() -> None:
    """Prints decode throughput in rows/s (median of the runs)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--partial",
        action="store_true",
        help="random absent/null columns: thousands of row layouts",
    )
    args = parser.parse_args()
    values = make_values(args.rows, partial=args.partial)
    decoder = Rowv2Decoder()
    times = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        batch, rejects = decoder.decode(values, SCHEMA)
        times.append(time.perf_counter() - t0)
        assert len(batch) == args.rows and len(rejects) == 0
    med = statistics.median(times)
    shape = "partial rows" if args.partial else "10 columns"
    print(
        f"rowv2 decode: {args.rows} rows x {shape}, {values.nbytes / args.rows:.0f} B/row;"
        f" median {med:.3f} s of {args.runs} -> {args.rows / med:,.0f} rows/s"
    )


if __name__ == "__main__":
    main()
