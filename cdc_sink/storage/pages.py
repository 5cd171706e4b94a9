"""Page locations: where a snapshot's pages live on disk, and how they are read back.

A page blob is an Arrow IPC stream holding one single-column record batch (one page of
one column), appended to a page file ``_pages/<bucket>/<version>-<attempt>.pages``
(see :mod:`cdc_sink.storage.snapshot` for the manifest that maps pages to blobs). A
:class:`PageLoc` is one blob's location, size, CRC32C, row count and page statistics.

The tablet does not know any of this. A stored page is, to the tablet, a
:class:`~cdc_sink.tablet.column.LazyPage` with an opaque loader; the loaders made here
are :class:`StoredPage` s, which carry the page's :class:`PageLoc`. So an incremental
snapshot finds the location of a page an earlier snapshot wrote by looking at the
page's loader (:func:`stored_location`), and a page written from memory becomes a stored
page when its snapshot's version commits (:func:`apply_locations`; an uncommitted
snapshot's files may be deleted, so nothing may point at them before).

Page files are objects of the table's store (:mod:`cdc_sink.storage.objectstore`),
written with its :meth:`~cdc_sink.storage.objectstore.ObjectStore.open_new` (a local
store streams the file to disk as it is appended to; an object store's is assembled in
memory and written with one ``put_new``), and read memory-mapped, each file once, without
a copy, where the store has a file to map
(:meth:`~cdc_sink.storage.objectstore.ObjectStore.local_path`), else by ranges, never the
whole file: the blobs a load or a scan will read are fetched together first
(:meth:`PageReader.prefetch`: one :meth:`~cdc_sink.storage.objectstore.ObjectStore.get_ranges_of`,
which coalesces near blobs into one GET and issues the GETs concurrently), and a blob not
fetched so is read with one ``get_range`` of its (file, offset, length).

Page statistics (``min``/``max``) are stored in the physical form of
:func:`cdc_sink.filters.physical_value`; see :mod:`cdc_sink.storage.snapshot` for the
older format 1.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import google_crc32c
import pyarrow as pa

from cdc_sink.errors import WalCorruption
from cdc_sink.filters import PageStats, physical_value
from cdc_sink.storage.bounded_ipc import check_expansion, expansion_limit
from cdc_sink.storage.byte_split import join_page, split_page
from cdc_sink.storage.objectstore import (
    RANGE_READ_THREADS,
    ObjectNotFound,
    ObjectStore,
    ShortRead,
    StoreLike,
    as_store,
)
from cdc_sink.tablet.column import Base, LazyPage, PageEntry
from cdc_sink.tablet.lazy_pages import PageLoader
from cdc_sink.utils.parallel import ordered_map

__all__ = [
    "PAGE_CODECS",
    "EncodedPage",
    "LocationUpdate",
    "PageCompression",
    "PageFileWriter",
    "PageJob",
    "PageLoc",
    "PageReader",
    "StatsSource",
    "StoredPage",
    "apply_locations",
    "encoded_pages",
    "page_array",
    "page_blob",
    "stored_location",
]

# One page is one column's buffers: decoding it in this thread beats handing them to
# Arrow's pool; scans read many pages in parallel instead (cdc_sink.tablet.page_loads).
_READ = pa.ipc.IpcReadOptions(use_threads=False)


@dataclass(frozen=True)
class PageLoc:
    """Where a page blob is: file (relative to the table root), offset, length, CRC."""

    file: str
    offset: int
    length: int
    crc: int
    rows: int
    min: Any = None
    max: Any = None
    null_count: int = 0

    def to_list(self) -> list[Any]:
        """The location as the JSON list of a manifest."""
        return [
            self.file,
            self.offset,
            self.length,
            self.crc,
            self.rows,
            self.min,
            self.max,
            self.null_count,
        ]

    @classmethod
    def from_list(cls, v: list[Any]) -> PageLoc:
        """A location from the JSON list of a manifest."""
        return cls(v[0], int(v[1]), int(v[2]), int(v[3]), int(v[4]), v[5], v[6], int(v[7]))


def json_stat(v: Any) -> Any:
    """A physical statistic (int, float, bool, str, bytes) as JSON; a NaN or an infinite
    float is unknown (null: RFC 8259 JSON has no token for it, docs/format.md §1)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        return v
    if isinstance(v, bytes):
        return {"b64": base64.b64encode(v).decode()}
    return None


def py_stat(v: Any, type: pa.DataType) -> Any:
    """A stored statistic back in physical form; format-1 values (ISO dates/timestamps,
    decimal strings) are converted with the column's ``type`` (None if they do not fit)."""
    if not isinstance(v, dict):
        return v
    if "b64" in v:
        return base64.b64decode(v["b64"])
    try:
        if "ts" in v:
            return physical_value(dt.datetime.fromisoformat(v["ts"]), type)
        if "date" in v:
            return physical_value(dt.date.fromisoformat(v["date"]), type)
        if "dec" in v:
            return physical_value(decimal.Decimal(v["dec"]), type)
    except (TypeError, ValueError, ArithmeticError, pa.ArrowException):
        return None
    return None


PageCompression = Literal["zstd", "lz4"] | None
"""The codec of a page blob's buffers (Arrow IPC body compression), or None."""

PAGE_CODECS: tuple[PageCompression, ...] = ("zstd", "lz4", None)
"""Every :data:`PageCompression`."""


def page_blob(arr: pa.Array, compression: PageCompression = None) -> pa.Buffer:
    """One page as a blob: an Arrow IPC stream of a one-column record batch, its
    buffers compressed with ``compression`` (a reader needs no codec argument: the
    stream names it). A compressed page's fixed-width values are byte-split first
    (:mod:`cdc_sink.storage.byte_split`). Returned as Arrow's buffer, not copied into ``bytes``."""
    sink = pa.BufferOutputStream()
    split = split_page(arr) if compression is not None else None
    if split is None:
        batch = pa.RecordBatch.from_arrays([arr], names=["v"])
    else:
        carrier, meta = split
        schema = pa.schema([pa.field("v", carrier.type, metadata=meta)])
        batch = pa.RecordBatch.from_arrays([carrier], schema=schema)
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, batch.schema, options=options) as w:
        w.write_batch(batch)
    return sink.getvalue()


def page_array(blob: pa.Buffer) -> pa.Array:
    """The page a blob of :func:`page_blob` holds, as it was given to it.

    Raises:
        pyarrow.ArrowException, ValueError, StopIteration: ``blob`` is not a page blob.
    """
    stream = pa.ipc.open_stream(blob, options=_READ)
    return join_page(stream.read_next_batch().column(0), stream.schema.field(0).metadata)


#: A page's statistics as queued: known, computed where the page is encoded (an encoding
#: thread: Arrow's min/max releases the GIL), or none.
StatsSource = PageStats | Callable[[], PageStats] | None


class PageJob(NamedTuple):
    """A page to encode: the array, the codec of its buffers, its statistics."""

    array: pa.Array
    codec: PageCompression = None
    stats: StatsSource = None


class EncodedPage(NamedTuple):
    """A page encoded: its blob (:func:`page_blob`), the blob's CRC32C, its statistics."""

    blob: pa.Buffer
    crc: int
    stats: PageStats | None


#: Pages queued ahead of the one being written, per encoding thread.
_AHEAD_PER_THREAD = 2

#: A snapshot with fewer rows than this in its queued pages is encoded in the calling
#: thread: starting a pool costs more than spreading so few pages' encoding saves.
MIN_PARALLEL_ROWS = 65_536


def _encoded(job: PageJob) -> EncodedPage:
    blob = page_blob(job.array, job.codec)
    stats = job.stats() if callable(job.stats) else job.stats
    return EncodedPage(blob, google_crc32c.value(blob), stats)


def encoded_pages(jobs: Sequence[PageJob], threads: int) -> Iterator[EncodedPage]:
    """Each page of ``jobs`` encoded (:func:`page_blob`, its CRC32C, its statistics), in
    order.

    Compressing a page (lz4, zstd), its CRC and Arrow's min/max release the GIL, so with
    ``threads`` > 1 the pages are encoded in that many threads, at most ``2 * threads``
    pages ahead of the consumer (memory stays bounded by a few pages, not the snapshot's
    size). Pages that are neither compressed nor have statistics to compute are a copy:
    a run of only those is encoded in this thread, and so are pages of fewer than
    :data:`MIN_PARALLEL_ROWS` rows in all.
    """
    if (
        threads <= 1
        or len(jobs) < 2
        or sum(len(j.array) for j in jobs) < MIN_PARALLEL_ROWS
        or all(j.codec is None and not callable(j.stats) for j in jobs)
    ):
        yield from map(_encoded, jobs)
        return
    yield from ordered_map(
        _encoded, jobs, threads, ahead_per_thread=_AHEAD_PER_THREAD, name="cdc_sink-encode"
    )


class PageFileWriter:
    """Appends page blobs to one new page file.

    Blobs are appended as they are given (:meth:`add`), or queued (:meth:`queue`) and
    encoded in parallel when :meth:`write_queued` appends them in queue order.

    Args:
        where: The table's store (a path: a local store on that directory).
        rel: The new file's key (created exclusively: its
            :meth:`~cdc_sink.storage.objectstore.ObjectStore.open_new`).
    """

    def __init__(self, where: StoreLike, rel: str) -> None:
        self.store: ObjectStore = as_store(where)
        self.rel = rel
        self.path = self.store.location(rel)
        self._out = self.store.open_new(rel)  # finished in finish(), or aborted
        self.offset = 0
        self._queued: list[PageJob] = []

    def add(
        self, data: bytes | pa.Buffer, rows: int, stats: PageStats | None, crc: int | None = None
    ) -> PageLoc:
        """Appends a blob (its CRC32C computed unless given); returns its location."""
        self._out.write(data)
        loc = PageLoc(
            self.rel,
            self.offset,
            len(data),
            google_crc32c.value(data) if crc is None else crc,
            rows,
            json_stat(stats.min) if stats else None,
            json_stat(stats.max) if stats else None,
            stats.null_count if stats else 0,
        )
        self.offset += len(data)
        return loc

    def add_page(
        self,
        page: pa.Array,
        stats: PageStats | None = None,
        compression: PageCompression = None,
    ) -> PageLoc:
        """Appends a page (as :func:`page_blob`); returns its location."""
        return self.add(page_blob(page, compression), len(page), stats)

    def queue(
        self, page: pa.Array, stats: StatsSource = None, compression: PageCompression = None
    ) -> int:
        """Queues a page for :meth:`write_queued` (``stats`` may be a function, called
        where the page is encoded); returns its index in the list of locations that
        :meth:`write_queued` returns."""
        self._queued.append(PageJob(page, compression, stats))
        return len(self._queued) - 1

    def write_queued(self, threads: int) -> list[PageLoc]:
        """Encodes the queued pages in up to ``threads`` threads (:func:`encoded_pages`)
        and appends them in queue order; returns their locations, in that order."""
        jobs, self._queued = self._queued, []
        return [
            self.add(enc.blob, len(job.array), enc.stats, enc.crc)
            for job, enc in zip(jobs, encoded_pages(jobs, threads), strict=True)
        ]

    def finish(self) -> int:
        """Makes the file durable and closes it; returns its size. A file left empty is
        not kept."""
        return self._out.finish()

    def abort(self) -> None:
        """Closes and removes the file."""
        self._out.abort()


_Blob = tuple[str, int, int]  # file, offset, length


class PageReader:
    """Page blobs of a table's page files: memory-mapped where the store has a file to
    map (each file once), else read by ranges: the blobs a load or a scan will read are
    fetched together first (:meth:`prefetch`), any other with one ranged ``get``.

    A blob's CRC is checked when the blob is first read (:meth:`array`, :meth:`blob`),
    before any of its data is returned; :meth:`check` checks locations against the files'
    sizes up front (a missing or truncated page file is found at load).

    Args:
        where: The table's store (a path: a local store on that directory).
    """

    def __init__(self, where: StoreLike) -> None:
        self.store = as_store(where)
        self._maps: dict[str, pa.Buffer] = {}
        self._fetched: dict[_Blob, bytes] = {}  # prefetched, each taken by its one read

    def check(self, locs: Iterable[PageLoc]) -> None:
        """Checks that the files of ``locs`` exist and hold every blob (maps them where
        the store has files to map; else one ``HEAD`` per file, issued concurrently).

        Raises:
            WalCorruption: A page file is missing or truncated.
        """
        locs = list(locs)
        first = {loc.file: loc for loc in locs}
        if len(first) > 1 and self.store.local_path(locs[0].file) is None:
            with ThreadPoolExecutor(min(len(first), RANGE_READ_THREADS)) as pool:
                sizes = dict(zip(first, pool.map(self._size, first.values()), strict=True))
        else:
            sizes = {f: self._size(loc) for f, loc in first.items()}
        for loc in locs:
            size = sizes[loc.file]
            if loc.offset < 0 or loc.offset + loc.length > size:
                raise WalCorruption(
                    "a snapshot page file is truncated",
                    path=self.store.location(loc.file),
                    offset=loc.offset,
                )

    def _missing(self, loc: PageLoc) -> WalCorruption:
        return WalCorruption(
            "a snapshot page file is missing",
            path=self.store.location(loc.file),
            offset=loc.offset,
        )

    def _size(self, loc: PageLoc) -> int:
        mapped = self._map(loc)
        if mapped is not None:
            return int(mapped.size)
        try:
            return self.store.head(loc.file).size
        except ObjectNotFound:
            raise self._missing(loc) from None

    def _map(self, loc: PageLoc) -> pa.Buffer | None:
        """The whole page file of ``loc``, memory-mapped, or None when the store has no
        file to map."""
        buf = self._maps.get(loc.file)
        if buf is None:
            path = self.store.local_path(loc.file)
            if path is None:
                return None
            try:
                with pa.memory_map(path, "r") as mm:
                    buf = mm.read_buffer()
            except FileNotFoundError:
                raise self._missing(loc) from None
            self._maps[loc.file] = buf
        return buf

    def prefetch(self, locs: Iterable[PageLoc]) -> list[PageLoc]:
        """Fetches the blobs at ``locs`` that no read took yet, together (one
        :meth:`~cdc_sink.storage.objectstore.ObjectStore.get_ranges_of`: near blobs of
        a file in one GET, the GETs concurrent), for the next read of each to take
        instead of a GET of its own; returns the locations fetched (:meth:`forget` those
        a read may not take). Nothing where the store has files to map. A fetch that
        fails fetches nothing: each read then reads, and fails, by itself.
        """
        wanted: dict[str, list[PageLoc]] = {}
        for loc in locs:
            if (loc.file, loc.offset, loc.length) not in self._fetched and loc.length:
                wanted.setdefault(loc.file, []).append(loc)
        if not wanted or self.store.local_path(next(iter(wanted))) is not None:
            return []
        try:
            got = self.store.get_ranges_of(
                {f: [(loc.offset, loc.length) for loc in ls] for f, ls in wanted.items()}
            )
        except (ObjectNotFound, ShortRead):
            return []
        fetched: list[PageLoc] = []
        for f, ls in wanted.items():
            for loc, data in zip(ls, got[f], strict=True):
                self._fetched[(loc.file, loc.offset, loc.length)] = data
                fetched.append(loc)
        return fetched

    def forget(self, locs: Iterable[PageLoc]) -> None:
        """Drops what :meth:`prefetch` fetched at ``locs`` and no read took."""
        for loc in locs:
            self._fetched.pop((loc.file, loc.offset, loc.length), None)

    def prefetch_pages(self, loaders: Sequence[PageLoader]) -> list[PageLoader]:
        """:meth:`prefetch` of the stored pages of ``loaders`` (this reader's
        :class:`StoredPage` s; a tablet's :class:`~cdc_sink.tablet.lazy_pages.PageFetcher`);
        returns the loaders whose pages were fetched."""
        stored = [ld for ld in loaders if isinstance(ld, StoredPage) and ld.reader is self]
        done = {
            (loc.file, loc.offset, loc.length) for loc in self.prefetch(ld.loc for ld in stored)
        }
        return [ld for ld in stored if (ld.loc.file, ld.loc.offset, ld.loc.length) in done]

    def forget_pages(self, loaders: Sequence[PageLoader]) -> None:
        """:meth:`forget` of the stored pages of ``loaders``."""
        self.forget(ld.loc for ld in loaders if isinstance(ld, StoredPage))

    def _piece(self, loc: PageLoc) -> pa.Buffer:
        """The bytes at ``loc`` (fewer if the file ends first)."""
        mapped = self._map(loc)
        if mapped is not None:
            return mapped.slice(loc.offset, loc.length)
        if self._fetched:
            data = self._fetched.pop((loc.file, loc.offset, loc.length), None)
            if data is not None:
                return pa.py_buffer(data)
        try:
            return pa.py_buffer(self.store.get_range(loc.file, loc.offset, loc.length))
        except ObjectNotFound:
            raise self._missing(loc) from None
        except ShortRead:
            return pa.py_buffer(b"")

    def blob(self, loc: PageLoc) -> pa.Buffer:
        """The blob at ``loc``, checked against its CRC.

        Raises:
            WalCorruption: The blob is damaged.
        """
        piece = self._piece(loc)
        if len(piece) != loc.length or google_crc32c.value(piece) != loc.crc:
            raise WalCorruption(
                "snapshot page fails its CRC",
                path=self.store.location(loc.file),
                offset=loc.offset,
            )
        return piece

    def array(self, loc: PageLoc, *, check_rows: bool = False) -> pa.Array:
        """The page at ``loc`` (CRC checked first).

        Raises:
            WalCorruption: The blob is damaged, would decompress to more than
                :func:`~.bounded_ipc.expansion_limit` of its size (found before anything is
                decompressed), or (with ``check_rows``) does not hold ``loc.rows`` rows.
        """
        blob = self.blob(loc)
        check_expansion(
            blob,
            limit=expansion_limit(len(blob)),
            what="snapshot page",
            path=self.store.location(loc.file),
            offset=loc.offset,
        )
        try:
            arr = page_array(blob)
        except (pa.ArrowException, StopIteration, ValueError) as exc:
            raise WalCorruption(
                f"snapshot page does not decode: {exc}",
                path=self.store.location(loc.file),
                offset=loc.offset,
            ) from None
        if check_rows and len(arr) != loc.rows:
            raise WalCorruption(
                f"snapshot page holds {len(arr)} rows, not {loc.rows}",
                path=self.store.location(loc.file),
                offset=loc.offset,
            )
        return arr

    def lazy(self, loc: PageLoc) -> LazyPage:
        """The page at ``loc``, read and CRC-checked on first access."""
        return LazyPage(loc.rows, StoredPage(loc, self))


class StoredPage:
    """The loader of a page stored at ``loc`` (a tablet
    :class:`~cdc_sink.tablet.column.PageLoader`): reads the page through ``reader``,
    checking its CRC and row count.

    Args:
        loc: Where the page is.
        reader: The table's page reader.
    """

    __slots__ = ("loc", "reader")

    def __init__(self, loc: PageLoc, reader: PageReader) -> None:
        self.loc = loc
        self.reader = reader

    @property
    def fetcher(self) -> PageReader:
        """The reader, which fetches many stored pages together
        (:meth:`PageReader.prefetch_pages`)."""
        return self.reader

    def __call__(self) -> pa.Array:
        """The page (read now).

        Raises:
            WalCorruption: The page is damaged.
        """
        return self.reader.array(self.loc, check_rows=True)


def stored_location(entry: PageEntry) -> PageLoc | None:
    """Where a base page (as held, see :meth:`~cdc_sink.tablet.column.Base.page_entry`)
    is stored, if a committed snapshot wrote it (or it was loaded from one)."""
    if isinstance(entry, LazyPage) and isinstance(entry.loader, StoredPage):
        return entry.loader.loc
    return None


#: A page a snapshot wrote from memory: (base, page number, its loader at its location).
LocationUpdate = tuple[Base, int, StoredPage]


def apply_locations(updates: list[LocationUpdate]) -> None:
    """Records where pages were written, once the snapshot's version is committed (an
    uncommitted snapshot's files may be deleted, so nothing may point at them before):
    each page becomes a stored page of its base, which later incremental snapshots reuse.
    """
    for base, p, loader in updates:
        base.set_loader(p, loader)
