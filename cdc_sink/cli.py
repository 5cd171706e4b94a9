"""The ``cdc-sink`` command line.

::

    cdc-sink demo [--events N] [--format json|rowv2|debezium]
                  [--apply-mode driver|executors] [--workdir DIR] [--seed S]
    cdc-sink query PATH [--version V | --timestamp T] [--columns a,b] [--limit N]
    cdc-sink versions PATH

``demo`` runs the whole pipeline locally (Kafka broker, producer, Spark Structured
Streaming job, snapshot queries) and checks the result (exit code 1 on a mismatch);
``query`` and ``versions`` read a table with plain Python (no Spark).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``cdc-sink``."""
    parser = argparse.ArgumentParser(
        prog="cdc-sink",
        description="A realtime-updatable columnar table fed by Kafka CDC through Spark.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", help="run the end-to-end demo (local Kafka + Spark)",
                          description="Produce an orders CDC stream to a local Kafka, apply "
                          "it with a Spark Structured Streaming job, query two versions "
                          "and check them against the expected state.")
    demo.add_argument("--events", type=int, default=20_000, help="events to produce "
                      "(default 20000)")
    demo.add_argument("--format", choices=("json", "rowv2", "debezium"), default="json",
                      help="wire format on Kafka (default json)")
    demo.add_argument("--apply-mode", choices=("driver", "executors"), default="driver",
                      help="where micro-batches are applied (default driver)")
    demo.add_argument("--workdir", default=None, help="directory for the table and the "
                      "checkpoint (default: a new temporary directory, kept)")
    demo.add_argument("--seed", type=int, default=7, help="seed of the orders stream")
    demo.add_argument("--partitions", type=int, default=4, help="partitions of the topic")
    demo.add_argument("--trigger", default="500 milliseconds",
                      help="processing-time trigger (default '500 milliseconds')")
    demo.add_argument("--backend", choices=("auto", "confluent", "kafka-python"),
                      default="auto", help="Kafka client of the producer")

    query = sub.add_parser("query", help="print a table version (Python read)")
    query.add_argument("path", help="table directory")
    at = query.add_mutually_exclusive_group()
    at.add_argument("--version", type=int, default=None, help="version (default latest)")
    at.add_argument("--timestamp", default=None,
                    help="newest version committed at or before this time (ISO 8601, or "
                    "epoch milliseconds)")
    query.add_argument("--columns", default=None, help="comma-separated columns")
    query.add_argument("--limit", type=int, default=20, help="rows to print (default 20)")

    versions = sub.add_parser("versions", help="list the retained versions of a table")
    versions.add_argument("path", help="table directory")
    return parser


def parse_timestamp(text: str) -> Any:
    """``--timestamp``: epoch milliseconds (digits) or an ISO 8601 time (UTC if naive).

    Raises:
        ValueError: Neither.
    """
    s = text.strip()
    if s.lstrip("-").isdigit():
        return int(s)
    t = dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def _console() -> Any:
    """A rich console; wide when output is not a terminal (pipes, CI logs)."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=160)


def _cmd_demo(args: argparse.Namespace) -> int:
    from cdc_sink.demo.runner import DemoOptions, run_demo

    opts = DemoOptions(events=args.events, format=args.format, apply_mode=args.apply_mode,
                       workdir=args.workdir, seed=args.seed, partitions=args.partitions,
                       trigger=args.trigger, backend=args.backend)
    return run_demo(opts)


def _cmd_query(args: argparse.Namespace) -> int:
    from rich.table import Table as RichTable

    import cdc_sink

    console = _console()
    table = cdc_sink.open_table(args.path)
    ts = parse_timestamp(args.timestamp) if args.timestamp is not None else None
    version = table.resolve_version(args.version, ts)
    columns = [c.strip() for c in args.columns.split(",")] if args.columns else None
    data = table.read(version=version, columns=columns)
    console.print(f"{args.path} at version {version}: {data.num_rows} rows", soft_wrap=True,
                  markup=False, highlight=False)
    out = RichTable()
    for name in data.column_names:
        out.add_column(name, overflow="fold")
    for row in data.slice(0, max(args.limit, 0)).to_pylist():
        out.add_row(*("" if v is None else str(v) for v in row.values()))
    console.print(out)
    if data.num_rows > args.limit:
        console.print(f"... {data.num_rows - args.limit} more rows")
    return 0


def _cmd_versions(args: argparse.Namespace) -> int:
    from rich.table import Table as RichTable

    import cdc_sink

    table = cdc_sink.open_table(args.path)
    out = RichTable(title=f"versions of {args.path}")
    for col in ("version", "committed (UTC)", "kind", "app_id", "batch_id", "buckets",
                "stats"):
        out.add_column(col, overflow="fold")
    for v in table.versions():
        when = dt.datetime.fromtimestamp(v["commit_time_ms"] / 1000, dt.timezone.utc)
        stats = " ".join(f"{k}={n}" for k, n in sorted(v["stats"].items()) if n)
        out.add_row(str(v["version"]), when.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3],
                    str(v["kind"]), str(v["app_id"] or ""),
                    "" if v["batch_id"] is None else str(v["batch_id"]),
                    ",".join(map(str, v["buckets"])), stats)
    _console().print(out)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Runs ``cdc-sink``; returns the exit code (also used as ``sys.exit``'s).

    Args:
        argv: Arguments (default ``sys.argv[1:]``).
    """
    from cdc_sink.errors import CdcSinkError

    args = build_parser().parse_args(argv)
    commands = {"demo": _cmd_demo, "query": _cmd_query, "versions": _cmd_versions}
    try:
        return commands[args.command](args)
    except (CdcSinkError, ValueError) as exc:
        print(f"cdc-sink {args.command}: error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ValueError) else 1
    except KeyboardInterrupt:
        print(f"cdc-sink {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
