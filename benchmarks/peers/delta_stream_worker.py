"""Worker of ``benchmarks/delta_stream.py``: one Structured Streaming consumer of Kafka CDC
events in this process (local[2] Spark), driven by line commands on stdin.

Consumers (``--consumer``):

* ``cdc_sink``: ``cdc_sink.spark.sink(..., apply_mode="driver")`` as the ``foreachBatch``
  function (runs in the project's virtualenv);
* ``delta_merge``: a ``foreachBatch`` into Delta Lake (delta-spark, its own virtualenv):
  the Kafka values parsed by ``from_json`` into the event schema, the events of a key in
  the batch folded into one source row (see :func:`fold`), one ``MERGE`` on the key.

The query: ``startingOffsets`` earliest, ``maxOffsetsPerTrigger``, a 1 s processing-time
trigger. The backlog is drained (``processAllAvailable``) and reported; then commands on
stdin: ``live`` (the batches from now on are a live phase), ``end N T_MS`` (wait until
the phase's N events are visible, or a timeout; report freshness, the lag when the
producer stopped at T_MS and the catch-up time), ``digest`` (once everything produced so
far is applied, a full-content digest of the table's latest version, the query idle),
``stop``.

Reports are lines ``@@ {json}`` on stdout (anything else there is Spark's or Ivy's).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from kafka_source import earliest_stream  # this directory is sys.path[0] when run

#: producer timestamps kept per batch for the freshness percentiles (cdc_sink's rule:
#: evenly spaced, ``step = max(1, n // TS_SAMPLE)``)
TS_SAMPLE = 4_096
KAFKA_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13"


def emit(report: dict[str, Any]) -> None:
    """One report line for the orchestrator."""
    sys.stdout.write("@@ " + json.dumps(report) + "\n")
    sys.stdout.flush()


def now_ms() -> int:
    """Wall time, ms since the epoch."""
    return int(time.time() * 1000)


@dataclass
class Committed:
    """One committed micro-batch: its events, when it became visible, sampled ``ts_ms``."""

    batch_id: int
    events: int
    commit_ms: int
    ts: np.ndarray


def digest(table: pa.Table, names: list[str], key: str) -> dict[str, Any]:
    """sha256 of the rows sorted by ``key`` (Python values, ``repr`` per row): equal for
    equal content whatever the Arrow chunking or physical types."""
    t = table.select(names).sort_by(key)
    h = hashlib.sha256()
    for b in t.to_batches(max_chunksize=65_536):
        rows = zip(*(c.to_pylist() for c in b.columns), strict=True)
        h.update("".join(repr(r) + "\n" for r in rows).encode())
    return {"digest": h.hexdigest(), "rows": t.num_rows}


# -- consumers ---------------------------------------------------------------------------


class CdcSinkConsumer:
    """cdc_sink's sink, driver apply mode."""

    def __init__(self, spark: Any, table: str, app_id: str, schema: dict[str, Any]) -> None:
        from cdc_sink.schema import TableSchema
        from cdc_sink.spark import SinkOptions, sink

        self.path = table
        self.live = False
        self.fn = sink(
            table,
            schema=TableSchema.from_dict(schema),
            options=SinkOptions(app_id=app_id, apply_mode="driver"),
        )

    def __call__(self, df: Any, batch_id: int) -> None:
        self.fn(df, batch_id)

    def committed(self) -> list[Committed]:
        """The committed batches the sink remembers (its newest 256)."""
        return [
            Committed(
                s.batch_id,
                s.events,
                s.committed_ms,
                s.ts_sample if s.ts_sample is not None else np.empty(0, np.int64),
            )
            for s in list(self.fn.stats)
            if not s.skipped and s.version is not None
        ]

    def read(self) -> pa.Table:
        """The latest version of the table."""
        from cdc_sink.table import open_table

        return open_table(self.path).read()


_SPARK_TYPES = {
    "int64": "LongType",
    "int32": "IntegerType",
    "float64": "DoubleType",
    "string": "StringType",
    "bool": "BooleanType",
}


def spark_type(name: str) -> Any:
    """The Spark SQL type of a cdc_sink type name (the ones the e2e schema uses)."""
    from pyspark.sql import types as T

    if name not in _SPARK_TYPES:
        raise ValueError(f"no Spark type for {name!r} here")
    return getattr(T, _SPARK_TYPES[name])()


def fold(ev: Any, key: str) -> Any:
    """One source row per key from the batch's events (columns ``_op``, key, ``_seq``, the
    set columns), as applying them one by one in ``seq`` order would leave the row
    (docs/architecture.md §3): events before the key's last ``insert``/``delete`` are
    dropped; each set column takes its newest non-null value; ``_kind`` is ``delete``
    (the last event deletes), ``insert`` (the row is replaced: an insert, or a delete then
    upserts) or ``upsert`` (the set columns change). Not modelled (absent from the
    workload): an explicit null in ``set`` (from_json cannot tell it from absent),
    ``update``/``truncate`` ops, events older than the row's ``seq``.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    set_cols = [c for c in ev.columns if c not in ("_op", key, "_seq")]
    is_reset = F.col("_op").isin("insert", "delete")
    ev = ev.withColumn(
        "_reset", F.max(F.when(is_reset, F.col("_seq"))).over(Window.partitionBy(key))
    )
    ev = ev.where(F.col("_reset").isNull() | (F.col("_seq") >= F.col("_reset")))
    folded = ev.groupBy(key).agg(
        F.max_by("_op", "_seq").alias("_last_op"),
        F.max(is_reset.cast("int")).alias("_replaced"),
        F.max("_seq").alias("_seq"),
        *[F.max_by(c, F.when(F.col(c).isNotNull(), F.col("_seq"))).alias(c) for c in set_cols],
    )
    kind = (
        F.when(F.col("_last_op") == "delete", F.lit("delete"))
        .when(F.col("_replaced") == 1, F.lit("insert"))
        .otherwise(F.lit("upsert"))
    )
    return folded.select(key, kind.alias("_kind"), "_seq", *set_cols)


class DeltaMergeConsumer:
    """``foreachBatch`` into a Delta table: parse, fold per key, one MERGE."""

    def __init__(self, spark: Any, table: str, schema: dict[str, Any]) -> None:
        from delta.tables import DeltaTable
        from pyspark.sql import types as T

        self.spark = spark
        self.path = table
        self.live = False
        self.records: list[Committed] = []
        cols = schema["columns"]
        self.key = schema["primary_key"][0]
        self.seq = schema["sequence_column"]
        self.set_cols = [c["name"] for c in cols if c["name"] not in (self.key, self.seq)]
        self.defaults = {c["name"]: c.get("default") for c in cols}
        types = {c["name"]: spark_type(c["type"]) for c in cols}
        row = T.StructType(
            [T.StructField(c["name"], types[c["name"]], c.get("nullable", True)) for c in cols]
        )
        self.event_type = T.StructType(
            [
                T.StructField("op", T.StringType()),
                T.StructField("key", T.StructType([T.StructField(self.key, types[self.key])])),
                T.StructField("seq", T.LongType()),
                T.StructField(
                    "set", T.StructType([T.StructField(c, types[c]) for c in self.set_cols])
                ),
            ]
        )
        if not DeltaTable.isDeltaTable(spark, table):
            spark.createDataFrame([], row).write.format("delta").save(table)
        self.dt = DeltaTable.forPath(spark, table)

    def _source(self, df: Any) -> Any:
        from pyspark.sql import functions as F

        e = F.from_json(F.col("value").cast("string"), self.event_type).alias("e")
        ev = df.select(e).select(
            F.col("e.op").alias("_op"),
            F.col(f"e.key.{self.key}").alias(self.key),
            F.col("e.seq").alias("_seq"),
            *[F.col(f"e.set.{c}").alias(c) for c in self.set_cols],
        )
        return fold(ev, self.key)

    def __call__(self, df: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        def s(c: str) -> Any:
            return F.col(f"s.{c}")

        replace = {
            c: s(c) if self.defaults[c] is None else F.coalesce(s(c), F.lit(self.defaults[c]))
            for c in self.set_cols
        }
        replace[self.seq] = s("_seq")
        update = {c: F.coalesce(s(c), F.col(f"t.{c}")) for c in self.set_cols}
        update[self.seq] = s("_seq")
        (
            self.dt.alias("t")
            .merge(self._source(df).alias("s"), f"t.{self.key} = s.{self.key}")
            .whenMatchedDelete(condition="s._kind = 'delete'")
            .whenMatchedUpdate(condition="s._kind = 'upsert'", set=update)
            .whenMatchedUpdate(condition="s._kind = 'insert'", set=replace)
            .whenNotMatchedInsert(
                condition="s._kind <> 'delete'", values={self.key: s(self.key), **replace}
            )
            .execute()
        )
        committed = now_ms()
        ts = np.empty(0, np.int64)
        if self.live:  # after the commit: not part of the measured latency
            col = F.get_json_object(F.col("value").cast("string"), "$.ts_ms").cast("long")
            arr = df.select(col.alias("ts")).toArrow().column(0).combine_chunks().drop_null()
            ts = np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.int64)
        step = max(1, len(ts) // TS_SAMPLE)
        self.records.append(Committed(batch_id, len(ts), committed, ts[::step]))

    def committed(self) -> list[Committed]:
        """Every committed batch of this process."""
        return list(self.records)

    def read(self) -> pa.Table:
        """The latest version of the table."""
        return self.spark.read.format("delta").load(self.path).toArrow()


# -- sessions and queries ----------------------------------------------------------------


def session(consumer: str, driver_memory: str) -> Any:
    """local[2] Spark with the Kafka source (and Delta for ``delta_merge``)."""
    if consumer == "cdc_sink":
        from cdc_sink.spark.session import local_spark

        spark = local_spark(
            "delta_stream-cdc_sink",
            master="local[2]",
            extra_conf={"spark.driver.memory": driver_memory},
        )
    else:
        import pyspark
        from delta import configure_spark_with_delta_pip
        from spark_delta_worker import delta_builder

        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = delta_builder("delta_stream-delta_merge", driver_memory).config(
            "spark.driver.host", "127.0.0.1"
        )
        package = f"{KAFKA_PACKAGE}:{pyspark.__version__}"  # the running Spark's own
        spark = configure_spark_with_delta_pip(builder, extra_packages=[package]).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def make_consumer(name: str, spark: Any, work: str, app_id: str, schema: dict[str, Any]) -> Any:
    """The consumer ``name`` writing ``<work>/table``."""
    if name == "cdc_sink":
        return CdcSinkConsumer(spark, f"{work}/table", app_id, schema)
    if name == "delta_merge":
        return DeltaMergeConsumer(spark, f"{work}/table", schema)
    raise ValueError(f"unknown consumer {name!r}")


def start_query(
    spark: Any, fn: Any, args: argparse.Namespace, work: str, topics: str, trigger: dict[str, Any]
) -> Any:
    """The streaming query: Kafka ``topics`` from earliest into ``fn``."""
    df = earliest_stream(spark, args.bootstrap, topics, args.max_per_trigger)
    return (
        df.writeStream.foreachBatch(fn)
        .trigger(**trigger)
        .option("checkpointLocation", f"{work}/ckpt")
        .start()
    )


# -- the run -----------------------------------------------------------------------------


def phase_report(batches: list[Committed], produced: int, t_stop_ms: int) -> dict[str, Any]:
    """Freshness, lag and catch-up of one live phase's committed batches."""
    fresh = np.concatenate([b.commit_ms - b.ts for b in batches] or [np.empty(0, np.int64)])
    ts = np.concatenate([b.ts for b in batches] or [np.empty(0, np.int64)])
    cum = np.cumsum([b.events for b in batches])
    caught = [b.commit_ms for b, c in zip(batches, cum, strict=True) if c >= produced]
    visible = sum(b.events for b in batches if b.commit_ms <= t_stop_ms)

    def pct(x: np.ndarray, q: float) -> float | None:
        return float(np.percentile(x, q)) if len(x) else None

    mid = float(np.median(ts)) if len(ts) else 0.0
    return {
        "event": "phase",
        "visible": int(cum[-1]) if len(cum) else 0,
        "batches": len(batches),
        "samples": len(fresh),
        "p50_ms": pct(fresh, 50),
        "p99_ms": pct(fresh, 99),
        "max_ms": float(fresh.max()) if len(fresh) else None,
        "p50_first_half_ms": pct(fresh[ts < mid], 50),
        "p50_second_half_ms": pct(fresh[ts >= mid], 50),
        "lag_at_stop": produced - visible,
        "catch_up_s": (caught[0] - t_stop_ms) / 1000 if caught else None,
    }


def wait_phase(
    consumer: Any, query: Any, mark: int, produced: int, t_stop_ms: int, timeout: float
) -> dict[str, Any]:
    """Waits until ``produced`` events of the batches after ``mark`` are visible (at most
    ``timeout`` s after the producer stopped); their :func:`phase_report`."""
    deadline = t_stop_ms / 1000 + timeout
    while True:
        batches = [b for b in consumer.committed() if b.batch_id > mark]
        if sum(b.events for b in batches) >= produced or time.time() > deadline:
            return phase_report(batches, produced, t_stop_ms)
        if query.exception() is not None:
            raise RuntimeError(f"the query failed: {query.exception()}")
        time.sleep(0.05)


def run(args: argparse.Namespace, schema: dict[str, Any]) -> None:
    """Backlog drain, then live phases as the orchestrator commands."""
    spark = session(args.consumer, args.driver_memory)
    consumer = make_consumer(args.consumer, spark, args.dir, args.app_id, schema)
    names, key = [c["name"] for c in schema["columns"]], schema["primary_key"][0]
    t0 = now_ms()
    query = start_query(
        spark, consumer, args, args.dir, args.topics, {"processingTime": "1 second"}
    )
    try:
        query.processAllAvailable()
        done = consumer.committed()
        emit(
            {
                "event": "backlog",
                "t0_ms": t0,
                "last_commit_ms": max(b.commit_ms for b in done),
                "batches": len(done),
            }
        )
        mark = -1
        for line in sys.stdin:
            cmd = line.split()
            if cmd[0] == "live":
                mark = max((b.batch_id for b in consumer.committed()), default=-1)
                consumer.live = True
                emit({"event": "live_ready"})
            elif cmd[0] == "end":
                produced, t_stop = int(cmd[1]), int(cmd[2])
                emit(wait_phase(consumer, query, mark, produced, t_stop, args.catchup_timeout))
            elif cmd[0] == "digest":
                query.processAllAvailable()  # every event produced so far applied
                emit({"event": "digest", **digest(consumer.read(), names, key)})
            elif cmd[0] == "stop":
                break
    finally:
        query.stop()
        spark.stop()
    emit({"event": "stopped"})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--consumer", required=True, choices=["cdc_sink", "delta_merge"])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--schema", required=True, help="the table schema, TableSchema.to_dict JSON")
    ap.add_argument("--max-per-trigger", type=int, required=True)
    ap.add_argument("--driver-memory", default="4g")
    ap.add_argument("--dir", required=True, help="the table and checkpoint directory")
    ap.add_argument("--topics", required=True, help="comma-separated topics")
    ap.add_argument("--app-id", required=True, help="the sink's app id")
    ap.add_argument("--catchup-timeout", type=float, default=60.0)
    args = ap.parse_args()
    run(args, json.loads(args.schema))


if __name__ == "__main__":
    main()
