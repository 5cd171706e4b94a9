"""The owner of an open table's state in one process: :class:`TableCore`.

A :class:`TableCore` keeps, for one process:

* the version log and the :class:`~cdc_sink.storage.history.History` built from it (which
  segment or snapshot holds each bucket's change of each version), and the newest version
  this process has followed;
* one :class:`~cdc_sink.tablet.MemTablet` per bucket the process writes, at the newest
  version, loaded lazily from storage (the newest snapshot at or below the version, then
  the WAL segments after it) and kept current by replaying what other writers commit;
* a small cache of tablets loaded for reads of older versions;
* what the process prepared and has not seen decided
  (:class:`~cdc_sink.engine.pending.PendingBucket`).

Its methods are the commit protocol (docs/architecture.md §4): :meth:`TableCore.begin`
(decide), :meth:`~TableCore.prepare` / :meth:`~TableCore.prepare_bucket`,
:meth:`~TableCore.commit`, :meth:`~TableCore.abort`, and the versions the table makes of
its own (:meth:`~TableCore.compact`, :meth:`~TableCore.change_schema`,
:meth:`~TableCore.collect_garbage`), with the tablet loads and reads they rest on. Only
the core takes its lock and changes its state; its private helpers
(:mod:`cdc_sink.engine._commit`, :mod:`cdc_sink.engine._maintenance`) work on it inside
those methods. Everything above the engine reaches a table's core through one door,
:func:`cdc_sink.engine.core_of`.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pyarrow as pa

from cdc_sink.batch import ChangeBatch
from cdc_sink.engine import _commit, _maintenance
from cdc_sink.engine.location import immutable
from cdc_sink.engine.options import TableOptions
from cdc_sink.engine.pending import PendingBucket
from cdc_sink.engine.requirements import Requirement
from cdc_sink.engine.results import CommitResult, PreparedBucket
from cdc_sink.errors import TableNotFound, VersionNotFound, WalCorruption
from cdc_sink.schema import TableSchema
from cdc_sink.storage.gc import GcPlan, GcPolicy
from cdc_sink.storage.history import History
from cdc_sink.storage.layout import TABLE_FILE, schema_key
from cdc_sink.storage.objectstore import ObjectNotFound, ObjectStore
from cdc_sink.storage.objectstore.cache import CachingStore
from cdc_sink.storage.objectstore.local import LocalStore
from cdc_sink.storage.protocol import check_protocol
from cdc_sink.storage.rejects import version_rejects
from cdc_sink.storage.segments import SegmentPrefetch, read_change_segment
from cdc_sink.storage.snapshot import apply_locations, load_snapshot, read_manifest
from cdc_sink.storage.version_log import VersionLog
from cdc_sink.tablet import MemTablet, TabletOptions
from cdc_sink.tablet.keyindex import seed_from_json

__all__ = ["Opened", "TableCore", "now_ms"]


def now_ms() -> int:
    """The wall clock in milliseconds since the epoch."""
    return int(time.time() * 1000)


class Opened:
    """What :meth:`TableCore.begin` decided for a writer's next version.

    Attributes:
        version: The version to write (the newest committed + 1).
        schema: The schema of the newest version, which the events are written with.
        skipped: The writer's batch is committed already (a replay).
    """

    __slots__ = ("schema", "skipped", "version")

    def __init__(self, version: int, schema: TableSchema, skipped: bool) -> None:
        self.version = version
        self.schema = schema
        self.skipped = skipped


class TableCore:
    """The state of one open table in one process (see the module docstring)."""

    def __init__(
        self, root: str, options: TableOptions | None, store: ObjectStore | None = None
    ) -> None:
        """Args:
        root: The table's directory or URL (for messages).
        options: The process's options (``page_rows`` comes from the table).
        store: The store holding the table (default: a
            :class:`~cdc_sink.storage.objectstore.local.LocalStore` on ``root``).

        Raises:
            TableNotFound: No table there.
            UnsupportedTableVersion: The table needs a newer reader than this release.
        """
        self.root = root
        opts = options or TableOptions()
        if store is None:
            store = LocalStore(root, file_mode=opts.file_mode)
        elif store.wants_object_cache and opts.object_cache_bytes:
            store = CachingStore(store, opts.object_cache_bytes, cacheable=immutable)
        self.store: ObjectStore = store
        try:
            self._meta = meta = json.loads(self.store.get(TABLE_FILE))
        except ObjectNotFound:
            raise TableNotFound(f"no cdc_sink table at {root}") from None
        check_protocol(meta, access="read", where=root)
        self.options = replace(opts, page_rows=int(meta["page_rows"]))
        try:  # None: a table created before the salt keeps the unsalted index hash
            self.index_seed = seed_from_json(meta.get("index_seed"))
        except ValueError as exc:
            where = self.store.location(TABLE_FILE)
            raise WalCorruption(str(exc), path=where, offset=0) from None
        self.log = VersionLog(root, file_mode=self.options.file_mode, store=self.store)
        self._repaired = False
        self._schemas: dict[int, TableSchema] = {}
        # The newest version first, then the history: a version committed in between is
        # then in the history but not yet named (the next refresh follows it). The other
        # order names a version whose segments the history lacks, and reads of it return
        # the version before (found by the chaos suite's reader).
        self.version = self.latest()
        self.history = History.from_log(self.log)
        self._tablets: dict[int, MemTablet] = {}
        # per bucket since its last snapshot: segments, events, bytes (decompressed)
        self._since_snapshot: dict[int, tuple[int, int, int]] = {}
        self.loaded_events = 0  # events the last load_bucket replayed
        self.loaded_bytes = 0  # and the bytes of their segments (decompressed)
        self._pending: dict[int, PendingBucket] = {}
        self._cache: OrderedDict[tuple[int, int], MemTablet] = OrderedDict()
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ the protocol
    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Holds the table's lock: one writer of this process at a time, from decide to
        commit (re-entrant; every method below takes it too)."""
        with self._lock:
            yield

    def begin(self, app_id: str | None, batch_id: int | None) -> Opened:
        """Step 1, decide, from this process's view and without a request: the next
        version follows the newest one it committed or followed, and the writer's batch
        is a replay if that version's idempotency table holds it. A version another
        writer committed since makes the commit's conditional create fail, which is when
        the writer reads the log (:meth:`follow_lost_race`)."""
        self._writer_repair()
        with self._lock:
            last = self.last_batch_id(app_id) if app_id is not None else None
            replay = batch_id is not None and last is not None and batch_id <= last
            return Opened(self.version + 1, self.schema_at(self.version), replay)

    def prepare(
        self, version: int, parts: Sequence[tuple[int, ChangeBatch]]
    ) -> list[PreparedBucket]:
        """Step 2 in this process: prepares each ``(bucket, events)`` pair as pending
        ``version``, in the table's prepare threads.

        Raises:
            CommitConflict: The log is no longer at ``version - 1``. On any error, what
                this call prepared is rolled back before the error is raised.
        """
        self._writer_repair()
        with self._lock:
            return _commit.prepare_buckets(self, version, parts)

    def prepare_bucket(self, bucket: int, version: int, batch: ChangeBatch) -> PreparedBucket:
        """Step 2 in an executor: prepares one bucket's events as pending ``version`` in
        this process's tablet, for the driver's transaction.

        Raises:
            CommitConflict: The log is no longer at ``version - 1``.
        """
        self._writer_repair()
        with self._lock:
            return _commit.prepare_bucket(self, bucket, version, batch)

    def commit(
        self,
        version: int,
        prepared: Sequence[PreparedBucket],
        requirements: Sequence[Requirement],
        *,
        app_id: str | None = None,
        batch_id: int | None = None,
        events: int | None = None,
        rejects: pa.Table | None = None,
        source_offsets: Mapping[str, Mapping[str, int]] | None = None,
    ) -> CommitResult:
        """Step 3: checks ``requirements``, then makes ``version`` visible with every
        bucket of ``prepared``, atomically (the rejects file, then the log entry).

        Raises:
            CommitConflict: A requirement failed, or another writer committed
                ``version`` first; nothing of the attempt is visible (then :meth:`abort`).
        """
        self._writer_repair()
        with self._lock:
            for req in requirements:
                req.validate(self)
            return _commit.commit_prepared(
                self, version, prepared, app_id, batch_id, events, rejects, source_offsets
            )

    def abort(self, version: int, prepared: Sequence[PreparedBucket]) -> None:
        """Rolls back the prepared buckets of a failed commit and removes their files,
        unless the log says the version was committed with them after all."""
        with self._lock:
            _commit.abort_prepared(self, version, prepared)

    def last_batch_id(self, app_id: str) -> int | None:
        """The last batch id of ``app_id`` as of the newest version this process
        followed (from the idempotency table it holds: no request in the steady state)."""
        return self.log.app_transactions(self.version).get(app_id)

    def follow_lost_race(self) -> None:
        """After this process's conditional create of a log entry failed: reads the
        entries after the newest version it knew (probing from it, :meth:`refresh`) and
        follows them, so that its next transaction starts from the newest version."""
        with self._lock:
            self.refresh()

    # ------------------------------------------------------------------ own versions
    def compact(self) -> int:
        """Snapshots every bucket at the newest version in a version of its own
        (:func:`cdc_sink.engine._maintenance.compact`); returns that version."""
        self._writer_repair()
        with self._lock:
            return _maintenance.compact(self)

    def change_schema(self, new: TableSchema) -> int:
        """Commits ``new`` as the table's schema in a version of its own; returns it."""
        self._writer_repair()
        with self._lock:
            return _maintenance.change_schema(self, new)

    def collect_garbage(self, policy: GcPolicy, *, dry_run: bool) -> GcPlan:
        """GC of the table (:func:`cdc_sink.engine._maintenance.collect_garbage`)."""
        if not dry_run:
            self._writer_repair()
        with self._lock:
            return _maintenance.collect_garbage(self, policy, dry_run=dry_run)

    # ------------------------------------------------------------------ metadata
    def _writer_repair(self) -> None:
        """Before this process's first commit: prove the store's conditional writes
        (once per store; an object store opened for reading has not), and remove an
        unfinished newest log entry left by a crashed writer (readers never repair; they
        ignore such an entry)."""
        if not self._repaired:
            check_protocol(self._meta, access="write", where=self.root)
            self.store.ensure_conditional_writes()
            self.log.repair()
            self._repaired = True

    def latest(self) -> int:
        """The newest committed version in the log."""
        v = self.log.latest()
        if v is None:
            raise TableNotFound(
                f"the table at {self.root} was never created completely "
                "(create_table crashed before committing version 0)"
            )
        return v

    def oldest_version(self) -> int:
        """The oldest readable version."""
        oldest = self.log.oldest_readable()
        return 0 if oldest is None else oldest

    def schema_of(self, schema_id: int) -> TableSchema:
        """The schema with id ``schema_id``."""
        s = self._schemas.get(schema_id)
        if s is None:
            s = TableSchema.from_dict(json.loads(self.store.get(schema_key(schema_id))))
            self._schemas[schema_id] = s
        return s

    def schema_at(self, version: int) -> TableSchema:
        """The schema version ``version`` was written under."""
        return self.schema_of(self.history.schema_id_at(version))

    def discard(self, rels: Sequence[str]) -> None:
        """Removes files a failed attempt wrote (keys; missing ones are fine)."""
        self.store.delete_many(rels)

    def commit_time(self) -> int:
        """The commit time of the next version: now, but never before the newest one."""
        return max(now_ms(), self.log.read(self.version).commit_time_ms)

    # ------------------------------------------------------------------ tablets
    def empty_tablet(self, bucket: int, version: int) -> MemTablet:
        """A tablet of ``bucket`` without rows, at ``version`` (its key index salted with
        the table's seed)."""
        opts = TabletOptions(page_rows=self.options.page_rows, index_seed=self.index_seed)
        return MemTablet(self.schema_at(version), bucket=bucket, version=version, options=opts)

    def load_bucket(self, bucket: int, version: int) -> MemTablet:
        """Bucket ``bucket`` at ``version`` from disk: newest snapshot <= version, then
        the segments after it."""
        snap = self.history.snapshot_at(bucket, version)
        start = snap[0] if snap else self.history.schemas[0][0] if self.history.schemas else 0
        segs = self.history.segments_between(bucket, start, version)
        # The segments are fetched while the snapshot loads (on an object store)
        with SegmentPrefetch(self.store, [r for _, r in segs]) as segments:
            if snap is None:
                tablet = self.empty_tablet(bucket, start)
            else:
                manifest = read_manifest(self.store, snap[1])
                tablet = load_snapshot(
                    self.store,
                    manifest,
                    self.schema_of(manifest.schema_id),
                    lambda v: self.empty_tablet(bucket, v),
                )
            self.loaded_bytes = 0
            self.loaded_events = self.replay(tablet, start, version, merge=True, ahead=segments)
        return tablet

    def replay(
        self,
        tablet: MemTablet,
        start: int,
        version: int,
        *,
        merge: bool = False,
        ahead: SegmentPrefetch | None = None,
    ) -> int:
        """Brings ``tablet`` from ``start`` to ``version`` by replaying segments;
        returns the events replayed.

        With ``merge``, consecutive segments of one schema are folded as one batch (the
        fold is exact, so the result equals applying them one by one); the versions in
        between are then not kept in memory (reads of them load from disk). ``ahead``:
        the segments being fetched already (a cold load's).
        """
        segs = self.history.segments_between(tablet.bucket, start, version)
        i = 0
        events = 0
        while i < len(segs):
            schema = self.schema_at(segs[i][0])
            if schema.schema_id != tablet.schema.schema_id:
                tablet.set_schema(schema)
            run = [segs[i]]
            while (
                merge
                and i + len(run) < len(segs)
                and self.history.schema_id_at(segs[i + len(run)][0]) == schema.schema_id
            ):
                run.append(segs[i + len(run)])
            read = [
                ahead.read(r, schema)
                if ahead is not None
                else read_change_segment(self.store, r, schema)
                for _, r in run
            ]
            batches = [b for _, b in read]
            events += sum(len(x) for x in batches)
            self.loaded_bytes += sum(h.bytes or 0 for h, _ in read)
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

    def tablet(self, bucket: int) -> MemTablet:
        """The writer's tablet of ``bucket`` at the newest version followed."""
        t = self._tablets.get(bucket)
        if t is None:
            t = self.load_bucket(bucket, self.version)
            self._tablets[bucket] = t
            if bucket not in self._since_snapshot:  # what a reload replayed counts too
                snap = self.history.snapshot_at(bucket, self.version)
                start = snap[0] if snap else -1
                segs = self.history.segments_between(bucket, start, self.version)
                self._since_snapshot[bucket] = (len(segs), self.loaded_events, self.loaded_bytes)
        return t

    def reader_tablet(self, bucket: int, version: int) -> MemTablet:
        """A tablet of ``bucket`` that holds ``version`` (the writer's, or a cached one
        loaded from disk)."""
        t = self._tablets.get(bucket)
        if t is not None and t.oldest <= version <= t.committed:
            return t
        key = (bucket, version)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        t = self.load_bucket(bucket, version)
        self._cache[key] = t
        while len(self._cache) > 2 * self.schema_at(version).num_buckets:
            self._cache.popitem(last=False)
        return t

    # ------------------------------------------------------------------ following
    def refresh(self) -> None:
        """Follows versions other writers committed (replaying them into loaded tablets)."""
        latest = self.latest()
        if latest == self.version and self.history.upto >= latest:
            return
        with self._lock:
            oldest = self.oldest_version()
            if oldest > self.history.upto + 1:
                # GC deleted entries this process never read: start from its checkpoint.
                self.history = History.from_log(self.log)
            else:  # the entries after those it holds (cached ones cost no request)
                for entry in self.log.entries(self.history.upto + 1, latest):
                    self.history.add(entry)
            self._settle_bulk(latest)
            for b, t in list(self._tablets.items()):
                self.settle_pending(b, t, latest)
                if t.committed < oldest or self.history.bulk_between(b, t.committed, latest):
                    # GC may have deleted the segments after it, or a bulk write's
                    # snapshot (which no segment replays) replaced the bucket's rows:
                    # reload from the newest snapshot when next used.
                    del self._tablets[b]
                    continue
                self.replay(t, t.committed, latest)
            self.version = latest

    def _decided(self, p: PendingBucket, bucket: int) -> bool:
        """Whether the log entry of ``p.version`` names ``p``'s file for ``bucket``."""
        try:
            return p.won(self.log.read(p.version).buckets.get(bucket))
        except VersionNotFound:
            # GC collected the version before this process looked: whether it was
            # committed no longer matters, as the tablet is older than the oldest
            # retained version and is reloaded from disk (see refresh).
            return False

    def _settle_bulk(self, latest: int) -> None:
        """Bulk writes this process prepared (executors mode) become the bucket's tablet
        if their version was committed with their snapshot, else are dropped."""
        for b, p in list(self._pending.items()):
            if not p.bulk or p.version > latest:
                continue
            del self._pending[b]
            if self._decided(p, b) and p.tablet is not None:
                self._tablets[b] = p.tablet

    def settle_pending(self, bucket: int, t: MemTablet, latest: int) -> None:
        """A pending version prepared by this process (executors mode) is committed if the
        log entry of that version names our segment, else rolled back."""
        pv = t.pending_version
        if pv is None:
            return
        p = self._pending.pop(bucket, None)
        if p is not None and not p.bulk and pv <= latest and self._decided(p, bucket):
            t.commit(pv)
            apply_locations(p.locations)
            return
        t.rollback()

    # ------------------------------------------------------------------ publishing
    def publish(self, v: int, pending: list[MemTablet]) -> None:
        """Makes version ``v`` this process's newest: commits the pending tablets of the
        version, advances the others, and does their in-memory upkeep."""
        touched = {t.bucket for t in pending}
        for t in pending:
            t.commit(v)
        for b, t in self._tablets.items():
            if b not in touched:
                t.advance(v)
            self._maintain(t)
        self.version = v

    def _maintain(self, t: MemTablet) -> None:
        """In-memory upkeep: compact deltas, drop versions past ``memory_versions``."""
        if t.delta_versions() >= self.options.compact_every:
            t.compact()
        t.release(t.committed - self.options.memory_versions + 1)

    # ------------------------------------------------------------------ what it holds
    def held_tablets(self, *, load: bool = False) -> dict[int, MemTablet]:
        """The writer tablets this process holds at the newest version (with ``load``,
        every bucket's, loading those it lacks); read them under :meth:`exclusive`."""
        with self._lock:
            self.refresh()
            if load:
                for b in range(self.schema_at(self.version).num_buckets):
                    self.tablet(b)
            return dict(self._tablets)

    def writer_tablet(self, bucket: int) -> MemTablet | None:
        """The writer's tablet of ``bucket`` if this process holds one, without loading."""
        return self._tablets.get(bucket)

    def forget_read_tablets(self) -> None:
        """Drops the tablets loaded for reads of older versions (they reload on use)."""
        with self._lock:
            self._cache.clear()

    def rejects(self, version: int | None = None) -> pa.Table:
        """The events version ``version`` (default: the newest) refused
        (:func:`~cdc_sink.storage.rejects.version_rejects`).

        Raises:
            VersionNotFound: The version does not exist or is no longer retained.
        """
        with self._lock:
            self.refresh()
            v = self.version if version is None else version
            self.check_readable(v)
            entry = self.log.read(v)
        return version_rejects(self.store, entry)

    # ------------------------------------------------------------------ reads
    def check_readable(self, v: int) -> None:
        """Raises VersionNotFound, naming the oldest readable version, unless ``v`` is
        retained (between the oldest readable version and the latest, both included)."""
        oldest = self.oldest_version()
        if not oldest <= v <= self.version:
            raise VersionNotFound(
                f"version {v} is not readable: readable versions are {oldest}..{self.version}"
                f" (the oldest readable version is {oldest})",
                version=v,
                oldest=oldest,
                latest=self.version,
            )

    def bucket_batches(
        self,
        bucket: int,
        version: int,
        columns: Sequence[str] | None,
        filter: Any,
        schema: TableSchema,
    ) -> Iterator[pa.RecordBatch]:
        """Record batches of ``bucket`` at ``version``, its tablet pinned meanwhile."""
        with self.collected_means_gone(version):
            t = self.reader_tablet(bucket, version)
            with t.pin(version):
                yield from t.batches(version, columns, filter, schema=schema)

    def lookup(
        self,
        bucket: int,
        keys: pa.Table,
        version: int,
        columns: Sequence[str] | None,
        schema: TableSchema,
    ) -> pa.Table:
        """The rows of ``keys`` (all in ``bucket``) at ``version``; missing keys left out."""
        with self.collected_means_gone(version):
            t = self.reader_tablet(bucket, version)
            with t.pin(version):
                return t.get(keys, version, columns, schema=schema)

    @contextmanager
    def collected_means_gone(self, version: int) -> Iterator[None]:
        """A read that finds a file of ``version`` missing raises VersionNotFound if GC
        collected the version during the read (GC writes its checkpoint, which moves the
        oldest readable version, before it deletes a file), and the damage otherwise."""
        try:
            yield
        except (WalCorruption, FileNotFoundError) as exc:
            oldest = self.oldest_version()
            if version >= oldest:
                raise
            raise VersionNotFound(
                f"version {version} was garbage-collected during the read (the oldest "
                f"readable version is {oldest})",
                version=version,
                oldest=oldest,
                latest=self.latest(),
            ) from exc
