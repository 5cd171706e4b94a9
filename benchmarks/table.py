"""Durable-table benchmark (issue "Durable table").

Measures, for a 1-bucket table of --rows rows x 20 columns (default 10M):
  * reopen: open_table + load the bucket (newest snapshot + --segments WAL segments of
    --segment-events partial updates each) -- target <= 2 s;
  * incremental snapshot after 1% of rows changed vs a full snapshot: bytes and time;
  * commit overhead per micro-batch (WAL segment + fsync + log entry + dir fsync) for a
    small batch -- target <= 10 ms.

Reopen is reported as wall and CPU seconds (CPU time is the figure to compare on a loaded
machine), split into the snapshot load and the segment replay, followed by cold reads of
a fresh Table: one column of the latest version, and the whole latest version.

Run:  .venv/bin/python benchmarks/table.py [--rows 10000000] [--segments 100]
      [--segment-events 10000] [--repeat 3] [--dir /tmp/cdc_bench]
      [--keep] [--reopen-only] [--page-compression none|lz4|zstd]
      [--wal-compression none|lz4|zstd]

``--keep`` leaves the table in ``--dir``; ``--reopen-only`` measures only the reopen and
cold reads of a table kept before (e.g. to compare two versions of the code on the same
files: ``PYTHONPATH=<other checkout> .venv/bin/python benchmarks/table.py --reopen-only``).
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

import cdc_sink.engine.core
import cdc_sink.table
from cdc_sink import TableOptions, create_table, open_table
from cdc_sink.batch import ChangeBatch
from cdc_sink.engine import core_of
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
    ap.add_argument(
        "--keep",
        action="store_true",
        help="leave the table in --dir (skips the snapshot comparison)",
    )
    ap.add_argument(
        "--page-compression",
        choices=["none", "lz4", "zstd"],
        default=None,
        help="TableOptions.page_compression of the table built (default: the library's)",
    )
    ap.add_argument(
        "--wal-compression",
        choices=["none", "lz4", "zstd"],
        default=None,
        help="TableOptions.wal_compression of the table built (default: the library's)",
    )
    ap.add_argument(
        "--reopen-only",
        action="store_true",
        help="only reopen (and cold-read) a table kept by an earlier --keep run",
    )
    args = ap.parse_args()
    pa.set_cpu_count(1)
    codecs: dict[str, Any] = {
        f"{name}_compression": None if value == "none" else value
        for name, value in (("page", args.page_compression), ("wal", args.wal_compression))
        if value is not None
    }
    opts = TableOptions(
        snapshot_every=10**9,
        compact_every=10**9,
        memory_versions=10**6,
        retain_versions=10**6,
        **codecs,
    )
    print(f"cdc_sink from {os.path.dirname(cdc_sink.table.__file__)}")
    if args.reopen_only:
        # Parsing a schema imports pandas (pyarrow scalars): once, before timing.
        warm = open_table(args.dir, options=opts)
        assert warm.schema is not None
        reopen(args, opts, None, warm.version)
        return
    rng = np.random.default_rng(3)
    schema = make_schema()
    shutil.rmtree(args.dir, ignore_errors=True)
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
    small = [
        ChangeBatch.from_arrow(
            update_batch(schema, args.rows, args.rows + 10_000 * i, 100, rng), schema
        )[0]
        for i in range(50)
    ]
    times = []
    for b in small:
        t0 = time.perf_counter()
        table.apply(b)
        times.append(time.perf_counter() - t0)
    results["commit_100_events_ms"] = statistics.median(times) * 1000
    print(
        f"commit of a 100-event micro-batch (segment+fsync+log entry+dir fsync, incl. apply):"
        f" median {statistics.median(times) * 1000:.1f} ms, "
        f"p90 {np.percentile(times, 90) * 1000:.1f} ms"
    )

    # The WAL: --segments segments of partial updates after the snapshot.
    next_key = args.rows + 10**7
    for _ in range(args.segments):
        b, _ = ChangeBatch.from_arrow(
            update_batch(schema, args.rows, next_key, args.segment_events, rng), schema
        )
        next_key += args.segment_events // 10
        table.apply(b)
    latest = table.version
    expect = table.read(version=latest, columns=["id", "i0", "s0"])
    del table

    results.update(reopen(args, opts, expect, latest))
    if args.keep:  # the snapshot comparison below would change the kept table
        return

    # Incremental snapshot after 1% of rows changed vs full: snapshot (compact()), change
    # 1% of the rows in one column, snapshot again through compact() (incremental), and
    # once more from scratch (previous=None: full).
    t = open_table(args.dir, options=opts)
    t.compact()
    n_changed = args.rows // 100
    for label, rows in (
        ("random rows", rng.choice(args.rows, n_changed, replace=False)),
        ("clustered rows", np.arange(n_changed, dtype=np.int64)),
    ):
        b, _ = ChangeBatch.from_arrow(
            pa.table(
                {
                    "__op": pa.array(np.full(n_changed, 2, np.int8)),
                    "id": pa.array(rows),
                    "i0": pa.array(rng.integers(0, 1 << 40, n_changed)),
                    "__set__i0": pa.array(np.ones(n_changed, bool)),
                }
            ),
            schema,
        )
        t.apply(b)
        before = dir_bytes(os.path.join(args.dir, "_pages"))
        t0 = time.perf_counter()
        t.compact()
        inc_s = time.perf_counter() - t0
        inc_bytes = dir_bytes(os.path.join(args.dir, "_pages")) - before
        tablet = core_of(t).tablet(0)
        before = dir_bytes(os.path.join(args.dir, "_pages"))
        t0 = time.perf_counter()
        tablet.compact(tablet.committed)
        write_snapshot(args.dir, tablet, tablet.committed, 0, previous=None)
        full_s = time.perf_counter() - t0
        full_bytes = dir_bytes(os.path.join(args.dir, "_pages")) - before
        results[f"incremental_{label}"] = (inc_bytes, inc_s, full_bytes, full_s)
        print(
            f"snapshot after 1% of rows changed in 1 of 20 columns ({label}): incremental "
            f"{inc_bytes / 1e6:.1f} MB in {inc_s:.2f}s vs full {full_bytes / 1e6:.1f} MB "
            f"in {full_s:.2f}s"
        )
    if not args.keep:
        shutil.rmtree(args.dir, ignore_errors=True)


class _Timed:
    """Accumulates wall and CPU seconds of calls to ``cdc_sink.engine.core.load_snapshot``."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0
        self._orig = cdc_sink.engine.core.load_snapshot

    def __enter__(self) -> _Timed:
        def timed(*a: Any, **kw: Any) -> Any:
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return self._orig(*a, **kw)
            finally:
                self.wall += time.perf_counter() - t0
                self.cpu += time.process_time() - c0

        cdc_sink.engine.core.load_snapshot = timed
        return self

    def __exit__(self, *exc: object) -> None:
        cdc_sink.engine.core.load_snapshot = self._orig


def reopen(
    args: argparse.Namespace, opts: TableOptions, expect: pa.Table | None, latest: int
) -> dict[str, Any]:
    """Reopen (open + load the bucket: snapshot, then the segments after it) and cold
    reads, ``--repeat`` times; medians of wall and CPU seconds."""
    runs: list[dict[str, float]] = []
    first: pa.Table | None = expect
    for _ in range(args.repeat):
        with _Timed() as snap:
            t0, c0 = time.perf_counter(), time.process_time()
            t = open_table(args.dir, options=opts)
            t.get([0], version=latest)  # forces the bucket load
            w, c = time.perf_counter() - t0, time.process_time() - c0
        got = t.read(version=latest, columns=["id", "i0", "s0"])
        if first is None:
            first = got
        assert got.equals(first)
        del t
        # Cold reads from a fresh Table: one value column, then every column.
        t0, c0 = time.perf_counter(), time.process_time()
        t = open_table(args.dir, options=opts)
        n1 = t.read(version=latest, columns=["id", "i0"]).num_rows
        w1, c1 = time.perf_counter() - t0, time.process_time() - c0
        del t
        t0, c0 = time.perf_counter(), time.process_time()
        t = open_table(args.dir, options=opts)
        n2 = t.read(version=latest).num_rows
        w2, c2 = time.perf_counter() - t0, time.process_time() - c0
        del t
        assert n1 == n2
        runs.append(
            {
                "reopen_s": w,
                "reopen_cpu_s": c,
                "snapshot_load_s": snap.wall,
                "snapshot_load_cpu_s": snap.cpu,
                "replay_s": w - snap.wall,
                "replay_cpu_s": c - snap.cpu,
                "cold_read_1col_s": w1,
                "cold_read_1col_cpu_s": c1,
                "cold_read_all_s": w2,
                "cold_read_all_cpu_s": c2,
            }
        )
        print("  " + " ".join(f"{k}={v:.2f}" for k, v in runs[-1].items()), flush=True)
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(
        f"reopen {args.rows:,} rows x 20 cols, snapshot + {args.segments} segments of "
        f"{args.segment_events:,} events: median {med['reopen_s']:.2f}s wall, "
        f"{med['reopen_cpu_s']:.2f}s CPU (snapshot load {med['snapshot_load_s']:.2f}s wall /"
        f" {med['snapshot_load_cpu_s']:.2f}s CPU, segment replay {med['replay_s']:.2f}s /"
        f" {med['replay_cpu_s']:.2f}s CPU)"
    )
    print(
        f"cold read of the latest version from a fresh Table: id + 1 column "
        f"{med['cold_read_1col_s']:.2f}s wall / {med['cold_read_1col_cpu_s']:.2f}s CPU; "
        f"all 21 columns {med['cold_read_all_s']:.2f}s / {med['cold_read_all_cpu_s']:.2f}s"
    )
    return med


if __name__ == "__main__":
    main()
