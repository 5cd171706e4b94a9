"""A durable, versioned cdc_sink table: N bucket tablets, a WAL, a version log, snapshots.

On disk (every file immutable once written; the log entry is the only commit point)::

    <table>/
      _table.json                         options fixed at creation (page_rows)
      _schema/<schema_id:08d>.json        every schema the table has had
      _log/<version:020d>.json            version log entries (storage/version_log.py)
      _log/_checkpoint.<version>.json     written by GC before old entries go
      _wal/<bucket>/<v>-<attempt>.wal     change segments (storage/segments.py)
      _snapshots/<bucket>/<v>-<a>.manifest, _pages/<bucket>/<v>-<a>.pages   (snapshot.py)
      _rejects/<v>-<attempt>.arrow        the events version v refused (storage/rejects.py)

In memory, a :class:`Table` opened for writing keeps one :class:`MemTablet` per bucket
at the latest version (loaded lazily: newest snapshot + the segments after it), retains
``memory_versions`` versions in them, and serves older versions by loading them from
disk. Commit of one batch (DESIGN.md §3)::

    decide   refresh from the log; (app_id, batch_id) already committed -> skipped
    prepare  per touched bucket: WAL segment (fsync), maybe a snapshot of the previous
             version, apply in memory as pending version v
    commit   create log entry v exclusively -> visible; CommitConflict -> roll back
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa

from cdc_sink.changes import ChangeBatch, Rejects
from cdc_sink.errors import (
    CommitConflict,
    SchemaError,
    TableExists,
    TableNotFound,
    VersionNotFound,
    WalCorruption,
)
from cdc_sink.schema import TableSchema
from cdc_sink.stats import TableStats
from cdc_sink.storage.faults import fault_point, register
from cdc_sink.storage.fsutil import (
    atomic_replace,
    fsync_dir,
    list_files,
    makedirs,
    remove,
    write_file_durable,
)
from cdc_sink.storage.history import History
from cdc_sink.storage.rejects import REJECTS_DIR, REJECTS_SCHEMA, read_rejects, write_rejects
from cdc_sink.storage.segments import file_version, read_change_segment, write_change_segment
from cdc_sink.storage.snapshot import (
    LocationUpdate,
    SnapshotManifest,
    apply_locations,
    load_snapshot,
    read_manifest,
    write_snapshot,
)
from cdc_sink.storage.version_log import BucketRef, LogEntry, VersionLog
from cdc_sink.tablet import ApplyResult, MemTablet, TabletOptions

__all__ = ["CommitResult", "PreparedBucket", "Table", "TableOptions", "create_table",
           "open_table"]

register("table.prepared", "table.rejects_written", "table.committed", "gc.deleting")


@dataclass(frozen=True)
class TableOptions:
    """How a table keeps its versions.

    Attributes:
        page_rows: Rows per page (fixed at creation).
        memory_versions: Versions each in-memory tablet keeps readable.
        compact_every: Compact a tablet's deltas in memory after this many versions.
        snapshot_every: Write a bucket snapshot after this many versions changed the
            bucket since its last snapshot ...
        snapshot_events: ... or once the bucket's WAL segments since its last snapshot
            hold this many events (a large batch into a bucket that has rows snapshots
            at the bucket's next version), so that loading a bucket never replays much
            more than this. Events, not bytes: replay cost follows the events, and
            compressed segments of a sparse workload are several times smaller than
            those of a dense one.
        bulk_events: A batch of at least this many events for a bucket that holds no
            rows yet (a table's initial load, a backfill into a new table, Debezium's
            initial snapshot) is written as a snapshot of the bucket at its version
            instead of a WAL segment: the snapshot is the durable record and the log
            entry names it, so the data is written once, as pages, and a read of that
            version loads pages instead of replaying the load.
        retain_versions: GC keeps at least this many newest versions ...
        retain_seconds: ... and every version committed within this many seconds.
    """

    page_rows: int = 65536
    memory_versions: int = 100
    compact_every: int = 20
    snapshot_every: int = 50
    snapshot_events: int = 4_000_000
    bulk_events: int = 100_000
    retain_versions: int = 100
    retain_seconds: float = 3600.0

    @classmethod
    def for_tests(cls) -> TableOptions:
        """Tiny pages and frequent snapshots, to exercise every path in small tests."""
        return cls(page_rows=8, memory_versions=4, compact_every=3, snapshot_every=3,
                   bulk_events=4, retain_versions=3, retain_seconds=0.0)


@dataclass
class PreparedBucket:
    """A bucket's prepared transaction: the picklable message from applier to committer.

    Attributes:
        bucket: The bucket.
        version: The version it was prepared for.
        segment: Its WAL segment (relative path); ``None`` for a bulk write, whose
            snapshot (at ``version``) is the durable record.
        snapshot: A snapshot written with it, if any (of ``version - 1``, or of
            ``version`` for a bulk write).
        counts: Apply counts.
        reject_positions: Input positions of events the tablet refused.
        reject_reasons: Their reasons.
        files: Other files written by this attempt (snapshot page files).
    """

    bucket: int
    version: int
    segment: str | None
    snapshot: str | None
    counts: dict[str, int]
    reject_positions: np.ndarray
    reject_reasons: list[str]
    files: list[str] = field(default_factory=list)


@dataclass
class CommitResult:
    """What ``Table.apply`` did.

    Attributes:
        version: The version created (or, when skipped, the latest version).
        skipped: The ``(app_id, batch_id)`` was committed before; nothing was done.
        counts: Inserted/updated/deleted/ignored/stale/rejected event counts.
        rejects: Positions (input index) and reasons of the refused events.
        buckets: Buckets the version touched.
    """

    version: int
    skipped: bool = False
    counts: dict[str, int] = field(default_factory=dict)
    rejects: Rejects = field(default_factory=Rejects)
    buckets: list[int] = field(default_factory=list)


def _now_ms() -> int:
    return int(time.time() * 1000)


def create_table(path: str | os.PathLike[str], schema: TableSchema | Mapping[str, Any], *,
                 options: TableOptions | None = None) -> Table:
    """Creates an empty table at ``path`` (version 0).

    Args:
        path: Directory of the table (created if missing; must not hold a table).
        schema: The schema, or its dictionary form.
        options: Table options (``page_rows`` is fixed here).

    Raises:
        TableExists: ``path`` already holds a table.
        SchemaError: The schema is invalid.
    """
    root = os.fspath(path)
    if not isinstance(schema, TableSchema):
        schema = TableSchema.from_dict(schema)
    if schema.schema_id != 0:
        schema = replace(schema, schema_id=0)
    options = options or TableOptions()
    makedirs(root)
    log = VersionLog(root)
    log.repair()
    if log.latest() is not None:
        raise TableExists(f"a table already exists at {root}")
    # Version 0's log entry is the commit point of creation: files written before it by
    # a creation that crashed are simply written again.
    atomic_replace(os.path.join(root, "_table.json"),
                   json.dumps({"format": 1, "page_rows": options.page_rows}).encode())
    schema_file = os.path.join(root, "_schema", f"{0:08d}.json")
    remove(schema_file, missing_ok=True)
    _write_schema(root, schema)
    try:
        log.commit(LogEntry(version=0, app_id=None, batch_id=None, commit_time_ms=_now_ms(),
                            schema_id=0, kind="create"))
    except CommitConflict:
        raise TableExists(f"a table already exists at {root}") from None
    return Table(root, options=options)


def open_table(path: str | os.PathLike[str], *, options: TableOptions | None = None) -> Table:
    """Opens the table at ``path``.

    Args:
        path: The table directory.
        options: In-memory and retention options (``page_rows`` comes from the table).

    Raises:
        TableNotFound: ``path`` holds no table.
    """
    root = os.fspath(path)
    if not os.path.exists(os.path.join(root, "_table.json")):
        raise TableNotFound(f"no cdc_sink table at {root}")
    if VersionLog(root).latest() is None:
        raise TableNotFound(f"the table at {root} was never created completely "
                            "(create_table crashed before committing version 0)")
    return Table(root, options=options)


def _write_schema(root: str, schema: TableSchema, *, committed: bool = False) -> None:
    """Writes ``_schema/<id>.json``. A file of an id no log entry uses yet is left by a
    schema change that failed before its commit, and is replaced; one of a committed id
    must hold the same schema."""
    d = os.path.join(root, "_schema")
    makedirs(d)
    p = os.path.join(d, f"{schema.schema_id:08d}.json")
    data = json.dumps(schema.to_dict(), indent=1).encode()
    try:
        write_file_durable(p, data, exclusive=True)
    except FileExistsError:
        with open(p, "rb") as f:
            same = TableSchema.from_dict(json.loads(f.read())) == schema
        if same:
            return
        if committed:
            raise CommitConflict(
                f"schema {schema.schema_id} was written by another writer") from None
        atomic_replace(p, data)


class Table:
    """A cdc_sink table (see the module docstring). Use :func:`create_table` or
    :func:`open_table` to get one."""

    def __init__(self, root: str, *, options: TableOptions | None = None) -> None:
        self.root = root
        with open(os.path.join(root, "_table.json"), "rb") as f:
            meta = json.loads(f.read())
        opts = options or TableOptions()
        self.options = replace(opts, page_rows=int(meta["page_rows"]))
        self.log = VersionLog(root)
        self._repaired = False
        self._schemas: dict[int, TableSchema] = {}
        # The newest version first, then the history: a version committed in between is
        # then in the history but not yet named (the next refresh follows it). The other
        # order names a version whose segments the history lacks, and reads of it return
        # the version before (found by the chaos suite's reader).
        self._version = self._latest()
        self._history = History.from_log(self.log)
        self._tablets: dict[int, MemTablet] = {}
        self._since_snapshot: dict[int, tuple[int, int]] = {}  # segments, events
        self._loaded_events = 0  # events the last _load_bucket replayed
        self._pending_segments: dict[int, str] = {}
        # Bulk writes prepared by this process: bucket -> (version, snapshot, the tablet
        # that becomes the bucket's once that version commits with that snapshot).
        self._pending_bulk: dict[int, tuple[int, str, MemTablet]] = {}
        self._pending_locations: dict[int, list[LocationUpdate]] = {}
        self._cache: OrderedDict[tuple[int, int], MemTablet] = OrderedDict()
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ metadata
    def _writer_repair(self) -> None:
        """Before this process's first commit: remove an unfinished newest log entry left
        by a crashed writer (readers never repair; they ignore such an entry)."""
        if not self._repaired:
            self.log.repair()
            self._repaired = True

    def _latest(self) -> int:
        v = self.log.latest()
        if v is None:
            raise TableNotFound(f"table at {self.root} has no committed version")
        return v

    def schema_of(self, schema_id: int) -> TableSchema:
        """The schema with id ``schema_id``."""
        s = self._schemas.get(schema_id)
        if s is None:
            with open(os.path.join(self.root, "_schema", f"{schema_id:08d}.json"), "rb") as f:
                s = TableSchema.from_dict(json.loads(f.read()))
            self._schemas[schema_id] = s
        return s

    def schema_at(self, version: int) -> TableSchema:
        """The schema version ``version`` was written under."""
        return self.schema_of(self._history.schema_id_at(version))

    @property
    def schema(self) -> TableSchema:
        """The latest schema."""
        self._refresh()
        return self.schema_at(self._version)

    @property
    def version(self) -> int:
        """The latest committed version."""
        self._refresh()
        return self._version

    @property
    def oldest_version(self) -> int:
        """The oldest readable version."""
        oldest = self.log.oldest()
        floor = self.log.newest_checkpoint_version()
        # Once GC has written a checkpoint at its horizon, versions below it are gone even
        # if a crash left some of their log entries behind.
        return max(0 if oldest is None else oldest, 0 if floor is None else floor)

    def versions(self) -> list[dict[str, Any]]:
        """Every retained version: version, kind, app_id, batch_id, commit time, stats."""
        self._refresh()
        return [{"version": e.version, "kind": e.kind, "app_id": e.app_id,
                 "batch_id": e.batch_id, "commit_time_ms": e.commit_time_ms,
                 "schema_id": e.schema_id, "buckets": sorted(int(b) for b in e.buckets),
                 "stats": dict(e.stats)}
                for e in self.log.entries(from_version=self.oldest_version)]

    # ------------------------------------------------------------------ tablets
    def _empty_tablet(self, bucket: int, version: int) -> MemTablet:
        return MemTablet(self.schema_at(version), bucket=bucket, version=version,
                         options=TabletOptions(page_rows=self.options.page_rows))

    def _load_bucket(self, bucket: int, version: int) -> MemTablet:
        """Bucket ``bucket`` at ``version`` from disk: newest snapshot <= version, then
        the segments after it."""
        snap = self._history.snapshot_at(bucket, version)
        if snap is None:
            start = self._history.schemas[0][0] if self._history.schemas else 0
            tablet = self._empty_tablet(bucket, start)
        else:
            start, rel = snap
            manifest = read_manifest(self.root, rel)
            tablet = load_snapshot(self.root, manifest, self.schema_of(manifest.schema_id),
                                   lambda v: self._empty_tablet(bucket, v))
        self._loaded_events = self._replay(tablet, start, version, merge=True)
        return tablet

    def _replay(self, tablet: MemTablet, start: int, version: int, *,
                merge: bool = False) -> int:
        """Brings ``tablet`` from ``start`` to ``version`` by replaying segments;
        returns the events replayed.

        With ``merge``, consecutive segments of one schema are folded as one batch (the
        fold is exact, so the result equals applying them one by one); the versions in
        between are then not kept in memory (reads of them load from disk).
        """
        b = tablet.bucket
        segs = self._history.segments_between(b, start, version)
        i = 0
        events = 0
        while i < len(segs):
            v, _rel = segs[i]
            schema = self.schema_at(v)
            if schema.schema_id != tablet.schema.schema_id:
                tablet.set_schema(schema)
            run = [segs[i]]
            while merge and i + len(run) < len(segs) and \
                    self._history.schema_id_at(segs[i + len(run)][0]) == schema.schema_id:
                run.append(segs[i + len(run)])
            batches = [read_change_segment(self.root, r, schema)[1] for _, r in run]
            events += sum(len(x) for x in batches)
            last = run[-1][0]
            tablet.apply(ChangeBatch.concat(batches), last)
            tablet.commit(last)
            if len(run) > 1:
                tablet.release(last)
            i += len(run)
        schema = self.schema_at(version)
        if schema.schema_id != tablet.schema.schema_id:
            tablet.set_schema(schema)
        if version > tablet.committed:
            tablet.advance(version)
        return events

    def _tablet(self, bucket: int) -> MemTablet:
        """The writer's tablet of ``bucket`` at the latest version."""
        t = self._tablets.get(bucket)
        if t is None:
            t = self._load_bucket(bucket, self._version)
            self._tablets[bucket] = t
            if bucket not in self._since_snapshot:  # what a reload replayed counts too
                snap = self._history.snapshot_at(bucket, self._version)
                start = snap[0] if snap else -1
                segs = self._history.segments_between(bucket, start, self._version)
                self._since_snapshot[bucket] = (len(segs), self._loaded_events)
        return t

    def _refresh(self) -> None:
        """Follows versions other writers committed (replaying them into loaded tablets)."""
        latest = self._latest()
        if latest == self._version and self._history.upto >= latest:
            return
        with self._lock:
            oldest = self.oldest_version
            if oldest > self._history.upto + 1:
                # GC deleted entries this process never read: start from its checkpoint.
                self._history = History.from_log(self.log)
            else:
                self._history.extend(self.log)
            self._settle_bulk(latest)
            for b, t in list(self._tablets.items()):
                self._settle_pending(b, t, latest)
                if t.committed < oldest or self._history.bulk_between(b, t.committed, latest):
                    # GC may have deleted the segments after it, or a bulk write's
                    # snapshot (which no segment replays) replaced the bucket's rows:
                    # reload from the newest snapshot when next used.
                    del self._tablets[b]
                    continue
                self._replay(t, t.committed, latest)
            self._version = latest

    def _settle_bulk(self, latest: int) -> None:
        """Bulk writes this process prepared (executors mode) become the bucket's tablet
        if their version was committed with their snapshot, else are dropped."""
        for b, (pv, rel, nt) in list(self._pending_bulk.items()):
            if pv > latest:
                continue
            del self._pending_bulk[b]
            try:
                ref = self.log.read(pv).buckets.get(b)
            except VersionNotFound:  # collected already: the bucket reloads from disk
                continue
            if ref is not None and ref.segment is None and ref.snapshot == rel:
                self._tablets[b] = nt

    def _settle_pending(self, bucket: int, t: MemTablet, latest: int) -> None:
        """A pending version prepared by this process (executors mode) is committed if the
        log entry of that version names our segment, else rolled back."""
        pv = t.pending_version
        if pv is None:
            return
        mine = self._pending_segments.pop(bucket, None)
        if pv <= latest:
            try:
                ref = self.log.read(pv).buckets.get(bucket)
            except VersionNotFound:
                # GC collected the version before this process looked: whether it was
                # committed no longer matters, as the tablet is older than the oldest
                # retained version and is reloaded from disk (see _refresh).
                ref = None
            if ref is not None and mine is not None and ref.segment == mine:
                t.commit(pv)
                apply_locations(self._pending_locations.pop(bucket, []))
                return
        t.rollback()
        self._pending_locations.pop(bucket, None)

    def _reader_tablet(self, bucket: int, version: int) -> MemTablet:
        t = self._tablets.get(bucket)
        if t is not None and t.oldest <= version <= t.committed:
            return t
        key = (bucket, version)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        t = self._load_bucket(bucket, version)
        self._cache[key] = t
        while len(self._cache) > 2 * self.schema_at(version).num_buckets:
            self._cache.popitem(last=False)
        return t

    def resolve_version(self, version: int | None = None, timestamp: Any = None) -> int:
        """The version a read of ``version`` or ``timestamp`` (default: latest) sees.

        Raises:
            VersionNotFound: Not retained; the message names the oldest readable version.
        """
        self._refresh()
        if version is not None and timestamp is not None:
            raise ValueError("give version or timestamp, not both")
        v = self.log.version_at(_to_ms(timestamp)) if timestamp is not None else (
            self._version if version is None else int(version))
        oldest = self.oldest_version
        if not oldest <= v <= self._version:
            raise VersionNotFound(
                f"version {v} is not readable: readable versions are {oldest}..{self._version}"
                f" (the oldest readable version is {oldest})",
                version=v, oldest=oldest, latest=self._version)
        return v

    # ------------------------------------------------------------------ reads
    @contextmanager
    def _collected_means_gone(self, version: int) -> Iterator[None]:
        """A read that finds a file of ``version`` missing raises VersionNotFound if GC
        collected the version during the read (GC writes its checkpoint, which moves the
        oldest readable version, before it deletes a file), and the damage otherwise."""
        try:
            yield
        except (WalCorruption, FileNotFoundError) as exc:
            oldest = self.oldest_version
            if version >= oldest:
                raise
            raise VersionNotFound(
                f"version {version} was garbage-collected during the read (the oldest "
                f"readable version is {oldest})", version=version, oldest=oldest,
                latest=self._latest()) from exc

    def bucket_batches(self, bucket: int, version: int, columns: Sequence[str] | None = None,
                       filter: Any = None) -> Iterator[pa.RecordBatch]:
        """Record batches of one bucket at ``version`` (what a Spark partition reads).

        Raises:
            VersionNotFound: GC collected the version during the read.
        """
        schema = self.schema_at(version)
        with self._collected_means_gone(version):
            t = self._reader_tablet(bucket, version)
            with t.pin(version):
                yield from t.batches(version, columns, filter, schema=schema)

    def read(self, version: int | None = None, timestamp: Any = None,
             columns: Sequence[str] | None = None, filter: Any = None) -> pa.Table:
        """The table at a version as Arrow (rows grouped by bucket, in row id order).

        Args:
            version: Version to read (default latest).
            timestamp: Or the newest version committed at or before this time
                (datetime, or epoch milliseconds).
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
        out = schema.arrow_schema(names)
        batches = [b for bucket in range(schema.num_buckets)
                   for b in self.bucket_batches(bucket, v, names, filter)]
        return pa.Table.from_batches(batches, schema=out)

    def get(self, keys: pa.Table | Sequence[Mapping[str, Any]] | Sequence[Any],
            version: int | None = None, columns: Sequence[str] | None = None) -> pa.Table:
        """Point lookups of keys at a version (missing keys are left out).

        Args:
            keys: A table of the key columns, a list of key dicts, or (one-column keys)
                a list of key values.
        """
        v = self.resolve_version(version, None)
        schema = self.schema_at(v)
        kt = _keys_table(keys, schema)
        from cdc_sink.bucketing import bucket_ids

        buckets = bucket_ids([kt.column(c.name) for c in schema.key_columns],
                             schema.num_buckets)
        parts = []
        for b in np.unique(buckets).tolist():
            sel = np.flatnonzero(buckets == b)
            with self._collected_means_gone(v):
                t = self._reader_tablet(b, v)
                with t.pin(v):
                    parts.append(t.get(kt.take(pa.array(sel)), v, columns, schema=schema))
        names = list(columns) if columns is not None else schema.names
        if not parts:
            return schema.arrow_schema(names).empty_table()
        return pa.concat_tables(parts)

    def _doomed_rejects(self, horizon: int, latest: int, grace: float) -> list[str]:
        """Rejects files GC deletes: those of versions below the horizon, and orphans."""
        top = os.path.join(self.root, REJECTS_DIR)
        if not os.path.isdir(top):
            return []
        named = {e.rejects for e in self.log.entries(from_version=horizon, to_version=latest)
                 if e.rejects is not None}
        doomed = []
        for name in list_files(top, ".arrow"):
            rel = f"{REJECTS_DIR}/{name}"
            fv = file_version(name)
            full = os.path.join(self.root, rel)
            if rel in named or fv is None:
                continue
            if fv > latest and not _older_than(full, grace):
                continue  # a commit may still be in flight
            doomed.append(full)
        return doomed

    # ------------------------------------------------------------------ writes
    def apply(self, events: Sequence[Mapping[str, Any]] | pa.Table | ChangeBatch, *,
              app_id: str | None = None, batch_id: int | None = None,
              source: pa.Table | None = None, source_rejects: Rejects | None = None,
              source_offsets: Mapping[str, Mapping[str, int]] | None = None
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
            CommitConflict: Another writer committed this version first; nothing of this
                attempt is visible.
        """
        if (app_id is None) != (batch_id is None):
            raise ValueError("app_id and batch_id go together")
        self._writer_repair()
        with self._lock:
            self._refresh()
            if self.is_committed(app_id, batch_id):
                return CommitResult(version=self._version, skipped=True)
            schema = self.schema_at(self._version)
            batch, rejects = _to_batch(events, schema)
            if source_rejects is not None:
                rejects.extend(source_rejects)
            v = self._version + 1
            prepared: list[PreparedBucket] = []
            try:
                for b, part in sorted(batch.split_by_bucket().items()):
                    prepared.append(self.prepare_bucket(b, v, part))
                refused = Rejects()
                refused.extend(rejects)
                for p in prepared:
                    refused.extend(Rejects(np.asarray(p.reject_positions, dtype=np.int64),
                                           list(p.reject_reasons)))
                result = self.commit_prepared(
                    v, prepared, app_id=app_id, batch_id=batch_id, events=len(batch),
                    rejects=reject_records(_sorted_rejects(refused), source),
                    source_offsets=source_offsets)
            except BaseException:
                self.abort_prepared(v, prepared)
                raise
            result.rejects.extend(rejects)
            result.rejects = _sorted_rejects(result.rejects)
            return result

    def rejects(self, version: int | None = None) -> pa.Table:
        """The events that version ``version`` (default: the latest) refused.

        Returns:
            A table of the rejects file's columns (position, topic, partition, offset,
            key, value, reason) plus ``version``, ``app_id`` and ``batch_id`` of the
            commit; empty when the version refused nothing.

        Raises:
            VersionNotFound: The version does not exist or is no longer retained.
        """
        with self._lock:
            self._refresh()
            v = self._version if version is None else version
            if v < self.oldest_version or v > self._version:
                raise VersionNotFound(
                    f"version {v} is not readable: retained versions are "
                    f"{self.oldest_version}..{self._version}")
            entry = self.log.read(v)
        table = (read_rejects(self.root, entry.rejects) if entry.rejects is not None
                 else REJECTS_SCHEMA.empty_table())
        n = table.num_rows
        return (table.append_column("version", pa.array([v] * n, pa.int64()))
                .append_column("app_id", pa.array([entry.app_id] * n, pa.string()))
                .append_column("batch_id", pa.array([entry.batch_id] * n, pa.int64())))

    def is_committed(self, app_id: str | None, batch_id: int | None) -> bool:
        """Whether ``(app_id, batch_id)`` (or a later batch of ``app_id``) is committed."""
        if app_id is None or batch_id is None:
            return False
        last = self.log.last_batch_id(app_id)
        return last is not None and batch_id <= last

    def prepare_bucket(self, bucket: int, version: int, batch: ChangeBatch) -> PreparedBucket:
        """Prepare step of the commit protocol for one bucket (driver or executor).

        Brings the bucket's tablet to ``version - 1``, writes the batch as a WAL segment
        unique to this attempt (fsynced), maybe snapshots the previous version, and
        applies the batch in memory as pending ``version``.

        Raises:
            CommitConflict: The log is no longer at ``version - 1``.
        """
        self._writer_repair()
        with self._lock:
            self._refresh()
            if self._version != version - 1:
                raise CommitConflict(
                    f"cannot prepare version {version}: the table is at {self._version}")
            schema = self.schema_at(self._version)
            t = self._tablet(bucket)
            if t.pending_version is not None:  # an earlier attempt in this process
                self._settle_pending(bucket, t, self._version)
            self._pending_bulk.pop(bucket, None)  # an earlier attempt's, never committed
            if len(batch) >= self.options.bulk_events and t.row_count == 0:
                return self._prepare_bulk(bucket, version, schema.schema_id, batch)
            written: list[str] = []
            seg = write_change_segment(self.root, bucket, version, schema.schema_id, batch)
            written.append(seg)
            try:
                snap = self._maybe_snapshot(t, schema.schema_id, written, len(batch))
                res = t.apply(batch, version)
            except BaseException:
                for rel in written:
                    _remove_quietly(os.path.join(self.root, rel))
                raise
            self._pending_segments[bucket] = seg
            return PreparedBucket(bucket=bucket, version=version, segment=seg, snapshot=snap,
                                  counts=res.counts(), reject_positions=res.rejects.positions,
                                  reject_reasons=res.rejects.reasons,
                                  files=[f for f in written if f != seg])

    def _prepare_bulk(self, bucket: int, version: int, schema_id: int,
                      batch: ChangeBatch) -> PreparedBucket:
        """The bulk path of :meth:`prepare_bucket` (a large batch for a bucket without
        rows): applies the batch to a new tablet and writes it as a snapshot of the bucket
        at ``version``, which the log entry names instead of a WAL segment. The bucket's
        tablet is replaced by the new one when the version commits."""
        nt = self._empty_tablet(bucket, version - 1)
        res = nt.apply(batch, version)
        nt.commit(version)
        nt.compact(version)
        rel, manifest, updates = write_snapshot(self.root, nt, version, schema_id,
                                                previous=None)
        apply_locations(updates)  # the pages are this tablet's alone: no rollback needed
        self._pending_bulk[bucket] = (version, rel, nt)
        self._since_snapshot[bucket] = (0, 0)
        return PreparedBucket(bucket=bucket, version=version, segment=None, snapshot=rel,
                              counts=res.counts(), reject_positions=res.rejects.positions,
                              reject_reasons=res.rejects.reasons,
                              files=sorted(manifest.files))

    def commit_prepared(self, version: int, prepared: Sequence[PreparedBucket], *,
                        app_id: str | None = None, batch_id: int | None = None,
                        events: int | None = None, rejects: pa.Table | None = None,
                        source_offsets: Mapping[str, Mapping[str, int]] | None = None
                        ) -> CommitResult:
        """Commit step: creates log entry ``version`` naming the prepared buckets.

        ``rejects`` (columns of :data:`~cdc_sink.storage.rejects.REJECTS_SCHEMA`) are
        written durably first and named by the entry, so they exist exactly when the
        version does; ``source_offsets`` go into the entry.

        Raises:
            CommitConflict: Another writer committed ``version`` first (the caller must
                then call :meth:`abort_prepared`).
        """
        self._writer_repair()
        with self._lock:
            fault_point("table.prepared")
            refs = {p.bucket: BucketRef(segment=p.segment, snapshot=p.snapshot)
                    for p in prepared}
            total = ApplyResult()
            for p in prepared:
                total.add(ApplyResult(**p.counts, rejects=Rejects(
                    np.asarray(p.reject_positions, dtype=np.int64), list(p.reject_reasons))))
            stats = total.counts()
            if events is not None:
                stats["events"] = events
            schema_id = self._history.schema_id_at(version - 1)
            rejects_rel = None
            if rejects is not None and rejects.num_rows:
                rejects_rel = write_rejects(self.root, version, rejects)
                fault_point("table.rejects_written")
            offsets = {str(t): {str(p): int(o) for p, o in parts.items()}
                       for t, parts in (source_offsets or {}).items()}
            entry = LogEntry(version=version, app_id=app_id, batch_id=batch_id,
                             commit_time_ms=self._commit_time(), schema_id=schema_id,
                             buckets=refs, stats=stats, rejects=rejects_rel,
                             source_offsets=offsets)
            try:
                self.log.commit(entry)
            except CommitConflict:
                if rejects_rel is not None:
                    _remove_quietly(os.path.join(self.root, rejects_rel))
                raise
            except BaseException:
                # The outcome is unknown (e.g. the directory fsync failed after the entry
                # was linked): if the entry is there, the version is committed -- publish
                # it so memory matches the log, then report the error.
                if self._committed_as(version, prepared):
                    self._history.add(self.log.read(version))
                    self._publish_prepared(version, prepared)
                raise
            fault_point("table.committed")
            self._history.add(entry)
            self._publish_prepared(version, prepared)
            return CommitResult(version=version, counts=total.counts(), rejects=total.rejects,
                                buckets=sorted(refs))

    def _publish_prepared(self, version: int, prepared: Sequence[PreparedBucket]) -> None:
        pending = []
        bulk = []
        for p in prepared:
            mine = self._pending_bulk.get(p.bucket)
            if mine is not None and mine[:2] == (version, p.snapshot) and p.segment is None:
                del self._pending_bulk[p.bucket]
                bulk.append(mine[2])
                continue
            t = self._tablets.get(p.bucket)
            if t is not None and t.pending_version == version:
                pending.append(t)
                self._pending_segments.pop(p.bucket, None)
                apply_locations(self._pending_locations.pop(p.bucket, []))
            elif t is not None:
                # Prepared in another process (executors mode): this copy lacks the
                # version's changes and must not be advanced to it; it reloads on use.
                del self._tablets[p.bucket]
        self._publish(version, pending)
        for nt in bulk:
            self._tablets[nt.bucket] = nt

    def _committed_as(self, version: int, prepared: Sequence[PreparedBucket]) -> bool:
        """Whether log entry ``version`` exists and names exactly these segments."""
        try:
            entry = self.log.read(version)
        except (VersionNotFound, FileNotFoundError):
            return False
        mine = {p.bucket: (p.segment, p.snapshot) for p in prepared}
        return {b: (r.segment, r.snapshot) for b, r in entry.buckets.items()} == mine

    def _committed_snapshots(self, version: int, refs: Mapping[int, BucketRef]) -> bool:
        """Whether log entry ``version`` exists and is the snapshot version of ``refs``."""
        if not refs:
            return False
        try:
            entry = self.log.read(version)
        except (VersionNotFound, FileNotFoundError):
            return False
        return entry.kind == "snapshot" and {b: r.snapshot for b, r in entry.buckets.items()} \
            == {b: r.snapshot for b, r in refs.items()}

    def abort_prepared(self, version: int, prepared: Sequence[PreparedBucket]) -> None:
        """Rolls back prepared buckets of a failed commit and removes their files (unless
        the log says the version was committed with them after all)."""
        if self._committed_as(version, prepared):
            return
        with self._lock:
            for b, t in self._tablets.items():
                if t.pending_version == version:
                    t.rollback()
                    self._pending_segments.pop(b, None)
                    self._pending_locations.pop(b, None)
            for b, (pv, _rel, _nt) in list(self._pending_bulk.items()):
                if pv == version:
                    del self._pending_bulk[b]
            for p in prepared:
                for rel in [*([p.segment] if p.segment else []),
                            *([p.snapshot] if p.snapshot else []), *p.files]:
                    _remove_quietly(os.path.join(self.root, rel))

    def _commit_time(self) -> int:
        prev = self.log.read(self._version).commit_time_ms
        return max(_now_ms(), prev)

    def _publish(self, v: int, pending: list[MemTablet]) -> None:
        touched = {t.bucket for t in pending}
        for t in pending:
            t.commit(v)
        for b, t in self._tablets.items():
            if b not in touched:
                t.advance(v)
            self._maintain(t)
        self._version = v

    def _maintain(self, t: MemTablet) -> None:
        """In-memory upkeep: compact deltas, drop versions past ``memory_versions``."""
        if t.delta_versions() >= self.options.compact_every:
            t.compact()
        t.release(t.committed - self.options.memory_versions + 1)

    def _maybe_snapshot(self, t: MemTablet, schema_id: int, written: list[str],
                        events: int) -> str | None:
        n, total = self._since_snapshot.get(t.bucket, (0, 0))
        n, total = n + 1, total + events
        self._since_snapshot[t.bucket] = (n, total)
        if n < self.options.snapshot_every and total < self.options.snapshot_events:
            return None
        rel = self._snapshot(t, schema_id, written)
        return rel

    def _snapshot(self, t: MemTablet, schema_id: int, written: list[str]) -> str:
        prev_ref = self._history.snapshot_at(t.bucket, t.committed)
        previous = read_manifest(self.root, prev_ref[1]) if prev_ref else None
        t.compact(t.committed)
        rel, manifest, updates = write_snapshot(self.root, t, t.committed, schema_id,
                                                previous=previous)
        self._pending_locations.setdefault(t.bucket, []).extend(updates)
        written.append(rel)
        written.extend(f for f in manifest.files if file_version(f) == t.committed
                       and (previous is None or f not in previous.files))
        self._since_snapshot[t.bucket] = (0, 0)
        return rel

    def compact(self) -> int:
        """Snapshots every loaded bucket at the latest version and compacts it in memory.

        Commits a maintenance version (kind ``snapshot``) that references the snapshots.

        Returns:
            The version created.
        """
        self._writer_repair()
        with self._lock:
            self._refresh()
            schema = self.schema_at(self._version)
            for b in range(schema.num_buckets):
                self._tablet(b)
            refs: dict[int, BucketRef] = {}
            written: list[str] = []
            v = self._version + 1
            try:
                for b, t in sorted(self._tablets.items()):
                    newest = self._history.snapshot_at(b, t.committed)
                    if newest is not None and newest[0] == t.committed:
                        t.compact()  # a snapshot of this state exists (a bulk write's)
                        continue
                    refs[b] = BucketRef(segment=None,
                                        snapshot=self._snapshot(t, schema.schema_id, written))
                entry = LogEntry(version=v, app_id=None, batch_id=None,
                                 commit_time_ms=self._commit_time(), schema_id=schema.schema_id,
                                 buckets=refs, kind="snapshot")
                self.log.commit(entry)
            except BaseException:
                if self._committed_snapshots(v, refs):
                    # The outcome was unknown (the directory fsync failed after the entry
                    # was linked) and the entry is there: the version is committed, its
                    # snapshots must stay. Publish it so memory matches the log, then
                    # report the error.
                    for b in refs:
                        apply_locations(self._pending_locations.pop(b, []))
                    self._history.add(self.log.read(v))
                    self._publish(v, [])
                    raise
                for rel in written:
                    _remove_quietly(os.path.join(self.root, rel))
                for b in refs:
                    self._pending_locations.pop(b, None)
                raise
            for b in refs:
                apply_locations(self._pending_locations.pop(b, []))
            self._history.add(entry)
            self._publish(v, [])
            return v

    # ------------------------------------------------------------------ schema changes
    def _change_schema(self, new: TableSchema) -> int:
        self._writer_repair()
        with self._lock:
            self._refresh()
            v = self._version + 1
            _write_schema(self.root, new,
                          committed=new.schema_id <= max(s for _, s in self._history.schemas))
            entry = LogEntry(version=v, app_id=None, batch_id=None,
                             commit_time_ms=self._commit_time(), schema_id=new.schema_id,
                             kind="schema")
            self.log.commit(entry)
            self._schemas[new.schema_id] = new
            self._history.add(entry)
            for t in self._tablets.values():
                t.set_schema(new)
            self._publish(v, [])
            return v

    def add_column(self, name: str, type: str, *, nullable: bool = True,
                   default: Any = None) -> int:
        """Adds a column (existing rows read ``default``); returns the new version."""
        return self._change_schema(self.schema.add_column(name, type, nullable=nullable,
                                                          default=default))

    def drop_column(self, name: str) -> int:
        """Drops a column (older versions still read it); returns the new version."""
        return self._change_schema(self.schema.drop_column(name))

    def rename_column(self, old: str, new: str) -> int:
        """Renames a column (older versions read the old name); returns the new version."""
        return self._change_schema(self.schema.rename_column(old, new))

    # ------------------------------------------------------------------ GC
    def gc(self, *, dry_run: bool = True, retain_versions: int | None = None,
           retain_seconds: float | None = None,
           orphan_grace_seconds: float = 3600.0, keep_from: int | None = None) -> list[str]:
        """Deletes what no retained version needs (see DESIGN.md "Retention and GC").

        Retained: the newest ``retain_versions`` versions, every version committed in
        the last ``retain_seconds`` and every version from ``keep_from`` on (the streaming
        sink passes the first version whose rejects are not forwarded to the dead-letter
        sink yet, so that an outage of that sink holds GC back instead of losing them).
        Per bucket the newest snapshot at or below the horizon is kept with everything
        after it; older snapshots, unreferenced page files, WAL segments, log entries (a
        checkpoint keeps what they said) and orphans of failed attempts are deleted.

        Files of a version newer than the latest belong to a commit in flight, unless they
        are older than ``orphan_grace_seconds`` (then a crashed attempt left them).

        Returns:
            The paths deleted (or, with ``dry_run``, that would be deleted).
        """
        if not dry_run:
            self._writer_repair()
        with self._lock:
            self._refresh()
            latest = self._version
            keep_n = self.options.retain_versions if retain_versions is None else retain_versions
            keep_s = self.options.retain_seconds if retain_seconds is None else retain_seconds
            horizon = max(self.oldest_version, latest - max(keep_n, 1) + 1)
            if keep_from is not None and keep_from < horizon:
                horizon = max(self.oldest_version, keep_from)
            if keep_s > 0:
                cutoff = _now_ms() - int(keep_s * 1000)
                for e in self.log.entries(from_version=self.oldest_version, to_version=horizon):
                    if e.commit_time_ms >= cutoff:
                        horizon = min(horizon, e.version)
                        break
            nb = self.schema_at(latest).num_buckets
            keep_snap: dict[int, int] = {}
            snap_refs: dict[int, str | None] = {}
            for b in range(nb):
                s = self._history.snapshot_at(b, horizon)
                keep_snap[b] = s[0] if s else -1
                snap_refs[b] = s[1] if s else None
            # What retained versions reference.
            live: set[str] = set()
            for b in range(nb):
                for sv, rel in self._history.snapshots.get(b, []):
                    if sv >= keep_snap[b]:
                        live.add(rel)
                for v, rel in self._history.segments.get(b, []):
                    if v > keep_snap[b]:
                        live.add(rel)
            manifests: dict[str, SnapshotManifest] = {}
            for rel in live:
                if rel.endswith(".manifest"):
                    manifests[rel] = read_manifest(self.root, rel)
            for m in manifests.values():
                live.update(m.files)
            doomed: list[str] = []
            for sub in ("_wal", "_snapshots", "_pages"):
                top = os.path.join(self.root, sub)
                for bdir in sorted(os.listdir(top)) if os.path.isdir(top) else []:
                    d = os.path.join(top, bdir)
                    for name in list_files(d, ""):
                        rel = f"{sub}/{bdir}/{name}"
                        fv = file_version(name)
                        full = os.path.join(self.root, rel)
                        if rel in live or fv is None:
                            continue  # needed, or not ours
                        if fv > latest and not _older_than(full, orphan_grace_seconds):
                            continue  # a commit may still be in flight
                        doomed.append(full)
            doomed += self._doomed_rejects(horizon, latest, orphan_grace_seconds)
            doomed += [self.log.entry_path(v) for v in range(self.oldest_version, horizon)]
            if dry_run:
                return sorted(doomed)
            log_oldest = self.log.oldest()
            prune = log_oldest is not None and horizon > log_oldest
            if horizon > self.oldest_version:
                self.log.write_checkpoint(horizon, None, snap_refs,
                                          self._history.schema_id_at(horizon),
                                          self._history.checkpoint_extra(horizon, keep_snap))
            dirs = set()
            for p in doomed:
                if "/_log/" in p:
                    continue
                fault_point("gc.deleting")
                _remove_quietly(p)
                dirs.add(os.path.dirname(p))
            for d in dirs:
                fsync_dir(d)
            if prune:
                self.log.delete_entries_below(horizon)
            self._cache.clear()
            for t in self._tablets.values():
                t.release(max(t.oldest, min(horizon, t.committed)))
            return sorted(doomed)

    # ------------------------------------------------------------------ statistics
    def stats(self, *, load: bool = False, disk_max_age: float = 0.0) -> TableStats:
        """Rows, memory, outstanding deltas and bytes on disk (:mod:`cdc_sink.stats`).

        Args:
            load: Load every bucket first (else the memory figures cover the buckets this
                object holds: a writer holds every bucket it wrote since it opened).
            disk_max_age: Reuse a directory walk younger than this many seconds.
        """
        from cdc_sink.stats import table_stats

        with self._lock:  # the tablets are read while no commit changes them
            self._refresh()
            if load:
                for b in range(self.schema_at(self._version).num_buckets):
                    self._tablet(b)
            return table_stats(self, dict(self._tablets), disk_max_age=disk_max_age)


# ---------------------------------------------------------------------- helpers
def _sorted_rejects(rejects: Rejects) -> Rejects:
    order = np.argsort(rejects.positions, kind="stable")
    return Rejects(rejects.positions[order], [rejects.reasons[i] for i in order.tolist()])


def reject_records(rejects: Rejects, source: pa.Table | None = None) -> pa.Table:
    """The rejects-file records of ``rejects``, with their source columns when given.

    Args:
        rejects: Positions and reasons.
        source: One row per event position (any of ``topic``, ``partition``, ``offset``,
            ``key``, ``value``); row ``i`` describes position ``i``.

    Returns:
        A table of :data:`~cdc_sink.storage.rejects.REJECTS_SCHEMA`.
    """
    pos = np.asarray(rejects.positions, dtype=np.int64)
    n = len(pos)
    cols: dict[str, pa.Array | pa.ChunkedArray] = {"position": pa.array(pos, pa.int64())}
    if source is not None and n:
        idx = pa.array(pos)
        for f in REJECTS_SCHEMA:
            if f.name in source.column_names and f.name not in ("position", "reason"):
                cols[f.name] = source.column(f.name).take(idx).cast(f.type)
    cols["reason"] = pa.array(list(rejects.reasons), pa.string())
    return pa.table([cols[f.name] if f.name in cols else pa.nulls(n, f.type)
                     for f in REJECTS_SCHEMA], schema=REJECTS_SCHEMA)


def _to_batch(events: Any, schema: TableSchema) -> tuple[ChangeBatch, Rejects]:
    if isinstance(events, ChangeBatch):
        return events, Rejects()
    if isinstance(events, (pa.Table, pa.RecordBatch)):
        return ChangeBatch.from_arrow(events, schema)
    if isinstance(events, (list, tuple)):
        return ChangeBatch.from_events(events, schema)
    raise TypeError(f"events must be a list of dicts, a pyarrow.Table or a ChangeBatch, "
                    f"not {type(events).__name__}")


def _keys_table(keys: Any, schema: TableSchema) -> pa.Table:
    names = list(schema.primary_key)
    arrow = schema.arrow_schema(names)
    if isinstance(keys, pa.Table):
        missing = [n for n in names if n not in keys.column_names]
        if missing:
            raise SchemaError(f"key table lacks key column(s) {missing}")
        return keys.select(names).cast(arrow)
    rows = [k if isinstance(k, Mapping) else {names[0]: k} for k in keys]
    if len(names) > 1 and any(not isinstance(k, Mapping) for k in keys):
        raise ValueError("composite keys must be given as dicts")
    return pa.Table.from_pylist(rows, schema=arrow)


def _to_ms(ts: Any) -> int:
    import datetime as dt

    if isinstance(ts, dt.datetime):
        if ts.tzinfo is None:
            ts = ts.replace(tzinfo=dt.timezone.utc)
        return int(ts.timestamp() * 1000)
    if isinstance(ts, (int, float)):
        return int(ts)
    if isinstance(ts, str):
        return _to_ms(dt.datetime.fromisoformat(ts.replace("Z", "+00:00")))
    raise TypeError(f"timestamp must be a datetime, ISO string or epoch ms, not {ts!r}")


def _older_than(path: str, seconds: float) -> bool:
    try:
        return time.time() - os.path.getmtime(path) >= seconds
    except FileNotFoundError:
        return False


def _remove_quietly(path: str) -> None:
    remove(path, missing_ok=True)

