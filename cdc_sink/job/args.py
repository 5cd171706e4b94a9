"""The streaming job's arguments: flags, and the same settings from a TOML file or the
environment.

The sink's flags (``--format``, ``--apply-mode``, ``--decoder-option``,
``--page-compression``...) are not declared here: each is made from a field of
:class:`~cdc_sink.spark.options.SinkOptions` (:mod:`cdc_sink.job.sink_flags`), and
:func:`sink_options` builds the options from them. The flags declared here are the job's
own: Kafka, the checkpoint, Spark, metrics, logs and the maintenance schedule.

Every long flag of :func:`build_parser` is also a key of the ``--config`` file (TOML;
``bootstrap-servers`` or ``bootstrap_servers``; a list for a repeatable flag) and an
environment variable (``CDC_SINK_`` + the flag in upper case with ``_``:
``CDC_SINK_BOOTSTRAP_SERVERS``; repeatable flags are not read from the environment).
Precedence: command line, then environment, then file, then the defaults. Values from a
file or the environment are checked as the flag's would be (type and choices), and an
error names where the value came from. Secrets need none of these: the Kafka and
registry settings come from the client properties file (``--client-properties``), whose
placeholders read them from the environment or from files; an object store's credentials
come from the environment variables ``obstore`` reads (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``GOOGLE_SERVICE_ACCOUNT``,
``AZURE_STORAGE_ACCOUNT_KEY``...), and a secret given as a ``--storage-option`` (or in the
file) is refused. A repeatable flag's file value may also be a TOML table
(``[storage-option]`` with ``endpoint = "..."``), read as its ``KEY=VALUE`` items.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import tomllib

from cdc_sink.errors import MissingExtra
from cdc_sink.kafka.properties import ClientProperties
from cdc_sink.utils.redact import is_secret

if TYPE_CHECKING:
    from cdc_sink.table import TableOptions

__all__ = [
    "ENV_PREFIX",
    "LOG_LEVELS",
    "build_parser",
    "database_options",
    "job_decoder_options",
    "key_value_pairs",
    "parse_args",
    "parse_decoder_options",
    "parse_kafka_options",
    "parse_storage_options",
    "table_options",
]

ENV_PREFIX = "CDC_SINK_"
"""Prefix of the environment variables that set the job's flags."""

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def build_parser() -> argparse.ArgumentParser:
    """The job's arguments."""
    p = argparse.ArgumentParser(
        prog="cdc_to_tablets",
        description="Apply Kafka CDC events to a cdc_sink table with Spark Structured "
        "Streaming (one table version per micro-batch, exactly once).",
    )
    p.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="a TOML file of settings: any long flag as a key (flags and CDC_SINK_* "
        "environment variables win)",
    )
    _add_stream_args(p)
    _add_sink_args(p)
    _add_observability_args(p)
    _add_maintenance_args(p)
    return p


def _add_stream_args(p: argparse.ArgumentParser) -> None:
    """What the job reads, where it writes, and how the query runs."""
    p.add_argument("--bootstrap-servers", required=True, help="Kafka bootstrap servers")
    p.add_argument("--topic", default=None, help="topic to read (comma-separated for several)")
    p.add_argument(
        "--subscribe-pattern",
        default=None,
        metavar="REGEX",
        help="read every topic matching REGEX (Spark's subscribePattern; instead of "
        "--topic), e.g. 'dbserver1\\.inventory\\..*' for a whole database",
    )
    _add_table_args(p)
    _add_database_args(p)
    p.add_argument(
        "--trigger",
        default="1 second",
        help="processing-time interval such as '1 second', or 'available-now' (default '1 second')",
    )
    p.add_argument(
        "--checkpoint",
        default=None,
        help="streaming checkpoint directory (default <table-path>.checkpoint; required "
        "when --table-path is an object-store URL)",
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
    p.add_argument(
        "--master",
        default=None,
        help="Spark master when the job starts Spark itself (cdc-sink run, python -m "
        "cdc_sink.job; default $SPARK_MASTER or local[*]); spark-submit's --master wins",
    )
    p.add_argument(
        "--remote",
        default=None,
        metavar="URL",
        help="run through a Spark Connect server (sc://host:port): the sink is pickled to "
        "the server, which runs each micro-batch; --master, --spark-log-level and the "
        "executor settings are then the server's",
    )


def _add_table_args(p: argparse.ArgumentParser) -> None:
    """Where the table is."""
    p.add_argument(
        "--table-path",
        default=None,
        help="the cdc_sink table: a directory, or an object-store URL (s3://bucket/prefix, "
        "gs://..., az://...; with --storage-option and the environment's credentials)",
    )
    p.add_argument(
        "--table-root",
        default=None,
        metavar="URL",
        help="write a whole database: each source table to its own table under this "
        "directory or object-store prefix, created from the schema its messages carry "
        "(instead of --table-path; formats debezium and debezium-avro)",
    )


def _add_database_args(p: argparse.ArgumentParser) -> None:
    """A whole database under ``--table-root`` (:mod:`cdc_sink.spark.database`)."""
    db = p.add_argument_group("whole database (with --table-root)")
    db.add_argument(
        "--table-name-format",
        default=None,
        metavar="FORMAT",
        help="a table's name from its source block: placeholders {db}, {schema}, {table}, "
        "{topic} (default: the qualified name, db.table or db.schema.table)",
    )
    db.add_argument(
        "--include-tables",
        action="append",
        default=[],
        metavar="REGEX",
        help="write only the tables whose name matches (repeatable)",
    )
    db.add_argument(
        "--exclude-tables",
        action="append",
        default=[],
        metavar="REGEX",
        help="leave out the tables whose name matches (repeatable)",
    )
    db.add_argument(
        "--key-columns",
        action="append",
        default=[],
        metavar="TABLE=COL,COL",
        help="key columns of a table (replacing its message key's; needed for a table "
        "without a primary key, which is skipped otherwise; repeatable)",
    )
    db.add_argument(
        "--schema-dir",
        default=None,
        metavar="DIR",
        help="schemaless JSON (schemas.enable=false): the directory of <table>.json schema files",
    )
    db.add_argument(
        "--default-buckets",
        type=int,
        default=1,
        metavar="N",
        help="buckets of a table the job creates (default 1; --table-buckets for a large one)",
    )
    db.add_argument(
        "--table-buckets",
        action="append",
        default=[],
        metavar="TABLE=N",
        help="buckets of one table the job creates (repeatable)",
    )
    db.add_argument(
        "--tables-memory-budget",
        type=int,
        default=2 << 30,
        metavar="BYTES",
        help="tablet bytes the open tables may hold before the least recently written "
        "are released (default 2 GiB)",
    )
    db.add_argument(
        "--commit-threads",
        type=int,
        default=8,
        metavar="N",
        help="tables written concurrently within a micro-batch (default 8)",
    )


_NO_SINK_FLAGS = "_no_sink_flags"
"""The namespace default saying why the sink's flags are missing (no pyspark)."""


def _add_sink_args(p: argparse.ArgumentParser) -> None:
    """The sink's options: a flag per field of SinkOptions (:mod:`cdc_sink.job.sink_flags`),
    and the job's shorthand ``--allow-truncate``. Without pyspark (no ``spark`` extra) the
    job cannot run and SinkOptions cannot be imported: its help still shows, saying so,
    and :func:`parse_args` refuses to go further."""
    sink = p.add_argument_group(
        "sink options",
        "each a field of cdc_sink.spark.SinkOptions (or of its decode and table options)",
    )
    try:
        from cdc_sink.job.sink_flags import add_sink_flags
    except MissingExtra as exc:
        sink.description = f"the sink's options (--format, --apply-mode...): {exc}"
        p.set_defaults(**{_NO_SINK_FLAGS: str(exc)})
    else:
        add_sink_flags(sink)
    p.add_argument(
        "--allow-truncate",
        action="store_true",
        help='--format json: apply {"op": "truncate"} events, which delete every row '
        "of the table (decoder option allow_truncate; default: rejected, so that a producer "
        "cannot empty the table)",
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


def _add_observability_args(p: argparse.ArgumentParser) -> None:
    """Metrics and logs."""
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


def _add_maintenance_args(p: argparse.ArgumentParser) -> None:
    """Compaction, GC and the codecs of what is written."""
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
        help="run GC every N committed batches (default 100; 0: never; it keeps "
        "--retain-versions and --retain-seconds)",
    )


def table_options(args: argparse.Namespace) -> TableOptions:
    """The table options the job's arguments name (``--page-compression``,
    ``--retain-versions``...: the table fields of
    :func:`~cdc_sink.job.sink_flags.sink_options`).

    Raises:
        ValueError: A value a table option refuses.
    """
    from cdc_sink.job.sink_flags import sink_options

    table = sink_options(args).table
    assert table is not None  # the flags always name one
    return table


def parse_kafka_options(items: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` pairs as a dict.

    Raises:
        ValueError: An item has no ``=``.
    """
    return dict(key_value_pairs(items, "--kafka-option"))


def key_value_pairs(items: Sequence[str], flag: str) -> list[tuple[str, str]]:
    """``KEY=VALUE`` items as pairs (each key stripped).

    Raises:
        ValueError: An item has no ``=`` or no key (the message names ``flag``).
    """
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{flag} {item!r}: expected KEY=VALUE")
        out.append((key.strip(), value))
    return out


def parse_storage_options(items: Sequence[str]) -> dict[str, str]:
    """``--storage-option`` ``KEY=VALUE`` pairs as a dict (keys in lower case, as obstore
    takes them).

    Raises:
        ValueError: An item has no ``=``, or is a secret by :mod:`cdc_sink.utils.redact`'s rule
            (``secret_access_key``, ``session_token``, ``account_key``, ``sas_key``..., or
            a value such as an endpoint with user info), which comes from the
            environment; the message names the key, never the value.
    """
    out: dict[str, str] = {}
    for key, value in key_value_pairs(items, "--storage-option"):
        if is_secret(key, value):
            raise ValueError(
                f"--storage-option {key}: a secret is not taken from the command line or "
                "the settings file; set it in the environment (e.g. AWS_SECRET_ACCESS_KEY, "
                "AWS_SESSION_TOKEN, AZURE_STORAGE_ACCOUNT_KEY), where obstore reads it"
            )
        out[key.lower()] = value
    return out


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
    for key, value in key_value_pairs(items, "--decoder-option"):
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def _actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The parser's long-flag actions by their ``dest``."""
    return {
        a.dest: a
        for a in parser._actions
        if any(s.startswith("--") for s in a.option_strings) and a.dest not in ("help", "config")
    }


def _checked(action: argparse.Action, value: Any, where: str) -> Any:
    """``value`` converted and checked as the flag's own value would be."""
    flag = max(action.option_strings, key=len)
    if isinstance(action, argparse._AppendAction):
        if isinstance(value, dict):  # a TOML table of KEY=VALUE items
            value = [f"{k}={json.dumps(v) if isinstance(v, bool) else v}" for k, v in value.items()]
        items = value if isinstance(value, list) else [value]
        return [str(v) for v in items]
    if isinstance(
        action,
        (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse.BooleanOptionalAction),
    ):
        if isinstance(value, str):
            if value.lower() not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                raise ValueError(f"{where}: {flag} takes true or false, not {value!r}")
            value = value.lower() in ("1", "true", "yes", "on")
        return bool(value)
    if isinstance(value, str) and action.type is not None and callable(action.type):
        try:
            value = action.type(value)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {flag}: {exc}") from None
    if action.choices is not None and value not in action.choices:
        raise ValueError(
            f"{where}: {flag} must be one of {sorted(map(str, action.choices))}, not {value!r}"
        )
    return value


def _file_settings(path: str, actions: Mapping[str, argparse.Action]) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except OSError as exc:
        raise ValueError(f"--config {path!r}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"--config {path!r}: {exc}") from None
    out: dict[str, Any] = {}
    for key, value in raw.items():
        dest = key.replace("-", "_")
        if dest not in actions:
            raise ValueError(f"--config {path!r}: unknown setting {key!r}")
        out[dest] = _checked(actions[dest], value, f"--config {path!r}, {key!r}")
    return out


def _env_settings(
    environ: Mapping[str, str], actions: Mapping[str, argparse.Action]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dest, action in actions.items():
        name = ENV_PREFIX + dest.upper()
        if name in environ and not isinstance(action, argparse._AppendAction):
            out[dest] = _checked(action, environ[name], f"${name}")
    return out


def parse_args(
    argv: Sequence[str] | None = None, *, environ: Mapping[str, str] | None = None
) -> argparse.Namespace:
    """The job's settings: ``argv``, then ``environ``, then the ``--config`` file.

    Raises:
        SystemExit: Bad arguments (argparse's usage error, exit code 2), including a bad
            value in the file or the environment (the message names where it is), or
            no pyspark (the message names the extra that installs it).
    """
    env = os.environ if environ is None else environ
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", default=None)
    first, _ = pre.parse_known_args(argv)
    parser = build_parser()
    actions = _actions(parser)
    settings: dict[str, Any] = {}
    try:
        if first.config:
            settings.update(_file_settings(first.config, actions))
        settings.update(_env_settings(env, actions))
    except ValueError as exc:
        parser.error(str(exc))
    for dest, value in settings.items():
        actions[dest].required = False  # given by the file or the environment
        if isinstance(actions[dest], argparse._AppendAction):
            actions[dest].default = list(value)
    parser.set_defaults(**{k: v for k, v in settings.items() if not isinstance(v, list)})
    missing = parser.get_default(_NO_SINK_FLAGS)
    given = sys.argv[1:] if argv is None else argv
    if missing and not {"-h", "--help"} & set(given):
        parser.error(missing)  # no pyspark: the job cannot run
    args = parser.parse_args(argv)
    problem = _one_of_each(args)
    if problem:
        parser.error(problem)
    return args


def _one_of_each(args: argparse.Namespace) -> str | None:
    """What is wrong with the choice of source and target (None: nothing): one of
    ``--topic`` and ``--subscribe-pattern``, one of ``--table-path`` and ``--table-root``,
    and the flags of the other kind of job left out."""
    if (args.topic is None) == (args.subscribe_pattern is None):
        return "give one of --topic and --subscribe-pattern"
    if (args.table_path is None) == (args.table_root is None):
        return "give one of --table-path (one table) and --table-root (a whole database)"
    if args.table_root is not None and args.schema_file:
        return "--schema-file is for --table-path; with --table-root use --schema-dir"
    if args.table_path is not None:
        given = [
            flag
            for flag, value in (
                ("--table-name-format", args.table_name_format),
                ("--include-tables", args.include_tables),
                ("--exclude-tables", args.exclude_tables),
                ("--key-columns", args.key_columns),
                ("--schema-dir", args.schema_dir),
                ("--table-buckets", args.table_buckets),
            )
            if value
        ]
        if given:
            return f"{', '.join(given)}: for --table-root (a whole database) only"
    return None


def database_options(args: argparse.Namespace) -> Any:
    """The :class:`~cdc_sink.spark.database.DatabaseOptions` of the arguments.

    Raises:
        ValueError: A bad ``TABLE=...`` item, or an option the options refuse.
    """
    from cdc_sink.spark.database import DatabaseOptions

    keys = {}
    for name, cols in key_value_pairs(args.key_columns, "--key-columns"):
        columns = tuple(c.strip() for c in cols.split(",") if c.strip())
        if not columns:
            raise ValueError(f"--key-columns {name}=: names no column")
        keys[name] = columns
    buckets = {}
    for name, n in key_value_pairs(args.table_buckets, "--table-buckets"):
        try:
            buckets[name] = int(n)
        except ValueError:
            raise ValueError(f"--table-buckets {name}={n}: not an integer") from None
    return DatabaseOptions(
        table_root=args.table_root,
        table_name_format=args.table_name_format,
        include_tables=tuple(args.include_tables),
        exclude_tables=tuple(args.exclude_tables),
        key_columns=keys,
        schema_dir=args.schema_dir,
        num_buckets=args.default_buckets,
        buckets=buckets,
        memory_budget_bytes=args.tables_memory_budget,
        commit_threads=args.commit_threads,
    ).checked()
