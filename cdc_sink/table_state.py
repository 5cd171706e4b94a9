"""The in-memory state of an open table: its log, history, schemas and bucket tablets.

A :class:`TableState` keeps, for one process:

* the version log and the :class:`~cdc_sink.storage.history.History` built from it (which
  segment or snapshot holds each bucket's change of each version), and the newest version
  this process has followed;
* one :class:`~cdc_sink.tablet.MemTablet` per bucket the process writes, at the newest
  version, loaded lazily from disk (the newest snapshot at or below the version, then the
  WAL segments after it) and kept current by replaying what other writers commit;
* a small cache of tablets loaded for reads of older versions;
* what the process prepared and has not seen decided (:mod:`cdc_sink.pending`).

The commit protocol (:mod:`cdc_sink.commit`), snapshots and schema changes
(:mod:`cdc_sink.maintenance`) and the :class:`~cdc_sink.table.Table` facade work on it.
Every method that changes it runs under :attr:`TableState.lock`.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from cdc_sink.changes import ChangeBatch
from cdc_sink.errors import InvalidOption, TableNotFound, VersionNotFound, WalCorruption
from cdc_sink.pending import PendingBucket
from cdc_sink.schema import TableSchema
from cdc_sink.storage.change_codec import WAL_CODECS, WalCompression
from cdc_sink.storage.fsutil import DEFAULT_FILE_MODE, check_file_mode
from cdc_sink.storage.history import History
from cdc_sink.storage.layout import TABLE_FILE, kind_of, schema_key
from cdc_sink.storage.objectstore import ObjectNotFound, ObjectStore, store_for
from cdc_sink.storage.objectstore.cache import DEFAULT_CACHE_BYTES, CachingStore
from cdc_sink.storage.objectstore.local import LocalStore
from cdc_sink.storage.objectstore.urls import parse_store_url
from cdc_sink.storage.pages import PAGE_CODECS, PageCompression
from cdc_sink.storage.segments import read_change_segment
from cdc_sink.storage.snapshot import apply_locations, load_snapshot, read_manifest
from cdc_sink.storage.version_log import VersionLog
from cdc_sink.tablet import MemTablet, TabletOptions
from cdc_sink.tablet.keyindex import seed_from_json

__all__ = ["TableOptions", "TableState", "check_created", "now_ms", "open_location"]


def now_ms() -> int:
    """The wall clock in milliseconds since the epoch."""
    return int(time.time() * 1000)


@dataclass(frozen=True)
class TableOptions:
    """How a table keeps its versions (each attribute's docstring follows it)."""

    page_rows: int = 65536
    """Rows per page (fixed at creation)."""
    memory_versions: int = 100
    """Versions each in-memory tablet keeps readable."""
    compact_every: int = 20
    """Compact a tablet's deltas in memory after this many versions."""
    snapshot_every: int = 50
    """Write a bucket snapshot after this many versions changed the bucket since its last
    snapshot ..."""
    snapshot_events: int = 4_000_000
    """... or once the bucket's WAL segments since its last snapshot hold this many events
    (a large batch into a bucket that has rows snapshots at the bucket's next version), so
    that loading a bucket never replays much more than this. Events, not bytes: replay
    cost follows the events, and compressed segments of a sparse workload are several
    times smaller than those of a dense one."""
    bulk_events: int = 100_000
    """A batch of at least this many events for a bucket that holds no rows yet (a
    table's initial load, a backfill into a new table, Debezium's initial snapshot) is
    written as a snapshot of the bucket at its version instead of a WAL segment: the
    snapshot is the durable record and the log entry names it, so the data is written
    once, as pages, and a read of that version loads pages instead of replaying the
    load."""
    page_compression: PageCompression = "zstd"
    """Codec of the pages snapshots write from now on (Arrow IPC buffer compression, with
    fixed-width values byte-split first): ``"zstd"`` (the default), ``"lz4"`` or ``None``.
    It applies to value and key pages; row hashes (random bits) and the index slots (decoded
    at every bucket load) are never compressed. Any page is read whatever it was written
    with, so the option can change between opens. zstd writes the fewest bytes, lz4 more,
    uncompressed pages the most (docs/benchmarks.md, "Byte-split compressed pages", "Per
    codec"). An uncompressed page is mapped without a copy where a compressed one is
    decompressed when first read, so ``None`` gives the fastest cold reads for the most disk
    (docs/design-notes.md, "Snapshot pages are zstd by default"). In-memory tablets are
    never compressed."""
    wal_compression: WalCompression = "lz4"
    """Codec of the WAL segments written from now on: ``"lz4"`` (the default), ``"zstd"``
    or ``None``; any segment is read whatever it was written with. zstd writes fewer
    bytes than lz4, but a reopen's replay waits for its slower decompression
    (docs/benchmarks.md, "zstd pages by default", "WAL codec", and "Compact WAL", "Where
    the time goes"). Batches under 4,096 events are never compressed."""
    change_images: bool = False
    """Each commit of this process also writes, beside a bucket's WAL segment, the
    pre-images of the keys its events name (every column as of the version before, Arrow
    IPC with the ``wal_compression`` codec), named by the log entry, so that a reader
    of the change feed that does not hold the versions in memory reads the version's
    changes from that object and the segment instead of opening the bucket and reading
    the pages of the changed rows (Delta's ``delta.enableChangeDataFeed``;
    docs/architecture.md, "Change feed"). Off by default: it costs the writer a gather of
    those rows (page reads for rows whose pages it has not read yet) and an object per
    bucket per version. A version written without them (older ones, another writer
    without the option, a batch with a truncate) is read from pages as before."""
    retain_versions: int = 100
    """GC keeps at least this many newest versions ..."""
    retain_seconds: float = 3600.0
    """... and every version committed within this many seconds."""
    prepare_threads: int | None = None
    """Threads that prepare the buckets of one batch at once (each bucket's WAL segment
    encoded, compressed and fsynced, its tablet applied); ``None`` (the default): one per
    CPU this process may use, at most one per bucket the batch touches. ``1`` prepares
    the buckets one after another. The version still commits atomically, with one log
    entry, after every bucket is prepared."""
    object_cache_bytes: int = DEFAULT_CACHE_BYTES
    """On an object store: bytes of immutable objects (pages, WAL segments, manifests,
    rejects files) this process keeps in memory once read, least recently used evicted
    first, so a warm read makes no request (objects never change under their name: the
    cache needs no invalidation). ``0`` keeps none. A local table reads its files
    through the page cache and memory maps instead."""
    file_mode: int = DEFAULT_FILE_MODE
    """Permission bits of the files this process creates in the table (log entries,
    checkpoints, WAL segments, snapshot manifests and pages, rejects files, which hold
    raw message values, and schema files); the directories it creates get the same bits
    plus search (``x``) wherever reading is allowed: ``0o640`` (the default) gives
    ``0o750``. The process umask may clear more bits. Files and directories that exist
    keep their modes, so a table written before keeps working."""

    def __post_init__(self) -> None:
        check_file_mode(self.file_mode)
        cache = self.object_cache_bytes
        if type(cache) is not int or cache < 0:
            raise InvalidOption(
                f"object_cache_bytes must be an int >= 0, got {cache!r}",
                option="object_cache_bytes",
            )
        threads = self.prepare_threads
        if threads is not None and (type(threads) is not int or threads < 1):
            raise InvalidOption(
                f"prepare_threads must be None or an int >= 1, got {threads!r}",
                option="prepare_threads",
            )
        for name, codecs in (("page_compression", PAGE_CODECS), ("wal_compression", WAL_CODECS)):
            if getattr(self, name) not in codecs:
                raise InvalidOption(
                    f"{name} must be one of {sorted(map(str, codecs))}, "
                    f"got {getattr(self, name)!r}",
                    option=name,
                )

    def threads_for(self, buckets: int) -> int:
        """How many threads prepare a batch touching ``buckets`` buckets."""
        threads = self.prepare_threads
        if threads is None:
            affinity = getattr(os, "sched_getaffinity", None)
            threads = len(affinity(0)) if affinity is not None else os.cpu_count() or 1
        return max(1, min(threads, buckets))

    @classmethod
    def for_tests(cls) -> TableOptions:
        """Tiny pages, frequent snapshots and buckets prepared in two threads, to exercise
        every path in small tests."""
        return cls(
            page_rows=8,
            memory_versions=4,
            compact_every=3,
            snapshot_every=3,
            bulk_events=4,
            retain_versions=3,
            retain_seconds=0.0,
            prepare_threads=2,
        )


def _immutable(key: str) -> bool:
    """Whether ``key`` names an object never rewritten under its name (an attempt's)."""
    return kind_of(key) in ("segment", "snapshot", "pages", "rejects", "images")


def open_location(
    url: str | os.PathLike[str],
    storage_options: Mapping[str, str] | None,
    options: TableOptions | None,
    *,
    probe: bool,
) -> tuple[str, ObjectStore]:
    """The root of the table at ``url`` (a local table's path as given, else its URL)
    and its store (:func:`~cdc_sink.storage.objectstore.store_for`; a local one creates
    files with ``options.file_mode``). Without ``probe`` an object store's conditional
    writes are proved only before this process's first write
    (:meth:`TableState.writer_repair`)."""
    where = parse_store_url(os.fspath(url))
    root = os.fspath(url) if where.kind == "local" else where.url
    mode = (options or TableOptions()).file_mode
    url = os.fspath(url)
    return root, store_for(url, storage_options, check_conditional_writes=probe, file_mode=mode)


def check_created(root: str, store: ObjectStore) -> None:
    """Raises TableNotFound unless ``store`` holds a table whose version 0 is committed."""
    try:
        store.head(TABLE_FILE)
    except ObjectNotFound:
        raise TableNotFound(f"no cdc_sink table at {root}") from None
    if VersionLog(root, store=store).latest() is None:
        raise TableNotFound(
            f"the table at {root} was never created completely "
            "(create_table crashed before committing version 0)"
        )


class TableState:
    """The state of one open table in one process (see the module docstring)."""

    def __init__(
        self, root: str, options: TableOptions | None, store: ObjectStore | None = None
    ) -> None:
        """Args:
        root: The table's directory or URL (for messages).
        options: The process's options (``page_rows`` comes from the table).
        store: The store holding the table (default: a
            :class:`~cdc_sink.storage.objectstore.local.LocalStore` on ``root``).
        """
        self.root = root
        opts = options or TableOptions()
        if store is None:
            store = LocalStore(root, file_mode=opts.file_mode)
        elif not isinstance(store, LocalStore) and opts.object_cache_bytes:
            store = CachingStore(store, opts.object_cache_bytes, cacheable=_immutable)
        self.store: ObjectStore = store
        try:
            meta = json.loads(self.store.get(TABLE_FILE))
        except ObjectNotFound:
            raise TableNotFound(f"no cdc_sink table at {root}") from None
        self.options = replace(opts, page_rows=int(meta["page_rows"]))
        try:  # None: a table created before the salt keeps the unsalted index hash
            self.index_seed = seed_from_json(meta.get("index_seed"))
        except ValueError as exc:
            where = self.store.location(TABLE_FILE)
            raise WalCorruption(str(exc), path=where, offset=0) from None
        self.log = VersionLog(root, file_mode=self.options.file_mode, store=self.store)
        self.repaired = False
        self.schemas: dict[int, TableSchema] = {}
        # The newest version first, then the history: a version committed in between is
        # then in the history but not yet named (the next refresh follows it). The other
        # order names a version whose segments the history lacks, and reads of it return
        # the version before (found by the chaos suite's reader).
        self.version = self.latest()
        self.history = History.from_log(self.log)
        self.tablets: dict[int, MemTablet] = {}
        self.since_snapshot: dict[int, tuple[int, int]] = {}  # segments, events
        self.loaded_events = 0  # events the last load_bucket replayed
        self.pending: dict[int, PendingBucket] = {}
        self.cache: OrderedDict[tuple[int, int], MemTablet] = OrderedDict()
        self.lock = threading.RLock()

    # ------------------------------------------------------------------ metadata
    def writer_repair(self) -> None:
        """Before this process's first commit: prove the store's conditional writes
        (once per store; an object store opened for reading has not), and remove an
        unfinished newest log entry left by a crashed writer (readers never repair; they
        ignore such an entry)."""
        if not self.repaired:
            self.store.ensure_conditional_writes()
            self.log.repair()
            self.repaired = True

    def latest(self) -> int:
        """The newest committed version in the log."""
        v = self.log.latest()
        if v is None:
            raise TableNotFound(f"table at {self.root} has no committed version")
        return v

    def oldest_version(self) -> int:
        """The oldest readable version."""
        oldest = self.log.oldest()
        floor = self.log.newest_checkpoint_version()
        # Once GC has written a checkpoint at its horizon, versions below it are gone even
        # if a crash left some of their log entries behind.
        return max(0 if oldest is None else oldest, 0 if floor is None else floor)

    def schema_of(self, schema_id: int) -> TableSchema:
        """The schema with id ``schema_id``."""
        s = self.schemas.get(schema_id)
        if s is None:
            s = TableSchema.from_dict(json.loads(self.store.get(schema_key(schema_id))))
            self.schemas[schema_id] = s
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
        if snap is None:
            start = self.history.schemas[0][0] if self.history.schemas else 0
            tablet = self.empty_tablet(bucket, start)
        else:
            start, rel = snap
            manifest = read_manifest(self.store, rel)
            tablet = load_snapshot(
                self.store,
                manifest,
                self.schema_of(manifest.schema_id),
                lambda v: self.empty_tablet(bucket, v),
            )
        self.loaded_events = self.replay(tablet, start, version, merge=True)
        return tablet

    def replay(self, tablet: MemTablet, start: int, version: int, *, merge: bool = False) -> int:
        """Brings ``tablet`` from ``start`` to ``version`` by replaying segments;
        returns the events replayed.

        With ``merge``, consecutive segments of one schema are folded as one batch (the
        fold is exact, so the result equals applying them one by one); the versions in
        between are then not kept in memory (reads of them load from disk).
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
            batches = [read_change_segment(self.store, r, schema)[1] for _, r in run]
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

    def tablet(self, bucket: int) -> MemTablet:
        """The writer's tablet of ``bucket`` at the newest version followed."""
        t = self.tablets.get(bucket)
        if t is None:
            t = self.load_bucket(bucket, self.version)
            self.tablets[bucket] = t
            if bucket not in self.since_snapshot:  # what a reload replayed counts too
                snap = self.history.snapshot_at(bucket, self.version)
                start = snap[0] if snap else -1
                segs = self.history.segments_between(bucket, start, self.version)
                self.since_snapshot[bucket] = (len(segs), self.loaded_events)
        return t

    def reader_tablet(self, bucket: int, version: int) -> MemTablet:
        """A tablet of ``bucket`` that holds ``version`` (the writer's, or a cached one
        loaded from disk)."""
        t = self.tablets.get(bucket)
        if t is not None and t.oldest <= version <= t.committed:
            return t
        key = (bucket, version)
        cached = self.cache.get(key)
        if cached is not None:
            self.cache.move_to_end(key)
            return cached
        t = self.load_bucket(bucket, version)
        self.cache[key] = t
        while len(self.cache) > 2 * self.schema_at(version).num_buckets:
            self.cache.popitem(last=False)
        return t

    # ------------------------------------------------------------------ following
    def refresh(self) -> None:
        """Follows versions other writers committed (replaying them into loaded tablets)."""
        latest = self.latest()
        if latest == self.version and self.history.upto >= latest:
            return
        with self.lock:
            oldest = self.oldest_version()
            if oldest > self.history.upto + 1:
                # GC deleted entries this process never read: start from its checkpoint.
                self.history = History.from_log(self.log)
            else:
                self.history.extend(self.log)
            self.settle_bulk(latest)
            for b, t in list(self.tablets.items()):
                self.settle_pending(b, t, latest)
                if t.committed < oldest or self.history.bulk_between(b, t.committed, latest):
                    # GC may have deleted the segments after it, or a bulk write's
                    # snapshot (which no segment replays) replaced the bucket's rows:
                    # reload from the newest snapshot when next used.
                    del self.tablets[b]
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

    def settle_bulk(self, latest: int) -> None:
        """Bulk writes this process prepared (executors mode) become the bucket's tablet
        if their version was committed with their snapshot, else are dropped."""
        for b, p in list(self.pending.items()):
            if not p.bulk or p.version > latest:
                continue
            del self.pending[b]
            if self._decided(p, b) and p.tablet is not None:
                self.tablets[b] = p.tablet

    def settle_pending(self, bucket: int, t: MemTablet, latest: int) -> None:
        """A pending version prepared by this process (executors mode) is committed if the
        log entry of that version names our segment, else rolled back."""
        pv = t.pending_version
        if pv is None:
            return
        p = self.pending.pop(bucket, None)
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
        for b, t in self.tablets.items():
            if b not in touched:
                t.advance(v)
            self._maintain(t)
        self.version = v

    def _maintain(self, t: MemTablet) -> None:
        """In-memory upkeep: compact deltas, drop versions past ``memory_versions``."""
        if t.delta_versions() >= self.options.compact_every:
            t.compact()
        t.release(t.committed - self.options.memory_versions + 1)

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
