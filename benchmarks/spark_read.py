"""Spark reads: the JVM connector against Parquet and the Python data source, and its
change feed against the Python source's and ``Table.changes``.

Usage::

    .venv/bin/python benchmarks/spark_read.py [--rows 2000000] [--buckets 4]
        [--repeat 3] [--master local[2]] [--work DIR] [--json out.json]
        [--feed-updates N] [--feed-only] [--no-python]

One table of ``--rows`` rows x 20 columns (an int64 key ``id`` and ``c1`` .. ``c19``:
int64, float64 and int32 in turn), ``--buckets`` buckets, loaded in versions of 500,000
rows and compacted (a table at rest: readers load snapshots). The same rows are written
as Parquet by pyarrow (one file per bucket's share of the rows, in key order). One local
Spark session reads both: ``format("cdc_sink")`` through the JVM connector (its jar on
``spark.jars``), ``spark.read.parquet``, and ``format("cdc_sink_python")``, the Python
data source of the same table in the same session.

Queries: the sum of all 20 columns (a full scan), ``sum(c1)`` (one column), ``sum(c1)``
of the keys of a 1% range (``id < rows/100``), and ``count(*)``. Each reader runs each
query once as a warm-up, then ``--repeat`` rounds that alternate the readers; a figure is
the median of the rounds' wall times (each run makes its DataFrame: the time includes
resolving the version).

Then the change feed of one version: a version that updates three columns of
``--feed-updates`` keys (default rows/20) and deletes and inserts rows/200 keys each is
committed after the queries above, and its changes are read whole (every column, written
to Spark's ``noop`` sink) through ``spark.read...option("readChangeFeed", "true")`` on the
connector and on the Python source, and as ``Table.changes(v - 1, v)`` in this process
(an Arrow table) of the same ``Table`` each run (its caches warm, as a long-lived reader
has them) and of one opened for the run ("new"), alternated as above after two warm-up
rounds (the JIT compiles the reader's code over its first runs); this process's CPU
seconds (``Table.changes`` runs in it) are printed beside the JVM's. ``--feed-only`` skips
the snapshot queries; ``--feed-images`` commits the version with its pre-images
(``TableOptions.change_images``), which every reader then reads instead of the bucket's
pages.

The JVM's CPU seconds (its process's user + system time, from /proc) over the same runs
are printed beside; the Python source's workers are processes of their own and not in
that figure. The load average before and after is
printed too.

Not run by the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

import cdc_sink
from cdc_sink import TableOptions

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import read_queries

from tests.integration.bench_spark_read import parquet_copy

N_COLUMNS = read_queries.N_COLUMNS
_TYPES = ("int64", "float64", "int32")


def schema(buckets: int) -> dict[str, Any]:
    """``id`` and ``c1`` .. ``c19`` of :data:`_TYPES` in turn."""
    cols = [{"name": "id", "type": "int64", "nullable": False}]
    cols += [{"name": f"c{i}", "type": _TYPES[i % 3]} for i in range(1, N_COLUMNS)]
    return {"columns": cols, "primary_key": ["id"], "num_buckets": buckets}


def make_rows(n: int, start: int, rng: np.random.Generator) -> pa.Table:
    """``n`` insert events with keys from ``start``."""
    cols: dict[str, Any] = {
        "__op": pa.array(np.full(n, "insert")),
        "id": pa.array(np.arange(start, start + n, dtype=np.int64)),
    }
    for i in range(1, N_COLUMNS):
        kind = _TYPES[i % 3]
        if kind == "int64":
            cols[f"c{i}"] = pa.array(rng.integers(-(10**9), 10**9, n, dtype=np.int64))
        elif kind == "float64":
            cols[f"c{i}"] = pa.array(rng.normal(size=n))
        else:
            cols[f"c{i}"] = pa.array(rng.integers(0, 10**6, n, dtype=np.int32))
    return pa.table(cols)


def build(root: str, rows: int, buckets: int) -> tuple[str, str]:
    """The cdc_sink table and its Parquet copy under ``root``."""
    rng = np.random.default_rng(51)
    path = os.path.join(root, "cdc")
    table = cdc_sink.create_table(path, schema(buckets), options=TableOptions(snapshot_every=1000))
    for start in range(0, rows, 500_000):
        table.apply(make_rows(min(500_000, rows - start), start, rng))
    table.compact()
    data = table.read().sort_by("id")
    assert data.num_rows == rows
    return path, parquet_copy(data, root, buckets)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--buckets", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--work", default=None, help="work directory (default: a temp dir)")
    ap.add_argument("--no-python", action="store_true", help="leave the Python source out")
    ap.add_argument(
        "--feed-updates", type=int, default=None, help="keys the feed's version updates"
    )
    ap.add_argument("--feed-only", action="store_true", help="only the change-feed case")
    ap.add_argument(
        "--feed-images",
        action="store_true",
        help="commit the feed's version with its pre-images (TableOptions.change_images)",
    )
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args()

    from cdc_sink.spark.session import connector_jar, local_spark
    from cdc_sink.spark.source import PYTHON_FORMAT, register

    if connector_jar() is None:
        raise SystemExit("the JVM connector is not installed: make install builds it")
    root = args.work or tempfile.mkdtemp(prefix="bench_spark_read_")
    os.makedirs(root, exist_ok=True)
    load_before = os.getloadavg()
    try:
        t0 = time.perf_counter()
        path, pq_path = build(root, args.rows, args.buckets)
        print(f"built {args.rows:,} rows x {N_COLUMNS} columns in {time.perf_counter() - t0:.1f} s")
        spark = local_spark(
            "bench_spark_read",
            master=args.master,
            with_kafka=False,
            extra_conf={"spark.driver.memory": "4g"},
        )
        assert register(spark) == "jvm"
        jvm_pid = int(spark._jvm.ProcessHandle.current().pid())

        def jvm_cpu() -> float:
            return read_queries.process_cpu_s(jvm_pid)

        # a DataFrame per query run (a Python source's DataFrame keeps the filters pushed
        # to it by an earlier query: Spark reuses its pickled reader)
        frames: dict[str, Callable[[], Any]] = {
            "cdc_sink (JVM)": lambda: spark.read.format("cdc_sink").load(path),
            "parquet": lambda: spark.read.parquet(pq_path),
        }
        if not args.no_python:
            frames["cdc_sink (Python)"] = lambda: spark.read.format(PYTHON_FORMAT).load(path)
        queries = read_queries.queries(args.rows)

        def runner(df: Callable[[], Any], sql: str) -> Callable[[], Any]:
            def run() -> Any:
                df().createOrReplaceTempView("t")
                return spark.sql(sql).collect()

            return run

        results: dict[str, Any] = {}
        for qname, sql in ({} if args.feed_only else queries).items():
            runs = {name: runner(df, sql) for name, df in frames.items()}
            answers = {name: run() for name, run in runs.items()}  # warm-up, checked
            first = next(iter(answers.values()))
            assert all(_same(a, first) for a in answers.values()), answers
            timed = read_queries.alternated(runs, args.repeat, {"jvm_cpu": jvm_cpu})
            results[qname] = res = read_queries.summary(timed)
            pq_med = res["parquet"]["median_s"]
            print(qname)
            for n, r in res.items():
                med = r["median_s"]
                each = ", ".join(f"{w:.3f}" for w in r["wall_s"])
                print(
                    f"  {n:18s} median {med:6.3f} s  (runs {each})"
                    f"  JVM CPU {r['jvm_cpu_median_s']:6.2f} s  vs Parquet {pq_med / med:5.2f}x"
                )
        feed_updates = args.rows // 20 if args.feed_updates is None else args.feed_updates
        results["change feed of one version"] = change_feed_case(
            spark,
            path,
            args.rows,
            feed_updates,
            args.repeat,
            jvm_pid,
            not args.no_python,
            args.feed_images,
        )
        spark.stop()
        load_after = os.getloadavg()
        print(
            f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}; "
            f"{os.cpu_count()} CPUs, Python {platform.python_version()}, Spark {spark.version}"
        )
        if args.json:
            meta = {
                "rows": args.rows,
                "buckets": args.buckets,
                "master": args.master,
                "load_before": load_before,
                "load_after": load_after,
            }
            with open(args.json, "w") as f:
                json.dump({"meta": meta, "results": results}, f, indent=1)
    finally:
        if args.work is None:
            shutil.rmtree(root, ignore_errors=True)


def change_feed_case(
    spark: Any,
    path: str,
    rows: int,
    updates: int,
    repeat: int,
    jvm_pid: int,
    python: bool,
    images: bool = False,
) -> dict[str, Any]:
    """Commits one version (``updates`` keys' c1..c3 updated, rows/200 keys deleted and as
    many new keys inserted) and times reading its changes whole: the connector's and the Python
    source's ``readChangeFeed`` (to the ``noop`` sink) and ``Table.changes``, alternated."""
    from cdc_sink.spark.source import PYTHON_FORMAT

    rng = np.random.default_rng(52)
    table = cdc_sink.open_table(path, options=TableOptions(change_images=images))
    keys = rng.choice(rows, size=updates + rows // 200, replace=False)
    gone = len(keys) - updates
    ids = np.concatenate([keys, np.arange(rows, rows + gone)]).astype(np.int64)
    n = len(ids)
    ops = np.array(["update"] * updates + ["delete"] * gone + ["insert"] * gone)
    table.apply(
        pa.table(
            {
                "__op": pa.array(ops),
                "id": pa.array(ids),
                "c1": pa.array(rng.normal(size=n)),  # float64, int32, int64: _TYPES
                "c2": pa.array(rng.integers(0, 10**6, n, dtype=np.int32)),
                "c3": pa.array(rng.integers(-(10**9), 10**9, n, dtype=np.int64)),
            }
        )
    )
    v = table.version
    expected = table.changes(v - 1, v).num_rows
    assert expected == 2 * updates + 2 * gone, expected

    def spark_read(fmt: str) -> Callable[[], Any]:
        def run() -> Any:
            reader = spark.read.format(fmt).option("readChangeFeed", "true")
            df = reader.option("startingVersion", v).option("endingVersion", v).load(path)
            df.write.format("noop").mode("overwrite").save()

        return run

    runs: dict[str, Callable[[], Any]] = {
        "cdc_sink (JVM)": spark_read("cdc_sink"),
        "Table.changes": lambda: table.changes(v - 1, v),
        "Table.changes (new)": lambda: cdc_sink.open_table(path).changes(v - 1, v),
    }
    if python:
        runs["cdc_sink (Python)"] = spark_read(PYTHON_FORMAT)
    counted = spark.read.format("cdc_sink").option("readChangeFeed", "true")
    counted = counted.option("startingVersion", v).option("endingVersion", v).load(path)
    assert counted.count() == expected
    for _ in range(2):  # warm-up: the JIT compiles the reader's code over its first runs
        for run in runs.values():
            run()
    clocks = {
        "jvm_cpu": lambda: read_queries.process_cpu_s(jvm_pid),
        "python_cpu": time.process_time,
    }
    res = read_queries.summary(read_queries.alternated(runs, repeat, clocks))
    base = res["Table.changes"]["median_s"]
    print(f"change feed of version {v} ({expected:,} records)")
    for n, r in res.items():
        med = r["median_s"]
        each = ", ".join(f"{w:.3f}" for w in r["wall_s"])
        print(
            f"  {n:19s} median {med:6.3f} s  (runs {each})  JVM CPU"
            f" {r['jvm_cpu_median_s']:5.2f} s  this process's CPU"
            f" {r['python_cpu_median_s']:5.2f} s  {med / base:5.2f}x Table.changes"
        )
        r["records"] = expected
    return res


def _same(a: list[Any], b: list[Any]) -> bool:
    """Equal answers, floating-point sums within a relative 1e-9 (summation order)."""
    ra, rb = [tuple(r) for r in a], [tuple(r) for r in b]
    if len(ra) != len(rb):
        return False
    for x, y in zip(ra, rb, strict=True):
        for u, v in zip(x, y, strict=True):
            if isinstance(u, float) or isinstance(v, float):
                if abs(u - v) > 1e-9 * max(1.0, abs(u), abs(v)):
                    return False
            elif u != v:
                return False
    return True


if __name__ == "__main__":
    main()
