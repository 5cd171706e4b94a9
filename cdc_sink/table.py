"""A durable, versioned cdc_sink table: N bucket tablets, a WAL, a version log, snapshots.

Every file is immutable once written and a version's log entry is its only commit point
(:mod:`cdc_sink.storage.layout`); a table lives in a directory or an object store (§10).

This module is the facade; the work is done by

* :mod:`cdc_sink.table_state` -- the log, history, schemas and bucket tablets of one
  process (loading, replay, following other writers);
* :mod:`cdc_sink.transaction` -- the commit object every writer goes through (decide,
  prepare per bucket, commit one log entry, abort, forward dead letters), over the
  protocol steps of :mod:`cdc_sink.commit`;
* :mod:`cdc_sink.maintenance` -- creation, snapshots, compaction, schema changes;
* :mod:`cdc_sink.storage.gc` -- what GC deletes (a plan) and deleting it.

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

from cdc_sink import changefeed, commit, maintenance
from cdc_sink.changes import ChangeBatch, Rejects
from cdc_sink.commit import CommitResult, PreparedBucket
from cdc_sink.errors import InvalidOption
from cdc_sink.schema import TableSchema
from cdc_sink.stats import TableStats
from cdc_sink.storage.gc import GcPlan, GcPolicy
from cdc_sink.storage.objectstore import ObjectStore
from cdc_sink.storage.rejects import reject_records, sorted_rejects, version_rejects
from cdc_sink.table_inputs import keys_table, timestamp_ms, to_batch
from cdc_sink.table_state import TableOptions, TableState, check_created, open_location
from cdc_sink.tablet import MemTablet
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
    maintenance.create(store, schema, options or TableOptions())
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
    check_created(root, store)
    return Table(root, options=options, store=store)


class Table:
    """A cdc_sink table (see the module docstring), from :func:`create_table`/:func:`open_table`."""

    def __init__(
        self, root: str, *, options: TableOptions | None = None, store: ObjectStore | None = None
    ) -> None:
        self._state = TableState(root, options, store)
        self.root = root
        self.store = self._state.store
        self.options = self._state.options
        self.log = self._state.log

    # ------------------------------------------------------------------ metadata
    def schema_of(self, schema_id: int) -> TableSchema:
        """The schema with id ``schema_id``."""
        return self._state.schema_of(schema_id)

    def schema_at(self, version: int) -> TableSchema:
        """The schema version ``version`` was written under."""
        return self._state.schema_at(version)

    @property
    def schema(self) -> TableSchema:
        """The latest schema."""
        self._state.refresh()
        return self._state.schema_at(self._state.version)

    @property
    def version(self) -> int:
        """The latest committed version."""
        self._state.refresh()
        return self._state.version

    @property
    def oldest_version(self) -> int:
        """The oldest readable version."""
        return self._state.oldest_version()

    def versions(self) -> list[dict[str, Any]]:
        """Every retained version: version, kind, app_id, batch_id, commit time, stats."""
        self._state.refresh()
        return [e.summary() for e in self.log.entries(from_version=self.oldest_version)]

    def resolve_version(self, version: int | None = None, timestamp: Any = None) -> int:
        """The version a read of ``version`` or ``timestamp`` (default: latest) sees.

        Raises:
            InvalidOption: Both ``version`` and ``timestamp`` were given.
            VersionNotFound: Not retained; the message names the oldest readable version.
        """
        s = self._state
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
        yield from self._state.bucket_batches(bucket, version, columns, filter, schema)

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
            parts.append(self._state.lookup(b, kt.take(sel), v, columns, schema))
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
        s = self._state
        with s.lock:
            s.refresh()
            v = s.version if version is None else version
            s.check_readable(v)
            entry = self.log.read(v)
        return version_rejects(self.store, entry)

    changes = changefeed.changes  # the changes of versions (start, end]: cdc_sink.changefeed

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
        s = self._state
        with s.lock:  # one writer of this process at a time, from decide to commit
            txn = self.transaction(app_id=app_id, batch_id=batch_id)
            if txn.skipped:
                return CommitResult(version=txn.latest, skipped=True)
            with txn:
                batch, rejects = to_batch(events, txn.schema)
                if source_rejects is not None:
                    rejects.extend(source_rejects)
                txn.prepare(sorted(batch.split_by_bucket().items()))
                refused = Rejects()
                refused.extend(rejects)
                refused.extend(txn.refused())
                records = reject_records(sorted_rejects(refused), source)
                result = txn.commit(
                    events=len(batch), rejects=records, source_offsets=source_offsets
                )
        result.rejects.extend(rejects)
        result.rejects = sorted_rejects(result.rejects)
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
        return Transaction(self, app_id=app_id, batch_id=batch_id)

    def prepare_bucket(self, bucket: int, version: int, batch: ChangeBatch) -> PreparedBucket:
        """The executor's half of a :class:`Transaction`: prepares one bucket's events as
        pending ``version`` in this process's tablet, for the driver's
        :meth:`Transaction.add_prepared`.

        Args:
            bucket: The bucket every event of ``batch`` routes to.
            version: The transaction's :attr:`Transaction.version`.
            batch: The bucket's events, decoded and validated.

        Raises:
            CommitConflict: The log is no longer at ``version - 1``.
        """
        return commit.prepare_bucket(self._state, bucket, version, batch)

    def bucket_figures(self, bucket: int) -> dict[str, int] | None:
        """Live rows (at the last committed version), memory bytes and delta versions of this
        process's tablet of ``bucket`` (:func:`cdc_sink.stats.tablet_figures`; ``None``: none)."""
        from cdc_sink.stats import tablet_figures

        t = self._state.tablets.get(bucket)
        return None if t is None else tablet_figures(t)

    def is_committed(self, app_id: str | None, batch_id: int | None) -> bool:
        """Whether ``(app_id, batch_id)`` (or a later batch of ``app_id``) is committed."""
        if app_id is None or batch_id is None:
            return False
        last = self.log.last_batch_id(app_id)
        return last is not None and batch_id <= last

    # ------------------------------------------------------------------ maintenance
    def compact(self) -> int:
        """Snapshots every bucket at the latest version and compacts it in memory.

        Commits a maintenance version (kind ``snapshot``) that references the snapshots.

        Returns:
            The version created.
        """
        return maintenance.compact(self._state)

    def add_column(
        self, name: str, type: str, *, nullable: bool = True, default: Any = None
    ) -> int:
        """Adds a column (existing rows read ``default``); returns the new version."""
        new = self.schema.add_column(name, type, nullable=nullable, default=default)
        return maintenance.change_schema(self._state, new)

    def drop_column(self, name: str) -> int:
        """Drops a column (older versions still read it); returns the new version."""
        return maintenance.change_schema(self._state, self.schema.drop_column(name))

    def rename_column(self, old: str, new: str) -> int:
        """Renames a column (older versions read the old name); returns the new version."""
        return maintenance.change_schema(self._state, self.schema.rename_column(old, new))

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
        return maintenance.collect_garbage(self._state, policy, dry_run=dry_run)

    # ------------------------------------------------------------------ statistics
    def stats(self, *, load: bool = False, disk_max_age: float = 0.0) -> TableStats:
        """Rows, memory, outstanding deltas and bytes on disk (:mod:`cdc_sink.stats`).

        Args:
            load: Load every bucket first (else the memory figures cover the buckets this
                object holds: a writer holds every bucket it wrote since it opened).
            disk_max_age: Reuse a directory walk younger than this many seconds.
        """
        from cdc_sink.stats import table_stats

        s = self._state
        with s.lock:  # the tablets are read while no commit changes them
            s.refresh()
            if load:
                for b in range(s.schema_at(s.version).num_buckets):
                    s.tablet(b)
            return table_stats(self, dict(s.tablets), disk_max_age=disk_max_age)

    # ------------------------------------------------------------------ internals
    def _tablet(self, bucket: int) -> MemTablet:
        """The writer's tablet of ``bucket`` at the latest version (benchmarks, tests)."""
        return self._state.tablet(bucket)


def _default(value: _T | None, default: _T) -> _T:
    return default if value is None else value
