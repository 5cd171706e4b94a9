"""The Spark batch source ``format("cdc_sink")``: repeatable snapshot reads of a table.

::

    cdc_sink.spark.register(spark)
    df = (spark.read.format("cdc_sink")
          .option("versionAsOf", 42)            # or timestampAsOf (ISO string, epoch ms)
          .option("columns", "order_id,amount")  # optional column pruning
          .load(path))

Where each step runs::

    planning (Python worker of the driver)
      CdcSinkDataSource.schema()   open the table, resolve the version ONCE (default:
                                   latest), Spark schema of that version's columns; the
                                   resolved instance is pickled into the plan, so every
                                   action on the DataFrame reads the same version
      CdcSinkReader.pushFilters()  with option pushFilters=true only: keeps the filters it
                                   can apply exactly, hands the others back to Spark (which
                                   does not re-check kept ones); by default CdcSinkScan,
                                   keeps none (PUSHDOWN_HAZARD)
      CdcSinkReader.partitions()   one BucketPartition per bucket: path, version, bucket,
                                   columns, kept predicates
    execution (Python workers of the executors)
      CdcSinkReader.read(part)     Table from a per-process cache (reopened after a fork
                                   or when the table at the path changes, see
                                   cdc_sink.spark._tables; each Table keeps
                                   up to 2 x num_buckets loaded bucket versions), then
                                   Table.bucket_batches(...) - pages skipped by min/max,
                                   rows filtered - each batch conformed to the Arrow schema
                                   Spark expects

A table on an object store is read by its URL (``load("s3://bucket/prefix/t")``) with
its ``storage_options`` as reader options prefixed ``storage.``
(``.option("storage.endpoint", url)``, ``.option("storage.region", r)``...); what they
leave unset (credentials best of all) comes from the environment variables ``obstore``
reads (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``...) in the driver and executors.

Spark does no column pruning for Python sources (``df.select`` still reads every
declared column): the ``columns`` option is the way to read fewer. A user-specified
schema (``spark.read.schema(...)``) also selects columns; its types must match.
This module imports no Spark session and does nothing on import: Spark workers import it
to unpickle the source (classes are pickled by reference).
"""

from __future__ import annotations

import logging
import re
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
)
from pyspark.sql.types import StructType

from cdc_sink.changefeed import ChangesNotRetained
from cdc_sink.errors import InvalidOption, SchemaMismatch
from cdc_sink.spark import change_feed, change_stream
from cdc_sink.spark._catalog_location import location_of, with_location, without_location
from cdc_sink.spark._tables import TableCache, storage_options_from
from cdc_sink.spark.options import StorageOptions
from cdc_sink.spark.types import arrow_schema, column_value, conform_batch, spark_schema
from cdc_sink.storage.objectstore import StoreConfigError
from cdc_sink.storage.objectstore.urls import parse_store_url

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "FORMAT",
    "JVM_PROVIDER",
    "PUSHDOWN_HAZARD",
    "PYTHON_FORMAT",
    "BucketPartition",
    "CdcSinkDataSource",
    "CdcSinkPythonSource",
    "CdcSinkReader",
    "CdcSinkScan",
    "Predicate",
    "register",
    "translate_filter",
]

FORMAT = "cdc_sink"
"""The name of the format: ``spark.read.format(FORMAT)``."""

PYTHON_FORMAT = "cdc_sink_python"
"""The name of this Python source where the JVM connector owns :data:`FORMAT`."""

JVM_PROVIDER = "io.cdcsink.spark.CdcSinkProvider"
"""The JVM connector's ``DataSourceRegister`` (its jar:
:func:`~cdc_sink.spark.session.connector_jar`)."""

_log = logging.getLogger(__name__)

Predicate = tuple[Any, ...]
"""A cdc_sink filter predicate ``(column, op, value)`` or ``(column, op)``."""


def register(spark: SparkSession) -> str:
    """Registers the ``cdc_sink`` format with ``spark`` and enables filter pushdown.

    Where the JVM connector's jar is on the session's classpath (``cdc-sink jars``;
    :func:`cdc_sink.spark.session.local_spark` puts it there), it owns the name
    ``cdc_sink`` (Spark refuses a Python source of a name a JVM source claims) and reads
    snapshots and the batch change feed itself; this Python source is then registered as
    :data:`PYTHON_FORMAT`, which the connector hands streams of the change feed to
    (``readStream`` with ``readChangeFeed``).
    Without the jar (Spark Connect to a server without it, a cluster without it) this
    Python source is ``cdc_sink``. Logs which one reads ``format("cdc_sink")``.

    Sets ``spark.sql.python.filterPushdown.enabled=true`` on the session: without it
    Spark offers no filters to Python sources and refuses to plan a reader that
    implements ``pushFilters`` (``DATA_SOURCE_PUSHDOWN_DISABLED``), which the Python
    source does with ``.option("pushFilters", "true")`` (off by default:
    :data:`PUSHDOWN_HAZARD`).

    Args:
        spark: The session to register with.

    Returns:
        ``"jvm"`` when the JVM connector reads ``format("cdc_sink")``, ``"python"`` when
        this Python source does.
    """
    from pyspark.errors import AnalysisException

    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        spark.dataSource.register(CdcSinkDataSource)
    except AnalysisException as exc:
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(exc):
            raise
        try:
            spark.dataSource.register(CdcSinkPythonSource)
        except AnalysisException as again:  # registered by an earlier call already
            if "DATA_SOURCE_ALREADY_EXISTS" not in str(again):
                raise
        _log.info(
            'format("cdc_sink") reads through the JVM connector (%s); the Python data '
            "source is %s, for the change feed",
            JVM_PROVIDER,
            PYTHON_FORMAT,
        )
        return "jvm"
    _log.info(
        'format("cdc_sink") reads through the Python data source (the JVM connector %s '
        "is not on this session's classpath)",
        JVM_PROVIDER,
    )
    return "python"


# ---------------------------------------------------------------------- options
@dataclass(frozen=True)
class _Resolved:
    """What the driver fixed for one DataFrame: the version and what to read of it."""

    path: str
    version: int
    columns: tuple[str, ...]
    types: Mapping[str, pa.DataType]  # every column of the version (filters may name any)
    num_buckets: int
    schema: StructType
    push_filters: bool = False
    storage_options: StorageOptions = field(default_factory=StorageOptions)


_EPOCH_MS = re.compile(r"[+-]?\d+")

PUSHDOWN_HAZARD = (
    "Spark 4.3 stores the Python reader that filters were pushed to on the data source "
    "instance of the DataFrame's relation (PythonDataSourceV2), and plans every later scan "
    "of that relation with it; later Spark keeps it per scan (PythonScanBuilder)"
)
"""Why ``pushFilters`` is off by default (a later query of a DataFrame would otherwise
read only the rows an earlier query's filters selected)."""


@dataclass(frozen=True)
class _ReadOptions:
    """The options of a read, parsed (before the table is opened)."""

    path: str
    version: int | None
    timestamp: int | str | None  # epoch milliseconds or an ISO-8601 string
    columns: tuple[str, ...] | None
    push_filters: bool
    storage_options: StorageOptions = field(default_factory=StorageOptions)


def _parse_options(options: Mapping[str, str]) -> _ReadOptions:
    """path, version, timestamp and columns from the (case-insensitive) options.

    Raises:
        ValueError: No path, a malformed option, or both versionAsOf and timestampAsOf.
    """
    opts = {str(k).lower(): v for k, v in options.items()}
    path = _path_option(opts.get("path"))
    version = _version_option(opts.get("versionasof"))
    timestamp = _timestamp_option(opts.get("timestampasof"))
    if version is not None and timestamp is not None:
        raise ValueError("cdc_sink: give versionAsOf or timestampAsOf, not both")
    columns = _columns_option(opts.get("columns"))
    push = str(opts.get("pushfilters", "false")).strip().lower()
    if push not in ("true", "false"):
        raise ValueError(f"cdc_sink: pushFilters must be true or false, got {push!r}")
    return _ReadOptions(
        path=path,
        version=version,
        timestamp=timestamp,
        columns=columns,
        push_filters=push == "true",
        storage_options=storage_options_from(opts),
    )


def _given(raw: object) -> str | None:
    """An option's text, stripped; None when it is missing or blank."""
    if raw is None or str(raw).strip() == "":
        return None
    return str(raw).strip()


def _path_option(path: str | None) -> str:
    """The table's local path (``file://`` URLs accepted) or object-store URL."""
    if not path:
        raise ValueError('cdc_sink: no table path; use spark.read.format("cdc_sink").load(path)')
    url = urllib.parse.urlparse(str(path))
    if url.scheme == "file":
        return urllib.parse.unquote(url.path)
    if url.scheme and len(url.scheme) > 1:  # (a one-letter scheme is a Windows drive)
        try:
            return parse_store_url(str(path)).url
        except StoreConfigError as exc:
            raise InvalidOption(f"cdc_sink: {exc}", option="path") from None
    return str(path)


def _version_option(raw: str | None) -> int | None:
    text = _given(raw)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"cdc_sink: versionAsOf must be an integer, got {raw!r}") from None


def _timestamp_option(raw: str | None) -> int | str | None:
    text = _given(raw)
    if text is None:
        return None
    return int(text) if _EPOCH_MS.fullmatch(text) else text


def _columns_option(raw: str | None) -> tuple[str, ...] | None:
    if _given(raw) is None:
        return None
    columns = tuple(c.strip() for c in str(raw).split(","))
    if any(not c for c in columns) or len(set(columns)) != len(columns):
        raise ValueError(
            f"cdc_sink: columns must be distinct names separated by commas, got {raw!r}"
        )
    return columns


def _resolve(options: Mapping[str, str], user_schema: StructType | None = None) -> _Resolved:
    """Opens the table and fixes the version and the columns of a read.

    Raises:
        VersionNotFound: The version (or timestamp) is not retained; the message names
            the oldest readable version.
        TableNotFound: No table at the path.
        SchemaMismatch: A user-specified schema does not match the version's columns.
        ValueError: Malformed options, or unknown columns.
    """
    o = _parse_options(options)
    table = _TABLES.get(o.path, storage_options=o.storage_options)
    timestamp = o.timestamp
    if isinstance(timestamp, str):
        try:
            version = table.resolve_version(None, timestamp)
        except ValueError:
            raise ValueError(
                f"cdc_sink: timestampAsOf must be an ISO-8601 timestamp or "
                f"epoch milliseconds, got {timestamp!r}"
            ) from None
    else:
        version = table.resolve_version(o.version, timestamp)
    schema = table.schema_at(version)
    columns: Sequence[str] = o.columns if o.columns is not None else schema.names
    unknown = [c for c in columns if not schema.has_column(c)]
    if unknown:
        raise ValueError(
            f"cdc_sink: no column(s) {unknown} at version {version} (columns: {schema.names})"
        )
    declared = spark_schema(schema, columns)
    if user_schema is not None:
        declared = _check_user_schema(user_schema, spark_schema(schema), version)
        if o.columns is not None and tuple(declared.names) != tuple(columns):
            raise ValueError("cdc_sink: the columns option and the given schema disagree")
        columns = declared.names
    return _Resolved(
        path=o.path,
        version=version,
        columns=tuple(columns),
        types={c.name: c.type for c in schema.columns},
        num_buckets=schema.num_buckets,
        schema=declared,
        push_filters=o.push_filters,
        storage_options=o.storage_options,
    )


def _check_user_schema(user: StructType, full: StructType, version: int) -> StructType:
    by_name = {f.name: f for f in full.fields}
    for f in user.fields:
        have = by_name.get(f.name)
        if have is None:
            raise SchemaMismatch(
                f"cdc_sink: the given schema names {f.name!r}, which version "
                f"{version} does not have (columns: {full.names})"
            )
        if have.dataType != f.dataType:
            raise SchemaMismatch(
                f"cdc_sink: column {f.name!r} is {have.dataType.simpleString()}"
                f" at version {version}, not {f.dataType.simpleString()}"
            )
    return user


# ---------------------------------------------------------------------- the source
class CdcSinkDataSource(DataSource):
    """``spark.read.format("cdc_sink")``: a table version as a DataFrame.

    Options: ``path`` (``load(path)``: a directory or an object-store URL; ``storage.*``:
    its storage options), ``versionAsOf`` (int), ``timestampAsOf``
    (ISO-8601 string, a naive one read as UTC, or epoch milliseconds: the newest version
    committed at or before it), ``columns`` (comma-separated names to read; default all),
    ``pushFilters`` (default ``false``: every filter is left to Spark. ``true`` skips
    pages by min/max and applies the filters it can in the reader, for a DataFrame that
    serves one query: Spark 4.3 keeps a Python source's reader with the filters pushed to
    it on the DataFrame's relation, so a later query of the same DataFrame would read
    through it, filtered by the earlier query's filters (:data:`PUSHDOWN_HAZARD`); the
    JVM connector has no such limit. Spark refuses to plan a reader that implements
    ``pushFilters`` where ``spark.sql.python.filterPushdown.enabled`` is off).
    ``readChangeFeed=true`` reads the changes between versions instead
    (:mod:`cdc_sink.spark.change_feed`), and ``spark.readStream`` follows them
    (:mod:`cdc_sink.spark.change_stream`).
    The version (default: the latest) is fixed when the DataFrame is created; with a
    user-specified schema Spark skips :meth:`schema`, and each query resolves it anew.
    """

    _resolved: _Resolved | None = None
    _feed: change_feed.ChangeFeedRead | None = None

    @classmethod
    def name(cls) -> str:
        """The format name, ``cdc_sink``."""
        return FORMAT

    def schema(self) -> StructType:
        """Resolves the version and returns its Spark schema (the columns read).

        Raises:
            VersionNotFound: Not retained; the message names the oldest readable version.
        """
        if change_feed.wants_feed(self.options):  # readChangeFeed: spark/change_feed.py
            if self._feed is None and change_stream.range_free(self.options):
                return change_stream.stream_schema(self.options)  # a stream's (or no) range
            try:
                self._feed = self._feed or change_feed.resolve_feed(self.options)
            except ChangesNotRetained:  # a restarted stream resumes from its checkpoint;
                return change_stream.stream_schema(self.options)  # a batch read: reader()
            return self._feed.schema
        if self._resolved is None:
            self._resolved = _resolve(self.options)
        return with_location(self._resolved.schema, self.options)  # for a catalog table

    def reader(self, schema: StructType) -> CdcSinkScan | change_feed.ChangeFeedScan:
        """A reader of the resolved version (resolved here when Spark was given a schema
        and never called :meth:`schema`), or of the resolved change-feed range. A table
        named in SQL comes with no options: its location is in ``schema``
        (:mod:`cdc_sink.spark._catalog_location`)."""
        if change_feed.wants_feed(self.options):
            feed = self._feed
            if feed is None or feed.schema != schema:  # a schema given with spark.read
                feed = change_feed.resolve_given_feed(self.options, schema)
            return change_feed.ChangeFeedScan(feed)
        options: Mapping[str, str] = self.options
        location = location_of(schema)
        if location is not None:
            schema = without_location(schema)
            if not any(str(k).lower() == "path" for k in options):
                options = {**options, "path": location}
        resolved = self._resolved
        if resolved is None or resolved.schema != schema:
            resolved = _resolve(options, user_schema=schema)
        return CdcSinkReader(resolved) if resolved.push_filters else CdcSinkScan(resolved)

    def streamReader(self, schema: StructType) -> change_stream.ChangeStreamReader:
        """``spark.readStream``: the change feed as a stream (``readChangeFeed=true``).

        Raises:
            StreamNeedsChangeFeed: ``readChangeFeed`` is not ``true``.
        """
        return change_stream.stream_reader(self.options, schema)


class CdcSinkPythonSource(CdcSinkDataSource):
    """:class:`CdcSinkDataSource` under the name :data:`PYTHON_FORMAT`: what
    :func:`register` registers where the JVM connector owns ``cdc_sink``."""

    @classmethod
    def name(cls) -> str:
        """The format name, ``cdc_sink_python``."""
        return PYTHON_FORMAT


@dataclass(frozen=True)
class BucketPartition(InputPartition):
    """One Spark partition: one bucket of one version (picklable, self-contained)."""

    path: str
    version: int
    bucket: int
    columns: tuple[str, ...]
    filters: tuple[Predicate, ...]
    storage_options: StorageOptions = field(default_factory=StorageOptions)


class CdcSinkScan(DataSourceReader):
    """Reads one resolved version, one bucket per partition; Spark applies the filters."""

    def __init__(self, resolved: _Resolved) -> None:
        self.resolved = resolved
        self.arrow_schema = arrow_schema(resolved.schema)
        self.filters: list[Predicate] = []

    def partitions(self) -> list[InputPartition]:
        """One :class:`BucketPartition` per bucket."""
        r = self.resolved
        return [
            BucketPartition(
                path=r.path,
                version=r.version,
                bucket=b,
                columns=r.columns,
                filters=tuple(self.filters),
                storage_options=r.storage_options,
            )
            for b in range(r.num_buckets)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The bucket's rows at the partition's version, as batches of the declared schema.

        Raises:
            VersionNotFound: The version was garbage-collected since planning.
        """
        assert isinstance(partition, BucketPartition)
        table = _TABLES.get(partition.path, storage_options=partition.storage_options)
        version = table.resolve_version(partition.version)
        target = self.arrow_schema
        for batch in table.bucket_batches(
            partition.bucket, version, list(partition.columns), list(partition.filters) or None
        ):
            if batch.num_rows:
                yield conform_batch(batch, target)


class CdcSinkReader(CdcSinkScan):
    """:class:`CdcSinkScan` that keeps the filters it applies exactly (pushdown)."""

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:
        """Keeps the filters :func:`translate_filter` translates exactly.

        Returns:
            The filters Spark must still evaluate.
        """
        rejected: list[Filter] = []
        for f in filters:
            pred = translate_filter(f, self.resolved.types)
            if pred is None:
                rejected.append(f)
            else:
                self.filters.append(pred)
        return rejected


# ---------------------------------------------------------------------- filters
_COMPARISON_TYPES = (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)
_COMPARISONS: dict[type[Filter], str] = {
    EqualTo: "=",
    GreaterThan: ">",
    GreaterThanOrEqual: ">=",
    LessThan: "<",
    LessThanOrEqual: "<=",
}
_NEGATED = {"=": "!=", ">": "<=", ">=": "<", "<": ">=", "<=": ">"}


def translate_filter(f: Filter, types: Mapping[str, pa.DataType]) -> Predicate | None:
    """The cdc_sink predicate that selects exactly the rows Spark's ``f`` selects.

    Translated (on top-level columns, with literals that convert exactly to the column's
    type, see :func:`cdc_sink.spark.types.column_value`): ``EqualTo``, ``EqualNullSafe``,
    ``GreaterThan``, ``GreaterThanOrEqual``, ``LessThan``, ``LessThanOrEqual``, ``In``,
    ``IsNull``, ``IsNotNull``, and ``Not`` of ``EqualTo``, ``In``, ``IsNull``,
    ``IsNotNull``, comparisons and ``EqualNullSafe(null)``.

    Left to Spark (``None``): string ``LIKE`` filters, nested columns, NaN literals,
    ``x > v``/``x >= v``/``NOT x < v``/``NOT x <= v`` on float columns (Spark orders NaN
    above every number, Arrow's comparisons are false for NaN), ``NOT IN`` with a null or
    an empty list, ``NOT x <=> v``, and any literal that would need rounding.
    """
    negated = isinstance(f, Not)
    inner: Filter = f.child if isinstance(f, Not) else f
    attribute = getattr(inner, "attribute", None)
    if not attribute or len(attribute) != 1 or attribute[0] not in types:
        return None
    col = attribute[0]
    t = types[col]
    floating = pa.types.is_floating(t)
    if isinstance(inner, (IsNull, IsNotNull)):
        return (col, "is null" if isinstance(inner, IsNull) != negated else "is not null")
    if isinstance(inner, EqualNullSafe):
        if inner.value is None:
            return (col, "is not null" if negated else "is null")
        if negated:
            return None  # "x IS DISTINCT FROM v" keeps null rows
        inner = EqualTo(inner.attribute, inner.value)
    if isinstance(inner, In):
        return _translate_in(col, t, inner.value, negated)
    if not isinstance(inner, _COMPARISON_TYPES):
        return None
    op = _COMPARISONS[type(inner)]
    if negated:
        op = _NEGATED[op]
    if floating and op in (">", ">="):
        return None
    try:
        value = column_value(inner.value, t)
    except ValueError:
        return None
    return (col, op, value)


def _translate_in(
    col: str, t: pa.DataType, values: Sequence[Any], negated: bool
) -> Predicate | None:
    if negated and (not values or any(v is None for v in values)):
        return None  # NOT IN with a null is never true; NOT IN () keeps null rows
    out: list[Any] = []
    try:
        for v in values:
            if v is not None:
                out.append(column_value(v, t))
    except ValueError:
        return None
    if pa.types.is_floating(t) and any(v == 0.0 for v in out):
        out += [0.0, -0.0]  # Arrow's is_in tells -0.0 from 0.0; Spark's IN does not
    return (col, "not in" if negated else "in", out)


_TABLES = TableCache()
"""This process's tables read by the source (see :mod:`cdc_sink.spark._tables`)."""
