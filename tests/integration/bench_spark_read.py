"""Spark read throughput: ``format("cdc_sink")`` vs the same data as Parquet.

One table of ``--rows`` rows x 10 columns (int64 key, int32, int64, float32, float64,
bool, string, date, timestamp, decimal(18, 2)), ``--buckets`` buckets, loaded in a few
versions and compacted (readers load snapshots, as a table at rest serves them). The
same rows are written as Parquet (snappy, one file per bucket). Both are read by the
same local Spark with ``spark.read...load(p).write.format("noop").mode("overwrite")
.save()``; the first cdc_sink read is "cold" (the Python workers open the table and
load the bucket snapshots), the later ones find the tablets in the workers' caches.
Then, per repeat, a small update is committed and the new version read (the workers
load it: newest snapshot + one segment), as a streaming-fed table is read.
MB/s counts the Arrow in-memory bytes of the rows (the same for both formats). For
context, ``Table.read()`` of the whole table in this process (no Spark) is timed too.

A third reader, ``arrow_floor`` (``tests/integration/arrow_floor_source.py``), hands Spark
the same Arrow batches from memory-mapped IPC files through a Python data source with
no logic at all: the floor of any Python data source, so cdc_sink's own cost and Spark's
transport cost can be told apart.

Run:  .venv/bin/python -m tests.integration.bench_spark_read [--rows 2000000]
      [--buckets 4] [--repeat 3] [--master local[2]] [--dir /tmp/x] [--json out.json]

Not collected by pytest (no ``test_`` prefix).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import cdc_sink
from cdc_sink import TableOptions

SCHEMA = {
    "columns": [
        {"name": "id", "type": "int64", "nullable": False},
        {"name": "qty", "type": "int32"},
        {"name": "amount_cents", "type": "int64"},
        {"name": "ratio", "type": "float32"},
        {"name": "score", "type": "float64"},
        {"name": "active", "type": "bool"},
        {"name": "status", "type": "string"},
        {"name": "day", "type": "date32"},
        {"name": "updated_at", "type": "timestamp[us, UTC]"},
        {"name": "price", "type": "decimal128(18, 2)"},
    ],
    "primary_key": ["id"],
}
STATUSES = np.array(["new", "paid", "packed", "shipped", "delivered", "returned-to-sender"])


def make_rows(n: int, start: int, rng: np.random.Generator) -> pa.Table:
    """``n`` insert events (wire form: ``__op`` + columns) with keys from ``start``."""
    ts0 = np.datetime64("2024-01-01T00:00:00", "us").astype(np.int64)
    cols: dict[str, pa.Array] = {
        "__op": pa.array(np.full(n, "insert")),
        "id": pa.array(np.arange(start, start + n, dtype=np.int64)),
        "qty": pa.array(rng.integers(0, 1000, n, dtype=np.int32)),
        "amount_cents": pa.array(rng.integers(-(10**9), 10**9, n, dtype=np.int64)),
        "ratio": pa.array(rng.random(n, dtype=np.float32)),
        "score": pa.array(rng.normal(size=n)),
        "active": pa.array(rng.random(n) < 0.5),
        "status": pa.array(STATUSES[rng.integers(0, len(STATUSES), n)]),
        "day": pa.array(rng.integers(19000, 20000, n, dtype=np.int32)).cast(pa.date32()),
        "updated_at": pa.array(ts0 + rng.integers(0, 10**13, n, dtype=np.int64)).cast(
            pa.timestamp("us", tz="UTC")
        ),
        "price": pa.array(rng.integers(0, 10**9, n, dtype=np.int64))
        .cast(pa.decimal128(38, 2))
        .cast(pa.decimal128(18, 2)),
    }
    return pa.table(cols)


def build(root: str, rows: int, buckets: int, chunk: int) -> tuple[str, str, pa.Table, float]:
    """The cdc_sink table and the Parquet copy; returns paths, the data and build time."""
    rng = np.random.default_rng(42)
    path = os.path.join(root, "cdc")
    schema = dict(SCHEMA, num_buckets=buckets)
    t0 = time.perf_counter()
    table = cdc_sink.create_table(path, schema, options=TableOptions(snapshot_every=1000))
    for start in range(0, rows, chunk):
        res = table.apply(make_rows(min(chunk, rows - start), start, rng))
        assert res.counts.get("rejected", 0) == 0, res.counts
    table.compact()
    build_s = time.perf_counter() - t0
    data = table.read()
    assert data.num_rows == rows
    return path, parquet_copy(data, root, buckets), data, build_s


def parquet_copy(data: pa.Table, root: str, files: int) -> str:
    """``data`` written by pyarrow as ``files`` Parquet files in ``root/parquet`` (its
    rows in order, split evenly); the directory."""
    pq_path = os.path.join(root, "parquet")
    os.makedirs(pq_path)
    per = -(-data.num_rows // files)
    for i in range(files):
        pq.write_table(data.slice(i * per, per), os.path.join(pq_path, f"part-{i}.parquet"))
    return pq_path


def du(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def timed(run: Callable[[], None], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--buckets", type=int, default=4)
    ap.add_argument("--chunk", type=int, default=500_000, help="rows per committed version")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args()

    from cdc_sink.spark.session import local_spark
    from cdc_sink.spark.source import register

    root = args.dir or tempfile.mkdtemp(prefix="bench_spark_read_")
    os.makedirs(root, exist_ok=True)
    try:
        path, pq_path, data, build_s = build(root, args.rows, args.buckets, args.chunk)
        mb = data.nbytes / 1e6
        print(
            f"{args.rows:,} rows x {data.num_columns} columns = {mb:.1f} MB in Arrow; "
            f"cdc_sink {du(path) / 1e6:.1f} MB on disk (built in {build_s:.1f} s), "
            f"Parquet {du(pq_path) / 1e6:.1f} MB"
        )
        spark = local_spark(
            "bench_spark_read",
            master=args.master,
            with_kafka=False,
            extra_conf={"spark.driver.memory": "4g"},
        )
        register(spark)
        spark.range(1000).write.format("noop").mode("overwrite").save()  # JVM warm-up

        def cdc() -> None:
            spark.read.format("cdc_sink").load(path).write.format("noop").mode("overwrite").save()

        def parquet() -> None:
            spark.read.parquet(pq_path).write.format("noop").mode("overwrite").save()

        # The floor of a Python data source: the same batches cdc_sink yields, written to
        # Arrow IPC files (one per bucket) and handed to Spark as they are.
        from tests.integration.arrow_floor_source import ArrowFloorSource

        floor_path = os.path.join(root, "arrow")
        os.makedirs(floor_path)
        at_rest = cdc_sink.open_table(path)
        for b in range(args.buckets):
            batches = list(at_rest.bucket_batches(b, at_rest.version))
            with (
                pa.OSFile(os.path.join(floor_path, f"bucket-{b}.arrow"), "wb") as sink,
                pa.ipc.new_file(sink, batches[0].schema) as w,
            ):
                for rb in batches:
                    w.write_batch(rb)
        spark.dataSource.register(ArrowFloorSource)

        def floor() -> None:
            spark.read.format("arrow_floor").load(floor_path).write.format("noop").mode(
                "overwrite"
            ).save()

        results: dict[str, Any] = {
            "rows": args.rows,
            "columns": data.num_columns,
            "arrow_mb": mb,
            "buckets": args.buckets,
            "master": args.master,
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "spark": spark.version,
        }
        reader = cdc_sink.open_table(path)
        py = timed(lambda: reader.read() and None, 1 + args.repeat)
        results["python_table_read"] = {"cold_s": py[0], "warm_s": py[1:]}
        print(
            f"{'Table.read':9s} cold {py[0]:6.2f} s ({mb / py[0]:7.1f} MB/s)   warm best "
            f"{min(py[1:]):6.2f} s ({mb / min(py[1:]):7.1f} MB/s)   (no Spark, one thread)"
        )
        for name, run in (("cdc_sink", cdc), ("parquet", parquet), ("arrow_floor", floor)):
            times = timed(run, 1 + args.repeat)
            cold, warm = times[0], times[1:]
            best, med = min(warm), statistics.median(warm)
            results[name] = {
                "cold_s": cold,
                "warm_s": warm,
                "cold_mb_s": mb / cold,
                "best_mb_s": mb / best,
                "median_mb_s": mb / med,
            }
            print(
                f"{name:9s} cold {cold:6.2f} s ({mb / cold:7.1f} MB/s)   warm best "
                f"{best:6.2f} s ({mb / best:7.1f} MB/s, {args.rows / best / 1e6:5.2f} "
                f"M rows/s)   median {med:6.2f} s ({mb / med:7.1f} MB/s)"
            )
        # A version the workers have not loaded yet: newest snapshot + one small segment.
        writer = cdc_sink.open_table(path)
        rng = np.random.default_rng(7)
        fresh = []
        for _ in range(args.repeat):
            ids = rng.choice(args.rows, 1000, replace=False)
            writer.apply(
                pa.table(
                    {
                        "__op": pa.array(np.full(1000, "update")),
                        "id": pa.array(ids.astype(np.int64)),
                        "qty": pa.array(rng.integers(0, 9, 1000, dtype=np.int32)),
                    }
                )
            )
            fresh += timed(cdc, 1)
        results["cdc_sink_new_version_s"] = fresh
        best = min(fresh)
        print(
            f"{'cdc_sink':9s} new version (snapshot + 1 segment, warm workers) best "
            f"{best:6.2f} s ({mb / best:7.1f} MB/s)   median {statistics.median(fresh):6.2f} s"
        )
        spark.stop()
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
