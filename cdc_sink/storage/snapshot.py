"""Incremental snapshots of one bucket tablet: immutable page files plus a manifest.

On disk, under the table root::

    _snapshots/<bucket>/<version:020d>-<attempt>.manifest   framed JSON (magic CDCSNP)
    _pages/<bucket>/<version:020d>-<attempt>.pages          concatenated page blobs

A page blob is an Arrow IPC stream holding one single-column record batch (one 64K-row
page of one column; :mod:`cdc_sink.storage.pages`). The manifest maps every page of the
bucket at its version to ``[file, offset, length, crc32c, rows, min, max, null_count]``:
value columns (by column id), the key columns, the rows' index hashes, and the deletion
vector (a serialized roaring bitmap blob) -- everything needed to rebuild the tablet and
its index without reading any WAL.

*Incremental*: a page that compaction left untouched is the same entry as in the
previous base, a stored page whose loader (:class:`~cdc_sink.storage.pages.StoredPage`)
carries the location it was written to, so the new manifest points at the old file;
only changed pages are written (key pages, append-only, are
unchanged when they were full at the previous snapshot). When the bytes the manifest
references fall under half of the bytes of the files it references, every page is
rewritten into one new file, so old files can be collected. Writing a snapshot never
compacts: the caller compacts the tablet at the version first (``MemTablet.compact``).

Pages are written with the table's ``page_compression`` codec (value pages and key pages;
row hashes never: they are random bits; the index slots never: every bucket load would
decompress them into fresh memory instead of mapping them, for the bytes zstd saves:
docs/benchmarks-history.md, "zstd pages by default", "Index slots uncompressed"), and each blob
reads with whatever codec it was written with. The pages to write are queued, compressed
in as many threads as the process may use cores and appended in queue order
(:func:`~cdc_sink.storage.pages.encoded_pages`; docs/benchmarks-history.md, "Snapshot pages
compressed in parallel"), the value pages' statistics computed in the same threads.
Manifests and page files are objects of the table's store, each written once
(``put_new``, before the log entry that names the snapshot); loading reads the manifest
with one ``get`` and the pages through :class:`~cdc_sink.storage.pages.PageReader`.
On a local store loading memory-maps the page files (zero-copy Arrow arrays for
uncompressed blobs); key,
row-hash, index and deletion-vector blobs are CRC-checked at load, value pages lazily:
each when it is first read (:class:`~cdc_sink.tablet.column.LazyPage`), before any of its
data is returned.

Page statistics (``min``/``max``) are stored in the physical form of
:func:`cdc_sink.filters.physical_value` (integers for dates, timestamps and decimals; a
binary as ``{"b64": ...}``), so writing them never converts a value to Python's
``datetime`` or ``Decimal``. Manifests say so with ``"stats_format": 2``; a manifest
without it (format 1) held ISO strings and decimal strings (``{"ts"|"date"|"dec": ...}``),
which loading converts to the physical form.

A compressed page may hold its fixed-width values byte-split
(:mod:`cdc_sink.storage.byte_split`). Manifests written since then say
``"page_format": 2``; a reader refuses a manifest whose ``page_format`` is newer than
the one it knows (:data:`PAGE_FORMAT`), instead of misreading its pages.

The row hashes and index slots are those of the tablet's key index, whose hash is
salted with the table's seed (:mod:`cdc_sink.tablet.keyindex`). The manifest records
the seed that built them (``"index_seed"``, 16 hex digits; absent: the unsalted hash of
the tables created before the salt), and loading trusts them only under that same seed:
otherwise the index is rebuilt from the key pages (and the next snapshot writes its row
hashes anew). A manifest with an ``index_seed`` says ``"page_format": 3``, so a reader
from before the salt, which would take salted hashes for its own and miss every stored
key, refuses it; manifests of unsalted tables stay format 2.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
from pyroaring import FrozenBitMap

from cdc_sink.errors import TabletStateError, WalCorruption
from cdc_sink.filters import PageStats, page_stats
from cdc_sink.schema import TableSchema
from cdc_sink.storage import layout
from cdc_sink.storage.faults import fault_point, register
from cdc_sink.storage.framing import encode_file, read_records
from cdc_sink.storage.objectstore import StoreLike, as_store
from cdc_sink.storage.pages import (
    LocationUpdate,
    PageCompression,
    PageFileWriter,
    PageLoc,
    PageReader,
    StoredPage,
    apply_locations,
    json_stat,
    py_stat,
    stored_location,
)
from cdc_sink.storage.segments import read_committed_object
from cdc_sink.tablet.column import Base, PageList
from cdc_sink.tablet.keyindex import seed_from_json, seed_to_json
from cdc_sink.tablet.memtablet import MemTablet
from cdc_sink.tablet.page_loads import MIN_PARALLEL, usable_cores
from cdc_sink.utils.parallel import ordered_map

__all__ = [
    "PAGE_FORMAT",
    "LocationUpdate",
    "PageLoc",
    "SnapshotManifest",
    "SnapshotWrite",
    "apply_locations",
    "load_snapshot",
    "read_manifest",
    "write_snapshot",
]

SNAPSHOT_MAGIC = b"CDCSNP\x00\x01"
#: Page statistics in physical form (see the module docstring).
STATS_FORMAT = 2
#: Page blobs as :mod:`cdc_sink.storage.pages` writes them (2: compressed pages may be
#: byte-split; 3: the row hashes and slots are salted with the manifest's
#: ``index_seed``). A manifest without ``page_format`` is format 1.
PAGE_FORMAT = 3
#: The format of a manifest whose index is unsalted (readable from before the salt).
UNSALTED_PAGE_FORMAT = 2


def page_format_for(index_seed: int | None) -> int:
    """The page format a manifest of an index with ``index_seed`` is written with."""
    return UNSALTED_PAGE_FORMAT if index_seed is None else PAGE_FORMAT


register("snapshot.pages_written", "snapshot.written")


@dataclass
class SnapshotManifest:
    """The manifest of one bucket snapshot (see the module docstring)."""

    bucket: int
    version: int
    schema_id: int
    row_count: int
    page_rows: int
    columns: dict[int, list[PageLoc]]
    keys: list[list[PageLoc]]
    row_hash: list[PageLoc]
    dv: PageLoc | None
    files: dict[str, int] = field(default_factory=dict)
    index_slots: PageLoc | None = None
    stats_format: int = STATS_FORMAT
    page_format: int = PAGE_FORMAT
    index_seed: int | None = None

    def locations(self) -> list[PageLoc]:
        """Every blob the manifest references: value and key pages, row hashes,
        deletion vector and index slots."""
        locs = [p for ps in self.columns.values() for p in ps]
        locs += [p for ps in self.keys for p in ps] + self.row_hash
        locs += [p for p in (self.dv, self.index_slots) if p is not None]
        return locs

    @property
    def referenced_bytes(self) -> int:
        """Bytes of the blobs the manifest references."""
        return sum(p.length for p in self.locations())

    def all_files(self) -> set[str]:
        """Page files this manifest references."""
        return set(self.files)

    def to_json(self) -> bytes:
        doc = {
            "bucket": self.bucket,
            "version": self.version,
            "schema_id": self.schema_id,
            "row_count": self.row_count,
            "page_rows": self.page_rows,
            "columns": {str(k): [p.to_list() for p in v] for k, v in self.columns.items()},
            "keys": [[p.to_list() for p in ps] for ps in self.keys],
            "row_hash": [p.to_list() for p in self.row_hash],
            "dv": self.dv.to_list() if self.dv else None,
            "files": self.files,
            "index_slots": self.index_slots.to_list() if self.index_slots else None,
            "stats_format": STATS_FORMAT,
            "page_format": page_format_for(self.index_seed),
        }
        if self.index_seed is not None:
            doc["index_seed"] = seed_to_json(self.index_seed)
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> SnapshotManifest:
        d = json.loads(data)
        return cls(
            bucket=d["bucket"],
            version=d["version"],
            schema_id=d["schema_id"],
            row_count=d["row_count"],
            page_rows=d["page_rows"],
            columns={int(k): [PageLoc.from_list(p) for p in v] for k, v in d["columns"].items()},
            keys=[[PageLoc.from_list(p) for p in ps] for ps in d["keys"]],
            row_hash=[PageLoc.from_list(p) for p in d["row_hash"]],
            dv=PageLoc.from_list(d["dv"]) if d["dv"] else None,
            files={k: int(v) for k, v in d["files"].items()},
            index_slots=PageLoc.from_list(d["index_slots"]) if d.get("index_slots") else None,
            stats_format=int(d.get("stats_format", 1)),
            page_format=int(d.get("page_format", 1)),
            index_seed=seed_from_json(d.get("index_seed")),
        )


class SnapshotWrite(NamedTuple):
    """What :func:`write_snapshot` wrote (unpacks as ``rel, manifest, locations``).

    Attributes:
        rel: The manifest's path relative to the table root.
        manifest: The manifest.
        locations: The pages written from memory, to record with
            :func:`apply_locations` once the snapshot's version is committed.
    """

    rel: str
    manifest: SnapshotManifest
    locations: list[LocationUpdate]


def check_compacted(tablet: MemTablet, version: int) -> None:
    """Raises unless every column's base of ``tablet`` is the column at ``version``.

    Raises:
        TabletStateError: The tablet is not compacted at ``version``.
    """
    if not tablet.is_compacted(version):
        raise TabletStateError(
            f"bucket {tablet.bucket}: the tablet is not compacted at version {version}; "
            f"compact it (tablet.compact({version})) before writing its snapshot"
        )


def _rewrite_all(previous: SnapshotManifest | None, page_rows: int) -> bool:
    """Whether every page is written anew: no usable previous snapshot, or the bytes it
    references fell under half of its files' bytes (see the module docstring)."""
    if previous is None or previous.page_rows != page_rows:
        return True
    total = sum(previous.files.values())
    return total > 0 and previous.referenced_bytes < total // 2


#: A page of the snapshot: reused from an earlier one (its location), or queued to be
#: written (its index in the page file's queue).
_Ref = PageLoc | int


class _SnapshotWriter:
    """The pages of one snapshot: reused where already stored, else queued and written
    to one new page file, encoded in parallel (:meth:`write` writes them all and
    returns the manifest)."""

    def __init__(
        self,
        where: StoreLike,
        tablet: MemTablet,
        version: int,
        previous: SnapshotManifest | None,
        pages_rel: str,
        compression: PageCompression,
    ) -> None:
        self.compression = compression
        self.tablet = tablet
        self.version = version
        self.rows = tablet.row_count_at(version)
        self.page_rows = tablet.options.page_rows
        self.full = _rewrite_all(previous, self.page_rows)
        self.previous = None if self.full else previous
        self.pages_rel = pages_rel
        self.file = PageFileWriter(where, pages_rel)
        self.reader = PageReader(where)  # loaders of the pages written from memory
        self.written: list[tuple[Base, int, int]] = []  # (base, page, queue index)
        self.updates: list[LocationUpdate] = []

    def value_columns(self) -> dict[int, list[_Ref]]:
        """Every page of every live value column at the version (a page already stored
        is not read: its location is reused unless every page is rewritten)."""
        columns: dict[int, list[_Ref]] = {}
        live_ids = {c.id for c in self.tablet.schema.value_columns}
        for cid, store in self.tablet.columns.items():
            if cid in live_ids:  # a dropped column: versions from here on never read it
                base = store.base_at(self.version)
                columns[cid] = [self._value_page(base, p) for p in range(len(base.pages))]
        return columns

    def _value_page(self, base: Base, p: int) -> _Ref:
        loc = None if self.full else stored_location(base.page_entry(p))
        if loc is not None:
            return loc
        ref = self.file.queue(base.pages[p], partial(base.page_stats, p), self.compression)
        self.written.append((base, p, ref))
        return ref

    def _append_only_pages(
        self,
        reused: list[PageLoc] | None,
        page: Callable[[int, int], pa.Array],
        codec: PageCompression = None,
        stats: bool = False,
    ) -> list[_Ref]:
        """Pages of an append-only column (keys, row hashes): pages that were full at the
        previous snapshot are reused from it, the others queued with ``codec`` (and, with
        ``stats``, their statistics: a row's key never changes, so a key page's min/max
        stay true for every later version)."""
        pr, rows = self.page_rows, self.rows
        prev_full = 0 if self.previous is None else self.previous.row_count // pr
        out: list[_Ref] = []
        for p in range(-(-rows // pr)):
            if reused is not None and p < prev_full:
                out.append(reused[p])
                continue
            arr = page(p * pr, min((p + 1) * pr, rows))
            out.append(self.file.queue(arr, partial(page_stats, arr) if stats else None, codec))
        return out

    def key_columns(self) -> list[list[_Ref]]:
        """The pages of every key column, with their statistics (§10.4)."""
        prev = self.previous
        return [
            self._append_only_pages(
                None if prev is None else prev.keys[k], store.slice, self.compression, True
            )
            for k, store in enumerate(self.tablet.index.keys)
        ]

    def row_hashes(self) -> list[_Ref]:
        """The pages of the rows' index hashes (the previous snapshot's are reused only
        when they were built with the index's seed)."""
        rh = self.tablet.index.row_hashes()
        prev = self.previous
        same_seed = prev is not None and prev.index_seed == self.tablet.index.seed
        return self._append_only_pages(
            prev.row_hash if prev is not None and same_seed else None,
            lambda lo, hi: pa.array(rh[lo:hi]),
        )

    def index_state(self) -> tuple[PageLoc | None, _Ref | None]:
        """The deletion vector at the version (written now), and the index slots (queued;
        only when the index holds exactly the version's rows)."""
        t = self.tablet
        dv = t.deletion_vector(self.version)
        dv_loc = self.file.add(dv.serialize(), len(dv), None) if len(dv) else None
        slots = None
        if t.pending_version is None and t.index.count == self.rows:
            slots = self.file.queue(pa.array(t.index.slots), None)  # never compressed
        return dv_loc, slots

    def write(self, schema_id: int) -> SnapshotManifest:
        """Writes every page not stored yet and makes the page file durable (none when it
        stays empty); returns the manifest of the snapshot."""
        try:
            columns = self.value_columns()
            keys = self.key_columns()
            hashes = self.row_hashes()
            dv_loc, slots = self.index_state()
            locs = self.file.write_queued(usable_cores())
            size = self.file.finish()
        except BaseException:
            self.file.abort()
            raise
        fault_point("snapshot.pages_written")

        def at(ref: _Ref) -> PageLoc:
            return locs[ref] if isinstance(ref, int) else ref

        self.updates = [(b, p, StoredPage(locs[i], self.reader)) for b, p, i in self.written]
        manifest = SnapshotManifest(
            bucket=self.tablet.bucket,
            version=self.version,
            schema_id=schema_id,
            row_count=self.rows,
            page_rows=self.page_rows,
            columns={cid: [at(r) for r in refs] for cid, refs in columns.items()},
            keys=[[at(r) for r in refs] for refs in keys],
            row_hash=[at(r) for r in hashes],
            dv=dv_loc,
            index_slots=None if slots is None else at(slots),
            page_format=page_format_for(self.tablet.index.seed),
            index_seed=self.tablet.index.seed,
        )
        manifest.files = self._files(manifest, size)
        return manifest

    def _files(self, manifest: SnapshotManifest, size: int) -> dict[str, int]:
        """The page files ``manifest`` references, with their sizes."""
        files: dict[str, int] = {}
        if self.previous is not None:
            files.update(self.previous.files)
        if size:
            files[self.pages_rel] = size
        referenced = {loc.file for loc in manifest.locations()}
        return {f: s for f, s in files.items() if f in referenced}


def write_snapshot(
    where: StoreLike,
    tablet: MemTablet,
    version: int,
    schema_id: int,
    *,
    previous: SnapshotManifest | None,
    compression: PageCompression = None,
) -> SnapshotWrite:
    """Writes a snapshot of ``tablet`` at committed ``version``; the tablet must be
    compacted there (:meth:`MemTablet.compact`): writing a snapshot never compacts.

    Args:
        where: The table's store (a path: a local store on that directory).
        tablet: The bucket's tablet; ``version`` must be retained in it.
        version: Version to snapshot.
        schema_id: Schema id at that version.
        previous: The bucket's newest earlier snapshot (enables incremental writes).
        compression: The codec of the value pages, key pages and index slots written
            (row hashes, random bits, are never compressed). Uncompressed, loading a
            bucket maps its keys and slots without a copy.

    Returns:
        The manifest's key (its path relative to the table root), the manifest, and the
        page locations to record with :func:`apply_locations` once the snapshot is
        committed.

    Raises:
        TabletStateError: The tablet is not compacted at ``version``.
    """
    check_compacted(tablet, version)
    stem = layout.attempt_stem(version)
    man_rel = layout.snapshot_manifest(tablet.bucket, stem)
    store = as_store(where)
    pages_rel = layout.pages_file(tablet.bucket, stem)
    writer = _SnapshotWriter(store, tablet, version, previous, pages_rel, compression)
    manifest = writer.write(schema_id)
    store.put_new(man_rel, encode_file([manifest.to_json()], magic=SNAPSHOT_MAGIC))
    fault_point("snapshot.written")
    return SnapshotWrite(man_rel, manifest, writer.updates)


def read_manifest(where: StoreLike, rel: str) -> SnapshotManifest:
    """Reads and checks a manifest.

    ``rel`` comes from the log (checked when the log read it) and is checked again; so is
    every page file the manifest names (:func:`~cdc_sink.storage.layout.checked`), so
    nothing outside the table is ever opened through it.

    Raises:
        WalCorruption: The manifest is damaged, ``rel`` is no manifest path of the table,
            or the manifest names a page file that is no page file of the table.
    """
    path, data = read_committed_object(where, "snapshot", rel, "a committed snapshot manifest")
    res = read_records(data, path=path, magic=SNAPSHOT_MAGIC, allow_torn_tail=False)
    if len(res.records) != 1:
        raise WalCorruption("snapshot manifest must hold one record", path=path, offset=0)
    try:
        manifest = SnapshotManifest.from_json(res.records[0])
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        # Only the kind of error: its message may quote the record's content.
        raise WalCorruption(
            f"snapshot manifest is malformed ({type(exc).__name__})", path=path, offset=0
        ) from None
    _check_page_files(manifest, path)
    for name, found, known in (
        ("page format", manifest.page_format, PAGE_FORMAT),
        ("statistics format", manifest.stats_format, STATS_FORMAT),
    ):
        if found > known:
            raise WalCorruption(
                f"snapshot manifest has {name} {found}, newer than this cdc_sink reads "
                f"({known}): upgrade cdc_sink to read this table",
                path=path,
                offset=0,
            )
        if found < 1:
            raise WalCorruption(
                f"snapshot manifest has {name} {found}, which is no format", path=path, offset=0
            )
    return manifest


def _check_page_files(manifest: SnapshotManifest, source: str) -> None:
    """Checks every page file ``manifest`` (read from ``source``) names: its ``files``
    and each page location's file (each distinct name once).

    Raises:
        WalCorruption: One is no page file of the table.
    """
    seen: set[str] = set()
    for rel in [*manifest.files, *(loc.file for loc in manifest.locations())]:
        if not isinstance(rel, str) or rel not in seen:  # a non-str is refused
            seen.add(layout.checked("pages", rel, source=source, ref="page file"))


def load_snapshot(
    where: StoreLike, manifest: SnapshotManifest, schema: TableSchema, tablet_factory: Any
) -> MemTablet:
    """Builds a tablet at the manifest's version from its pages (on a local store
    zero-copy, memory-mapped).

    Value pages are lazy (:class:`~cdc_sink.tablet.column.LazyPage`): each is CRC-checked
    and decoded when first read, so loading reads only the key, row-hash, index and
    deletion-vector blobs (and the sequence column's pages, which the tablet keeps in a
    dense array); a damaged value page raises :class:`WalCorruption` from the read that
    first touches it, before any of its data is returned. Where the store has no files to
    map, the blobs read at load are fetched together first
    (:meth:`~cdc_sink.storage.pages.PageReader.prefetch`).

    Args:
        where: The table's store (a path: a local store on that directory).
        manifest: The snapshot to load.
        schema: The schema at the snapshot's version.
        tablet_factory: ``f(version) -> MemTablet`` making an empty tablet of the bucket.

    Raises:
        WalCorruption: A page file is missing or truncated, or a blob read at load is
            damaged.
    """
    reader = PageReader(where)
    reader.check(manifest.locations())
    at_load = [p for ps in manifest.keys for p in ps] + manifest.row_hash
    at_load += [p for p in (manifest.dv, manifest.index_slots) if p is not None]
    fetched = reader.prefetch(at_load)  # together: near blobs in one GET, GETs concurrent
    try:
        return _load(reader, manifest, schema, tablet_factory)
    finally:
        reader.forget(fetched)


def _load(
    reader: PageReader, manifest: SnapshotManifest, schema: TableSchema, tablet_factory: Any
) -> MemTablet:
    """:func:`load_snapshot` once the page files are checked."""
    tablet: MemTablet = tablet_factory(manifest.version)
    v = manifest.version
    known = {c.id: c for c in schema.value_columns}
    for cid, locs in manifest.columns.items():
        if cid in known:
            _load_value_column(tablet, cid, known[cid].type, locs, manifest, reader)
    key_cols = [
        pa.concat_arrays(_arrays(reader, locs)) if locs else pa.array([], type=t)
        for locs, t in zip(manifest.keys, [c.type for c in schema.key_columns], strict=True)
    ]
    hashes = (
        np.concatenate([np.asarray(a) for a in _arrays(reader, manifest.row_hash)])
        if manifest.row_hash
        else np.empty(0, np.uint64)
    )
    dv = (
        FrozenBitMap.deserialize(reader.blob(manifest.dv).to_pybytes())
        if manifest.dv
        else FrozenBitMap()
    )
    slots = np.asarray(reader.array(manifest.index_slots)) if manifest.index_slots else None
    tablet.restore(
        v,
        manifest.row_count,
        key_cols,
        hashes.astype(np.uint64, copy=False),
        dv,
        slots,
        index_seed=manifest.index_seed,
    )
    return tablet


def _arrays(reader: PageReader, locs: list[PageLoc]) -> list[pa.Array]:
    """The pages at ``locs``, CRC-checked and decoded in a few threads (both release the
    GIL: docs/benchmarks-history.md, "Cold reads built page by page")."""
    threads = min(usable_cores(), 8) if len(locs) >= MIN_PARALLEL else 1
    return list(ordered_map(reader.array, locs, threads, name="cdc_sink-load"))


def _load_value_column(
    tablet: MemTablet,
    cid: int,
    type: pa.DataType,
    locs: list[PageLoc],
    manifest: SnapshotManifest,
    reader: PageReader,
) -> None:
    """Sets a value column's base to the manifest's pages, lazy (not read here)."""
    # Physical statistics; a later (incremental) manifest reuses these locations, so
    # format-1 statistics are rewritten in format 2 here.
    locs = [
        replace(loc, min=json_stat(py_stat(loc.min, type)), max=json_stat(py_stat(loc.max, type)))
        for loc in locs
    ]
    stats: list[PageStats | None] = [
        PageStats(py_stat(loc.min, type), py_stat(loc.max, type), loc.null_count, loc.rows)
        for loc in locs
    ]
    store = tablet.ensure_column(cid)
    store.set_base(
        Base(
            version=manifest.version,
            num_rows=manifest.row_count,
            pages=PageList(reader.lazy(loc) for loc in locs),
            stats=stats,
        )
    )
    store.release_below(manifest.version)
