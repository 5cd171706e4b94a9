"""A durable, versioned cdc_sink table: N bucket tablets, a WAL, a version log, snapshots.

Every file is immutable once written and a version's log entry is its only commit point
(:mod:`cdc_sink.storage.layout`); a table lives in a directory or an object store (§10).

This module is the facade; the work is done by

* :mod:`cdc_sink.engine` -- :class:`~cdc_sink.engine.TableCore`, the one owner of the
  table's state in this process (the log, history, schemas and bucket tablets; loading,
  replay, following other writers), whose methods are the commit protocol, snapshots,
  compaction, schema changes and GC;
* :mod:`cdc_sink.transaction` -- the commit object every writer goes through (decide,
  prepare per bucket, commit one log entry, abort, forward dead letters);
* :mod:`cdc_sink.changefeed` -- the changes between versions;
* :mod:`cdc_sink.storage.gc` -- what GC deletes (a plan) and deleting it.

A :class:`Table` owns one core; the layers above the engine reach it through
:func:`cdc_sink.engine.core_of`.

A :class:`Table` opened for writing keeps one tablet per bucket at the latest version
(loaded lazily: newest snapshot + the segments after it), retains ``memory_versions``
versions in them, and loads older ones from storage (docs/architecture.md §4-§8, §10).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from cdc_sink import changefeed
from cdc_sink.batch import ChangeBatch, Rejects
from cdc_sink.engine import CommitResult, PreparedBucket, TableCore, TableOptions, create_files
from cdc_sink.engine.inputs import keys_table, timestamp_ms, to_batch
from cdc_sink.engine.location import open_location
from cdc_sink.errors import InvalidOption
from cdc_sink.schema import TableSchema
from cdc_sink.stats import TableStats
from cdc_sink.storage.gc import GcPlan, GcPolicy
from cdc_sink.storage.objectstore import ObjectStore
from cdc_sink.storage.rejects import batch_reject_records, reject_records
from cdc_sink.transaction import Transaction

__all__ = [
    "CommitResult",
    "GcPlan",
    "PreparedBucket",
    "Table",
    "TableOptions",
    "Transaction",
    "create_table",
    "open_table",
    "reject_records",
]

_T = TypeVar("_T")


def create_table(
    path: str | os.PathLike[str],
    schema: TableSchema | Mapping[str, Any],
    *,
    options: TableOptions | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> Table:
    """Creates an empty table at ``path`` (version 0).

    Args:
        path: A directory (created if missing), ``file://`` or object-store URL
            (``s3://bucket/prefix``...: :func:`cdc_sink.storage.objectstore.store_for`).
        schema: The schema, or its dictionary form.
        options: Table options (``page_rows`` is fixed here).
        storage_options: An object store's endpoint, region, credentials...

    Raises:
        TableExists, SchemaError: ``path`` holds a table; the schema is invalid.
        cdc_sink.storage.objectstore.StoreConfigError: A bad URL or store.
    """
    root, store = open_location(path, storage_options, options, probe=True)
    create_files(store, schema, options or TableOptions())
    return Table(root, options=options, store=store)


def open_table(
    path: str | os.PathLike[str],
    *,
    options: TableOptions | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> Table:
    """Opens the table at ``path`` (a directory or URL, with ``storage_options``, as for
    :func:`create_table`; ``options``: in memory and retention, ``page_rows`` is the
    table's).

    Raises:
        TableNotFound: ``path`` holds no table.
        cdc_sink.storage.objectstore.StoreConfigError: A bad URL or store.
    """
    root, store = open_location(path, storage_options, options, probe=False)
    return Table(root, options=options, store=store)  # TableNotFound: no table, or no version 0


class Table:
    """A cdc_sink table (see the module docstring), from :func:`create_table`/:func:`open_table`."""

    def __init__(
        self, root: str, *, options: TableOptions | None = None, store: ObjectStore | None = None
    ) -> None:
        self._core = TableCore(root, options, store)
        self.root = root
        self.store = self._core.store
        self.options = self._core.options
        self.log = self._core.log

    # ------------------------------------------------------------------ metadata
    def schema_of(self, schema_id: int) -> TableSchema:
        """The schema with id ``schema_id``."""
        return self._core.schema_of(schema_id)

    def schema_at(self, version: int) -> TableSchema:
        """The schema version ``version`` was written under."""
        return self._core.schema_at(version)

    @property
    def schema(self) -> TableSchema:
        """The latest schema."""
        self._core.refresh()
        return self._core.schema_at(self._core.version)

    @property
    def version(self) -> int:
        """The latest committed version."""
        self._core.refresh()
        return self._core.version

    @property
    def oldest_version(self) -> int:
        """The oldest readable version."""
        return self._core.oldest_version()

    def versions(self) -> list[dict[str, Any]]:
        """Every retained version: version, kind, app_id, batch_id, commit time, stats."""
        self._core.refresh()
        return [e.summary() for e in self.log.entries(from_version=self.oldest_version)]

    def resolve_version(self, version: int | None = None, timestamp: Any = None) -> int:
        """The version a read of ``version`` or ``timestamp`` (default: latest) sees.

        Raises:
            InvalidOption: Both ``version`` and ``timestamp`` were given.
            VersionNotFound: Not retained; the message names the oldest readable version.
        """
        s = self._core
        s.refresh()
        if version is not None and timestamp is not None:
            raise InvalidOption("give version or timestamp, not both", option="version/timestamp")
        if timestamp is not None:
            v = self.log.version_at(timestamp_ms(timestamp))
        else:
            v = s.version if version is None else int(version)
        s.check_readable(v)
        return v

    # ------------------------------------------------------------------ reads
    def bucket_batches(
        self,
        bucket: int,
        version: int,
        columns: Sequence[str] | None = None,
        filter: Any = None,
    ) -> Iterator[pa.RecordBatch]:
        """Record batches of one bucket at ``version`` (what a Spark partition reads).

        Raises:
            VersionNotFound: GC collected the version during the read.
        """
        schema = self.schema_at(version)
        yield from self._core.bucket_batches(bucket, version, columns, filter, schema)

    def read(
        self,
        version: int | None = None,
        timestamp: Any = None,
        columns: Sequence[str] | None = None,
        filter: Any = None,
    ) -> pa.Table:
        """The table at a version as Arrow (rows grouped by bucket, in row id order).

        Args:
            version: Version to read (default latest).
            timestamp: Or the newest version committed at or before this time
                (datetime, ISO string, or epoch milliseconds).
            columns: Columns to return (default all, schema order).
            filter: Conjunctive predicates ``[(column, op, value), ...]``; pages whose
                min/max exclude them are skipped.

        Raises:
            VersionNotFound: The version is not retained (the message names the oldest
                readable version).
        """
        v = self.resolve_version(version, timestamp)
        schema = self.schema_at(v)
        names = list(columns) if columns is not None else schema.names
        batches = [
            b
            for bucket in range(schema.num_buckets)
            for b in self.bucket_batches(bucket, v, names, filter)
        ]
        return pa.Table.from_batches(batches, schema=schema.arrow_schema(names))

    def get(
        self,
        keys: pa.Table | Sequence[Mapping[str, Any]] | Sequence[Any],
        version: int | None = None,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        """Point lookups of keys at a version (missing keys are left out).

        Args:
            keys: A table of the key columns, a list of key dicts, or (one-column keys)
                a list of key values.
            version: Version to read (default latest).
            columns: Columns to return (default all, schema order).
        """
        from cdc_sink.bucketing import bucket_ids

        v = self.resolve_version(version, None)
        schema = self.schema_at(v)
        kt = keys_table(keys, schema)
        key_arrays = [kt.column(c.name) for c in schema.key_columns]
        buckets = bucket_ids(key_arrays, schema.num_buckets)
        parts = []
        for b in np.unique(buckets).tolist():
            sel = pa.array(np.flatnonzero(buckets == b))
            parts.append(self._core.lookup(b, kt.take(sel), v, columns, schema))
        names = list(columns) if columns is not None else schema.names
        if not parts:
            return schema.arrow_schema(names).empty_table()
        return pa.concat_tables(parts)

    def rejects(self, version: int | None = None) -> pa.Table:
        """The events that version ``version`` (default: the latest) refused.

        Returns:
            A table of the rejects file's columns (position, topic, partition, offset,
            key, value, reason) plus ``version``, ``app_id`` and ``batch_id`` of the
            commit; empty when the version refused nothing.

        Raises:
            VersionNotFound: The version does not exist or is no longer retained.
        """
        return self._core.rejects(version)

    def changes(
        self,
        start: int,
        end: int,
        *,
        columns: Sequence[str] | None = None,
        filter: Any = None,
        set_columns_only: bool = False,
        buckets: Sequence[int] | None = None,
    ) -> pa.Table:
        """The changes of the versions after ``start`` up to and including ``end``:
        replayed onto the table at ``start``, they give the table at ``end``
        (:func:`cdc_sink.changefeed.changes` says what each record holds).

        Args:
            start: The version the changes start from (excluded).
            end: The last version whose changes are read (included).
            columns: Value columns to return (default all, as at ``end``); keys always.
            filter: Conjunctive predicates ``[(column, op, value), ...]`` on the records.
            set_columns_only: One record per changed row holding only the cells the
                version wrote, with a ``_set_<column>`` mask per value column.
            buckets: Only these buckets (a Spark partition reads one); default all.

        Raises:
            ChangesNotRetained: A version the range needs is not retained; the message
                names the oldest readable version. Never partial data.
            InvalidOption: ``start > end``, or a column not in the schema at ``end``.
        """
        return changefeed.changes(
            self._core,
            start,
            end,
            columns=columns,
            filter=filter,
            set_columns_only=set_columns_only,
            buckets=buckets,
        )

    # ------------------------------------------------------------------ writes
    def apply(
        self,
        events: Sequence[Mapping[str, Any]] | pa.Table | ChangeBatch,
        *,
        app_id: str | None = None,
        batch_id: int | None = None,
        source: pa.Table | None = None,
        source_rejects: Rejects | None = None,
        source_offsets: Mapping[str, Mapping[str, int]] | None = None,
    ) -> CommitResult:
        """Commits a batch of change events as the next version.

        Every refused event is recorded durably with the version (:meth:`rejects`).

        Args:
            events: Event dicts ``{"op", "key", "set", "seq"?}``, a wire-form Arrow table,
                or a :class:`ChangeBatch`.
            app_id: Writer id for exactly-once commits (with ``batch_id``).
            batch_id: Monotonic batch number of ``app_id``; a batch whose id is <= the
                last one committed for ``app_id`` is skipped.
            source: Where each event came from, one row per event position (row ``i``
                describes position ``i``): any of ``topic``, ``partition``, ``offset``,
                ``key``, ``value``; copied into the version's rejects.
            source_rejects: Events refused before this call (e.g. by a decoder), by
                position, to record with the version's rejects.
            source_offsets: Per topic and partition, the offset after the batch's last
                record (recorded in the log entry).

        Returns:
            The version, counts and rejects (invalid events never reach a tablet).

        Raises:
            InvalidOption: Only one of ``app_id`` and ``batch_id`` was given.
            CommitConflict: Another writer committed this version first; nothing of this
                attempt is visible.
        """
        with self._core.exclusive():  # one writer of this process at a time
            txn = self.transaction(app_id=app_id, batch_id=batch_id)
            if txn.skipped:
                return CommitResult(version=txn.latest, skipped=True)
            with txn:
                batch, rejects = to_batch(events, txn.schema)
                if source_rejects is not None:
                    rejects.extend(source_rejects)
                txn.prepare(sorted(batch.split_by_bucket().items()))
                records, merged = batch_reject_records(rejects, txn.refused(), source=source)
                result = txn.commit(
                    events=len(batch), rejects=records, source_offsets=source_offsets
                )
        result.rejects = merged  # the tablets' (as the commit counts them) and the input's
        return result

    def transaction(self, *, app_id: str | None = None, batch_id: int | None = None) -> Transaction:
        """Opens the next version for writing: the commit object every writer goes through
        (:mod:`cdc_sink.transaction`; :meth:`apply` is one prepare and one commit of it).

        Args:
            app_id: Writer id for exactly-once commits (with ``batch_id``).
            batch_id: Monotonic batch number of ``app_id``; when it is committed already
                the transaction is ``skipped``.

        Raises:
            InvalidOption: Only one of ``app_id`` and ``batch_id`` was given.
        """
        return Transaction(self._core, app_id=app_id, batch_id=batch_id)

    def is_committed(self, app_id: str | None, batch_id: int | None) -> bool:
        """Whether ``(app_id, batch_id)`` (or a later batch of ``app_id``) is committed, as
        of the newest version this table committed or followed (no request: a batch
        another writer committed since makes this writer's commit lose its race)."""
        if app_id is None or batch_id is None:
            return False
        last = self._core.last_batch_id(app_id)
        return last is not None and batch_id <= last

    # ------------------------------------------------------------------ maintenance
    def compact(self) -> int:
        """Snapshots every bucket at the latest version and compacts it in memory.

        Commits a maintenance version (kind ``snapshot``) that references the snapshots.

        Returns:
            The version created.
        """
        return self._core.compact()

    def add_column(
        self, name: str, type: str, *, nullable: bool = True, default: Any = None
    ) -> int:
        """Adds a column (existing rows read ``default``); returns the new version."""
        new = self.schema.add_column(name, type, nullable=nullable, default=default)
        return self._core.change_schema(new)

    def drop_column(self, name: str) -> int:
        """Drops a column (older versions still read it); returns the new version."""
        return self._core.change_schema(self.schema.drop_column(name))

    def rename_column(self, old: str, new: str) -> int:
        """Renames a column (older versions read the old name); returns the new version."""
        return self._core.change_schema(self.schema.rename_column(old, new))

    def widen_column(self, name: str, type: str | pa.DataType) -> int:
        """Widens a column's type losslessly (:meth:`TableSchema.widen_column
        <cdc_sink.schema.TableSchema.widen_column>`: ``int8`` up to ``int64``, ``float32``
        to ``float64``, a decimal to a larger precision of the same scale); returns the
        new version.

        Nothing is rewritten: rows written before read their values cast to the new
        type, and reads of older versions keep the type they had. The first widening
        raises the table's protocol versions (docs/format.md, "Protocol versions"), so
        older releases refuse the table instead of misreading it.

        Raises:
            SchemaError: The column is missing or a key column, or ``type`` is not a
                widening of its type.
        """
        return self._core.change_schema(self.schema.widen_column(name, type))

    def gc(
        self,
        *,
        dry_run: bool = True,
        retain_versions: int | None = None,
        retain_seconds: float | None = None,
        orphan_grace_seconds: float = 3600.0,
        keep_from: int | None = None,
    ) -> GcPlan:
        """Deletes what no retained version needs (:mod:`cdc_sink.storage.gc`).

        Retained: the newest ``retain_versions`` versions, every version committed in
        the last ``retain_seconds`` and every version from ``keep_from`` on (the streaming
        sink passes the first version whose rejects are not forwarded to the dead-letter
        sink yet, so that an outage of that sink holds GC back instead of losing them).
        Per bucket the newest snapshot at or below the horizon is kept with everything
        after it; older snapshots, unreferenced page files, WAL segments, log entries (a
        checkpoint keeps what they said) and orphans of failed attempts are deleted.

        Files of a version above the latest are a commit's in flight until (local store)
        older than ``orphan_grace_seconds`` or (object store) that version commits.

        Returns:
            The plan: the sorted paths deleted (or, with ``dry_run``, that would be
            deleted), each with the reason in ``plan.reasons``.
        """
        policy = GcPolicy(
            retain_versions=_default(retain_versions, self.options.retain_versions),
            retain_seconds=_default(retain_seconds, self.options.retain_seconds),
            orphan_grace_seconds=orphan_grace_seconds,
            keep_from=keep_from,
        )
        return self._core.collect_garbage(policy, dry_run=dry_run)

    # ------------------------------------------------------------------ statistics
    def stats(self, *, load: bool = False, disk_max_age: float = 0.0) -> TableStats:
        """Rows, memory, outstanding deltas and bytes on disk (:mod:`cdc_sink.stats`).

        Args:
            load: Load every bucket first (else the memory figures cover the buckets this
                object holds: a writer holds every bucket it wrote since it opened).
            disk_max_age: Reuse a directory walk younger than this many seconds.
        """
        from cdc_sink.stats import table_stats

        core = self._core
        with core.exclusive():  # the tablets are read while no commit changes them
            return table_stats(core, core.held_tablets(load=load), disk_max_age=disk_max_age)


def _default(value: _T | None, default: _T) -> _T:
    return default if value is None else value
