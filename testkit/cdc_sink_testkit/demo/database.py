"""``cdc-sink demo --database``: a whole database in one job, on embedded defaults.

A local Kafka broker gets a Debezium-shaped stream of Debezium's tutorial ``inventory``
database (:mod:`cdc_sink_testkit.inventory`: customers, addresses, orders, products,
products_on_hand, geom, order lines with a composite key, decimals and timestamps, a
table without a primary key, a table that appears mid-stream, a column added mid-stream
and a widening, heartbeats and transaction metadata), one topic per table, as Debezium
JSON with schemas (``--format debezium``) or Avro through a schema registry of its own
(``--format debezium-avro``). One Spark query reads every topic (``subscribePattern``)
into :func:`cdc_sink.spark.database_sink`, which creates each table under
``<workdir>/tables`` from the schema its messages carry. The demo then checks every
table against the stream's reference and prints them.
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from rich.console import Console
from rich.table import Table as RichTable

from cdc_sink_testkit.inventory import InventoryStream, KafkaRecordProducer, inventory_stream

if TYPE_CHECKING:
    from cdc_sink.formats import FormatName

__all__ = ["run_database_demo", "start_database_query", "stream_pattern"]


def run_database_demo(args: Any, console: Console | None = None) -> int:
    """Runs the whole-database demo with the ``demo`` command's arguments (``events``,
    ``format``, ``apply_mode``, ``workdir``, ``seed``, ``registry_url``); the exit code
    (0: every table equals the reference)."""
    console = console or (Console() if sys.stdout.isatty() else Console(width=140))
    fmt = args.format if args.format in ("debezium", "debezium-avro") else "debezium"
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="cdc_sink-demo-db-")).resolve()
    root = workdir / "tables"
    if root.exists():
        raise ValueError(f"{workdir} holds a previous demo run (tables/): give an empty --workdir")
    console.print(f"[bold]cdc_sink demo --database[/]: format [cyan]{fmt}[/], workdir {workdir}")
    started: list[Any] = []
    t0 = time.perf_counter()
    try:
        bootstrap = _kafka(started)
        registry = _registry(fmt, args, started)
        stream = inventory_stream(
            "mysql",
            "avro" if fmt == "debezium-avro" else "json",
            seed=args.seed,
            events=max(200, args.events),
            registry=registry,
            topic_prefix="dbserver1",
        )
        _produce(stream, bootstrap, console)
        sink = _run_query(stream, bootstrap, root, workdir, fmt, args, registry, console)
        ok = _check(stream, root, console)
    finally:
        for thing in reversed(started):
            thing.stop()
    console.print(_how_to_query(root))
    verdict = "[bold green]OK[/]" if ok else "[bold red]FAILED[/]"
    console.print(
        f"{verdict}: {len(stream.tables)} tables, {len(sink.stats)} micro-batches, "
        f"{time.perf_counter() - t0:.1f}s"
    )
    return 0 if ok else 1


def stream_pattern(stream: InventoryStream) -> str:
    """The ``subscribePattern`` of every topic of ``stream`` (its tables', transaction
    metadata and heartbeats)."""
    p = re.escape(stream.topic_prefix)
    return rf"(__debezium-heartbeat\.{p}|{p}\..*)"


def start_database_query(
    spark: Any, bootstrap: str, pattern: str, sink: Any, checkpoint: Path, max_offsets: int
) -> Any:
    """The started query of every topic matching ``pattern`` from its earliest offset
    into ``sink`` (``foreachBatch``), at most ``max_offsets`` records per micro-batch."""
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribePattern", pattern)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", max_offsets)
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )


def _kafka(started: list[Any]) -> str:
    """A local Kafka broker's bootstrap servers."""
    from cdc_sink_testkit.kafka.broker import start_kafka

    kafka = start_kafka(num_partitions=1)
    started.append(kafka)
    return str(kafka.bootstrap_servers)


def _registry(fmt: str, args: Any, started: list[Any]) -> Any:
    """The schema registry of an Avro run (the given one, or one started for the run)."""
    if fmt != "debezium-avro":
        return None
    from cdc_sink_testkit.registry import start_registry

    url = getattr(args, "registry_url", None)
    if url:
        return _RemoteRegistry(url)
    registry = start_registry()
    started.append(registry)
    return registry


class _RemoteRegistry:
    """A registry given by URL: registers through Confluent's client."""

    def __init__(self, url: str) -> None:
        from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

        self.url = url
        self._client = SchemaRegistryClient({"url": url})
        self._schema = Schema

    def register(self, subject: str, schema: object) -> int:
        import json

        return int(self._client.register_schema(subject, self._schema(json.dumps(schema), "AVRO")))

    def stop(self) -> None:
        return None


def _produce(stream: InventoryStream, bootstrap: str, console: Console) -> None:
    """Creates the stream's topics and produces it."""
    from cdc_sink.kafka.admin import create_topic

    for topic in stream.topics():
        create_topic(bootstrap, topic, 1)
    n = stream.produce(KafkaRecordProducer(bootstrap))
    counts = stream.events_by_table()
    console.print(f"produced {n} messages to {len(stream.topics())} topics: {counts}")


def _run_query(
    stream: InventoryStream,
    bootstrap: str,
    root: Path,
    workdir: Path,
    fmt: str,
    args: Any,
    registry: Any,
    console: Console,
) -> Any:
    """Runs the whole-database query until it has read every message; the sink."""
    from cdc_sink.spark import DatabaseOptions, DecodeOptions, SinkOptions, database_sink
    from cdc_sink.spark.session import local_spark

    options = {"registry_url": registry.url} if registry is not None else {}
    sink = database_sink(
        DatabaseOptions(
            str(root), num_buckets=2, key_columns={stream.no_key_table: stream.no_key_columns}
        ),
        options=SinkOptions(
            format=cast("FormatName", fmt),
            apply_mode=args.apply_mode,
            app_id="cdc_sink-demo-database",
            decode=DecodeOptions(options=options),
        ),
    )
    spark = local_spark("cdc_sink-demo-database")
    try:
        query = start_database_query(
            spark, bootstrap, stream_pattern(stream), sink, workdir / "checkpoint", 150
        )
        try:
            query.processAllAvailable()
        finally:
            query.stop()
    finally:
        spark.stop()
    for st in sink.stats:
        console.print(
            f"batch {st.batch_id}: {st.events} records, tables {dict(sorted(st.tables.items()))}, "
            f"ignored {st.ignored}, {st.total_s:.2f}s"
        )
    return sink


def _check(stream: InventoryStream, root: Path, console: Console) -> bool:
    """Every table against the stream's reference; prints them."""
    from cdc_sink import open_table

    want = stream.reference()
    out = RichTable(title="tables under " + str(root))
    for c in ("table", "version", "rows", "columns", "check"):
        out.add_column(c)
    ok = True
    for name in sorted(stream.tables):
        t = open_table(str(root / name))
        keys = [(k, "ascending") for k in t.schema.primary_key]
        ref = want.get(name)
        got = t.read()
        same = ref is not None and (
            got.select(ref.column_names).sort_by(keys).to_pylist() == ref.sort_by(keys).to_pylist()
        )
        ok &= same
        out.add_row(
            name,
            str(t.version),
            str(got.num_rows),
            ", ".join(t.schema.names),
            "[green]equal[/]" if same else "[red]DIFFERS[/]",
        )
    console.print(out)
    return ok


def _how_to_query(root: Path) -> str:
    """How to read the tables afterwards."""
    return (
        "query them: cdc-sink stats " + str(root) + "\n"
        "  spark.read.format('cdc_sink').load('" + str(root / "inventory.customers") + "')"
    )
