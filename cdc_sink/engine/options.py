"""The options of an open table: how it keeps its versions in memory and on storage.

:class:`TableOptions` is what :func:`cdc_sink.create_table` and :func:`cdc_sink.open_table`
take (re-exported by :mod:`cdc_sink.table`); ``page_rows`` is fixed when a table is
created, every other option belongs to the process that opens it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from cdc_sink.errors import InvalidOption
from cdc_sink.storage.change_codec import WAL_CODECS, WalCompression
from cdc_sink.storage.objectstore.cache import DEFAULT_CACHE_BYTES
from cdc_sink.storage.objectstore.local import DEFAULT_FILE_MODE, check_file_mode
from cdc_sink.storage.pages import PAGE_CODECS, PageCompression

__all__ = ["TableOptions"]


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
    that loading a bucket never replays much more than this. Replay cost follows the
    events, and compressed segments of a sparse workload are several times smaller than
    those of a dense one ..."""
    snapshot_wal_bytes: int = 256 << 20
    """... or once those segments hold this many bytes decompressed (what a replay
    decodes), so that wide events (large text or JSON values) cannot make a cold read of
    any version, the newest or an older one between two snapshots, fetch and decode far
    more than a snapshot holds. Together the three bound what a read costs beyond its
    snapshot: segments (requests), events and bytes."""
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
    uncompressed pages the most (docs/benchmarks-history.md, "Byte-split compressed pages", "Per
    codec"). An uncompressed page is mapped without a copy where a compressed one is
    decompressed when first read, so ``None`` gives the fastest cold reads for the most disk
    (docs/design-notes.md, "Snapshot pages are zstd by default"). In-memory tablets are
    never compressed."""
    wal_compression: WalCompression = "lz4"
    """Codec of the WAL segments written from now on: ``"lz4"`` (the default), ``"zstd"``
    or ``None``; any segment is read whatever it was written with. zstd writes fewer
    bytes than lz4, but a reopen's replay waits for its slower decompression
    (docs/benchmarks-history.md, "zstd pages by default", "WAL codec", and "Compact WAL", "Where
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
    checkpoint_every: int = 3
    """The writer replaces the table's last-checkpoint pointer (``_log/_last_checkpoint``:
    the checkpoint as of its newest version, one ``PUT``) once this many versions were
    committed after the pointer it knows ...

    An open reads the pointer, lists only the log entries after it and reads those, so
    that an open makes a number of requests that does not grow with the retained
    versions: with the default, the table file, the pointer, one listing and at most
    two entries (docs/format.md, "The last-checkpoint pointer")."""
    checkpoint_tail_bytes: int = 256 * 1024
    """... or once the log entries committed after it hold this many bytes (entries
    of many buckets are large)."""
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
        for name in ("checkpoint_every", "checkpoint_tail_bytes"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise InvalidOption(f"{name} must be an int >= 1, got {value!r}", option=name)
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
