"""The CDC streaming job: Kafka change events -> a cdc_sink table, one version per batch.

Run it with spark-submit (cdc_sink and its Python dependencies installed on the driver
and every executor, e.g. ``pip install cdc_sink`` in the image, or ``--py-files`` with a
wheel when the executors already have pyarrow, numpy and pyroaring)::

    spark-submit \\
      --master 'local[4]' \\
      --packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0 \\
      --conf spark.sql.session.timeZone=UTC \\
      --conf spark.sql.execution.arrow.pyspark.enabled=true \\
      streaming_jobs/cdc_to_tablets.py \\
      --bootstrap-servers kafka:9092 --topic orders \\
      --table-path /data/orders --schema-file streaming_jobs/orders_schema.json \\
      --checkpoint /data/checkpoints/orders --trigger '1 second' \\
      --dead-letter kafka://kafka:9092/orders.dead-letter

``--packages`` takes the spark-sql-kafka build of your Spark's version (Scala 2.13 for
Spark 4); Maven Central publishes none for pyspark 4.3.0 yet, and the 4.2.0 connector
works with it. Offline, give the jars cdc_sink caches instead of ``--packages``::

    --jars "$(python -c 'from cdc_sink.kafka.jars import spark_kafka_conf as c; \\
print(c()["spark.jars"])')"

Options (``--help`` lists them all): ``--format json|rowv2|debezium``; ``--trigger``
a processing-time interval (``"1 second"``) or ``available-now`` (process what is on
the topic, then exit); ``--apply-mode driver|executors``; ``--dead-letter``
``kafka://host:port/topic``, ``file:///dir`` or a path (Parquet); ``--schema-file``
creates the table when the path holds none; ``--app-id`` identifies the writer for
exactly-once commits (default: derived from the checkpoint, so a restart from the same
checkpoint never commits a batch twice); ``--starting-offsets`` for the first run;
``--kafka-option key=value`` for more Kafka source options (security, timeouts).

The job logs one line per micro-batch (version, events, rejects, time, freshness) and
stops gracefully on SIGTERM/SIGINT (the batch in flight finishes or is replayed).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any


def build_parser() -> argparse.ArgumentParser:
    """The job's arguments."""
    p = argparse.ArgumentParser(
        prog="cdc_to_tablets",
        description="Apply Kafka CDC events to a cdc_sink table with Spark Structured "
                    "Streaming (one table version per micro-batch, exactly once).")
    p.add_argument("--bootstrap-servers", required=True, help="Kafka bootstrap servers")
    p.add_argument("--topic", required=True,
                   help="topic to read (comma-separated for several)")
    p.add_argument("--table-path", required=True, help="the cdc_sink table directory")
    p.add_argument("--format", choices=("json", "rowv2", "debezium"), default="json",
                   help="encoding of the Kafka values (default json)")
    p.add_argument("--trigger", default="1 second",
                   help="processing-time interval such as '1 second', or 'available-now' "
                        "(default '1 second')")
    p.add_argument("--checkpoint", default=None,
                   help="streaming checkpoint directory (default <table-path>.checkpoint)")
    p.add_argument("--apply-mode", choices=("driver", "executors"), default="driver",
                   help="apply batches in the driver (default) or one task per bucket")
    p.add_argument("--dead-letter", default=None, metavar="URI",
                   help="kafka://host:port/topic, file:///dir or a path for rejected "
                        "records (default: counted only)")
    p.add_argument("--schema-file", default=None,
                   help="JSON table schema; creates the table when it does not exist")
    p.add_argument("--app-id", default=None,
                   help="writer id for exactly-once commits (default: from the checkpoint)")
    p.add_argument("--starting-offsets", default="earliest",
                   help="'earliest', 'latest' or Spark's per-partition JSON (first run only)")
    p.add_argument("--max-offsets-per-trigger", type=int, default=None,
                   help="cap on records per micro-batch")
    p.add_argument("--kafka-option", action="append", default=[], metavar="KEY=VALUE",
                   help="extra Kafka source option, e.g. kafka.security.protocol=SSL")
    p.add_argument("--query-name", default="cdc_to_tablets", help="streaming query name")
    return p


def parse_kafka_options(items: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` pairs as a dict.

    Raises:
        ValueError: An item has no ``=``.
    """
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--kafka-option {item!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out


def _logged(fn: Any) -> Any:
    """Wraps the sink function to print one line per micro-batch."""

    def run(df: Any, batch_id: int) -> None:
        fn(df, batch_id)
        st = fn.stats[-1] if getattr(fn, "stats", None) else None
        if st is None:
            return
        if st.skipped:
            print(f"batch {batch_id}: already committed, skipped", flush=True)
            return
        fresh = f", freshness {st.committed_ms - st.max_ts_ms} ms" if st.max_ts_ms else ""
        print(f"batch {batch_id}: version {st.version}, {st.events} events, {st.rejected} "
              f"rejected, {json.dumps(st.counts, sort_keys=True)}, {st.total_s:.2f}s{fresh}",
              flush=True)

    return run


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the job until it is stopped (or, with ``available-now``, until caught up)."""
    args = build_parser().parse_args(argv)
    from pyspark.sql import SparkSession

    import cdc_sink.spark
    from cdc_sink.kafka.deadletter import from_uri

    table_path = os.path.abspath(args.table_path)
    checkpoint = args.checkpoint or table_path.rstrip("/") + ".checkpoint"
    schema: dict[str, Any] | None = None
    if args.schema_file:
        with open(args.schema_file, encoding="utf-8") as f:
            schema = json.load(f)
    app_id = args.app_id or f"cdc_to_tablets:{os.path.abspath(checkpoint)}"
    dead_letter = from_uri(args.dead_letter) if args.dead_letter else None

    spark = SparkSession.builder.appName(args.query_name).getOrCreate()
    sink_fn = cdc_sink.spark.sink(table_path, schema=schema, format=args.format,
                                  app_id=app_id, apply_mode=args.apply_mode,
                                  dead_letter=dead_letter)
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", args.bootstrap_servers)
              .option("subscribe", args.topic)
              .option("startingOffsets", args.starting_offsets)
              .option("failOnDataLoss", "true"))
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    for key, value in parse_kafka_options(args.kafka_option).items():
        reader = reader.option(key, value)
    writer = (reader.load().writeStream.foreachBatch(_logged(sink_fn))
              .option("checkpointLocation", checkpoint).queryName(args.query_name))
    available_now = args.trigger.strip().lower() in ("available-now", "availablenow", "once")
    writer = (writer.trigger(availableNow=True) if available_now
              else writer.trigger(processingTime=args.trigger))
    query = writer.start()
    print(f"cdc_to_tablets: {args.topic} -> {table_path} (format {args.format}, "
          f"apply mode {args.apply_mode}, app id {app_id!r}, checkpoint {checkpoint})",
          flush=True)

    def stop(signum: int, _frame: Any) -> None:
        print(f"cdc_to_tablets: signal {signum}, stopping", flush=True)
        query.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    t0 = time.monotonic()
    try:
        query.awaitTermination()
    finally:
        if query.isActive:
            query.stop()
        close = getattr(dead_letter, "close", None)
        if close is not None:
            close()
    exc = query.exception()
    version = sink_fn.table.version
    print(f"cdc_to_tablets: stopped after {time.monotonic() - t0:.1f}s at table version "
          f"{version}", flush=True)
    if exc is not None:
        print(f"cdc_to_tablets: query failed: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
