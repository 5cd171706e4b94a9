"""The change stream's lag while a writer commits at a steady rate, and its throughput
catching up on a backlog.

Usage::

    .venv/bin/python benchmarks/change_stream.py [--rows 1000000] [--rate 20000]
        [--batch-seconds 0.5] [--seconds 60] [--warmup 10] [--runs 3] [--buckets 4]
        [--work /tmp/cdc_stream_bench]

Each run creates a table of ``--buckets`` buckets (default options) loaded with ``--rows``
rows (an id and 6 value columns: 3 int64, 2 float64, 1 string), then:

* **follow**: a writer process commits one version every ``--batch-seconds`` holding
  ``--rate x --batch-seconds`` events (90% upserts of two value columns of existing keys,
  5% inserts of new keys, 5% deletes, keys uniform) for ``--seconds``, while a streaming
  query in this process (local[2] Spark, ``readChangeFeed``, ``startingVersion=latest``,
  default trigger) reads every record: each micro-batch is aggregated per version (count,
  commit time) by Spark, which reads all of its records. The lag of a version is the time
  from its commit (its log entry's commit time) to the end of the micro-batch that read
  it; versions committed in the first ``--warmup`` seconds are left out.
* **catch-up**: a new query reads the versions the writer committed, from the first,
  with ``Trigger.AvailableNow`` (no read limit): records per second of wall time.

Prints one JSON line per run and one with the medians over the runs.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import time
from typing import Any

import numpy as np
import pyarrow as pa

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

SCHEMA = {
    "columns": [
        {"name": "id", "type": "int64", "nullable": False},
        {"name": "a", "type": "int64"},
        {"name": "b", "type": "int64"},
        {"name": "c", "type": "int64"},
        {"name": "x", "type": "float64"},
        {"name": "y", "type": "float64"},
        {"name": "s", "type": "string"},
    ],
    "primary_key": ["id"],
}


def load(path: str, rows: int, buckets: int) -> None:
    """A new table at ``path`` with ``rows`` rows (one bulk version)."""
    import cdc_sink

    t = cdc_sink.create_table(path, {**SCHEMA, "num_buckets": buckets})
    rng = np.random.default_rng(1)
    ids = np.arange(rows, dtype=np.int64)
    t.apply(
        pa.table(
            {
                "__op": pa.array(["insert"] * rows),
                "id": ids,
                "a": rng.integers(0, 1 << 40, rows),
                "b": rng.integers(0, 1000, rows),
                "c": ids * 3,
                "x": rng.random(rows),
                "y": rng.random(rows),
                "s": pa.array(np.char.add("row-", ids.astype(str)).astype(object)),
            }
        )
    )


def micro_batch(rng: np.random.Generator, n: int, rows: int, next_id: int) -> pa.Table:
    """``n`` events: 90% upserts of ``a`` and ``x``, 5% inserts, 5% deletes."""
    kind = rng.random(n)
    ids = rng.integers(0, rows, n)
    fresh = kind >= 0.95
    ids[fresh] = next_id + np.arange(int(fresh.sum()))
    op = np.where(fresh, "insert", np.where(kind >= 0.90, "delete", "upsert"))
    return pa.table(
        {
            "__op": pa.array(op.astype(object)),
            "id": ids,
            "a": rng.integers(0, 1 << 40, n),
            "x": rng.random(n),
            "__set__a": np.ones(n, dtype=bool),
            "__set__x": np.ones(n, dtype=bool),
        }
    )


def writer(path: str, rate: int, every: float, seconds: float, rows: int, ready: Any) -> None:
    """Commits ``rate * every`` events every ``every`` seconds for ``seconds``."""
    import cdc_sink

    t = cdc_sink.open_table(path)
    rng = np.random.default_rng(2)
    n, next_id = int(rate * every), rows
    ready.wait()
    start = time.monotonic()
    k = 0
    while time.monotonic() - start < seconds:
        batch = micro_batch(rng, n, rows, next_id)
        next_id += n
        t.apply(batch)
        k += 1
        pause = start + k * every - time.monotonic()
        if pause > 0:
            time.sleep(pause)  # the writer's pace, not a wait for the reader


def _stream(spark: Any, path: str, **options: Any) -> Any:
    reader = spark.readStream.format("cdc_sink").option("readChangeFeed", "true")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(path)


def follow(spark: Any, path: str, args: argparse.Namespace, work: str) -> dict[str, Any]:
    """The lag of each version while the writer commits (see the module docstring)."""
    import cdc_sink

    table = cdc_sink.open_table(path)
    first = table.version
    seen: list[tuple[int, int, float, float]] = []  # version, records, lag s, batch s

    def each(df: Any, batch_id: int) -> None:
        t0 = time.time()
        rows = df.groupBy("_commit_version").count().collect()
        done = time.time()
        for r in rows:
            v = int(r["_commit_version"])
            commit_s = table.log.read(v).commit_time_ms / 1000.0
            seen.append((v, int(r["count"]), done - commit_s, done - t0))

    q = (
        _stream(spark, path, startingVersion="latest")
        .writeStream.foreachBatch(each)
        .option("checkpointLocation", os.path.join(work, "ck-follow"))
        .start()
    )
    ready = mp.get_context("spawn").Event()
    proc = mp.get_context("spawn").Process(
        target=writer,
        args=(path, args.rate, args.batch_seconds, args.seconds, args.rows, ready),
    )
    proc.start()
    q.processAllAvailable()
    t_start = time.time()
    ready.set()
    proc.join()
    q.processAllAvailable()
    q.stop()
    last = table.version
    warm = [
        s for s in seen if table.log.read(s[0]).commit_time_ms / 1000.0 >= t_start + args.warmup
    ]
    lags = sorted(s[2] for s in warm)
    committed = sum(table.log.read(v).stats.get("events", 0) for v in range(first + 1, last + 1))
    return {
        "versions": last - first,
        "events_per_s": committed / args.seconds,
        "records_read": sum(s[1] for s in seen),
        "lag_median_s": statistics.median(lags),
        "lag_p95_s": lags[int(0.95 * (len(lags) - 1))],
        "lag_max_s": lags[-1],
        "first": first,
        "last": last,
    }


def catch_up(spark: Any, path: str, first: int, work: str) -> dict[str, Any]:
    """Records per second reading versions ``first + 1`` on with AvailableNow."""
    counts: list[int] = []

    def each(df: Any, batch_id: int) -> None:
        counts.append(df.count())

    t0 = time.time()
    q = (
        _stream(spark, path, startingVersion=first + 1)
        .writeStream.foreachBatch(each)
        .trigger(availableNow=True)
        .option("checkpointLocation", os.path.join(work, "ck-catchup"))
        .start()
    )
    q.awaitTermination()
    seconds = time.time() - t0
    return {
        "catchup_records": sum(counts),
        "catchup_s": seconds,
        "catchup_records_per_s": sum(counts) / seconds,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--rate", type=int, default=20_000, help="events per second")
    p.add_argument("--batch-seconds", type=float, default=0.5)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--warmup", type=float, default=10.0)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--buckets", type=int, default=4)
    p.add_argument("--work", default="/tmp/cdc_stream_bench")
    args = p.parse_args()

    import cdc_sink.spark
    from cdc_sink.spark.session import local_spark

    spark = local_spark("change-stream-bench", with_kafka=False)
    spark.sparkContext.setLogLevel("ERROR")
    cdc_sink.spark.register(spark)
    results = []
    for run in range(args.runs):
        work = os.path.join(args.work, f"run{run}")
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        path = os.path.join(work, "t")
        load(path, args.rows, args.buckets)
        res = follow(spark, path, args, work)
        res.update(catch_up(spark, path, res["first"], work))
        res["load_avg"] = os.getloadavg()[0]
        print(json.dumps({"run": run, **res}), flush=True)
        results.append(res)
        shutil.rmtree(work, ignore_errors=True)
    keys = [k for k, v in results[0].items() if isinstance(v, float)]
    print(json.dumps({"median": {k: statistics.median(r[k] for r in results) for k in keys}}))
    spark.stop()


if __name__ == "__main__":
    main()
