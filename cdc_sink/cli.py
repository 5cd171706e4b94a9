"""The ``cdc-sink`` command line.

::

    cdc-sink demo [--events N] [--format json|rowv2|debezium|debezium-avro]
                  [--apply-mode driver|executors] [--workdir DIR] [--seed S]
                  [--remote sc://HOST:PORT]
    cdc-sink run --bootstrap-servers K --topic T --table-path P [job flags...]
    cdc-sink query PATH [--version V | --timestamp T] [--columns a,b] [--limit N]
    cdc-sink versions PATH
    cdc-sink stats PATH [--json]            (PATH: a table, or a root holding tables)
    cdc-sink jars [--spark-version V]
    cdc-sink --log-level DEBUG ...

``demo`` runs the whole pipeline locally (Kafka broker, producer, Spark Structured
Streaming job, snapshot queries) and checks the result (exit code 1 on a mismatch); it
serves the job's Prometheus metrics while it runs (``--metrics-port``, a free port by
default) and prints where. With ``--remote sc://HOST:PORT`` a Spark Connect server runs
the streaming query and the snapshot queries instead of a local Spark. The demo lives in
the test kit (``cdc_sink_testkit.demo``, installed from a clone with ``pip install -e
testkit``); without it ``demo`` says so and exits with code 1. ``run`` runs the
streaming job (:mod:`cdc_sink.job`; ``cdc-sink run --help`` lists its flags). ``query``,
``versions`` and ``stats`` read a table with plain Python (no Spark); ``stats`` shows
rows, memory, outstanding deltas and bytes on disk (:meth:`cdc_sink.table.Table.stats`),
``--json`` for machines. Given a root holding tables (a directory or an object-store
prefix whose children, or children's children, are tables) instead of a table, ``stats``
lists each: name, version, live rows, last commit time and schema id.

``jars`` prints the paths of Spark's Kafka source jars for a Spark version, for
``spark-submit --jars`` (resolved from Maven Central once, then cached;
:mod:`cdc_sink.kafka.jars`), and cdc_sink's JVM connector (``format("cdc_sink")``, the
SQL catalog) when it is installed and built for that Spark.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``cdc-sink``."""

    parser = argparse.ArgumentParser(
        prog="cdc-sink",
        description="A realtime-updatable columnar table fed by Kafka CDC through Spark.",
    )
    parser.add_argument(
        "--log-level",
        type=str.upper,
        default="WARNING",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="level of cdc_sink's log on stderr (default WARNING)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _add_demo(sub)
    sub.add_parser(
        "run",
        help="run the streaming job (Kafka -> table; `cdc-sink run --help` for its flags)",
        add_help=False,
    )

    query = sub.add_parser("query", help="print a table version (Python read)")
    query.add_argument("path", help="table directory")
    at = query.add_mutually_exclusive_group()
    at.add_argument("--version", type=int, default=None, help="version (default latest)")
    at.add_argument(
        "--timestamp",
        default=None,
        help="newest version committed at or before this time (ISO 8601, or epoch milliseconds)",
    )
    query.add_argument("--columns", default=None, help="comma-separated columns")
    query.add_argument("--limit", type=int, default=20, help="rows to print (default 20)")

    versions = sub.add_parser("versions", help="list the retained versions of a table")
    versions.add_argument("path", help="table directory")

    stats = sub.add_parser(
        "stats",
        help="table statistics: rows, memory, deltas, disk",
        description="Loads every bucket of the table's latest version and "
        "shows its live rows, in-memory bytes, outstanding delta versions "
        "and the bytes of its WAL, snapshots and log on disk. Given a root holding "
        "tables (ROOT/NAME or ROOT/NAME/NAME), lists every table under it: version, "
        "live rows, last commit time, schema id.",
    )
    stats.add_argument("path", help="table directory or URL, or a root holding tables")
    stats.add_argument("--json", action="store_true", help="print JSON (with every bucket)")
    _add_jars(sub)
    return parser


def _add_demo(sub: Any) -> None:
    """The ``demo`` command's arguments (``--format``, ``--apply-mode`` and
    ``--decoder-option`` are the sink's: :mod:`cdc_sink.job.sink_flags`)."""
    from cdc_sink.errors import MissingExtra

    demo = sub.add_parser(
        "demo",
        help="run the end-to-end demo (local Kafka + Spark)",
        description="Produce an orders CDC stream to a local Kafka, apply "
        "it with a Spark Structured Streaming job, query two versions "
        "and check them against the expected state. Needs the test kit "
        "(from a clone: pip install -e testkit).",
    )
    demo.add_argument(
        "--events", type=int, default=20_000, help="events to produce (default 20000)"
    )
    try:
        from cdc_sink.job.sink_flags import add_sink_flags
    except MissingExtra as exc:  # no pyspark: the demo cannot run, and says so when run
        demo.set_defaults(missing_extra=exc)
    else:
        add_sink_flags(demo, ["format", "apply_mode", "decode.options"])
    demo.add_argument(
        "--workdir",
        default=None,
        help="directory for the table and the "
        "checkpoint (default: a new temporary directory, kept)",
    )
    demo.add_argument(
        "--database",
        action="store_true",
        help="the whole-database demo: Debezium's inventory database (nine tables, one "
        "topic each, a table and a column appearing mid-stream, a widening) into one "
        "table per source table, by one job (--format debezium or debezium-avro)",
    )
    demo.add_argument("--seed", type=int, default=7, help="seed of the orders stream")
    demo.add_argument("--partitions", type=int, default=4, help="partitions of the topic")
    demo.add_argument(
        "--trigger",
        default="500 milliseconds",
        help="processing-time trigger (default '500 milliseconds')",
    )
    demo.add_argument(
        "--backend",
        choices=("auto", "confluent", "kafka-python"),
        default="auto",
        help="Kafka client of the producer",
    )
    demo.add_argument(
        "--metrics-port",
        type=int,
        default=0,
        help="serve the job's Prometheus metrics on this port while the demo "
        "runs (default 0: a free port; -1: none)",
    )
    demo.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        help="address the metrics endpoint binds (default 127.0.0.1)",
    )
    demo.add_argument(
        "--registry-url",
        default=None,
        help="schema registry (Confluent API) for --format debezium-avro (default: start "
        "the test kit's Apicurio registry for the run)",
    )
    demo.add_argument(
        "--remote",
        default=None,
        metavar="sc://HOST:PORT",
        help="run the streaming query and the snapshot queries through this Spark Connect "
        "server instead of a local Spark (it must reach the workdir and Kafka, have "
        "Spark's Kafka source and cdc_sink installed)",
    )


def _add_jars(sub: Any) -> None:
    """The ``jars`` command's arguments."""
    jars = sub.add_parser(
        "jars",
        help="print the paths of Spark's Kafka source jars and cdc_sink's JVM connector, "
        "for spark-submit --jars",
        description="Resolves Spark's Kafka source (spark-sql-kafka-0-10_2.13 and the "
        "dependencies Spark does not ship) for a Spark version from Maven Central into "
        "cdc_sink's cache ($CDC_SINK_CACHE, else ~/.cache/cdc_sink; Maven is needed the "
        "first time only) and prints their paths, comma-separated, as spark-submit's "
        '--jars takes them, followed by cdc_sink\'s JVM connector (format("cdc_sink"), '
        "the io.cdcsink.spark.CdcSinkCatalog SQL catalog) when it is installed and built "
        "for that Spark version.",
    )
    jars.add_argument(
        "--spark-version",
        default=None,
        metavar="VERSION",
        help="the cluster's Spark version, as `spark-submit --version` prints it "
        "(default: the installed pyspark's)",
    )


def parse_timestamp(text: str) -> Any:
    """``--timestamp``: epoch milliseconds (digits) or an ISO 8601 time (UTC if naive).

    Raises:
        ValueError: Neither.
    """
    s = text.strip()
    if s.lstrip("-").isdigit():
        return int(s)
    from cdc_sink.schema import parse_timestamp as parse_iso

    return parse_iso(s)


def _console() -> Any:
    """A rich console; wide when output is not a terminal (pipes, CI logs)."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=160)


#: What ``cdc-sink demo`` prints when the test kit is not installed.
_DEMO_NEEDS_TESTKIT = (
    "the demo is part of cdc_sink's test kit (package cdc_sink_testkit), which is not "
    "installed. From a clone of the repository: pip install -e testkit "
    "(or make install, which also installs every extra)"
)


#: The entry-point group through which an installed distribution adds a command to
#: ``cdc-sink`` (the test kit adds ``demo``): the product names no such package.
COMMANDS_GROUP = "cdc_sink.commands"


def _cmd_demo(args: argparse.Namespace) -> int:
    from importlib.metadata import entry_points

    if getattr(args, "missing_extra", None) is not None:
        raise args.missing_extra

    found = list(entry_points(group=COMMANDS_GROUP, name="demo"))
    try:
        run = found[0].load() if found else None
    except ModuleNotFoundError as exc:  # metadata left behind by an uninstalled kit
        if exc.name is None or exc.name.partition(".")[0] != found[0].module.partition(".")[0]:
            raise  # the kit is there; something it imports is not
        run = None
    if run is None:
        print(f"cdc-sink demo: {_DEMO_NEEDS_TESTKIT}", file=sys.stderr)
        return 1
    from cdc_sink.job.args import parse_decoder_options

    args.decoder_options = parse_decoder_options(args.decoder_option)
    return int(run(args))


def _cmd_query(args: argparse.Namespace) -> int:
    from rich.table import Table as RichTable

    import cdc_sink

    console = _console()
    table = cdc_sink.open_table(args.path)
    ts = parse_timestamp(args.timestamp) if args.timestamp is not None else None
    version = table.resolve_version(args.version, ts)
    columns = [c.strip() for c in args.columns.split(",")] if args.columns else None
    data = table.read(version=version, columns=columns)
    console.print(
        f"{args.path} at version {version}: {data.num_rows} rows",
        soft_wrap=True,
        markup=False,
        highlight=False,
    )
    out = RichTable()
    for name in data.column_names:
        out.add_column(name, overflow="fold")
    for row in data.slice(0, max(args.limit, 0)).to_pylist():
        out.add_row(*("" if v is None else str(v) for v in row.values()))
    console.print(out)
    if data.num_rows > args.limit:
        console.print(f"... {data.num_rows - args.limit} more rows")
    return 0


def _utc(ms: int) -> str:
    """A commit time (milliseconds since the epoch) as UTC to the millisecond."""
    when = dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)
    return when.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _cmd_versions(args: argparse.Namespace) -> int:
    from rich.table import Table as RichTable

    import cdc_sink

    table = cdc_sink.open_table(args.path)
    out = RichTable(title=f"versions of {args.path}")
    for col in ("version", "committed (UTC)", "kind", "app_id", "batch_id", "buckets", "stats"):
        out.add_column(col, overflow="fold")
    for v in table.versions():
        stats = " ".join(f"{k}={n}" for k, n in sorted(v["stats"].items()) if n)
        out.add_row(
            str(v["version"]),
            _utc(v["commit_time_ms"]),
            str(v["kind"]),
            str(v["app_id"] or ""),
            "" if v["batch_id"] is None else str(v["batch_id"]),
            ",".join(map(str, v["buckets"])),
            stats,
        )
    _console().print(out)
    return 0


def _size(n: int) -> str:
    """Bytes for people: ``512 B``, ``1.5 KiB``, ``2.0 GiB``."""
    if n < 1024:
        return f"{n} B"
    x = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        x /= 1024
        if x < 1024 or unit == "GiB":
            break
    return f"{x:.1f} {unit}"


def _tables_under(root: str) -> list[str]:
    """The tables under ``root`` (a directory or an object-store URL) that are its
    children or its children's children, as names relative to it (``inventory.customers``,
    ``inventory/customers``), sorted. A table's own directory is not searched further."""
    from cdc_sink.storage.layout import TABLE_FILE, is_table
    from cdc_sink.storage.objectstore import store_for
    from cdc_sink.storage.objectstore.urls import parse_store_url

    where = parse_store_url(root)
    if where.kind != "local":  # one listing of every object under the prefix
        store = store_for(root, check_conditional_writes=False)
        found = []
        for key in store.list_keys():
            parts = key.split("/")
            if parts[-1] == TABLE_FILE and len(parts) in (2, 3):
                found.append("/".join(parts[:-1]))
        tables = set(found)  # a table's own keys hold no table: skip any found there
        return sorted(t for t in found if "/" not in t or t.split("/")[0] not in tables)
    names: list[str] = []
    for child in _subdirs(where.prefix):
        path = os.path.join(where.prefix, child)
        if is_table(path):
            names.append(child)
        else:
            names += [f"{child}/{g}" for g in _subdirs(path) if is_table(os.path.join(path, g))]
    return sorted(names)


def _subdirs(path: str) -> list[str]:
    """The directories in ``path`` (not hidden ones; nothing if it is none)."""
    try:
        with os.scandir(path) as it:
            return [
                e.name for e in it if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")
            ]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _table_row(root: str, name: str) -> dict[str, Any]:
    """One line of ``cdc-sink stats ROOT``: the table ``name`` under ``root`` (its
    ``error`` if it cannot be read)."""
    import cdc_sink
    from cdc_sink.errors import CdcSinkError

    path = os.path.join(root, name) if "://" not in root else f"{root.rstrip('/')}/{name}"
    try:
        table = cdc_sink.open_table(path)
        st = table.stats(load=True)
        entry = table.log.read(st.version)
    except CdcSinkError as exc:
        return {"table": name, "error": str(exc)}
    return {
        "table": name,
        "version": st.version,
        "live_rows": st.live_rows,
        "commit_time_ms": entry.commit_time_ms,
        "schema_id": entry.schema_id,
    }


def _cmd_stats_of_root(args: argparse.Namespace, names: list[str]) -> int:
    """``cdc-sink stats ROOT``: one line per table under the root."""
    from rich.table import Table as RichTable

    rows = [_table_row(args.path, name) for name in names]
    failed = any("error" in r for r in rows)
    if args.json:
        print(json.dumps({"root": args.path, "tables": rows}, indent=1))
        return 1 if failed else 0
    out = RichTable(title=f"tables under {args.path}")
    for col in ("table", "version", "live rows", "last commit (UTC)", "schema id"):
        out.add_column(col, justify="left" if col == "table" else "right", overflow="fold")
    for r in rows:
        if "error" in r:
            out.add_row(r["table"], f"error: {r['error']}", "", "", "")
            continue
        out.add_row(
            r["table"],
            str(r["version"]),
            str(r["live_rows"]),
            _utc(r["commit_time_ms"]),
            str(r["schema_id"]),
        )
    _console().print(out)
    return 1 if failed else 0


def _cmd_stats(args: argparse.Namespace) -> int:
    from rich.table import Table as RichTable

    import cdc_sink
    from cdc_sink.errors import TableNotFound

    try:
        table = cdc_sink.open_table(args.path)
    except TableNotFound:
        names = _tables_under(args.path)
        if not names:
            raise
        return _cmd_stats_of_root(args, names)
    st = table.stats(load=True)
    if args.json:
        print(json.dumps(st.to_dict(), indent=1))
        return 0
    console = _console()
    summary = RichTable(title=f"{args.path}", show_header=False)
    summary.add_column("figure")
    summary.add_column("value", justify="right")
    for name, value in (
        ("version", st.version),
        ("oldest readable version", st.oldest_version),
        ("buckets", st.num_buckets),
        ("live rows", st.live_rows),
        ("memory", _size(st.memory_bytes)),
        ("outstanding delta versions (max)", st.outstanding_delta_versions),
        ("WAL", f"{_size(st.wal_bytes)} in {st.wal_files} files"),
        ("snapshots", f"{_size(st.snapshot_bytes)} in {st.snapshot_files} files"),
        ("log", f"{_size(st.log_bytes)} in {st.log_files} files"),
    ):
        summary.add_row(name, str(value))
    console.print(summary)
    per = RichTable(title="buckets")
    for col in ("bucket", "live rows", "memory", "deltas", "WAL", "snapshots"):
        per.add_column(col, justify="right")
    for b in st.buckets:
        per.add_row(
            str(b.bucket),
            str(b.live_rows),
            _size(b.memory_bytes),
            str(b.delta_versions),
            _size(b.wal_bytes),
            _size(b.snapshot_bytes),
        )
    console.print(per)
    return 0


def _cmd_jars(args: argparse.Namespace) -> int:
    from importlib.metadata import PackageNotFoundError

    from cdc_sink.kafka.jars import pyspark_version, resolve_spark_kafka_jars

    version = args.spark_version
    if version is None:
        try:
            version = pyspark_version()
        except PackageNotFoundError:
            raise ValueError(
                "pyspark is not installed here: give --spark-version, the cluster's Spark "
                "version (spark-submit --version)"
            ) from None
    paths = [str(p) for p in resolve_spark_kafka_jars(version)]
    connector = _connector_jar(version)
    if connector is not None:
        paths.append(connector)
    print(",".join(paths))
    return 0


def _connector_jar(spark_version: str) -> str | None:
    """The JVM connector's jar when it is installed and built for ``spark_version``."""
    try:
        from cdc_sink.spark.session import connector_jar
    except ImportError:  # no pyspark here (MissingExtra is an ImportError)
        return None
    jar = connector_jar(spark_version)
    return None if jar is None else str(jar)


def configure_logging(level: str) -> None:
    """cdc_sink's log on stderr at ``level``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    log = logging.getLogger("cdc_sink")
    log.handlers[:] = [handler]
    log.setLevel(level)
    log.propagate = False


def main(argv: Sequence[str] | None = None) -> int:
    """Runs ``cdc-sink``; returns the exit code (also used as ``sys.exit``'s).

    Args:
        argv: Arguments (default ``sys.argv[1:]``).
    """
    from cdc_sink.errors import CdcSinkError

    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command == "run":
        from cdc_sink.job import main as run_job  # the job parses its own flags

        return run_job(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    configure_logging(args.log_level)
    commands = {
        "demo": _cmd_demo,
        "query": _cmd_query,
        "versions": _cmd_versions,
        "stats": _cmd_stats,
        "jars": _cmd_jars,
    }
    try:
        from cdc_sink.utils.extras import require

        if args.command != "jars":  # one plain line; the others print with rich: the cli extra
            require("rich", feature="cdc-sink")
        return commands[args.command](args)
    except (CdcSinkError, ValueError) as exc:
        print(f"cdc-sink {args.command}: error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ValueError) else 1
    except KeyboardInterrupt:
        print(f"cdc-sink {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
