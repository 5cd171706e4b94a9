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

Options (``--help`` lists them all): ``--format json|rowv2|debezium`` and
``--decoder-option KEY=VALUE`` (repeatable; the value is parsed as JSON when it parses,
e.g. ``--decoder-option decimal_handling=string``); ``--allow-truncate`` applies native
JSON ``{"op": "truncate"}`` events (rejected by default); ``--trigger`` a processing-time
interval (``"1 second"``) or ``available-now`` (process what is on the topic, then exit);
``--apply-mode driver|executors``; ``--dead-letter`` ``kafka://host:port/topic``,
``file:///dir`` or a path (Parquet); ``--schema-file`` creates the table when the path
holds none; ``--app-id`` identifies the writer for exactly-once commits (default: derived
from the checkpoint, so a restart from the same checkpoint never commits a batch twice);
``--starting-offsets`` for the first run; ``--kafka-option key=value`` for more Kafka
source options (security, timeouts); ``--decode-processes N`` decodes in N worker
processes (driver mode); ``--decode-in executors`` decodes in the executors' Spark tasks
instead and sends the driver only the decoded events (driver mode, for a cluster whose
executors have the cores); ``--numpy-hugepages off|on|numpy`` whether numpy
asks for transparent huge pages in the driver and the executors' Python workers (default
off, see :mod:`cdc_sink.hugepages`); ``--arrow-memory-pool auto|jemalloc|mimalloc|system|
pyarrow`` pyarrow's allocator there (default auto: jemalloc when pyarrow has it, see
:mod:`cdc_sink.arrow_pool`).

Observability (docs/observability.md): ``--metrics-port P`` serves Prometheus metrics on
``http://127.0.0.1:P/metrics`` (``--metrics-host`` to bind elsewhere, ``0`` picks a free
port and logs it; a port in use is an error naming it; ``--metrics-tls-cert``/
``--metrics-tls-key`` serve HTTPS, ``--metrics-auth-file`` or ``$CDC_SINK_METRICS_AUTH``
require basic auth, docs/security.md), labelled with ``--table-name``
(default: the table directory's name) and the app id. The job logs one ``key=value`` line
per micro-batch (version, events, rejects, seconds per phase, freshness p50/p99) and one
per compaction (``--compact-every N`` batches) and GC run (``--gc-every N`` batches);
``--log-level`` sets the level.

SIGTERM/SIGINT stop the job gracefully: the batch in flight finishes (or is replayed at
the next start), the dead-letter producers are flushed and closed, the metrics endpoint
stops, and the job exits 0. A query that fails exits 1 with one line
``cdc_to_tablets: failed: <reason>`` on stderr.
"""

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
from types import FrameType
from typing import TYPE_CHECKING, Any, Literal

from cdc_sink.kafka.properties import ClientProperties

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from cdc_sink.metrics import SinkMetrics
    from cdc_sink.metrics.observer import BatchObserver
    from cdc_sink.spark import SinkFunction
    from cdc_sink.table import Table, TableOptions

logger = logging.getLogger("cdc_to_tablets")

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def build_parser() -> argparse.ArgumentParser:
    """The job's arguments."""
    from cdc_sink.formats import FORMATS

    p = argparse.ArgumentParser(
        prog="cdc_to_tablets",
        description="Apply Kafka CDC events to a cdc_sink table with Spark Structured "
        "Streaming (one table version per micro-batch, exactly once).",
    )
    p.add_argument("--bootstrap-servers", required=True, help="Kafka bootstrap servers")
    p.add_argument("--topic", required=True, help="topic to read (comma-separated for several)")
    p.add_argument("--table-path", required=True, help="the cdc_sink table directory")
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="json",
        help="encoding of the Kafka values (default json)",
    )
    p.add_argument(
        "--decoder-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="option of the format's decoder (repeatable; VALUE is parsed as "
        "JSON when it parses, else taken as a string)",
    )
    p.add_argument(
        "--allow-truncate",
        action="store_true",
        help='--format json: apply {"op": "truncate"} events, which delete every row '
        "of the table (decoder option allow_truncate; default: rejected, so that a producer "
        "cannot empty the table)",
    )
    p.add_argument(
        "--json-decoder",
        choices=("python", "jvm"),
        default="python",
        help="where native JSON is decoded (default python)",
    )
    p.add_argument(
        "--trigger",
        default="1 second",
        help="processing-time interval such as '1 second', or 'available-now' (default '1 second')",
    )
    p.add_argument(
        "--checkpoint",
        default=None,
        help="streaming checkpoint directory (default <table-path>.checkpoint)",
    )
    p.add_argument(
        "--decode-processes",
        type=int,
        default=0,
        metavar="N",
        help="driver mode: N worker processes decode the Kafka values (default 0: the "
        "driver's own thread)",
    )
    p.add_argument(
        "--numpy-hugepages",
        choices=("off", "on", "numpy"),
        default="off",
        help="whether numpy asks for transparent huge pages for its large arrays, in the "
        "driver and the executors' Python workers (default off: measured faster here, see "
        "cdc_sink.hugepages; off also sets MIMALLOC_ALLOW_THP=0 in the workers; numpy: "
        "leave numpy's own setting)",
    )
    p.add_argument(
        "--arrow-memory-pool",
        choices=("auto", "jemalloc", "mimalloc", "system", "pyarrow"),
        default="auto",
        help="pyarrow's allocator in the driver and the executors' Python workers (default "
        "auto: jemalloc when this pyarrow has it, measured faster here, see "
        "cdc_sink.arrow_pool; pyarrow: leave pyarrow's own choice)",
    )
    p.add_argument(
        "--apply-mode",
        choices=("driver", "executors"),
        default="driver",
        help="apply batches in the driver (default) or one task per bucket",
    )
    p.add_argument(
        "--decode-in",
        choices=("driver", "executors"),
        default=None,
        help="driver mode: decode in the driver (default) or in the executors' Spark tasks, "
        "which send the driver each bucket's decoded events (executors mode: always there)",
    )
    p.add_argument(
        "--dead-letter",
        default=None,
        metavar="URI",
        help="kafka://host:port/topic, file:///dir or a path for rejected "
        "records (default: kept in the table only)",
    )
    p.add_argument(
        "--schema-file",
        default=None,
        help="JSON table schema; creates the table when it does not exist",
    )
    p.add_argument(
        "--app-id",
        default=None,
        help="writer id for exactly-once commits (default: from the checkpoint)",
    )
    p.add_argument(
        "--starting-offsets",
        default="earliest",
        help="'earliest', 'latest' or Spark's per-partition JSON (first run only)",
    )
    p.add_argument(
        "--max-offsets-per-trigger", type=int, default=None, help="cap on records per micro-batch"
    )
    p.add_argument(
        "--kafka-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Kafka source option, e.g. kafka.security.protocol=SSL",
    )
    p.add_argument(
        "--client-properties",
        default=None,
        metavar="FILE",
        help="Kafka and schema-registry connection settings (a client.properties file: "
        "security.protocol, sasl.*, ssl.*, schema.registry.url, basic.auth.user.info...; "
        "secrets as ${env:NAME}, ${file:PATH:KEY} or ${dir:DIR:NAME}) for the Kafka "
        "source, the Kafka dead-letter sink and the debezium-avro decoder; default: the "
        "file $CDC_SINK_CLIENT_PROPERTIES names",
    )
    p.add_argument("--query-name", default="cdc_to_tablets", help="streaming query name")
    obs = p.add_argument_group("observability")
    obs.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics on this port (0: a free port, logged; default: no endpoint)",
    )
    obs.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        help="address the metrics endpoint binds (default 127.0.0.1)",
    )
    obs.add_argument(
        "--metrics-tls-cert",
        default=None,
        metavar="PEM",
        help="serve the metrics over HTTPS with this certificate (chain) file (with "
        "--metrics-tls-key)",
    )
    obs.add_argument(
        "--metrics-tls-key",
        default=None,
        metavar="PEM",
        help="the private key file of --metrics-tls-cert",
    )
    obs.add_argument(
        "--metrics-auth-file",
        default=None,
        metavar="PATH",
        help="require HTTP basic auth on the metrics: the file's first line is "
        "'username:password' (default: $CDC_SINK_METRICS_AUTH, same form, when set; the "
        "password is never taken from the command line)",
    )
    obs.add_argument(
        "--table-name",
        default=None,
        help="'table' label of the metrics (default: the table directory's name)",
    )
    obs.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default="INFO",
        help="log level of the job and of cdc_sink (default INFO)",
    )
    obs.add_argument(
        "--spark-log-level",
        type=str.upper,
        default="WARN",
        choices=("ALL", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF"),
        help="log level of Spark's JVM once the session is up (default WARN)",
    )
    mnt = p.add_argument_group("maintenance")
    mnt.add_argument(
        "--compact-every",
        type=int,
        default=0,
        metavar="N",
        help="compact the table (a snapshot of every bucket) every N committed "
        "batches (default 0: never; buckets are snapshotted on their own "
        "every snapshot_every versions)",
    )
    mnt.add_argument(
        "--gc-every",
        type=int,
        default=100,
        metavar="N",
        help="run GC every N committed batches (default 100; 0: never)",
    )
    mnt.add_argument(
        "--retain-versions",
        type=int,
        default=None,
        metavar="N",
        help="GC keeps at least the newest N versions (default: the table's retain_versions, 100)",
    )
    mnt.add_argument(
        "--retain-seconds",
        type=float,
        default=None,
        metavar="S",
        help="GC keeps every version committed in the last S seconds "
        "(default: the table's retain_seconds, 3600)",
    )
    for what, default, detail in (
        ("page", "zstd", "snapshot pages (none: faster cold reads, 2.2x the disk)"),
        ("wal", "lz4", "WAL segments"),
    ):
        mnt.add_argument(
            f"--{what}-compression",
            choices=["zstd", "lz4", "none"],
            default=default,
            help=f"codec of the {detail} written from now on (default {default}); files "
            "written with another codec stay readable",
        )
    return p


def table_options(args: argparse.Namespace) -> TableOptions:
    """The table options the job's arguments name (the codecs; the rest are defaults)."""
    from cdc_sink.table import TableOptions

    codec: dict[str, Literal["zstd", "lz4"] | None] = {"zstd": "zstd", "lz4": "lz4", "none": None}
    return TableOptions(
        page_compression=codec[args.page_compression],
        wal_compression=codec[args.wal_compression],
    )


def _pairs(items: Sequence[str], flag: str) -> list[tuple[str, str]]:
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{flag} {item!r}: expected KEY=VALUE")
        out.append((key.strip(), value))
    return out


def parse_kafka_options(items: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` pairs as a dict.

    Raises:
        ValueError: An item has no ``=``.
    """
    return dict(_pairs(items, "--kafka-option"))


def job_decoder_options(
    args: argparse.Namespace, client_properties: ClientProperties | None = None
) -> dict[str, Any]:
    """The decoder options of the job: the schema registry's settings of the client
    properties (``debezium-avro``), ``--decoder-option`` items (they win), and
    ``allow_truncate=True`` with ``--allow-truncate``.

    Raises:
        ValueError: A bad ``--decoder-option``, or ``--allow-truncate`` with a format
            other than ``json``.
    """
    options = parse_decoder_options(args.decoder_option)
    if client_properties is not None and args.format == "debezium-avro":
        options = {**client_properties.registry_options(), **options}
    if args.allow_truncate:
        if args.format != "json":
            raise ValueError(
                f"--allow-truncate applies to --format json (the {args.format} decoder: "
                "see its own options, e.g. debezium's --decoder-option truncate=reject)"
            )
        options["allow_truncate"] = True
    return options


def parse_decoder_options(items: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs as a dict; a VALUE that parses as JSON is taken as parsed
    (``true``, ``3``, ``["a"]``), any other as the string it is.

    Raises:
        ValueError: An item has no ``=``.
    """
    out: dict[str, Any] = {}
    for key, value in _pairs(items, "--decoder-option"):
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


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


class Maintenance:
    """Compaction and GC every N committed batches, timed, counted and logged; a failure
    is logged and counted, never raised (the stream goes on)."""

    def __init__(
        self,
        table: Table,
        metrics: SinkMetrics | None,
        *,
        compact_every: int,
        gc_every: int,
        retain_versions: int | None,
        retain_seconds: float | None,
        gc_floor: Callable[[], int | None] = lambda: None,
    ) -> None:
        self.table = table
        self.metrics = metrics
        self.gc_floor = gc_floor  # versions whose dead letters are not forwarded stay
        self.compact_every = compact_every
        self.gc_every = gc_every
        self.retain_versions = retain_versions
        self.retain_seconds = retain_seconds
        self.committed = 0

    def after_batch(self, committed: bool) -> bool:
        """Runs what is due after a micro-batch; returns whether anything ran."""
        if not committed:
            return False
        self.committed += 1
        ran = False
        if self.compact_every > 0 and self.committed % self.compact_every == 0:
            self.compact()
            ran = True
        if self.gc_every > 0 and self.committed % self.gc_every == 0:
            self.gc()
            ran = True
        return ran

    def compact(self) -> None:
        """Compacts the table (a maintenance version snapshotting every bucket)."""
        t0 = time.perf_counter()
        try:
            version = self.table.compact()
        except Exception as exc:
            logger.error(
                "compaction failed after %.3fs: %s: %s",
                time.perf_counter() - t0,
                type(exc).__name__,
                exc,
            )
            return
        seconds = time.perf_counter() - t0
        if self.metrics is not None:
            self.metrics.observe_compaction(seconds)
        logger.info("compaction version=%d duration_s=%.3f", version, seconds)

    def gc(self) -> None:
        """Deletes what no retained version needs (sizes read before deleting)."""
        t0 = time.perf_counter()
        try:
            floor = self.gc_floor()
            if floor is not None and floor < self.table.version - 1:
                logger.warning(
                    "gc keeps versions from %d on: their dead letters are not forwarded yet", floor
                )
            planned = self._gc(dry_run=True, keep_from=floor)
            sizes = {}
            for path in planned:
                try:
                    sizes[path] = os.stat(path).st_size
                except OSError:
                    continue
            removed = self._gc(dry_run=False, keep_from=floor)
            from cdc_sink.stats import forget_disk_usage

            forget_disk_usage(self.table.root)  # the table gauges must not show deleted files
        except Exception as exc:
            seconds = time.perf_counter() - t0
            if self.metrics is not None:
                self.metrics.observe_gc(seconds, ok=False)
            logger.error("gc failed after %.3fs: %s: %s", seconds, type(exc).__name__, exc)
            return
        seconds = time.perf_counter() - t0
        nbytes = sum(sizes.get(p, 0) for p in removed)
        if self.metrics is not None:
            self.metrics.observe_gc(
                seconds, ok=True, removed_files=len(removed), removed_bytes=nbytes
            )
        logger.info(
            "gc removed_files=%d removed_bytes=%d oldest_version=%d duration_s=%.3f",
            len(removed),
            nbytes,
            self.table.oldest_version,
            seconds,
        )

    def _gc(self, *, dry_run: bool, keep_from: int | None) -> list[str]:
        return self.table.gc(
            dry_run=dry_run,
            keep_from=keep_from,
            retain_versions=self.retain_versions,
            retain_seconds=self.retain_seconds,
        )


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
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level)
    try:
        client_properties = ClientProperties.load(args.client_properties)
        kafka_options = {
            **client_properties.spark_options(),
            **parse_kafka_options(args.kafka_option),
        }
        decoder_options = job_decoder_options(args, client_properties)
    except ValueError as exc:
        print(f"cdc_to_tablets: error: {exc}", file=sys.stderr, flush=True)
        return 2

    from prometheus_client import disable_created_metrics

    from cdc_sink.metrics import MetricsServerError, SinkMetrics, start_metrics_server
    from cdc_sink.metrics.server import load_basic_auth

    # no *_created series next to every counter and histogram
    disable_created_metrics()  # type: ignore[no-untyped-call]

    table_path = os.path.abspath(args.table_path)
    checkpoint = args.checkpoint or table_path.rstrip("/") + ".checkpoint"
    app_id = args.app_id or f"cdc_to_tablets:{os.path.abspath(checkpoint)}"
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
        except KafkaUnreachable as exc:
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
            decoder_options=decoder_options,
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


def _run(
    args: argparse.Namespace,
    *,
    table_path: str,
    checkpoint: str,
    app_id: str,
    metrics: SinkMetrics,
    kafka_options: dict[str, str],
    decoder_options: dict[str, Any],
    client_properties: ClientProperties,
    stop: _StopRequest,
) -> int:
    from pyspark.errors import StreamingQueryException
    from pyspark.sql import SparkSession

    import cdc_sink.spark
    from cdc_sink.kafka.deadletter import from_uri
    from cdc_sink.metrics import ProgressPoller
    from cdc_sink.metrics.observer import BatchObserver
    from cdc_sink.runtime.arrow_pool import use_arrow_memory_pool

    schema: dict[str, Any] | None = None
    if args.schema_file:
        with open(args.schema_file, encoding="utf-8") as f:
            schema = json.load(f)
    dead_letter = (
        from_uri(args.dead_letter, client_properties=client_properties)
        if args.dead_letter
        else None
    )

    conf = apply_numpy_hugepages(args.numpy_hugepages) | use_arrow_memory_pool(
        args.arrow_memory_pool
    )
    spark = SparkSession.builder.appName(args.query_name).config(map=conf).getOrCreate()
    spark.sparkContext.setLogLevel(args.spark_log_level)
    sink_fn = cdc_sink.spark.sink(
        table_path,
        schema=schema,
        format=args.format,
        app_id=app_id,
        apply_mode=args.apply_mode,
        dead_letter=dead_letter,
        json_decoder=args.json_decoder,
        decoder_options=decoder_options,
        decode_processes=args.decode_processes,
        decode_in=args.decode_in,
        table_options=table_options(args),
    )
    observer = BatchObserver(sink_fn, metrics, log=logger).attach()
    observer.refresh_table()  # the table gauges before the first batch
    maintenance = Maintenance(
        sink_fn.table,
        metrics,
        compact_every=args.compact_every,
        gc_every=args.gc_every,
        retain_versions=args.retain_versions,
        retain_seconds=args.retain_seconds,
        gc_floor=sink_fn.gc_floor,
    )
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap_servers)
        .option("subscribe", args.topic)
        .option("startingOffsets", args.starting_offsets)
        .option("failOnDataLoss", "true")
    )
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    for key, value in kafka_options.items():
        reader = reader.option(key, value)
    writer = (
        reader.load()
        .writeStream.foreachBatch(_foreach_batch(sink_fn, maintenance, observer))
        .option("checkpointLocation", checkpoint)
        .queryName(args.query_name)
    )
    available_now = args.trigger.strip().lower() in ("available-now", "availablenow", "once")
    writer = (
        writer.trigger(availableNow=True)
        if available_now
        else writer.trigger(processingTime=args.trigger)
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
    failure: BaseException | None = None
    try:
        while not stop.event.is_set():
            if query.awaitTermination(0.5):  # type: ignore[arg-type]  # seconds, a float
                break
            progress.poll()  # Kafka rates and offsets behind latest, from Spark's progress
            observer.refresh_if_due()  # the table gauges catch up after the last batch
    except StreamingQueryException as exc:
        failure = exc
    if stop.event.is_set() and query.isActive:
        logger.info("signal %s: stopping (the batch in flight finishes)", stop.signum)
        try:
            query.stop()  # from the main thread, outside any other Py4J call
        except Exception as exc:  # the batch in flight failed meanwhile
            failure = exc
    if failure is None:
        failure = query.exception()
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


if __name__ == "__main__":
    sys.exit(main())
