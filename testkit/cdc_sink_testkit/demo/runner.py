"""``cdc-sink demo``: the whole pipeline on one machine, checked against a reference.

::

    orders generator ──CdcProducer──► Kafka "orders" (4 partitions, local KRaft broker)
                                          │ spark.readStream.format("kafka")
                                          ▼
           foreachBatch(cdc_sink.spark.sink(...)) ──► table <workdir>/orders
                    │ rejects                            │
                    ▼                                    ▼
         Kafka "orders.dead-letter"       spark.read.format("cdc_sink")
                                           .option("versionAsOf", v)   ──► checked

Spark is a local one, or a Spark Connect server with ``remote`` (``--remote sc://...``:
the server runs the streaming query and every micro-batch, see
:mod:`cdc_sink_testkit.demo.query`).

Two phases: produce half the stream and process it (``processAllAvailable``), note the
version; produce the rest and process it. Then both versions are read back through
Spark (and Python), compared with :class:`~cdc_sink_testkit.demo.expected.ExpectedTable`, and
the dead-letter topic is checked to hold exactly the malformed records. Every check
prints one ``check ...: OK`` (or ``FAILED``) line; any failure makes the exit code 1.
Kafka, the streaming query and Spark are stopped at the end, whatever happens.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table as RichTable

from cdc_sink.kafka.producer import FormatName
from cdc_sink_testkit.demo.expected import ExpectedTable, diff_rows
from cdc_sink_testkit.demo.orders import OrderRecord, generate_orders, orders_schema
from cdc_sink_testkit.demo.query import DemoQuery, start_query

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["DemoOptions", "run_demo", "run_from_args"]

ApplyMode = Literal["driver", "executors"]


@dataclass
class DemoOptions:
    """What ``cdc-sink demo`` does.

    Attributes:
        events: Records in the stream (valid, stale and malformed).
        format: Wire format on Kafka.
        apply_mode: Where the sink applies batches.
        workdir: Directory for the table, checkpoint (a new temporary one by default;
            it is kept so the table can be queried afterwards).
        seed: Seed of the orders stream.
        partitions: Partitions of the orders topic.
        trigger: Processing-time trigger of the streaming query.
        backend: Kafka client of the producer.
        metrics_port: Serve the job's Prometheus metrics on this port while the demo
            runs (0: a free port; ``None``: none).
        metrics_host: Address the metrics endpoint binds.
        decoder_options: Options of the format's decoder.
        registry_url: The schema registry's Confluent API for ``debezium-avro``; ``None``
            starts the test kit's registry (Apicurio) for the demo's run.
        remote: A Spark Connect server (``sc://host:port``) that runs the streaming
            query and the snapshot queries; ``None``: a local Spark.
    """

    events: int = 20_000
    format: FormatName = "json"
    apply_mode: ApplyMode = "driver"
    workdir: str | None = None
    seed: int = 7
    partitions: int = 4
    trigger: str = "500 milliseconds"
    backend: Literal["auto", "confluent", "kafka-python"] = "auto"
    metrics_port: int | None = 0
    metrics_host: str = "127.0.0.1"
    decoder_options: dict[str, Any] = field(default_factory=dict)
    registry_url: str | None = None
    remote: str | None = None


@dataclass
class _Report:
    console: Console
    failures: list[str] = field(default_factory=list)
    timings: list[tuple[str, float]] = field(default_factory=list)

    def check(self, what: str, problems: Sequence[str]) -> None:
        if problems:
            self.failures.append(what)
            self.console.print(
                f"check {what}: FAILED",
                style="bold red",
                soft_wrap=True,
                markup=False,
                highlight=False,
            )
            for p in problems:
                self.console.print(f"    {p}", style="red", soft_wrap=True, markup=False)
        else:
            self.console.print(
                f"check {what}: OK", style="green", soft_wrap=True, markup=False, highlight=False
            )

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        self.console.rule(f"[bold]{name}")
        t0 = time.perf_counter()
        try:
            yield
        finally:
            dt = time.perf_counter() - t0
            self.timings.append((name, dt))
            self.console.print(f"[dim]{name}: {dt:.1f}s[/]")


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        console=console,
    )


def _workdir(opts: DemoOptions) -> Path:
    if opts.workdir is None:
        return Path(tempfile.mkdtemp(prefix="cdc_sink-demo-"))
    wd = Path(opts.workdir).expanduser().resolve()
    wd.mkdir(parents=True, exist_ok=True)
    if (wd / "orders").exists() or (wd / "checkpoint").exists():
        raise ValueError(
            f"{wd} holds a previous demo run (orders/, checkpoint/): give an empty --workdir"
        )
    return wd


def run_from_args(args: Any) -> int:
    """``cdc-sink demo``: the demo with the options the CLI parsed (its ``demo``
    arguments, ``decoder_options`` already parsed into a dict); the exit status. With
    ``--database``, the whole-database demo (:mod:`cdc_sink_testkit.demo.database`)."""
    if getattr(args, "database", False):
        from cdc_sink_testkit.demo.database import run_database_demo

        return run_database_demo(args)
    opts = DemoOptions(
        events=args.events,
        format=args.format,
        apply_mode=args.apply_mode,
        workdir=args.workdir,
        seed=args.seed,
        partitions=args.partitions,
        trigger=args.trigger,
        backend=args.backend,
        metrics_port=None if args.metrics_port < 0 else args.metrics_port,
        metrics_host=args.metrics_host,
        decoder_options=args.decoder_options,
        registry_url=getattr(args, "registry_url", None),
        remote=getattr(args, "remote", None),
    )
    return run_demo(opts)


def run_demo(opts: DemoOptions, console: Console | None = None) -> int:
    """Runs the demo; returns the process exit code (0: every check passed).

    Raises:
        ValueError: Bad options (e.g. a non-empty ``workdir``).
    """
    if console is None:  # not a terminal (CI, pipes): wide enough for the tables
        console = Console() if sys.stdout.isatty() else Console(width=140)
    if opts.events < 2:
        raise ValueError("--events must be at least 2")
    rep = _Report(console)
    t_start = time.perf_counter()
    workdir = _workdir(opts)
    full_rows = opts.format in ("debezium", "debezium-avro")
    style: Literal["partial", "full_rows"] = "full_rows" if full_rows else "partial"
    records = generate_orders(opts.events, seed=opts.seed, style=style)
    console.print(
        f"[bold]cdc_sink demo[/]: {len(records)} order events "
        f"({sum(r.malformed for r in records)} malformed, "
        f"{sum(r.kind == 'stale' for r in records)} stale re-sends), "
        f"format [cyan]{opts.format}[/], apply mode [cyan]{opts.apply_mode}[/]"
    )
    console.print(f"workdir: {workdir}")
    if opts.remote is not None:
        console.print(f"spark: the Spark Connect server at {opts.remote}")
    run = _Running()
    try:
        _run_pipeline(opts, rep, run, workdir, records)
    finally:
        with rep.step("Shutdown"):
            run.stop(console)
    return _summary(rep, time.perf_counter() - t_start)


@dataclass
class _Running:
    """What the demo started and stops at the end, whatever happens."""

    kafka: Any = None
    streaming: DemoQuery | None = None
    metrics_server: Any = None
    registry: Any = None

    def stop(self, console: Console) -> None:
        """Stops the query, Spark, Kafka and the metrics endpoint (those started)."""
        if self.streaming is not None:
            try:
                self.streaming.query.stop()
            except Exception as exc:  # already stopped, or the JVM or server is gone
                console.print(f"[dim]stopping the query: {exc}[/]")
            self.streaming.stop()
        if self.kafka is not None:
            self.kafka.stop()
        if self.registry is not None:
            self.registry.stop()
        if self.metrics_server is not None:
            self.metrics_server.close()


def _run_pipeline(
    opts: DemoOptions, rep: _Report, run: _Running, workdir: Path, records: Sequence[OrderRecord]
) -> None:
    """Kafka, the streaming query, the two phases and the checks (see the module
    docstring); what it starts goes into ``run``."""
    from cdc_sink.kafka.deadletter import KafkaDeadLetter
    from cdc_sink.kafka.producer import CdcProducer

    table_path = str(workdir / "orders")
    schema = orders_schema()
    metrics = _start_metrics(opts, rep.console, run)
    bootstrap, topic, dlq_topic = _start_kafka(opts, rep, run)
    registry = _start_registry(opts, rep, run)
    if registry is not None:
        opts = dataclasses.replace(
            opts, decoder_options={"registry_url": registry, **opts.decoder_options}
        )
    producer = CdcProducer(
        bootstrap,
        topic,
        schema,
        format=opts.format,
        backend=opts.backend,
        encoder_options=None if registry is None else {"registry_url": registry},
    )
    dead_letter = KafkaDeadLetter(bootstrap, dlq_topic)
    with rep.step("Spark" if opts.remote is None else "Spark Connect"):
        streaming = run.streaming = start_query(
            opts, bootstrap, topic, table_path, workdir, dead_letter, metrics
        )
    half = len(records) // 2
    versions, snapshots = _process_phases(
        rep, producer, streaming, table_path, [records[:half], records[half:]]
    )
    producer.close()
    streaming.query.stop()
    _check_query(streaming.query, rep)
    if opts.remote is None:
        _print_batches(streaming.sink_fn, rep.console)
    else:
        rep.console.print("[dim]micro-batch statistics: in the Connect server's worker[/]")

    from cdc_sink.spark import register

    register(streaming.spark)
    for v, snap in zip(versions, snapshots, strict=True):
        with rep.step(f"Snapshot query at version {v}"):
            _snapshot_query(streaming.spark, table_path, v, snap, schema, rep)
    with rep.step("Dead letters"):
        _check_dead_letters(dead_letter, records, rep)
        dead_letter.close()
    _print_how_to_query(rep.console, table_path, versions, opts.remote)


def _start_metrics(opts: DemoOptions, console: Console, run: _Running) -> Any:
    """The job's metrics, served on ``opts.metrics_port`` unless it is None."""
    from cdc_sink.metrics import SinkMetrics, start_metrics_server

    metrics = SinkMetrics("orders", "cdc_sink-demo")
    if opts.metrics_port is not None:
        run.metrics_server = start_metrics_server(
            metrics.registry, host=opts.metrics_host, port=opts.metrics_port
        )
        console.print(
            f"metrics: [cyan]{run.metrics_server.url}[/] (Prometheus text format, "
            "while the demo runs; dashboards/ has the Grafana dashboards)",
            soft_wrap=True,
        )
    return metrics


def _start_kafka(opts: DemoOptions, rep: _Report, run: _Running) -> tuple[str, str, str]:
    """Starts (or finds) Kafka and creates the topics; returns the bootstrap servers, the
    orders topic and the dead-letter topic."""
    from cdc_sink_testkit.kafka.broker import ExternalKafka, start_kafka

    with rep.step("Kafka"):
        kafka = run.kafka = start_kafka(num_partitions=opts.partitions)
        bootstrap = kafka.bootstrap_servers
        # A shared external cluster may hold an "orders" topic already.
        suffix = f"-{uuid.uuid4().hex[:8]}" if isinstance(kafka, ExternalKafka) else ""
        topic, dlq_topic = f"orders{suffix}", f"orders{suffix}.dead-letter"
        kafka.create_topic(topic, opts.partitions)
        kafka.create_topic(dlq_topic, 1)
        rep.console.print(
            f"broker {bootstrap} ({type(kafka).__name__}); topics "
            f"{topic!r} ({opts.partitions} partitions), {dlq_topic!r}"
        )
    return bootstrap, topic, dlq_topic


def _start_registry(opts: DemoOptions, rep: _Report, run: _Running) -> str | None:
    """The schema registry's URL when the format needs one (``debezium-avro``): the given
    one, or the test kit's registry started for this run."""
    if opts.format != "debezium-avro":
        return None
    if opts.registry_url is not None:
        return opts.registry_url
    from cdc_sink_testkit.registry import start_registry

    with rep.step("Schema registry"):
        run.registry = start_registry()
        rep.console.print(f"registry {run.registry.url} (Apicurio, Confluent's API)")
    url: str = run.registry.url
    return url


def _process_phases(
    rep: _Report,
    producer: Any,
    streaming: DemoQuery,
    table_path: str,
    phases: Sequence[Sequence[OrderRecord]],
) -> tuple[list[int], list[dict[Any, Any]]]:
    """Produces and processes each phase; returns the table version after each (read
    from the table: under Connect the sink ran in the server) and the expected state."""
    import cdc_sink

    expected = ExpectedTable(orders_schema())
    versions: list[int] = []
    snapshots: list[dict[Any, Any]] = []
    for i, phase in enumerate(phases, 1):
        with rep.step(f"Phase {i}: produce {len(phase)} events, process"):
            _produce(producer, phase, rep.console, f"produce phase {i}")
            expected.apply_all(r.event if r.decodable else None for r in phase)
            t0 = time.perf_counter()
            streaming.query.processAllAvailable()
            streaming.poll_progress()
            v = cdc_sink.open_table(table_path).version
            versions.append(v)
            snapshots.append(expected.snapshot())
            rep.console.print(
                f"processed in {time.perf_counter() - t0:.1f}s -> table "
                f"version [bold]{v}[/] ({len(expected)} live orders expected)"
            )
    return versions, snapshots


def _summary(rep: _Report, total: float) -> int:
    """Prints the timings and the verdict; returns the exit code."""
    console = rep.console
    console.print(
        "timings: " + ", ".join(f"{n} {s:.1f}s" for n, s in rep.timings) + f"; total {total:.1f}s",
        soft_wrap=True,
    )
    if rep.failures:
        console.print(
            f"[bold red]{len(rep.failures)} check(s) failed:[/] " + "; ".join(rep.failures),
            soft_wrap=True,
        )
        return 1
    console.print(f"[bold green]demo passed[/] in {total:.1f}s")
    return 0


def _produce(producer: Any, records: Sequence[OrderRecord], console: Console, label: str) -> None:
    from cdc_sink_testkit.demo.stream import produce_records

    with _progress(console) as progress:
        task = progress.add_task(label, total=len(records))
        produce_records(producer, records, on_progress=lambda n: progress.advance(task, n))
        left = producer.flush(60)
        if left:
            raise RuntimeError(f"{left} events were not delivered within 60s")


def _check_query(query: Any, rep: _Report) -> None:
    exc = query.exception()
    rep.check("streaming query ended without error", [] if exc is None else [str(exc)])


def _print_batches(sink_fn: Any, console: Console) -> None:
    stats = [s for s in getattr(sink_fn, "stats", []) if not s.skipped]
    if not stats:
        return
    t = RichTable(title="micro-batches", show_lines=False)
    for col in (
        "batch",
        "version",
        "events",
        "rejected",
        "inserted",
        "updated",
        "deleted",
        "stale",
        "apply s",
        "total s",
        "freshness ms",
    ):
        t.add_column(col, justify="right")
    for s in stats:
        fresh = (s.committed_ms - s.max_ts_ms) if s.max_ts_ms else None
        t.add_row(
            str(s.batch_id),
            str(s.version),
            str(s.events),
            str(s.rejected),
            *(str(s.counts.get(k, 0)) for k in ("inserted", "updated", "deleted", "stale")),
            f"{s.apply_s:.2f}",
            f"{s.total_s:.2f}",
            "-" if fresh is None else str(fresh),
        )
    console.print(t)


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, dt.datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(v, bytes):
        return repr(v)
    return str(v)


def _rich_rows(title: str, rows: list[dict[str, Any]], columns: Sequence[str]) -> RichTable:
    t = RichTable(title=title)
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*(_cell(r.get(c)) for c in columns))
    return t


def _snapshot_query(
    spark: SparkSession,
    path: str,
    version: int,
    expected: dict[Any, Any],
    schema: Any,
    rep: _Report,
) -> None:
    from pyspark.sql import functions as F

    import cdc_sink

    df: DataFrame = spark.read.format("cdc_sink").option("versionAsOf", version).load(path)
    arrow = df.toArrow()
    rep.console.print(f"version {version}: {arrow.num_rows} orders")
    sample = df.orderBy("order_id").limit(5).toArrow().to_pylist()
    rep.console.print(
        _rich_rows(
            f"first orders at version {version}",
            sample,
            [n for n in schema.names if n != "created_at"],
        )
    )
    agg = (
        df.groupBy("status")
        .agg(
            F.count("*").alias("orders"),
            F.sum("amount").alias("amount"),
            F.sum("items").alias("items"),
        )
        .orderBy(F.desc("orders"))
        .toArrow()
        .to_pylist()
    )
    rep.console.print(
        _rich_rows(
            f"orders by status at version {version}", agg, ["status", "orders", "amount", "items"]
        )
    )
    rep.check(
        f"spark snapshot at version {version} == expected state ({len(expected)} rows)",
        diff_rows(expected, arrow.to_pylist(), schema),
    )
    py = cdc_sink.open_table(path).read(version=version)
    rep.check(
        f"python read at version {version} == expected state ({len(expected)} rows)",
        diff_rows(expected, py.to_pylist(), schema),
    )


def _check_dead_letters(dead_letter: Any, records: Sequence[OrderRecord], rep: _Report) -> None:
    dl = dead_letter.read()
    want = [r for r in records if r.malformed]
    rep.console.print(
        f"dead letters on {dead_letter.topic!r}: {dl.num_rows} "
        f"(expected {len(want)}: "
        + ", ".join(f"{k} {sum(r.kind == k for r in want)}" for k in sorted({r.kind for r in want}))
        + ")"
    )
    rows = dl.to_pylist()
    examples = []
    seen_reasons: set[str] = set()
    for r in rows:
        kind = (r["reason"] or "")[:24]
        if kind not in seen_reasons:
            seen_reasons.add(kind)
            examples.append({**r, "value": (r["value"] or b"")[:60]})
        if len(examples) >= 4:
            break
    rep.console.print(
        _rich_rows("dead-letter examples", examples, ["partition", "offset", "reason", "value"])
    )
    problems = (
        [] if dl.num_rows == len(want) else [f"{dl.num_rows} dead letters, expected {len(want)}"]
    )
    rep.check(f"dead letters == malformed records ({len(want)})", problems)


def _print_how_to_query(
    console: Console, path: str, versions: Sequence[int], remote: str | None
) -> None:
    v1, v2 = versions[0], versions[-1]
    session = (
        "    from cdc_sink.spark.session import local_spark\n    spark = local_spark()\n"
        if remote is None
        else "    from pyspark.sql import SparkSession\n"
        f"    spark = SparkSession.builder.remote({remote!r}).getOrCreate()\n"
    )
    console.rule("[bold]Query the table yourself")
    console.print(
        "From pyspark (the table stays in the workdir):\n\n"
        "    import cdc_sink.spark\n"
        f"{session}"
        "    cdc_sink.spark.register(spark)\n"
        f'    df = spark.read.format("cdc_sink").option("versionAsOf", {v1}).load({path!r})\n'
        '    df.groupBy("status").count().show()\n\n'
        "From Python (Arrow):\n\n"
        "    import cdc_sink\n"
        f"    cdc_sink.open_table({path!r}).read(version={v2}).to_pandas()\n\n"
        "From the shell:\n\n"
        f"    cdc-sink versions {path}\n"
        f"    cdc-sink query {path} --version {v1}\n",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
