"""The streaming job writing a whole database (``cdc-sink run --table-root``).

The job subscribes to the database's topics (``--subscribe-pattern`` or ``--topic``) and
hands each micro-batch to a :class:`~cdc_sink.spark.database.DatabaseSink`, which routes
it to one table per source table under the root, created and evolved from the schemas
the messages carry. After each batch every table that committed runs the maintenance
that is due for it (compaction, GC: the ``--compact-every`` and ``--gc-every`` counts are
per table), and one log line sums the batch up. The per-table metrics
(:class:`~cdc_sink.metrics.tables.TableMetrics`) are served beside the job's own.
"""

from __future__ import annotations

import argparse
import logging
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from cdc_sink.job.args import database_options
from cdc_sink.job.query_loop import run_until_stopped
from cdc_sink.job.schedule import Maintenance, maintenance_settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    from cdc_sink.kafka.properties import ClientProperties
    from cdc_sink.metrics import SinkMetrics
    from cdc_sink.spark.database import DatabaseSink, RouterStats
    from cdc_sink.spark.options import SinkOptions

__all__ = ["DatabaseBatches", "format_router_batch", "run_database"]

logger = logging.getLogger("cdc_to_tablets")


def format_router_batch(st: RouterStats) -> str:
    """The ``key=value`` log line of one routed micro-batch."""
    results: dict[str, int] = {}
    for result in st.tables.values():
        results[result] = results.get(result, 0) + 1
    parts = [
        f"batch_id={st.batch_id}",
        f"events={st.events}",
        f"tables={len(st.tables)}",
        *(f"{k}={results[k]}" for k in sorted(results)),
        f"unrouted={st.unrouted}",
        *(f"ignored_{k}={st.ignored[k]}" for k in sorted(st.ignored)),
        f"total_s={st.total_s:.3f}",
    ]
    return "database batch " + " ".join(parts)


class DatabaseBatches:
    """The job's ``foreachBatch`` function for a whole database: the router, then each
    committed table's due maintenance. It pickles (Spark Connect runs it in the server):
    the router's configuration and the settings; the maintenance of each table is made
    where the batches run.

    Args:
        sink: The router.
        settings: The maintenance's settings (:func:`~cdc_sink.job.schedule.
            maintenance_settings`), each table's counted on its own.
    """

    def __init__(self, sink: DatabaseSink, settings: Mapping[str, Any]) -> None:
        self.sink = sink
        self.settings = dict(settings)
        self._maintenance: dict[str, Maintenance] = {}

    def __getstate__(self) -> dict[str, Any]:
        """The router and the settings (the maintenance is made where batches run)."""
        return {"sink": self.sink, "settings": self.settings, "_maintenance": {}}

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """Routes and commits the batch, then runs each committed table's maintenance."""
        self.sink(df, batch_id)
        st = self.sink.stats[-1]
        logger.info("%s", format_router_batch(st))
        for name, result in st.tables.items():
            writer = self.sink.writers.get(name)
            if writer is None or result != "committed":
                continue
            m = self._maintenance.get(name)
            if m is None or m.table is not writer.table:  # released and opened again
                m = Maintenance(writer.table, None, gc_floor=writer.gc_floor, **self.settings)
                self._maintenance[name] = m
            m.after_batch(True)


def run_database(
    args: argparse.Namespace,
    stream: DataStreamWriter,
    metrics: SinkMetrics,
    options: SinkOptions,
    client_properties: ClientProperties,
    stop: threading.Event,
    signum: Callable[[], int | None],
) -> int:
    """Runs the whole-database job until it is stopped; its exit code (0: stopped or
    caught up; 1: the query failed).

    Raises:
        ValueError: A bad database flag (the caller prints it).
    """
    from cdc_sink.job.runner import failure_reason
    from cdc_sink.kafka.deadletter import from_uri
    from cdc_sink.metrics.tables import TableMetrics
    from cdc_sink.spark.database import DatabaseSink

    dead_letter = (
        from_uri(args.dead_letter, client_properties=client_properties)
        if args.dead_letter
        else None
    )
    sink = DatabaseSink(database_options(args), options=options, dead_letter=dead_letter)
    if not args.remote:
        sink.events = TableMetrics(metrics.registry, app_id=sink.app_id)
    batches = DatabaseBatches(sink, maintenance_settings(args))
    query = stream.foreachBatch(batches).start()
    logger.info(
        "started: %s -> tables under %s (format %s, app id %r)",
        args.subscribe_pattern or args.topic,
        args.table_root,
        options.format,
        sink.app_id,
    )
    failure = run_until_stopped(query, stop, lambda: None, signum)
    try:
        sink.close()
    except Exception as exc:
        logger.warning("closing the tables: %s: %s", type(exc).__name__, exc)
    if failure is not None:
        import sys

        print(f"cdc_to_tablets: failed: {failure_reason(failure)}", file=sys.stderr, flush=True)
        return 1
    return 0
