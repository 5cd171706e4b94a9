"""``format("cdc_sink")`` with ``readChangeFeed`` as a Structured Streaming source.

::

    changes = (spark.readStream.format("cdc_sink")
               .option("readChangeFeed", "true")
               .option("startingVersion", 5)           # or "latest", or startingTimestamp
               .option("maxVersionsPerTrigger", 10)    # optional
               .load(path))

Each micro-batch is the change records (as the batch feed gives them, see
:mod:`cdc_sink.spark.change_feed`) of the next committed versions. An offset is one
version, ``{"version": v}``: everything up to and including ``v`` has been read. The
micro-batch between offsets ``a`` and ``b`` is :meth:`Table.changes(a, b)
<cdc_sink.table.Table.changes>`, one bucket per Spark partition; a committed range reads
the same records every time, so Spark's checkpoint (the offsets of a micro-batch are
written before it runs, and re-run after a crash) makes the stream exactly once.

Where it starts (only a query without a checkpoint; a restarted query resumes from its
checkpoint's offset whatever the options say):

* ``startingVersion`` ``n``: the changes of version ``n`` on (offset ``n - 1``);
  ``latest``: only versions committed after the query started;
  ``startingTimestamp``: the first version committed at or after it;
* neither: the table at the latest version as ``insert`` records (``_commit_version``
  that version), then its changes, as Delta's stream does (offset ``-1``, the empty
  table before every version).

Bounds of a micro-batch (never splitting a version; at least one version each):
``maxVersionsPerTrigger``, and ``maxRowsPerTrigger``, a soft bound on the records,
estimated from each version's counts in its log entry (inserted, deleted and truncated
rows count one record, updated rows two). ``Trigger.AvailableNow`` honours them and
stops at the version that was latest when the query started; ``Trigger.Once`` reads all.

The records' columns are fixed when the query starts (``columns``, default every column
of the latest version): a column added later is not read; a column of the stream that a
later version drops fails the micro-batch with :class:`~cdc_sink.errors.InvalidOption`
naming that version. A schema given with ``spark.readStream.schema(...)`` must be the
change feed's for those columns (or for the value columns it names, without
``columns``): the same fields in the same order, of the same types, nullable wherever the
feed's are; any other fails at the start with :class:`~cdc_sink.errors.SchemaMismatch`
naming each field that differs. A stream whose position GC collected fails with
:class:`~cdc_sink.changefeed.ChangesNotRetained`, naming the oldest readable version.
A stream without ``readChangeFeed`` is refused (:class:`StreamNeedsChangeFeed`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxFiles,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructField, StructType

from cdc_sink.errors import InvalidOption, SchemaMismatch, StreamNeedsChangeFeed
from cdc_sink.spark._tables import TableCache
from cdc_sink.spark.change_feed import (
    _bound,
    _flag,
    _opt,
    given_columns,
    schema_differences,
    wants_feed,
)
from cdc_sink.spark.types import arrow_schema, conform_batch, spark_type
from cdc_sink.table import Table

__all__ = [
    "SNAPSHOT",
    "ChangeStream",
    "ChangeStreamPartition",
    "ChangeStreamReader",
    "StreamNeedsChangeFeed",
    "check_given_schema",
    "estimated_records",
    "range_free",
    "stream_reader",
    "stream_schema",
]

SNAPSHOT = -1
"""The offset before every version: the micro-batch from it is the table at its end
offset, every live row an ``insert``."""

_TABLES = TableCache()


@dataclass(frozen=True)
class ChangeStream:
    """What the query fixed when it started (picklable): the table, the records'
    columns and schema, and the bounds of a micro-batch."""

    path: str
    columns: tuple[str, ...]
    set_columns_only: bool
    schema: StructType
    num_buckets: int
    max_versions: int | None
    max_rows: int | None


def _positive(options: Mapping[str, str], name: str) -> int | None:
    raw = _opt(options, name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise InvalidOption(
            f"cdc_sink: {name} must be a positive integer, got {raw!r}", option=name
        )
    return value


def _path(options: Mapping[str, str]) -> str:
    path = _opt(options, "path")
    if path is None:
        raise InvalidOption(
            'cdc_sink: no table path; use spark.readStream.format("cdc_sink").load(path)',
            option="path",
        )
    return path


def _columns(options: Mapping[str, str]) -> tuple[str, ...] | None:
    raw = _opt(options, "columns")
    return None if raw is None else tuple(c.strip() for c in raw.split(","))


def range_free(options: Mapping[str, str]) -> bool:
    """Whether the options name no starting version (none, or ``latest``): a stream's,
    which the batch feed refuses."""
    raw = _opt(options, "startingVersion")
    if raw is not None:
        return raw.lower() == "latest"
    return _opt(options, "startingTimestamp") is None


def stream_schema(options: Mapping[str, str]) -> StructType:
    """The Spark schema of a change stream's records: those of the batch feed at the
    latest version (``columns``, ``setColumnsOnly``), whatever the starting options.

    Raises:
        InvalidOption: No path, or a column the latest version lacks.
        TableNotFound: No table at the path.
    """
    table = _TABLES.get(_path(options))
    return _feed_schema(table, _columns(options), _flag(options, "setColumnsOnly"))


def _feed_schema(table: Table, columns: tuple[str, ...] | None, only: bool) -> StructType:
    """The Spark schema of the records of ``columns`` (None: all) at the latest version."""
    latest = table.version
    empty = table.changes(latest, latest, columns=columns, set_columns_only=only, buckets=[])
    return StructType([StructField(f.name, spark_type(f.type), f.nullable) for f in empty.schema])


def check_given_schema(options: Mapping[str, str], given: StructType) -> tuple[str, ...]:
    """Checks a schema given with ``spark.readStream.schema(...)`` against the table's
    change feed (see the module docstring); returns the columns the records hold.

    Without the ``columns`` option the given schema names the value columns read (its
    fields that are neither key, mask nor metadata columns, in its order).

    Raises:
        SchemaMismatch: The schemas differ; the message names every field that does.
        InvalidOption: No path.
        TableNotFound: No table at the path.
    """
    table = _TABLES.get(_path(options))
    only = _flag(options, "setColumnsOnly")
    columns = _columns(options)
    if columns is None:
        columns = given_columns(table.schema, given, only)
    feed = _feed_schema(table, columns, only)
    diffs = schema_differences(given, feed)
    if diffs:
        raise SchemaMismatch(
            f"cdc_sink: the schema given to spark.readStream is not the change feed's of"
            f" {table.root} (columns {list(columns)}"
            f"{', setColumnsOnly' if only else ''}): {'; '.join(diffs)}."
            f" The change feed's schema: {feed.simpleString()}"
        )
    nkeys = len(table.schema.primary_key)
    return tuple(feed.names[: nkeys + len(columns)])


def stream_reader(options: Mapping[str, str], schema: StructType) -> ChangeStreamReader:
    """The stream reader of ``spark.readStream.format("cdc_sink")`` (``schema`` as
    :func:`stream_schema` gave it, or as the user gave it: :func:`check_given_schema`).

    Raises:
        StreamNeedsChangeFeed: ``readChangeFeed`` is not ``true``.
        InvalidOption: A malformed option, or ``endingVersion``/``endingTimestamp``.
        SchemaMismatch: ``schema`` is not the change feed's.
    """
    if not wants_feed(options):
        raise StreamNeedsChangeFeed(
            "cdc_sink: a stream of a cdc_sink table is its change feed: add"
            ' .option("readChangeFeed", "true") to spark.readStream.format("cdc_sink")'
            " (each micro-batch is then the changes of the next committed versions)",
            option="readChangeFeed",
        )
    for name in ("endingVersion", "endingTimestamp"):
        if _opt(options, name) is not None:
            raise InvalidOption(
                f"cdc_sink: a stream has no {name}; it follows the table", option=name
            )
    path = _path(options)
    only = _flag(options, "setColumnsOnly")
    table = _TABLES.get(path)
    columns = check_given_schema(options, schema)
    stream = ChangeStream(
        path=path,
        columns=columns,
        set_columns_only=only,
        schema=schema,
        num_buckets=table.schema.num_buckets,
        max_versions=_positive(options, "maxVersionsPerTrigger"),
        max_rows=_positive(options, "maxRowsPerTrigger"),
    )
    return ChangeStreamReader(stream, dict(options))


def estimated_records(stats: Mapping[str, int]) -> int:
    """The records a version's change feed holds, estimated from its log entry's counts."""
    return (
        int(stats.get("inserted", 0))
        + 2 * int(stats.get("updated", 0))
        + int(stats.get("deleted", 0))
        + int(stats.get("truncated", 0))
    )


@dataclass(frozen=True)
class ChangeStreamPartition(InputPartition):
    """One Spark task of a micro-batch: one bucket's records of the versions in
    ``(start, end]`` (``start`` :data:`SNAPSHOT`: the bucket at ``end``)."""

    stream: ChangeStream
    start: int
    end: int
    bucket: int


def _version_of(offset: Mapping[str, object]) -> int:
    v = offset.get("version") if isinstance(offset, Mapping) else None
    if not isinstance(v, int) or isinstance(v, bool) or v < SNAPSHOT:
        raise InvalidOption(
            f"cdc_sink: {offset!r} is no offset of a cdc_sink change stream", option="offset"
        )
    return v


class ChangeStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The driver's side of a change stream (one per running query) and its tasks' reads.

    Args:
        stream: What the query fixed when it started.
        options: The query's options (for where a new query starts).
    """

    def __init__(self, stream: ChangeStream, options: Mapping[str, str]) -> None:
        self.stream = stream
        self.options = options
        self.arrow_schema = arrow_schema(stream.schema)
        self.target: int | None = None  # Trigger.AvailableNow: the last version to read

    def _table(self) -> Table:
        return _TABLES.get(self.stream.path)

    def initialOffset(self) -> dict[str, int]:
        """Where a query without a checkpoint starts (see the module docstring).

        Raises:
            ChangesNotRetained: ``startingVersion`` (or the timestamp's version) is older
                than the oldest readable version, or not committed yet.
        """
        table = self._table()
        raw = _opt(self.options, "startingVersion")
        if raw is not None and raw.lower() == "latest":
            if _opt(self.options, "startingTimestamp") is not None:
                raise InvalidOption(
                    "cdc_sink: give startingVersion or startingTimestamp, not both",
                    option="startingVersion",
                )
            return {"version": table.version}
        first = _bound(table, self.options, "starting")
        if first is None:
            return {"version": SNAPSHOT}
        start = max(first - 1, 0)
        table.changes(start, start, columns=self.stream.columns, buckets=[])  # retained?
        return {"version": start}

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxRowsPerTrigger``/``maxVersionsPerTrigger`` as Spark's read limit."""
        if self.stream.max_rows is not None:
            return ReadMaxRows(self.stream.max_rows)
        if self.stream.max_versions is not None:
            return ReadMaxFiles(self.stream.max_versions)  # a version is the stream's file
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fixes the last version a ``Trigger.AvailableNow`` query reads: the latest now."""
        self.target = self._table().version

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        """The end of the next micro-batch: the latest version, within the bounds.

        A micro-batch from :data:`SNAPSHOT` ends at the latest version (one snapshot).
        """
        s = _version_of(start)
        table = self._table()
        latest = table.version if self.target is None else min(table.version, self.target)
        if latest <= s:
            return {"version": s}
        if s == SNAPSHOT or isinstance(limit, ReadAllAvailable):
            return {"version": latest}
        end = latest
        if self.stream.max_versions is not None:
            end = min(end, s + self.stream.max_versions)
        if self.stream.max_rows is not None:
            end = self._rows_bound(table, s, end, self.stream.max_rows)
        return {"version": end}

    @staticmethod
    def _rows_bound(table: Table, start: int, end: int, max_rows: int) -> int:
        """The last version of (start, end] whose records, with those before it, stay
        within ``max_rows`` (estimated); at least ``start + 1``."""
        total = 0
        for v in range(start + 1, end + 1):
            total += estimated_records(table.log.read(v).stats)
            if total > max_rows:
                return max(v - 1, start + 1)
        return end

    def reportLatestOffset(self) -> dict[str, int]:
        """The latest committed version (for the query's progress)."""
        return {"version": self._table().version}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[ChangeStreamPartition]:
        """One :class:`ChangeStreamPartition` per bucket (none for an empty range).

        Raises:
            ChangesNotRetained: GC collected the stream's position (the message names the
                oldest readable version), checked here, on the driver.
        """
        s, e = _version_of(start), _version_of(end)
        if e <= s:
            return []
        st = self.stream
        # No bucket: checks the range is retained and the columns still exist.
        self._table().changes(e if s == SNAPSHOT else s, e, columns=st.columns, buckets=[])
        return [ChangeStreamPartition(st, s, e, b) for b in range(st.num_buckets)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """One bucket's records of the partition's range, as batches of the schema.

        Raises:
            ChangesNotRetained: GC collected a version of the range since planning.
        """
        assert isinstance(partition, ChangeStreamPartition)
        st = partition.stream
        table = _TABLES.get(st.path)
        if partition.start == SNAPSHOT:
            batches: Iterator[pa.RecordBatch] = _snapshot(table, partition, self.arrow_schema)
        else:
            batches = iter(
                table.changes(
                    partition.start,
                    partition.end,
                    columns=st.columns,
                    set_columns_only=st.set_columns_only,
                    buckets=[partition.bucket],
                ).to_batches()
            )
        for batch in batches:
            if batch.num_rows:
                yield conform_batch(batch, self.arrow_schema)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: the stream holds nothing between micro-batches."""


def _snapshot(
    table: Table, part: ChangeStreamPartition, target: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """The bucket at ``part.end``, every live row an ``insert`` of that version."""
    st = part.stream
    nkeys = len(table.schema_at(part.end).primary_key)
    stamp_us = table.log.read(part.end).commit_time_ms * 1000
    for batch in table.bucket_batches(part.bucket, part.end, list(st.columns)):
        n = batch.num_rows
        arrays = [batch.column(c) for c in st.columns]
        if st.set_columns_only:
            arrays += [pa.repeat(pa.scalar(True), n) for _ in st.columns[nkeys:]]
        arrays += [
            pa.repeat(pa.scalar("insert"), n),
            pa.repeat(pa.scalar(part.end, pa.int64()), n),
            pa.repeat(pa.scalar(stamp_us, pa.timestamp("us", tz="UTC")), n),
        ]
        yield pa.RecordBatch.from_arrays(arrays, names=target.names)
