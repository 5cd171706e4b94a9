"""``format("cdc_sink")`` with ``readChangeFeed``: the change feed as a Spark batch read.

::

    df = (spark.read.format("cdc_sink")
          .option("readChangeFeed", "true")
          .option("startingVersion", 5)      # or startingTimestamp
          .option("endingVersion", 9)        # or endingTimestamp; default: the latest
          .load(path))

Both ends are inclusive, as in Delta: the rows are the changes of versions 5..9,
:meth:`Table.changes(4, 9) <cdc_sink.table.Table.changes>`. A timestamp (ISO-8601, a
naive one read as UTC, or epoch milliseconds) starts at the first version committed at or
after it and ends at the last one committed at or before it. Further options:
``columns`` (comma-separated value columns; keys always) and ``setColumnsOnly``
(``true``: only the cells each version wrote, with a ``_set_<column>`` mask per column).
The range is fixed once on the driver; each Spark partition reads one bucket's changes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructField, StructType

from cdc_sink.changefeed import META_COLUMNS
from cdc_sink.engine.inputs import timestamp_ms
from cdc_sink.errors import SchemaMismatch, VersionNotFound
from cdc_sink.schema import TableSchema
from cdc_sink.spark._tables import TableCache, storage_options_from
from cdc_sink.spark.options import StorageOptions
from cdc_sink.spark.types import arrow_schema, conform_batch, spark_type
from cdc_sink.table import Table

__all__ = [
    "ChangeFeedPartition",
    "ChangeFeedRead",
    "ChangeFeedScan",
    "given_columns",
    "resolve_feed",
    "resolve_given_feed",
    "schema_differences",
    "wants_feed",
]

_TABLES = TableCache()


def _opt(options: Mapping[str, str], name: str) -> str | None:
    for k, v in options.items():
        if str(k).lower() == name.lower() and v is not None and str(v).strip():
            return str(v).strip()
    return None


def _flag(options: Mapping[str, str], name: str) -> bool:
    raw = (_opt(options, name) or "false").lower()
    if raw not in ("true", "false"):
        raise ValueError(f"cdc_sink: {name} must be true or false, got {raw!r}")
    return raw == "true"


def wants_feed(options: Mapping[str, str]) -> bool:
    """Whether the read asks for the change feed (``readChangeFeed=true``)."""
    return _flag(options, "readChangeFeed")


@dataclass(frozen=True)
class ChangeFeedRead:
    """What the driver fixed for one change-feed DataFrame (picklable)."""

    path: str
    start: int
    end: int
    columns: tuple[str, ...] | None
    set_columns_only: bool
    num_buckets: int
    schema: StructType
    storage_options: StorageOptions = field(default_factory=StorageOptions)


def _version(options: Mapping[str, str], name: str) -> int | None:
    raw = _opt(options, name)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"cdc_sink: {name} must be an integer, got {raw!r}") from None


def _bound(table: Table, options: Mapping[str, str], which: str) -> int | None:
    """The inclusive version an end of the range names (None: not given)."""
    version = _version(options, f"{which}Version")
    raw = _opt(options, f"{which}Timestamp")
    if version is not None and raw is not None:
        raise ValueError(f"cdc_sink: give {which}Version or {which}Timestamp, not both")
    if raw is None:
        return version
    try:
        ms = timestamp_ms(int(raw) if raw.lstrip("+-").isdigit() else raw)
    except ValueError:
        raise ValueError(f"cdc_sink: {which}Timestamp is no timestamp: {raw!r}") from None
    if which == "ending":
        return table.resolve_version(timestamp=ms)
    try:  # the first version committed at or after ms follows the last one before it
        return table.resolve_version(timestamp=ms - 1) + 1
    except VersionNotFound:
        return table.oldest_version  # nothing committed before ms (that is retained)


def resolve_feed(
    options: Mapping[str, str], columns: tuple[str, ...] | None = None
) -> ChangeFeedRead:
    """Opens the table and fixes the range and the schema of a change-feed read
    (``columns``: the value columns read, instead of the ``columns`` option).

    Raises:
        ValueError: No path, no starting version or timestamp, or a malformed option.
        ChangesNotRetained: The range needs a version GC collected (the message names
            the oldest readable version), or one not committed yet.
    """
    path = _opt(options, "path")
    if path is None:
        raise ValueError('cdc_sink: no table path; use spark.read.format("cdc_sink").load(path)')
    storage = storage_options_from(options)  # storage.*: an object store's options
    table = _TABLES.get(path, storage_options=storage)
    first = _bound(table, options, "starting")
    if first is None:
        raise ValueError("cdc_sink: readChangeFeed needs startingVersion or startingTimestamp")
    last = _bound(table, options, "ending")
    end = table.version if last is None else last
    raw_cols = _opt(options, "columns")
    if columns is None and raw_cols is not None:
        columns = tuple(c.strip() for c in raw_cols.split(","))
    only = _flag(options, "setColumnsOnly")
    start = max(first - 1, 0)
    # No bucket: checks the range and the columns, and gives the records' schema.
    empty = table.changes(start, end, columns=columns, set_columns_only=only, buckets=[])
    fields = [StructField(f.name, spark_type(f.type), f.nullable) for f in empty.schema]
    return ChangeFeedRead(
        path=path,
        start=start,
        end=end,
        columns=columns,
        set_columns_only=only,
        num_buckets=table.schema_at(end).num_buckets,
        schema=StructType(fields),
        storage_options=storage,
    )


def schema_differences(given: StructType, feed: StructType) -> list[str]:
    """What differs between a schema a user gave and the change feed's, field by field."""
    have = {f.name: f for f in given.fields}
    want = {f.name: f for f in feed.fields}
    out = [f"{n!r} is missing" for n in want if n not in have]
    out += [f"{n!r} is not in the change feed" for n in have if n not in want]
    for n in [n for n in want if n in have]:
        g, f = have[n], want[n]
        if g.dataType != f.dataType:
            out.append(
                f"{n!r} is {g.dataType.simpleString()}, the feed's is {f.dataType.simpleString()}"
            )
        elif f.nullable and not g.nullable:
            out.append(f"{n!r} is declared not null, the feed's is nullable")
    if not out and given.names != feed.names:
        out.append(f"the fields are in another order (the feed's: {feed.names})")
    return out


def given_columns(schema: TableSchema, given: StructType, only: bool) -> tuple[str, ...]:
    """The value columns a given schema names (its fields that are neither key, mask
    nor metadata columns, in its order); ``only``: a ``setColumnsOnly`` read."""
    skip = {*schema.primary_key, *META_COLUMNS}
    return tuple(
        n
        for n in given.names
        if n not in skip and schema.has_column(n) and not _is_mask(n, only, schema.names)
    )


def _is_mask(name: str, only: bool, names: list[str]) -> bool:
    """Whether ``name`` is a ``_set_<column>`` mask of a set-columns-only read."""
    return only and name.startswith("_set_") and name[len("_set_") :] in names


def resolve_given_feed(options: Mapping[str, str], given: StructType) -> ChangeFeedRead:
    """:func:`resolve_feed` for a schema given with ``spark.read.schema(...)``: it
    selects the value columns (without the ``columns`` option) and must otherwise be
    the change feed's schema.

    Raises:
        SchemaMismatch: The schemas differ; the message names every field that does.
        ValueError, ChangesNotRetained: As :func:`resolve_feed`.
    """
    read = resolve_feed(options)
    if given == read.schema:
        return read
    if _opt(options, "columns") is None:
        table = _TABLES.get(read.path, storage_options=read.storage_options)
        cols = given_columns(table.schema_at(read.end), given, read.set_columns_only)
        read = resolve_feed(options, columns=cols)
    diffs = schema_differences(given, read.schema)
    if diffs:
        raise SchemaMismatch(
            f"cdc_sink: the schema given to spark.read is not the change feed's of"
            f" {read.path} (versions {read.start + 1}..{read.end}, columns"
            f" {list(read.columns) if read.columns is not None else 'all'}"
            f"{', setColumnsOnly' if read.set_columns_only else ''}): {'; '.join(diffs)}."
            f" The change feed's schema: {read.schema.simpleString()}"
        )
    return replace(read, schema=given)  # what Spark declared, nullability included


@dataclass(frozen=True)
class ChangeFeedPartition(InputPartition):
    """One Spark partition: one bucket's changes of the range."""

    read: ChangeFeedRead
    bucket: int


class ChangeFeedScan(DataSourceReader):
    """Reads a resolved change-feed range, one bucket per partition."""

    def __init__(self, read: ChangeFeedRead) -> None:
        self.feed = read
        self.arrow_schema = arrow_schema(read.schema)

    def partitions(self) -> list[InputPartition]:
        """One :class:`ChangeFeedPartition` per bucket."""
        return [ChangeFeedPartition(self.feed, b) for b in range(self.feed.num_buckets)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The bucket's change records, as batches of the declared schema.

        Raises:
            ChangesNotRetained: GC collected a version of the range since planning.
        """
        assert isinstance(partition, ChangeFeedPartition)
        f = partition.read
        records = _TABLES.get(f.path, storage_options=f.storage_options).changes(
            f.start,
            f.end,
            columns=f.columns,
            set_columns_only=f.set_columns_only,
            buckets=[partition.bucket],
        )
        for batch in records.to_batches():
            if batch.num_rows:
                yield conform_batch(batch, self.arrow_schema)
