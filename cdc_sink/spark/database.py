"""A whole database in one job: the ``foreachBatch`` router of many CDC topics into many
tables, each created and evolved from its source's own schema.

A Debezium connector writes one topic per table of a database (``dbserver1.inventory.
customers``, ``...orders``...), every message carrying its table's schema. One streaming
query subscribes to all of them (``subscribePattern``), and :func:`database_sink`
returns its ``foreachBatch`` function::

    query = (spark.readStream.format("kafka")
             .option("subscribePattern", r"dbserver1\\.inventory\\..*")...load()
             .writeStream.foreachBatch(database_sink(DatabaseOptions("s3://lake/inventory"),
                                                     options=SinkOptions(format="debezium")))
             .option("checkpointLocation", ckpt).start())

Per micro-batch ``(df, batch_id)`` (docs/architecture.md, "A whole database in one job"):

1. *Route*: the batch's records come to the driver once (``toArrow``) and each is given
   its source table by the ``source`` block it carries (database, schema, table; not by
   its topic: :func:`~cdc_sink.formats.source_tables.route`, vectorized). The table's name
   is :attr:`DatabaseOptions.table_name_format` of those; ``include_tables`` and
   ``exclude_tables`` select tables by it. Heartbeats, transaction metadata, schema
   change events, logical messages and tombstones are counted and left out; a record
   that names no table is a reject of the root's :data:`UNROUTED` table (forwarded as a
   dead letter with its Kafka coordinates, exactly once).
2. *Create and evolve*: the first records of a table not under the root yet create it
   from the schema they carry (:mod:`cdc_sink.spark._source_schemas`: columns and types
   as docs/compatibility.md maps them, the primary key from the message key's schema).
   Each distinct schema of the batch is compared with the table's
   (:func:`~cdc_sink.formats.source_schema.schema_change`): new columns are added (an
   optional one, or a required one with its default), lossless widenings applied, each
   in a version of its own. A change the table cannot take *stops that table*: its
   records from the first one carrying that schema on are refused with the reason (its
   dead letters), now and in every later batch, while the other tables go on. A table
   whose messages name no key, and for which the user named no key columns, is skipped
   (logged once, counted).
3. *Commit, per table, concurrently*: each table's records go to its
   :class:`~cdc_sink.spark.writer.TableWriter`, which commits them as one version under
   the job's ``(app_id, batch_id)`` (exactly once per table: after a crash between two
   tables' commits the replayed batch skips the tables that hold it and commits the
   others). The writes of different tables run on ``commit_threads`` threads. With
   ``SinkOptions(decode=DecodeOptions(processes=N))`` the tables' records are decoded in
   N worker processes the router shares among its tables (driver mode; spawned on the
   first batch, stopped by :meth:`DatabaseSink.close`): a commit thread hands its
   table's records over and gives its CPU slot up while it waits, so the decoding of
   some tables runs beside the apply and commit of others on another core.
4. *Memory*: after the batch, while the tablets held exceed ``memory_budget_bytes`` the
   least recently written tables are closed (their tablets released); the next record of
   one opens it again.

A stopped table stays stopped across restarts: the stop is recorded under the root
(``_database/stopped/<name>.json``, its reason and batch) once the version refusing its
records is committed; docs/operations.md says how an operator resolves it. The router
pickles as the single-table sink does: its configuration only.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_sink.engine import core_of
from cdc_sink.errors import InvalidOption, NoPrimaryKey, SchemaError, TableNotFound
from cdc_sink.formats import source_tables
from cdc_sink.formats.source_schema import SchemaChange, schema_change
from cdc_sink.formats.source_tables import Routed, SourceTable, route
from cdc_sink.schema import TableSchema
from cdc_sink.spark._batch import with_refused
from cdc_sink.spark._decode_pool import DecodePool, decode_here
from cdc_sink.spark._driver import raw_columns
from cdc_sink.spark._shared_decode import SharedInput, decode_passes, plan_shared
from cdc_sink.spark._source_schemas import SourceSchemas
from cdc_sink.spark.options import SinkOptions
from cdc_sink.spark.writer import BatchStats, DeadLetterSink, TableWriter, default_app_id
from cdc_sink.storage.objectstore import ObjectStore, store_for
from cdc_sink.storage.objectstore.urls import parse_store_url
from cdc_sink.table import Table, TableOptions, create_table, open_table
from cdc_sink.utils.cpu_gate import CpuGate
from cdc_sink.utils.process_local import ProcessLocal

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from cdc_sink.formats import Decoded

__all__ = [
    "UNROUTED",
    "DatabaseOptions",
    "DatabaseSink",
    "RouterStats",
    "TableEvents",
    "database_sink",
    "table_path",
]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

UNROUTED = "_unrouted"
"""The table under the root whose versions hold the records that name no table (as
rejects: forwarded as dead letters, exactly once)."""
_UNROUTED_SCHEMA = {
    "columns": [{"name": "id", "type": "int64", "nullable": False}],
    "primary_key": ["id"],
    "num_buckets": 1,
}
_STOPPED_PREFIX = "_database/stopped/"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.$-]{0,254}$")
_PLACEHOLDERS = ("db", "schema", "table", "topic")
_IGNORED_KINDS = {
    source_tables.TOMBSTONE: "tombstone",
    source_tables.HEARTBEAT: "heartbeat",
    source_tables.TRANSACTION: "transaction",
    source_tables.MESSAGE: "message",
    source_tables.SCHEMA_CHANGE: "schema_change",
}
"""Kinds of records that name no table and are no error, by their label."""


@dataclass(frozen=True)
class DatabaseOptions:
    """Where and how a whole-database sink writes its tables.

    Attributes:
        table_root: The directory or object-store prefix (``s3://bucket/lake``) each
            table is written under, as ``<table_root>/<name>``.
        table_name_format: A table's name from its source: ``str.format`` placeholders
            ``{db}``, ``{schema}``, ``{table}``, ``{topic}`` (None: the qualified name,
            ``db.table`` or ``db.schema.table``). A name is letters, digits and
            ``_.$-``, not starting with ``_`` (the root's own entries).
        include_tables: Regexes on the name: when given, only tables one matches
            (``re.fullmatch``).
        exclude_tables: Regexes on the name: tables one matches are left out.
        key_columns: Key columns per table name (they replace the message key's fields;
            the only way to take a table whose messages have no key).
        schema_dir: Schemaless JSON: the directory of ``<name>.json`` schema files.
        num_buckets: Buckets of a table created by the sink (1: a table's batch is
            prepared on one thread, and the router writes tables concurrently; name a
            large table's buckets in ``buckets``).
        buckets: Buckets per table name, overriding ``num_buckets``.
        memory_budget_bytes: Tablet bytes the open tables may hold after a batch before
            the least recently written are closed.
        commit_threads: Tables written concurrently (their storage waits overlap).
        cpu_threads: Of those, how many run CPU work (decode, apply) at once, in driver
            mode; the others wait until one of them waits on storage. Threads running
            small numpy and Arrow calls at once contend for the GIL and spend more CPU
            than the work (:mod:`cdc_sink.utils.cpu_gate`): one (the default) was the
            fastest measured (docs/benchmarks.md, "Many tables in one job"). None: the
            driver's cores.
    """

    table_root: str
    table_name_format: str | None = None
    include_tables: tuple[str, ...] = ()
    exclude_tables: tuple[str, ...] = ()
    key_columns: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    schema_dir: str | None = None
    num_buckets: int = 1
    buckets: Mapping[str, int] = field(default_factory=dict)
    memory_budget_bytes: int = 2 << 30
    commit_threads: int = 8
    cpu_threads: int | None = 1

    def checked(self) -> DatabaseOptions:
        """The options, checked.

        Raises:
            InvalidOption: A bad regex, name format, count or budget, naming the option.
        """
        if not isinstance(self.table_root, str) or not self.table_root:
            raise InvalidOption("table_root must name a directory or URL", option="table_root")
        _check_format(self.table_name_format)
        for opt in ("include_tables", "exclude_tables"):
            for rx in getattr(self, opt):
                try:
                    re.compile(rx)
                except re.error as exc:
                    raise InvalidOption(f"{opt}: bad regex {rx!r}: {exc}", option=opt) from None
        for opt in ("num_buckets", "commit_threads", "memory_budget_bytes"):
            v = getattr(self, opt)
            if type(v) is not int or v < 1:
                raise InvalidOption(f"{opt} must be an int >= 1, got {v!r}", option=opt)
        if self.cpu_threads is not None and (
            type(self.cpu_threads) is not int or self.cpu_threads < 1
        ):
            raise InvalidOption(
                f"cpu_threads must be None or an int >= 1, got {self.cpu_threads!r}",
                option="cpu_threads",
            )
        for name, n in self.buckets.items():
            if type(n) is not int or n < 1:
                raise InvalidOption(f"buckets[{name!r}] must be an int >= 1", option="buckets")
        return replace(
            self,
            key_columns={k: tuple(v) for k, v in self.key_columns.items()},
            include_tables=tuple(self.include_tables),
            exclude_tables=tuple(self.exclude_tables),
        )

    def name_of(self, source: SourceTable, topic: str) -> str:
        """The table name of ``source`` (read from a record of ``topic``)."""
        if self.table_name_format is None:
            return source.qualified()
        return self.table_name_format.format(
            db=source.db or "", schema=source.schema or "", table=source.table, topic=topic
        )

    def selects(self, name: str) -> bool:
        """Whether table ``name`` is written (``include_tables``, ``exclude_tables``)."""
        if self.include_tables and not any(re.fullmatch(r, name) for r in self.include_tables):
            return False
        return not any(re.fullmatch(r, name) for r in self.exclude_tables)


def _check_format(fmt: str | None) -> None:
    """Refuses a name format with a placeholder other than :data:`_PLACEHOLDERS`."""
    if fmt is None:
        return
    try:
        fmt.format(**{p: "x" for p in _PLACEHOLDERS})
    except (KeyError, IndexError, ValueError) as exc:
        raise InvalidOption(
            f"table_name_format {fmt!r}: placeholders are {{db}}, {{schema}}, {{table}}, "
            f"{{topic}} ({type(exc).__name__}: {exc})",
            option="table_name_format",
        ) from None


def table_path(root: str, name: str) -> str:
    """The path or URL of table ``name`` under ``root``."""
    if parse_store_url(root).kind == "local":
        return os.path.join(root, name)
    return root.rstrip("/") + "/" + name


class TableEvents(Protocol):
    """What a whole-database sink tells about its tables (e.g.
    :class:`~cdc_sink.metrics.tables.TableMetrics`)."""

    def observe(self, table: str, st: BatchStats) -> None:
        """One table's micro-batch."""

    def table_created(self, table: str) -> None:
        """A table was created from its source's schema."""

    def table_stopped(self, table: str, reason: str) -> None:
        """A table was stopped by a change it cannot take."""

    def table_skipped(self, table: str, reason: str, events: int) -> None:
        """Records of a table were left out (no primary key)."""

    def tables_open(self, n: int, bytes_: int) -> None:
        """Tables held open after a batch, and their tablets' bytes."""


@dataclass
class RouterStats:
    """What the router did with one micro-batch.

    Attributes:
        batch_id: Spark's micro-batch id.
        events: Records in the batch.
        tables: Table name -> what became of its records (``committed``, ``skipped``:
            held already, or left out for want of a key; ``failed``).
        ignored: Records left out, by kind (``heartbeat``, ``transaction``,
            ``tombstone``, ``message``, ``schema_change``, ``excluded``).
        unrouted: Records that named no table (rejects of :data:`UNROUTED`).
        total_s: Seconds of the whole batch.
        phases: Seconds of its steps in driver mode: ``route`` (which table each
            record names), ``open`` (the tables opened, created, their schemas
            evolved), ``decode`` (the passes shared by tables of one schema), ``write``
            (the tables' writes, less the shared decode they waited for).
    """

    batch_id: int
    events: int = 0
    tables: dict[str, str] = field(default_factory=dict)
    ignored: dict[str, int] = field(default_factory=dict)
    unrouted: int = 0
    total_s: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)


@dataclass
class _Part:
    """One table's records in a micro-batch (positions ascending), with the schema key
    of each."""

    name: str
    source: SourceTable
    rows: np.ndarray
    schema_rows: np.ndarray
    schema_keys: np.ndarray
    schema_texts: Mapping[int, bytes]


@dataclass
class _Ready:
    """One table's records in a micro-batch, its writer open and its schema evolved:
    ``refused`` is the cut of a change the table cannot take and its reason (None:
    every record is written)."""

    name: str
    writer: TableWriter
    sub: pa.Table
    refused: tuple[dict[int, int], str] | None
    rows: np.ndarray


class _SharedDeadLetters:
    """The one dead-letter sink of a database sink, shared by its tables' writers:
    writes are serialized, and a writer's close does not close it."""

    def __init__(self, sink: DeadLetterSink) -> None:
        self.sink = sink
        self._mutex = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"sink": self.sink}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.sink = state["sink"]
        self._mutex = threading.Lock()

    def write(self, records: pa.Table) -> None:
        """Writes ``records`` to the shared sink."""
        with self._mutex:
            self.sink.write(records)

    def of_table(self, name: str) -> _TableDeadLetters:
        """Table ``name``'s view of the shared sink."""
        return _TableDeadLetters(self, name)


class _TableDeadLetters:
    """One table's view of the shared dead-letter sink. Every table numbers its versions
    from 1 under the job's one app id, so the sink's exactly-once cursor
    (``forwarded_version``) and its per-version records (``write_version``) are kept per
    table, under ``<app id>|<table>``; a sink without them gets a cursor file in each
    table, named from this view's ``repr`` (the same in every process)."""

    def __init__(self, shared: _SharedDeadLetters, table: str) -> None:
        self.shared = shared
        self.table = table
        self.exactly_once = bool(getattr(shared.sink, "exactly_once", False))

    def __repr__(self) -> str:
        return f"{self.shared.sink!r}[{self.table}]"

    def _app(self, app_id: str) -> str:
        return f"{app_id}|{self.table}"

    def forwarded_version(self, app_id: str) -> int | None:
        """The newest version of this table the sink holds."""
        forwarded = getattr(self.shared.sink, "forwarded_version", None)
        with self.shared._mutex:
            version: int | None = None if forwarded is None else forwarded(self._app(app_id))
        return version

    def write_version(self, records: pa.Table, *, app_id: str, version: int) -> None:
        """Writes the rejects of this table's ``version``, once."""
        with self.shared._mutex:
            write_version = getattr(self.shared.sink, "write_version", None)
            if write_version is None:
                self.shared.sink.write(records)
            else:
                write_version(records, app_id=self._app(app_id), version=version)

    def write(self, records: pa.Table) -> None:
        """Writes ``records`` to the shared sink."""
        self.shared.write(records)


class DatabaseSink(ProcessLocal):
    """The ``foreachBatch`` callable of :func:`database_sink`: routes each micro-batch's
    records to their tables, creating and evolving them (module docstring).

    Args:
        database: Where and how the tables are written.
        options: Every table's sink options (``format``: ``debezium`` or
            ``debezium-avro``; driver apply mode).
        dead_letter: Where rejected records go (None: kept in the tables only).

    Raises:
        InvalidOption: A bad option, or one the router does not support.

    Attributes:
        stats: The :class:`RouterStats` of the last batches run in this process.
        events: Hooks told about tables (:class:`TableEvents`; this process only).
    """

    _PROCESS_LOCAL = (
        "_writers",
        "_schemas",
        "_store",
        "_stopped",
        "_skipped",
        "_mutex",
        "_decode_pool",
        "stats",
        "events",
    )

    def __init__(
        self,
        database: DatabaseOptions,
        *,
        options: SinkOptions | None = None,
        dead_letter: DeadLetterSink | None = None,
    ) -> None:
        self.database = database.checked()
        opts = (options or SinkOptions()).checked()
        _check_router_options(opts)
        if opts.app_id is None:
            opts = replace(opts, app_id=default_app_id(self.database.table_root))
        # the tables' writers decode in the router's pool (one for all), not pools of their own
        self.decode_processes = opts.decode.processes
        self.options = _one_prepare_thread(replace(opts, decode=replace(opts.decode, processes=0)))
        self.dead_letter = _SharedDeadLetters(dead_letter) if dead_letter is not None else None
        SourceSchemas(  # checks the format and the registry options now
            opts.format, opts.decode.options, schema_dir=self.database.schema_dir
        )
        self._init_process_state()

    def _init_process_state(self) -> None:
        """This process's state, empty: tables are opened on first use."""
        self._writers: OrderedDict[str, TableWriter] = OrderedDict()
        self._schemas: SourceSchemas | None = None
        # (table, id of a source schema) -> the table schema that took it unchanged
        self._taken: dict[tuple[str, int], TableSchema] = {}
        self._store: ObjectStore | None = None
        self._stopped: dict[str, str] | None = None
        self._skipped: set[str] = set()
        self._mutex = threading.RLock()
        self._decode_pool: DecodePool | None = None
        self._gate = CpuGate(self.database.cpu_threads or os.cpu_count() or 1)
        self.stats: list[RouterStats] = []
        self.events: TableEvents | None = None

    @property
    def app_id(self) -> str:
        """The writer id of every table's commits."""
        assert self.options.app_id is not None
        return self.options.app_id

    @property
    def writers(self) -> Mapping[str, TableWriter]:
        """The writers of the tables open in this process, by table name."""
        return self._writers

    def table(self, name: str) -> Table:
        """Table ``name`` under the root, open in this process (opened if need be).

        Raises:
            TableNotFound: The root holds no table ``name``.
        """
        with self._mutex:
            hit = self._writers.get(name)
        return (hit or self._open_writer(name)).table

    # ------------------------------------------------------------------ one batch
    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """Commits micro-batch ``batch_id`` (Kafka source rows ``df``) exactly once to
        every table it touches.

        Raises:
            Exception: What failed (the first table's error; the others' are logged);
                the tables that committed hold the batch, the others do not, and Spark's
                retry commits only those.
        """
        if self.options.apply_mode == "executors":
            self.write_distributed(df, batch_id)
        else:
            self.write_rows(raw_columns(df).toArrow(), batch_id)

    def write_rows(self, raw: pa.Table, batch_id: int) -> RouterStats:
        """:meth:`__call__` of records already in the driver (the columns of
        :func:`~cdc_sink.spark._driver.raw_columns`); what the router did."""
        t0 = time.perf_counter()
        raw = raw.combine_chunks()
        st = RouterStats(batch_id, events=raw.num_rows)
        routed = route(
            self.options.format,
            raw.column("value"),
            raw.column("key"),
            decoder_options=self.options.decode.options,
        )
        parts, unrouted = self._parts(raw, routed, st)
        st.phases["route"] = time.perf_counter() - t0
        jobs: list[tuple[str, Callable[[], str]]] = []
        if len(unrouted[0]):
            st.unrouted = len(unrouted[0])
            jobs.append((UNROUTED, _bind(self._write_unrouted, raw, unrouted, batch_id)))
        if self.decode_processes and self._decode_pool is None:
            self._decode_pool = DecodePool(
                self.decode_processes, self.options.format, dict(self.options.decode.options)
            )
        errors: list[BaseException] = []
        try:
            t1 = time.perf_counter()
            opened = self._run(
                [(p.name, self._gated(_bind(self._open_part, raw, p, batch_id))) for p in parts],
                st,
                errors,
            )
            st.phases["open"] = time.perf_counter() - t1
            ready = [r for r in opened.values() if isinstance(r, _Ready)]
            st.tables.update({n: r for n, r in opened.items() if isinstance(r, str)})
            t2 = time.perf_counter()
            st.tables.update(self._write_all(raw, ready, jobs, batch_id, st, errors))
            st.phases["write"] = time.perf_counter() - t2 - st.phases.get("decode", 0.0)
            if errors:
                raise errors[0]
        finally:
            self._release_memory({p.name for p in parts})
            st.total_s = time.perf_counter() - t0
            self.stats = [*self.stats[-99:], st]
        return st

    def write_distributed(self, df: DataFrame, batch_id: int) -> RouterStats:
        """:meth:`__call__` in executors mode: the records are routed in Spark tasks
        (:class:`~cdc_sink.spark._database_tasks.TagTask`) and each table's are prepared
        in tasks by its writer; the driver reads the counts per table, one record per
        distinct schema and partition, and the records that name no table."""
        from pyspark.sql import functions as F

        from cdc_sink.spark._database_tasks import KAFKA_COLUMNS, TAGGED_DDL

        t0 = time.perf_counter()
        st = RouterStats(batch_id)
        tagged = df.select(*KAFKA_COLUMNS).mapInArrow(self._tag_task(), TAGGED_DDL).persist()
        try:
            counts = {r[0]: int(r[1]) for r in tagged.groupBy("__table").count().collect()}
            st.events = sum(counts.values())
            reps = (
                tagged.where(F.col("__rep"))
                .select("__table", "key", "value", "partition", "offset")
                .toArrow()
            )
            jobs = self._distributed_jobs(tagged, counts, reps, batch_id, st)
            st.tables.update(self._run(jobs, st))
        finally:
            tagged.unpersist()
            self._release_memory(set(st.tables))
            st.total_s = time.perf_counter() - t0
            self.stats = [*self.stats[-99:], st]
        return st

    def _tag_task(self) -> Any:
        """The ``mapInArrow`` task that routes records in executors."""
        from cdc_sink.spark._database_tasks import TagTask

        return TagTask(
            self.options.format,
            self.options.decode.options,
            name_of=self.database.name_of,
            selects=self.database.selects,
            valid=_valid_name,
            ignored=_IGNORED_KINDS,
            unrouted=UNROUTED,
        )

    def _distributed_jobs(
        self,
        tagged: DataFrame,
        counts: Mapping[str, int],
        reps: pa.Table,
        batch_id: int,
        st: RouterStats,
    ) -> list[tuple[str, Callable[[], str]]]:
        """The tables' writes of a batch routed in tasks (left-out records counted)."""
        from pyspark.sql import functions as F

        from cdc_sink.spark._database_tasks import IGNORED

        jobs: list[tuple[str, Callable[[], str]]] = []
        names = reps.column("__table")
        for label, n in sorted(counts.items()):
            if label.startswith(IGNORED):
                st.ignored[label[len(IGNORED) :]] = n
            elif label == UNROUTED:
                st.unrouted = n
                rows = tagged.where(F.col("__table") == UNROUTED)
                jobs.append((UNROUTED, _bind(self._write_unrouted_rows, rows, batch_id)))
            else:
                mine = reps.filter(pc.equal(names, label))
                part = tagged.where(F.col("__table") == label)
                jobs.append((label, _bind(self._write_tasks_part, label, part, mine, batch_id)))
        return jobs

    def _write_unrouted_rows(self, rows: DataFrame, batch_id: int) -> str:
        """Commits the records that name no table (routed in tasks) as rejects."""
        got = _driver_rows(rows, "__reason")
        reasons = [
            str(r or "the record names no source table") for r in got.column("__reason").to_pylist()
        ]
        return self._unrouted_writer().reject_rows(got, batch_id, reasons)

    def _write_tasks_part(self, name: str, part: DataFrame, reps: pa.Table, batch_id: int) -> str:
        """Writes one table's records (routed in tasks) through its writer's apply mode;
        what became of them."""
        from pyspark.sql import functions as F

        stopped = self._stopped_reason(name)
        if stopped is not None:
            writer = self._known_writer(name) or self._open_writer(name)
            result = writer.reject_rows(_driver_rows(part), batch_id, f"table stopped: {stopped}")
            return self._observed(name, writer, result)
        reps = reps.sort_by([("partition", "ascending"), ("offset", "ascending")])
        try:
            writer = self._writer(name, None, reps.slice(0, 1))
        except NoPrimaryKey as exc:
            self._skip(name, str(exc), int(part.count()))
            return "skipped"
        table, mode = writer.table, writer.mode
        refused = self._evolve(name, table, reps)
        if refused is None:
            result = writer.write_with(lambda txn: mode.prepare(table, txn, part), batch_id)
            return self._observed(name, writer, result)
        cut, reason = refused
        cond = F.lit(False)
        for p, o in cut.items():
            cond = cond | ((F.col("partition") == p) & (F.col("offset") >= o))
        out = _driver_rows(part.where(cond))
        kept = part.where(~cond)
        why = f"table stopped: {reason}"
        result = writer.write_with(
            lambda txn: with_refused(mode.prepare(table, txn, kept), out, why), batch_id
        )
        self._stop(name, reason, batch_id)
        return self._observed(name, writer, result)

    def _parts(
        self, raw: pa.Table, routed: Routed, st: RouterStats
    ) -> tuple[list[_Part], tuple[np.ndarray, list[str]]]:
        """The batch's records by table (the selected ones), and the unrouted records
        with their reasons (ascending); what is left out is counted in ``st``."""
        codes = routed.codes
        kinds = routed.kinds
        for kind, label in _IGNORED_KINDS.items():
            n = int(np.count_nonzero((codes < 0) & (kinds == kind)))
            if n:
                st.ignored[label] = n
        bad = [np.flatnonzero((codes < 0) & (kinds == source_tables.OTHER))]
        reasons = [str(routed.reasons[i] or "the record names no source table") for i in bad[0]]
        topics = raw.column("topic")
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(len(routed.tables) + 1))
        parts: list[_Part] = []
        for code, source in enumerate(routed.tables):
            rows = order[bounds[code] : bounds[code + 1]]
            if not len(rows):
                continue
            name = self.database.name_of(source, str(topics[int(rows[0])]))
            if not _valid_name(name):
                bad.append(rows)
                why = f"table name {name!r} (of source table {source.qualified()}) is not valid"
                reasons += [why] * len(rows)
            elif not self.database.selects(name):
                st.ignored["excluded"] = st.ignored.get("excluded", 0) + len(rows)
            else:
                keys = routed.schema_keys[rows]
                parts.append(
                    _Part(name, source, rows, routed.schema_rows[code], keys, routed.schema_texts)
                )
        rows = np.concatenate(bad).astype(np.int64)
        order = np.argsort(rows, kind="stable")
        return parts, (rows[order], [reasons[int(i)] for i in order])

    def _gated(self, fn: Callable[[], _T]) -> Callable[[], _T]:
        """``fn`` run in a slot of the router's CPU gate (driver mode: the tables' decode
        and apply run in this process; their storage waits give the slot up)."""

        def run() -> _T:
            with self._gate.held():
                return fn()

        return run

    def _run(
        self,
        jobs: Sequence[tuple[str, Callable[[], _T]]],
        st: RouterStats,
        errors: list[BaseException] | None = None,
    ) -> dict[str, _T]:
        """Runs the tables' jobs on the commit threads; what each job that ended
        returned, by table. A failed table is marked ``failed`` in ``st``, its error
        logged and added to ``errors``; without ``errors``, the first error is raised
        once every job has ended."""
        if not jobs:
            return {}
        failed: list[BaseException] = [] if errors is None else errors
        workers = min(self.database.commit_threads, len(jobs))
        with ThreadPoolExecutor(workers, thread_name_prefix="cdc_sink-table") as pool:
            futures = [(name, pool.submit(fn)) for name, fn in jobs]
            done = _collect(futures, st, failed)
        if errors is None and failed:
            raise failed[0]
        return done

    def _write_all(
        self,
        raw: pa.Table,
        ready: Sequence[_Ready],
        jobs: Sequence[tuple[str, Callable[[], str]]],
        batch_id: int,
        st: RouterStats,
        errors: list[BaseException],
    ) -> dict[str, str]:
        """Writes the tables of ``ready`` and runs ``jobs`` on the commit threads; what
        became of each. The tables of one schema are decoded together in passes
        (:mod:`~cdc_sink.spark._shared_decode`) by this thread, or the decode pool, and
        each pass's tables start their writes while the next pass decodes; the other
        tables, and all after a failed pass, are decoded by their writers."""
        plan = plan_shared([_shared_input(r) for r in ready if not r.refused])
        planned = {m.name for members in plan for m in members}
        by_name = {r.name: r for r in ready}
        n = len(jobs) + len(ready)
        if not n:
            return {}
        futures: list[tuple[str, Future[str]]] = []
        with ThreadPoolExecutor(
            min(self.database.commit_threads, n), thread_name_prefix="cdc_sink-table"
        ) as pool:

            def start(name: str, fn: Callable[[], str]) -> None:
                futures.append((name, pool.submit(self._gated(fn))))

            for name, fn in jobs:
                start(name, fn)
            for r in ready:
                if r.name not in planned:
                    start(r.name, _bind(self._write_ready, r, batch_id, None))
            try:
                for members, decoded in decode_passes(plan, self._submit_decode(), parent=raw):
                    st.phases["decode"] = st.phases.get("decode", 0.0) + sum(
                        secs for _, secs in decoded.values()
                    )
                    for m in members:
                        planned.discard(m.name)
                        dec = decoded.get(m.name)
                        start(m.name, _bind(self._write_ready, by_name[m.name], batch_id, dec))
            except Exception as exc:  # each table left decodes its own records then
                logger.warning("a decode shared by tables failed (%s); each decodes its own", exc)
            for name in sorted(planned):
                start(name, _bind(self._write_ready, by_name[name], batch_id, None))
            return _collect(futures, st, errors)

    def _submit_decode(self) -> Callable[[pa.Table, TableSchema], Callable[[], Decoded]]:
        """How a shared decode pass is started: by the decode pool, or in the calling
        thread (when waited for, in a slot of the CPU gate)."""
        pool, fmt, options = self._decode_pool, self.options.format, self.options.decode.options
        gate = self._gate

        def submit(raw: pa.Table, schema: TableSchema) -> Callable[[], Decoded]:
            if pool is not None:
                return pool.submit(schema, raw.column("value"), raw.column("key")).result

            def here() -> Decoded:
                with gate.held():
                    return decode_here(fmt, options, schema, raw.column("value"), raw.column("key"))

            return here

        return submit

    # ------------------------------------------------------------------ one table
    def _open_part(self, raw: pa.Table, part: _Part, batch_id: int) -> _Ready | str:
        """One table's records of the batch, its writer open and its schema evolved by
        them (what is left is their write: :meth:`_write_ready`); or what became of
        them when that is all (a stopped table's rejects, a table skipped)."""
        sub = _rows_of(raw, part.rows)
        stopped = self._stopped_reason(part.name)
        if stopped is not None:
            writer = self._known_writer(part.name) or self._open_writer(part.name)
            result = writer.reject_rows(sub, batch_id, f"table stopped: {stopped}")
            return self._observed(part.name, writer, result)
        first = int(part.schema_rows[0])
        try:
            writer = self._writer(part.name, part.source, raw.slice(first, 1))
        except NoPrimaryKey as exc:
            self._skip(part.name, str(exc), len(part.rows))
            return "skipped"
        at = representative_rows(sub, part.schema_keys)
        reps = sub.slice(int(at[0]), 1) if len(at) == 1 else sub.take(pa.array(at))
        texts = [part.schema_texts.get(k) for k in part.schema_keys[at].tolist()]
        refused = self._evolve(part.name, writer.table, reps, texts)
        return _Ready(part.name, writer, sub, refused, part.rows)

    def _write_ready(
        self, ready: _Ready, batch_id: int, decoded: tuple[Decoded, float] | None
    ) -> str:
        """Writes one table's records of the batch (``decoded``: already decoded, with
        the seconds it took); what became of them."""
        name, writer, sub, pool = ready.name, ready.writer, ready.sub, self._decode_pool
        if ready.refused is None:
            result = writer.write_rows(sub, batch_id, pool=pool, decoded=decoded)
            return self._observed(name, writer, result)
        cut, reason = ready.refused
        result = writer.write_rows(
            sub,
            batch_id,
            refused=refused_mask(sub, cut),
            reason=f"table stopped: {reason}",
            pool=pool,
        )
        self._stop(name, reason, batch_id)  # once committed: a crash before finds it again
        return self._observed(name, writer, result)

    def _observed(self, name: str, writer: TableWriter, result: str) -> str:
        """Tells the hooks of table ``name``'s batch; returns ``result``."""
        if self.events is not None and writer.stats and result == "committed":
            self.events.observe(name, writer.stats[-1])
        return result

    def _write_unrouted(
        self, raw: pa.Table, unrouted: tuple[np.ndarray, list[str]], batch_id: int
    ) -> str:
        """Commits the records that name no table as rejects of :data:`UNROUTED`."""
        rows, reasons = unrouted
        return self._unrouted_writer().reject_rows(raw.take(pa.array(rows)), batch_id, reasons)

    def _known_writer(self, name: str) -> TableWriter | None:
        """The writer of table ``name`` if it is open (now the most recently used)."""
        with self._mutex:
            hit = self._writers.get(name)
            if hit is not None:
                self._writers.move_to_end(name)
            return hit

    def _writer(self, name: str, source: SourceTable | None, first: pa.Table) -> TableWriter:
        """The writer of table ``name``: open, or created from the schema its record
        ``first`` (one row: ``key``, ``value``) carries.

        Raises:
            NoPrimaryKey: The table has no key (the caller skips it).
        """
        hit = self._known_writer(name)
        if hit is not None:
            return hit
        try:
            return self._open_writer(name)
        except TableNotFound:
            pass
        schema = self._source_schemas().schema_of(
            name,
            _bytes(first, "value", 0),
            _bytes(first, "key", 0),
            num_buckets=self.database.buckets.get(name, self.database.num_buckets),
        )
        path = table_path(self.database.table_root, name)
        table = create_table(
            path,
            schema,
            options=self.options.table,
            storage_options=self.options.storage_options or None,
        )
        origin = source.qualified() if source is not None else "its records' source"
        logger.info("table %s created from %s at %s", name, origin, path)
        if self.events is not None:
            self.events.table_created(name)
        writer = TableWriter(path, self.options, self._dead_letters(name), table)
        return self._add_writer(name, writer)

    def _open_writer(self, name: str) -> TableWriter:
        """The writer of table ``name``, opened (raises TableNotFound)."""
        path = table_path(self.database.table_root, name)
        storage = self.options.storage_options or None
        table = open_table(path, options=self.options.table, storage_options=storage)
        writer = TableWriter(path, self.options, self._dead_letters(name), table)
        return self._add_writer(name, writer)

    def _dead_letters(self, name: str) -> _TableDeadLetters | None:
        """Table ``name``'s view of the dead-letter sink (None: there is none)."""
        return None if self.dead_letter is None else self.dead_letter.of_table(name)

    def _add_writer(self, name: str, writer: TableWriter) -> TableWriter:
        """Keeps ``writer`` (the most recently used)."""
        with self._mutex:
            self._writers[name] = writer
            self._writers.move_to_end(name)
        return writer

    def _unrouted_writer(self) -> TableWriter:
        """The writer of :data:`UNROUTED` (its table created on first use)."""
        hit = self._known_writer(UNROUTED)
        if hit is not None:
            return hit
        path = table_path(self.database.table_root, UNROUTED)
        storage = self.options.storage_options or None
        try:
            table = open_table(path, options=self.options.table, storage_options=storage)
        except TableNotFound:
            table = create_table(
                path, _UNROUTED_SCHEMA, options=self.options.table, storage_options=storage
            )
        writer = TableWriter(path, self.options, self._dead_letters(UNROUTED), table)
        return self._add_writer(UNROUTED, writer)

    # ------------------------------------------------------------------ schemas
    def _source_schemas(self) -> SourceSchemas:
        """The schemas of the sources' messages (made on first use)."""
        with self._mutex:
            if self._schemas is None:
                self._schemas = SourceSchemas(
                    self.options.format,
                    self.options.decode.options,
                    schema_dir=self.database.schema_dir,
                    key_columns=self.database.key_columns,
                )
            return self._schemas

    def _evolve(
        self,
        name: str,
        table: Table,
        reps: pa.Table,
        value_schemas: Sequence[bytes | None] | None = None,
    ) -> tuple[dict[int, int], str] | None:
        """Takes the schema each record of ``reps`` carries (the first record of each
        distinct schema in each Kafka partition: :func:`representatives`) into the
        table: columns added, widened, each in a version of its own.

        Kafka orders records per partition only, so a schema the table cannot take is
        refused per partition: in each partition where it appears, from its first record
        on. Returns ({partition: the offset refusing starts at}, why), or None when the
        table takes every schema. ``value_schemas``: per record of ``reps``, its JSON
        envelope schema's bytes when the routing read them (the value is not parsed
        again)."""
        partition = np.asarray(reps.column("partition").to_numpy(zero_copy_only=False), np.int64)
        offset = np.asarray(reps.column("offset").to_numpy(zero_copy_only=False), np.int64)
        cut: dict[int, int] = {}
        why: str | None = None
        for i in range(reps.num_rows):
            text = None if value_schemas is None else value_schemas[i]
            refused = self._refusal(name, table, reps, i, text)
            if refused is not None:
                p, o = int(partition[i]), int(offset[i])
                cut[p] = min(cut.get(p, o), o)
                why = why or refused
        return None if why is None else (cut, why)

    def _refusal(
        self, name: str, table: Table, sub: pa.Table, i: int, value_schema: bytes | None
    ) -> str | None:
        """Takes the schema record ``i`` of ``sub`` carries into ``table``; why the table
        cannot take it (None: it took it, or it has nothing to take)."""
        try:
            source = self._source_schemas().schema_of(
                name,
                _bytes(sub, "value", i),
                _bytes(sub, "key", i),
                num_buckets=_own_schema(table).num_buckets,
                value_schema=value_schema,
            )
        except NoPrimaryKey:
            return None  # the table has the key the user named: the rows are checked
        except SchemaError as exc:
            return f"a schema no table can take: {exc}"
        own = _own_schema(table)
        if self._taken.get((name, id(source))) is own:
            return None  # the table's schema already takes it as it is
        change = schema_change(own, source)
        if change.refused is not None:
            return change.refused
        if change.empty:
            # the source schemas are cached for the process: their ids stay theirs
            self._taken[(name, id(source))] = own
        _apply_change(name, table, change)
        return None

    # ------------------------------------------------------------------ stops and skips
    def _stopped_reason(self, name: str) -> str | None:
        """Why table ``name`` is stopped (None: it is not)."""
        with self._mutex:
            if self._stopped is None:
                self._stopped = self._load_stops()
            return self._stopped.get(name)

    def _load_stops(self) -> dict[str, str]:
        """The stops recorded under the root."""
        store = self._root_store()
        out: dict[str, str] = {}
        for key in store.list_keys(_STOPPED_PREFIX):
            try:
                doc = json.loads(store.get(key))
                out[str(doc["table"])] = str(doc["reason"])
            except (ValueError, KeyError, TypeError) as exc:
                logger.warning("unreadable stop record %s: %s", key, exc)
        return out

    def _stop(self, name: str, reason: str, batch_id: int) -> None:
        """Records that table ``name`` is stopped, for ``reason``."""
        doc = {"table": name, "reason": reason, "batch_id": batch_id, "ms": int(time.time() * 1e3)}
        self._root_store().put(f"{_STOPPED_PREFIX}{name}.json", json.dumps(doc).encode())
        with self._mutex:
            if self._stopped is None:
                self._stopped = self._load_stops()
            self._stopped[name] = reason
        logger.error(
            "table %s stopped: %s; its records go to the dead letters from batch %d on "
            "(docs/operations.md, 'A stopped table')",
            name,
            reason,
            batch_id,
        )
        if self.events is not None:
            self.events.table_stopped(name, reason)

    def _skip(self, name: str, reason: str, n: int) -> None:
        """Leaves out ``n`` records of table ``name`` (it has no key)."""
        with self._mutex:
            first = name not in self._skipped
            self._skipped.add(name)
        if first:
            logger.warning("table %s skipped: %s (--key-columns takes it)", name, reason)
        if self.events is not None:
            self.events.table_skipped(name, "no_primary_key", n)

    def _root_store(self) -> ObjectStore:
        """The store of the table root (its ``_database/`` entries)."""
        with self._mutex:
            if self._store is None:
                root = self.database.table_root
                local = parse_store_url(root).kind == "local"
                if local:
                    os.makedirs(root, exist_ok=True)
                storage = None if local else (self.options.storage_options or None)
                self._store = store_for(root, storage, check_conditional_writes=False)
            return self._store

    # ------------------------------------------------------------------ memory
    def _release_memory(self, used: set[str]) -> None:
        """Closes the least recently written tables while the tablets held exceed the
        budget (never one written in this batch)."""
        sizes = {name: _held_bytes(w) for name, w in list(self._writers.items())}
        total = sum(sizes.values())
        for name in list(self._writers):
            if total <= self.database.memory_budget_bytes:
                break
            if name in used or name == UNROUTED:
                continue
            with self._mutex:
                writer = self._writers.pop(name)
            writer.close()
            total -= sizes[name]
            logger.info("table %s released (%d bytes of tablets)", name, sizes[name])
        if self.events is not None:
            self.events.tables_open(len(self._writers), total)

    def close(self) -> None:
        """Closes every table's writer (forwarding what is left), the decode worker
        processes and the dead-letter sink."""
        with self._mutex:
            writers = list(self._writers.values())
            self._writers.clear()
            pool, self._decode_pool = self._decode_pool, None
        if pool is not None:
            pool.close()
        for writer in writers:
            writer.close()
        if self.dead_letter is not None:
            close = getattr(self.dead_letter.sink, "close", None)
            if close is not None:
                close()


def _valid_name(name: str) -> bool:
    """Whether ``name`` can be a table's name under the root."""
    return bool(_NAME.match(name))


def _driver_rows(rows: DataFrame, *extra: str) -> pa.Table:
    """Records of a tagged batch, brought to the driver in Kafka order with the columns
    a reject records (and ``extra``)."""
    got = raw_columns(rows, *extra).toArrow()
    return got.sort_by(
        [("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")]
    )


def _shared_input(r: _Ready) -> SharedInput:
    """What a shared decode takes of one table's records."""
    return SharedInput(r.name, r.sub, r.writer.table.schema, r.rows)


def _collect(
    futures: Sequence[tuple[str, Future[_T]]], st: RouterStats, errors: list[BaseException]
) -> dict[str, _T]:
    """What each table's job returned; a failed table is marked ``failed`` in ``st``,
    its error logged and added to ``errors`` (every job ends before the batch fails)."""
    done: dict[str, _T] = {}
    for name, fut in futures:
        try:
            done[name] = fut.result()
        except BaseException as exc:
            st.tables[name] = "failed"
            logger.error("table %s: batch %d failed: %s", name, st.batch_id, exc)
            errors.append(exc)
    return done


def _bind(fn: Callable[..., _T], *args: Any) -> Callable[[], _T]:
    """``fn`` with ``args`` bound (a loop's values, not its variables)."""
    return lambda: fn(*args)


def _rows_of(raw: pa.Table, rows: np.ndarray) -> pa.Table:
    """The records ``rows`` (ascending) of ``raw``: a slice when they follow each other
    (a topic-partition's records, as Spark's Kafka source gives them), else a copy."""
    if len(rows) and int(rows[-1]) - int(rows[0]) + 1 == len(rows):
        return raw.slice(int(rows[0]), len(rows))
    return raw.take(pa.array(rows))


def representatives(sub: pa.Table, schema_keys: np.ndarray) -> pa.Table:
    """The first record of each distinct schema key in each Kafka partition of ``sub``
    (records of one table, in order), ordered by partition and offset."""
    rows = representative_rows(sub, schema_keys)
    if len(rows) == 1:
        return sub.slice(int(rows[0]), 1)
    return sub.take(pa.array(rows))


def representative_rows(sub: pa.Table, schema_keys: np.ndarray) -> np.ndarray:
    """The positions in ``sub`` of :func:`representatives`' records."""
    partition = np.asarray(sub.column("partition").to_numpy(zero_copy_only=False), np.int64)
    if len(partition) == 0:
        return np.zeros(0, np.int64)
    if (partition == partition[0]).all() and (schema_keys == schema_keys[0]).all():
        return np.zeros(1, np.int64)  # one partition, one schema (most tables' batches)
    order = np.lexsort((np.arange(len(partition)), partition, schema_keys))
    sk, pt = schema_keys[order], partition[order]
    first = order[np.r_[True, (sk[1:] != sk[:-1]) | (pt[1:] != pt[:-1])]]
    offset = np.asarray(sub.column("offset").to_numpy(zero_copy_only=False), np.int64)
    return first[np.lexsort((offset[first], partition[first]))]


def refused_mask(sub: pa.Table, cut: Mapping[int, int]) -> np.ndarray:
    """The records of ``sub`` refused by ``cut`` ({partition: first refused offset})."""
    partition = np.asarray(sub.column("partition").to_numpy(zero_copy_only=False), np.int64)
    offset = np.asarray(sub.column("offset").to_numpy(zero_copy_only=False), np.int64)
    limit = np.full(len(offset), np.iinfo(np.int64).max, dtype=np.int64)
    for p, o in cut.items():
        limit[partition == p] = o
    return offset >= limit


def _bytes(raw: pa.Table, column: str, row: int) -> bytes | None:
    """One cell of a binary column of ``raw``."""
    v = raw.column(column)[row].as_py()
    return None if v is None else bytes(v)


def _apply_change(name: str, table: Table, change: SchemaChange) -> None:
    """Adds and widens the columns ``change`` names, each in a version of its own."""
    for col in change.add:
        logger.info("table %s: adding column %s %s", name, col.name, col.type)
        table.add_column(col.name, col.type, nullable=col.nullable, default=col.default)
    for col_name, new_type in change.widen:
        logger.info("table %s: widening column %s to %s", name, col_name, new_type)
        table.widen_column(col_name, new_type)


def _own_schema(table: Table) -> TableSchema:
    """The newest schema the table's writer knows, without reading the log (a writer
    learns another's versions from the commit it loses: :data:`~cdc_sink.spark.writer.
    COMMIT_ATTEMPTS`), so that a steady-state batch makes no request for it."""
    core = core_of(table)
    return core.schema_at(core.version)


def _held_bytes(writer: TableWriter) -> int:
    """Bytes of the tablets ``writer``'s table holds."""
    core = core_of(writer.table)
    buckets = core.schema_at(core.version).num_buckets
    with core.exclusive():  # no log read: what this process holds, as it holds it
        held = (core.writer_tablet(b) for b in range(buckets))
        return sum(int(t.memory_bytes()) for t in held if t is not None)


def _one_prepare_thread(opts: SinkOptions) -> SinkOptions:
    """``opts`` with one thread preparing each table's buckets unless the user chose a
    number (``TableOptions.prepare_threads``): the router writes its tables on
    ``commit_threads`` threads already, and a thread pool of each table's own, started
    for each batch, cost more than it gained (docs/benchmarks.md, "Many tables in one
    job")."""
    table = opts.table or TableOptions()
    if table.prepare_threads is not None:
        return opts
    return replace(opts, table=replace(table, prepare_threads=1))


def _check_router_options(opts: SinkOptions) -> None:
    """Refuses sink options the router does not take."""
    if opts.jvm_json:
        raise InvalidOption(
            "a whole-database sink reads Debezium messages with the Python decoders: "
            "decode.json_decoder='python'",
            option="decode.json_decoder",
        )
    if opts.apply_mode == "driver" and opts.decode_in != "driver":
        raise InvalidOption(
            "a whole-database sink in driver mode decodes in the driver (decode.where="
            "'driver'); apply_mode='executors' decodes and prepares in tasks",
            option="decode.where",
        )


def database_sink(
    database: DatabaseOptions | str,
    *,
    options: SinkOptions | None = None,
    dead_letter: DeadLetterSink | None = None,
) -> DatabaseSink:
    """Returns the ``foreachBatch`` function that writes a whole database's CDC topics,
    one table per source table under ``database.table_root`` (module docstring).

    Args:
        database: The options, or just the table root.
        options: Every table's sink options (``format`` ``debezium`` or
            ``debezium-avro``; driver apply mode).
        dead_letter: Where rejected records go.

    Raises:
        InvalidOption: A bad option.
    """
    if isinstance(database, str):
        database = DatabaseOptions(database)
    return DatabaseSink(database, options=options, dead_letter=dead_letter)
