"""The demo's Spark and its streaming query: a local Spark, or a Spark Connect server.

By default the demo starts a local Spark (:func:`cdc_sink.spark.session.local_spark`)
and runs the query in this process, which then sees every micro-batch: the sink's
statistics and the batch metrics are fed here. With ``remote`` (``cdc-sink demo --remote
sc://host:port``) this process is a Spark Connect client: the server runs the streaming
query, and each micro-batch runs in the server's ``foreachBatch`` Python worker, to which
the client pickles the sink (and its Kafka dead-letter sink); the snapshot queries are
Connect queries too. The server must reach the demo's directory and Kafka by the same
names (a server on this machine does), have Spark's Kafka source on its class path and
cdc_sink importable by its Python. The batch statistics then stay in the server's worker:
this process's metrics come from the query's progress (:meth:`DemoQuery.poll_progress`)
and the versions from the table.

Creating a Connect session marks the whole process as a Connect client (pyspark sets
``SPARK_CONNECT_MODE_ENABLED``, after which its classic sessions refuse to work);
:meth:`DemoQuery.stop` takes the mark back when the demo set it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdc_sink_testkit.demo.orders import orders_schema

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdc_sink_testkit.demo.runner import DemoOptions

__all__ = ["CONNECT_MARK", "DemoQuery", "start_query"]

CONNECT_MARK = "SPARK_CONNECT_MODE_ENABLED"
"""The variable through which pyspark marks a process as a Spark Connect client."""

QUERY_NAME = "cdc_sink_demo"


@dataclass
class DemoQuery:
    """The demo's Spark session, its streaming query and the sink.

    Attributes:
        spark: The session (classic, or a Connect client's).
        query: The streaming query.
        sink_fn: The sink (under Connect, this process's copy: the batches run in the
            server's copy).
        remote: The Connect server's URL, or ``None`` for a local Spark.
        progress: Under Connect, what copies the query's progress into the metrics.
    """

    spark: SparkSession
    query: Any
    sink_fn: Any
    remote: str | None = None
    progress: Any = None
    _took_mark: bool = field(default=False, repr=False)

    def poll_progress(self) -> None:
        """Under Connect, copies the query's last progress into the metrics (a local
        query's progress reaches them through a listener)."""
        if self.progress is not None:
            self.progress.poll()

    def stop(self) -> None:
        """Stops the session (not the query: the caller stops it first) and, when this
        demo marked the process as a Connect client, takes the mark back."""
        try:
            self.spark.stop()
        finally:
            if self._took_mark:
                os.environ.pop(CONNECT_MARK, None)


def _session(remote: str | None) -> tuple[SparkSession, bool]:
    """A local Spark, or a Connect client session to ``remote``; whether the process was
    marked as a Connect client by it."""
    if remote is None:
        from cdc_sink.spark.session import local_spark

        spark = local_spark("cdc_sink-demo")
        spark.sparkContext.setLogLevel("ERROR")
        return spark, False
    from pyspark.sql import SparkSession

    marked = CONNECT_MARK in os.environ
    return SparkSession.builder.remote(remote).getOrCreate(), not marked


def start_query(
    opts: DemoOptions,
    bootstrap: str,
    topic: str,
    table_path: str,
    workdir: Path,
    dead_letter: Any,
    metrics: Any,
) -> DemoQuery:
    """Starts Spark (``opts.remote``: a Connect client) and the streaming query from
    ``topic`` into the sink of ``table_path``, its metrics fed into ``metrics``.

    Raises:
        Exception: Whatever Spark raised; the session is stopped first.
    """
    from cdc_sink.metrics import ProgressPoller, attach_progress_listener
    from cdc_sink.metrics.observer import BatchObserver
    from cdc_sink.spark import DecodeOptions, SinkOptions, sink

    spark, took_mark = _session(opts.remote)
    demo = DemoQuery(spark, None, None, remote=opts.remote, _took_mark=took_mark)
    try:
        demo.sink_fn = sink(
            table_path,
            schema=orders_schema(),
            dead_letter=dead_letter,
            options=SinkOptions(
                format=opts.format,
                app_id="cdc_sink-demo",
                apply_mode=opts.apply_mode,
                decode=DecodeOptions(options=opts.decoder_options),
            ),
        )
        BatchObserver(demo.sink_fn, metrics).attach()  # under Connect: the table's store only
        if opts.remote is None:
            attach_progress_listener(spark, metrics, query_name=QUERY_NAME)
        source = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
        )
        demo.query = (
            source.writeStream.foreachBatch(demo.sink_fn)
            .option("checkpointLocation", str(workdir / "checkpoint"))
            .trigger(processingTime=opts.trigger)
            .queryName(QUERY_NAME)
            .start()
        )
        if opts.remote is not None:
            demo.progress = ProgressPoller(demo.query, metrics)
    except BaseException:
        demo.stop()
        raise
    return demo
