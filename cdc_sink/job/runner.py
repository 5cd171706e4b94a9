"""Running the streaming job: the Spark session, the Kafka source, the sink, the metrics
endpoint, the maintenance schedule, and a graceful stop on SIGTERM/SIGINT (the module
docstring of :mod:`cdc_sink.job` tells what it does)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from types import FrameType
from typing import TYPE_CHECKING, Any

from cdc_sink.job.args import job_decoder_options, parse_args, parse_kafka_options
from cdc_sink.job.query_loop import run_until_stopped
from cdc_sink.job.schedule import Maintenance, maintenance_settings
from cdc_sink.kafka.properties import ClientProperties

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    from cdc_sink.metrics import SinkMetrics
    from cdc_sink.metrics.observer import BatchObserver
    from cdc_sink.spark import SinkFunction, SinkOptions

__all__ = ["apply_numpy_hugepages", "configure_logging", "failure_reason", "main"]

logger = logging.getLogger("cdc_to_tablets")


_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::\s*(.*))?$")


def failure_reason(exc: BaseException) -> str:
    """One line saying why a streaming query failed.

    An error raised in the sink comes back from the JVM wrapped in a
    ``StreamingQueryException`` whose message holds the Python traceback: the reason is
    its last ``Type: message`` line. Otherwise, the first line of the message without
    Spark's ``[STREAM_FAILED] Query [...] terminated with exception:`` preamble.
    """
    text = str(getattr(exc, "desc", None) or exc)
    lines = text.splitlines()
    last_tb = max(
        (i for i, ln in enumerate(lines) if "Traceback (most recent call last)" in ln), default=None
    )
    if last_tb is not None:  # the exception line: the first one not indented after it
        line = next((ln for ln in lines[last_tb + 1 :] if ln and not ln[0].isspace()), "")
        m = _EXC_LINE.match(line.strip())
        if m:
            name = m.group(1).rsplit(".", 1)[-1]
            return (f"{name}: {m.group(2)}" if m.group(2) else name)[:500]
        if line.strip():
            return line.strip()[:500]
    first = next((ln.strip() for ln in lines if ln.strip()), "")
    if not type(exc).__module__.startswith("pyspark"):
        return (f"{type(exc).__name__}: {first}" if first else type(exc).__name__)[:500]
    first = re.sub(r"^\[STREAM_FAILED\] Query \[[^\]]*\] terminated with exception: ", "", first)
    return (first or type(exc).__name__)[:500]


def apply_numpy_hugepages(mode: str) -> dict[str, str]:
    """Applies ``--numpy-hugepages`` to this process (the driver) and returns the Spark
    configuration that applies it to the executors' Python workers (whose numpy reads
    ``NUMPY_MADVISE_HUGEPAGE`` when it is imported); ``off`` also turns off the huge
    pages of pyarrow's mimalloc in the workers (``MIMALLOC_ALLOW_THP=0``, read when they
    load pyarrow; cdc_sink.hugepages); ``numpy`` changes nothing."""
    if mode == "numpy":
        return {}
    from cdc_sink.runtime.hugepages import HUGEPAGE_ENV, MIMALLOC_THP_ENV, set_numpy_hugepages

    set_numpy_hugepages(mode == "on")
    conf = {f"spark.executorEnv.{HUGEPAGE_ENV}": "1" if mode == "on" else "0"}
    if mode == "off":
        conf[f"spark.executorEnv.{MIMALLOC_THP_ENV}"] = "0"
    return conf


def configure_logging(level: str) -> None:
    """One handler on stderr for the job's and cdc_sink's loggers."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in ("cdc_to_tablets", "cdc_sink"):
        log = logging.getLogger(name)
        log.handlers[:] = [handler]
        log.setLevel(level)
        log.propagate = False


def _start_spark(
    args: argparse.Namespace, checkpoint: str, storage_options: dict[str, str]
) -> SparkSession:
    """The job's Spark session: spark-submit's, or one this process starts (with S3A for
    an ``s3a://`` checkpoint, on the table's store: cdc_sink.spark.s3a)."""
    from pyspark.sql import SparkSession

    from cdc_sink.runtime.arrow_pool import use_arrow_memory_pool
    from cdc_sink.spark.s3a import s3a_checkpoint_conf

    conf: dict[str, Any] = apply_numpy_hugepages(args.numpy_hugepages) | use_arrow_memory_pool(
        args.arrow_memory_pool
    )
    if args.remote:  # Spark Connect: no JVM here, the server's settings apply
        return SparkSession.builder.remote(args.remote).getOrCreate()
    builder = SparkSession.builder.appName(args.query_name).config(map=conf)
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not spark-submit: Spark starts here
        master = args.master or os.environ.get("SPARK_MASTER") or "local[*]"
        if master.startswith("local"):  # its Python workers run this environment's Python
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = builder.master(master)
        own = s3a_checkpoint_conf(in_process_conf(), checkpoint, storage_options)
        builder = builder.config(map=dict[str, Any](own))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(args.spark_log_level)
    return spark


def in_process_conf() -> dict[str, str]:
    """What a Spark session this process starts itself (``cdc-sink run``, not
    ``spark-submit``) needs: the Kafka source's jars (cached by cdc_sink), UTC session
    time, Arrow for pandas conversions."""
    from cdc_sink.kafka.jars import spark_kafka_conf

    return {
        **spark_kafka_conf(),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }


def _foreach_batch(
    sink_fn: SinkFunction, maintenance: Maintenance, observer: BatchObserver
) -> Callable[[DataFrame, int], None]:
    """The ``foreachBatch`` function: the sink, then the maintenance that is due (and the
    table gauges again after it)."""

    def run(df: DataFrame, batch_id: int) -> None:
        sink_fn(df, batch_id)
        last = sink_fn.stats[-1] if sink_fn.stats else None
        if maintenance.after_batch(
            last is not None and last.batch_id == batch_id and not last.skipped
        ):
            observer.refresh_table()

    return run


class RemoteBatches:
    """The ``foreachBatch`` function under Spark Connect (``--remote``): pickled to the
    server with the sink, it runs the sink and the maintenance that is due there. The
    maintenance is made on first use in the server's process (never pickled); the batch
    metrics stay there too (the client's gauges come from the table and Spark's progress).

    Args:
        sink_fn: The sink.
        compact_every: Compact after every N committed batches (0: never).
        gc_every: GC after every N committed batches (0: never).
        retain_versions: GC's retention by count.
        retain_seconds: GC's retention by age.
    """

    def __init__(
        self,
        sink_fn: SinkFunction,
        *,
        compact_every: int,
        gc_every: int,
        retain_versions: int | None,
        retain_seconds: float | None,
    ) -> None:
        self.sink_fn = sink_fn
        self.settings: dict[str, Any] = {
            "compact_every": compact_every,
            "gc_every": gc_every,
            "retain_versions": retain_versions,
            "retain_seconds": retain_seconds,
        }
        self._maintenance: Maintenance | None = None

    def __getstate__(self) -> dict[str, Any]:
        """The sink and the settings (the maintenance is made where the batches run)."""
        return {"sink_fn": self.sink_fn, "settings": self.settings, "_maintenance": None}

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """Commits the batch, then runs the maintenance that is due."""
        sink_fn = self.sink_fn
        sink_fn(df, batch_id)
        if self._maintenance is None:
            self._maintenance = Maintenance(
                sink_fn.table, None, gc_floor=sink_fn.gc_floor, **self.settings
            )
        last = sink_fn.stats[-1] if sink_fn.stats else None
        self._maintenance.after_batch(
            last is not None and last.batch_id == batch_id and not last.skipped
        )


def _batches(
    args: argparse.Namespace,
    sink_fn: SinkFunction,
    maintenance: Maintenance,
    observer: BatchObserver,
) -> Callable[[DataFrame, int], None]:
    """The ``foreachBatch`` function: with ``--remote``, a picklable one the Connect server
    runs (:class:`RemoteBatches`); else one of this process, with its metrics."""
    if not args.remote:
        return _foreach_batch(sink_fn, maintenance, observer)
    return RemoteBatches(sink_fn, **maintenance_settings(args))


class _StopRequest:
    """Set by SIGTERM/SIGINT; the main thread stops the query (never the handler: it runs
    inside whatever Py4J call the main thread is in, and Py4J is not reentrant)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signum: int | None = None

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        if self.event.is_set():  # a second signal: the next one kills
            signal.signal(signum, signal.SIG_DFL)
            return
        self.signum = signum
        self.event.set()

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self)
        signal.signal(signal.SIGINT, self)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the job until it is stopped (or, with ``available-now``, until caught up).

    Returns:
        0 after a stop or a finished ``available-now`` run; 1 when the query failed; 2 for
        bad arguments or a metrics endpoint that cannot start (port in use, TLS or auth
        files).
    """
    args = parse_args(argv)
    configure_logging(args.log_level)
    try:
        client_properties = ClientProperties.load(args.client_properties)
        kafka_options = {
            **client_properties.spark_options(),
            **parse_kafka_options(args.kafka_option),
        }
        table_path, checkpoint, app_id = _table_and_checkpoint(args)
        options = _sink_options(args, app_id, client_properties)
    except ValueError as exc:
        print(f"cdc_to_tablets: error: {exc}", file=sys.stderr, flush=True)
        return 2

    from prometheus_client import disable_created_metrics

    from cdc_sink.metrics import MetricsServerError, SinkMetrics, start_metrics_server
    from cdc_sink.metrics.server import load_basic_auth

    # no *_created series next to every counter and histogram
    disable_created_metrics()  # type: ignore[no-untyped-call]

    table_name = args.table_name or os.path.basename(table_path.rstrip("/"))
    metrics = SinkMetrics(table_name, app_id)
    server = None
    if args.metrics_port is not None:
        try:
            server = start_metrics_server(
                metrics.registry,
                host=args.metrics_host,
                port=args.metrics_port,
                tls_cert=args.metrics_tls_cert,
                tls_key=args.metrics_tls_key,
                auth=load_basic_auth(args.metrics_auth_file),
            )
        except (MetricsServerError, ValueError) as exc:
            print(f"cdc_to_tablets: error: {exc}", file=sys.stderr, flush=True)
            return 2
        logger.info("metrics on %s", server.url)
    if client_properties.kafka:  # refused credentials: a clear error now, not a hang
        from cdc_sink.kafka.connection import KafkaUnreachable, check_connection

        try:
            check_connection(args.bootstrap_servers, client_properties)
        except (KafkaUnreachable, ValueError) as exc:  # ValueError: settings librdkafka refuses
            print(f"cdc_to_tablets: error: {exc}", file=sys.stderr, flush=True)
            if server is not None:
                server.close()
            return 2
    stop = _StopRequest()
    stop.install()
    try:
        return _run(
            args,
            table_path=table_path,
            checkpoint=checkpoint,
            app_id=app_id,
            metrics=metrics,
            kafka_options=kafka_options,
            options=options,
            client_properties=client_properties,
            stop=stop,
        )
    except Exception as exc:
        print(f"cdc_to_tablets: failed: {failure_reason(exc)}", file=sys.stderr, flush=True)
        logger.debug("failure", exc_info=True)
        return 1
    finally:
        if server is not None:
            server.close()


def _table_and_checkpoint(args: argparse.Namespace) -> tuple[str, str, str]:
    """The table (a local path made absolute, or an object-store URL), the streaming
    checkpoint (default: beside a local table) and the app id (default: from the
    checkpoint).

    Raises:
        ValueError: An object-store table without ``--checkpoint`` (Spark keeps its
            checkpoint through Hadoop's file systems, not through the table's store), a
            URL of no store (cdc_sink's StoreConfigError, which is a CdcSinkError), or a
            checkpoint URL with user info (the error does not show it).
    """
    from cdc_sink.storage.objectstore import StoreConfigError
    from cdc_sink.storage.objectstore.urls import parse_store_url
    from cdc_sink.utils.redact import has_userinfo

    flag = "--table-path" if args.table_path is not None else "--table-root"
    try:
        where = parse_store_url(args.table_path if args.table_path is not None else args.table_root)
    except StoreConfigError as exc:
        raise ValueError(f"{flag}: {exc}") from None
    if where.kind == "local":
        table_path = os.path.abspath(where.prefix)
        checkpoint = args.checkpoint or table_path.rstrip("/") + ".checkpoint"
    elif not args.checkpoint:
        raise ValueError(
            f"{flag} {where.url} is on an object store: give --checkpoint (a "
            "directory or a URL Spark's file systems reach)"
        )
    else:
        table_path, checkpoint = where.url, args.checkpoint
    if has_userinfo(checkpoint):  # it would be the app id, in every log entry and line
        raise ValueError(
            "--checkpoint: a URL takes no user info (user:password@): credentials come "
            "from --storage-option or the environment"
        )
    ckpt_id = checkpoint if "://" in checkpoint else os.path.abspath(checkpoint)
    return table_path, checkpoint, args.app_id or f"cdc_to_tablets:{ckpt_id}"


def _sink_options(
    args: argparse.Namespace, app_id: str, client_properties: ClientProperties
) -> SinkOptions:
    """The sink's options: its flags (:func:`~cdc_sink.job.sink_flags.sink_options`), the app id
    (default: from the checkpoint), and the decoder options with the registry's settings
    of the client properties and ``--allow-truncate``.

    Raises:
        ValueError: A bad flag value (a ``KEY=VALUE`` item, a secret storage option, a
            value an option refuses).
    """
    from cdc_sink.job.sink_flags import sink_options

    options = sink_options(args)
    decode = replace(options.decode, options=job_decoder_options(args, client_properties))
    return replace(options, app_id=app_id, decode=decode)


def _sink(
    args: argparse.Namespace,
    table_path: str,
    options: SinkOptions,
    client_properties: ClientProperties,
) -> SinkFunction:
    """The sink the arguments describe (the table created from ``--schema-file`` if
    missing), with its dead-letter sink."""
    import cdc_sink.spark
    from cdc_sink.kafka.deadletter import from_uri

    schema: dict[str, Any] | None = None
    if args.schema_file:
        with open(args.schema_file, encoding="utf-8") as f:
            schema = json.load(f)
    dead_letter = (
        from_uri(args.dead_letter, client_properties=client_properties)
        if args.dead_letter
        else None
    )
    return cdc_sink.spark.sink(table_path, schema=schema, dead_letter=dead_letter, options=options)


def _kafka_stream(
    spark: SparkSession,
    args: argparse.Namespace,
    kafka_options: dict[str, str],
    checkpoint: str,
) -> DataStreamWriter:
    """The Kafka source's stream writer: options, checkpoint, query name, trigger."""
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap_servers)
        .option(*_subscription(args))
        .option("startingOffsets", args.starting_offsets)
        .option("failOnDataLoss", "true")
    )
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    for key, value in kafka_options.items():
        reader = reader.option(key, value)
    writer = (
        reader.load()
        .writeStream.option("checkpointLocation", checkpoint)
        .queryName(args.query_name)
    )
    available_now = args.trigger.strip().lower() in ("available-now", "availablenow", "once")
    writer = (
        writer.trigger(availableNow=True)
        if available_now
        else writer.trigger(processingTime=args.trigger)
    )
    return writer


def _subscription(args: argparse.Namespace) -> tuple[str, str]:
    """The Kafka source's subscription option: ``subscribe`` (``--topic``) or
    ``subscribePattern`` (``--subscribe-pattern``)."""
    if args.subscribe_pattern is not None:
        return "subscribePattern", args.subscribe_pattern
    return "subscribe", args.topic


def _run(
    args: argparse.Namespace,
    *,
    table_path: str,
    checkpoint: str,
    app_id: str,
    metrics: SinkMetrics,
    kafka_options: dict[str, str],
    options: SinkOptions,
    client_properties: ClientProperties,
    stop: _StopRequest,
) -> int:
    from cdc_sink.metrics import ProgressPoller
    from cdc_sink.metrics.observer import BatchObserver
    from cdc_sink.metrics.tables import TableMetrics

    spark = _start_spark(args, checkpoint, dict(options.storage_options))
    if args.table_root is not None:
        from cdc_sink.job.database_run import run_database

        writer = _kafka_stream(spark, args, kafka_options, checkpoint)
        try:
            return run_database(
                args, writer, metrics, options, client_properties, stop.event, lambda: stop.signum
            )
        finally:
            spark.stop()
    sink_fn = _sink(args, table_path, options, client_properties)
    tables = TableMetrics(metrics.registry, app_id=app_id)  # the one-table case of many
    observer = BatchObserver(
        sink_fn, metrics, log=logger, tables=tables, table_name=metrics.table
    ).attach()
    observer.refresh_table()  # the table gauges before the first batch
    maintenance = Maintenance(
        sink_fn.table, metrics, gc_floor=sink_fn.gc_floor, **maintenance_settings(args)
    )
    writer = _kafka_stream(spark, args, kafka_options, checkpoint).foreachBatch(
        _batches(args, sink_fn, maintenance, observer)
    )
    t0 = time.monotonic()
    query = writer.start()
    progress = ProgressPoller(query, metrics)  # polled: no Py4J callback per query event
    logger.info(
        "started: %s -> %s (format %s, apply mode %s, app id %r, checkpoint %s)",
        args.topic,
        table_path,
        args.format,
        args.apply_mode,
        app_id,
        checkpoint,
    )

    def tick() -> None:
        progress.poll()  # Kafka rates and offsets behind latest, from Spark's progress
        observer.refresh_if_due()  # the table gauges catch up after the last batch

    failure = run_until_stopped(query, stop.event, tick, lambda: stop.signum)
    progress.poll()  # the last trigger's figures
    try:
        sink_fn.close()  # forwards what is left, closes the dead-letter producers
    except Exception as exc:
        logger.warning("closing the dead-letter sink: %s: %s", type(exc).__name__, exc)
    version = sink_fn.table.version
    logger.info("stopped after %.1fs at table version %d", time.monotonic() - t0, version)
    spark.stop()
    if failure is not None:
        print(f"cdc_to_tablets: failed: {failure_reason(failure)}", file=sys.stderr, flush=True)
        return 1
    return 0
