"""Durable-table benchmark (issue "Durable table").

Measures, for a 1-bucket table of --rows rows x 20 columns (default 10M):
  * reopen: open_table + load the bucket (newest snapshot + --segments WAL segments of
    --segment-events partial updates each) -- target <= 2 s;
  * incremental snapshot after 1% of rows changed vs a full snapshot: bytes and time;
  * commit overhead per micro-batch (WAL segment + fsync + log entry + dir fsync) for a
    small batch -- target <= 10 ms.

Run:  .venv/bin/python benchmarks/table.py [--rows 10000000] [--segments 100]
      [--segment-events 10000] [--repeat 3] [--dir /tmp/cdc_bench]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(__file__))

from engine import insert_batch, make_schema, update_batch

from cdc_sink import TableOptions, create_table, open_table
from cdc_sink.changes import ChangeBatch
from cdc_sink.storage.snapshot import write_snapshot


def dir_bytes(path: str) -> int:
    total = 0
    for d, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(d, f)) for f in files)
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--segments", type=int, default=100)
    ap.add_argument("--segment-events", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default="/tmp/cdc_bench_table")
    args = ap.parse_args()
    pa.set_cpu_count(1)
    rng = np.random.default_rng(3)
    schema = make_schema()
    shutil.rmtree(args.dir, ignore_errors=True)
    opts = TableOptions(snapshot_every=10**9, compact_every=10**9, memory_versions=10**6,
                        retain_versions=10**6)
    table = create_table(args.dir, schema, options=opts)
    results: dict[str, Any] = {}

    # Load rows, then one full snapshot (compact()) so reopen starts from it.
    step = 1_000_000
    for start in range(0, args.rows, step):
        keys = np.arange(start, min(start + step, args.rows), dtype=np.int64)
        b, _ = ChangeBatch.from_arrow(insert_batch(schema, keys, rng), schema)
        table.apply(b)
    t0 = time.perf_counter()
    table.compact()
    full_s = time.perf_counter() - t0
    full_bytes = dir_bytes(os.path.join(args.dir, "_pages"))
    print(f"full snapshot: {full_bytes / 1e9:.2f} GB in {full_s:.2f}s")
    results["full_snapshot_bytes"] = full_bytes
    results["full_snapshot_s"] = full_s

    # Commit overhead: small batches (100 partial updates), median over 50 commits.
    small = [ChangeBatch.from_arrow(update_batch(schema, args.rows, args.rows + 10_000 * i, 100,
                                                 rng), schema)[0] for i in range(50)]
    times = []
    for b in small:
        t0 = time.perf_counter()
        table.apply(b)
        times.append(time.perf_counter() - t0)
    results["commit_100_events_ms"] = statistics.median(times) * 1000
    print(f"commit of a 100-event micro-batch (segment+fsync+log entry+dir fsync, incl. apply):"
          f" median {statistics.median(times) * 1000:.1f} ms, "
          f"p90 {np.percentile(times, 90) * 1000:.1f} ms")

    # The WAL: --segments segments of partial updates after the snapshot.
    next_key = args.rows + 10**7
    for _ in range(args.segments):
        b, _ = ChangeBatch.from_arrow(update_batch(schema, args.rows, next_key,
                                                   args.segment_events, rng), schema)
        next_key += args.segment_events // 10
        table.apply(b)
    latest = table.version
    expect = table.read(version=latest, columns=["id", "i0", "s0"])
    del table

    # Reopen: open + load the bucket (snapshot + segments) + first read of a column.
    reopen = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        t = open_table(args.dir, options=opts)
        t.get([0], version=latest)  # forces the bucket load
        reopen.append(time.perf_counter() - t0)
        got = t.read(version=latest, columns=["id", "i0", "s0"])
        assert got.equals(expect)
        del t
    results["reopen_s"] = statistics.median(reopen)
    print(f"reopen {args.rows:,} rows x 20 cols, snapshot + {args.segments} segments of "
          f"{args.segment_events:,} events: median {statistics.median(reopen):.2f}s")

    # Incremental snapshot after 1% of rows changed vs full: snapshot (compact()), change
    # 1% of the rows in one column, snapshot again through compact() (incremental), and
    # once more from scratch (previous=None: full).
    t = open_table(args.dir, options=opts)
    t.compact()
    n_changed = args.rows // 100
    for label, rows in (("random rows", rng.choice(args.rows, n_changed, replace=False)),
                        ("clustered rows", np.arange(n_changed, dtype=np.int64))):
        b, _ = ChangeBatch.from_arrow(pa.table({
            "__op": pa.array(np.full(n_changed, 2, np.int8)), "id": pa.array(rows),
            "i0": pa.array(rng.integers(0, 1 << 40, n_changed)),
            "__set__i0": pa.array(np.ones(n_changed, bool))}), schema)
        t.apply(b)
        before = dir_bytes(os.path.join(args.dir, "_pages"))
        t0 = time.perf_counter()
        t.compact()
        inc_s = time.perf_counter() - t0
        inc_bytes = dir_bytes(os.path.join(args.dir, "_pages")) - before
        tablet = t._tablet(0)
        before = dir_bytes(os.path.join(args.dir, "_pages"))
        t0 = time.perf_counter()
        write_snapshot(args.dir, tablet, tablet.committed, 0, previous=None)
        full_s = time.perf_counter() - t0
        full_bytes = dir_bytes(os.path.join(args.dir, "_pages")) - before
        results[f"incremental_{label}"] = (inc_bytes, inc_s, full_bytes, full_s)
        print(f"snapshot after 1% of rows changed in 1 of 20 columns ({label}): incremental "
              f"{inc_bytes / 1e6:.1f} MB in {inc_s:.2f}s vs full {full_bytes / 1e6:.1f} MB "
              f"in {full_s:.2f}s")
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
