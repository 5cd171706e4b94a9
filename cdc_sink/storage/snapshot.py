"""Incremental snapshots of one bucket tablet: immutable page files plus a manifest.

On disk, under the table root::

    _snapshots/<bucket>/<version:020d>-<attempt>.manifest   framed JSON (magic CDCSNP)
    _pages/<bucket>/<version:020d>-<attempt>.pages          concatenated page blobs

A page blob is an Arrow IPC stream holding one single-column record batch (one 64K-row
page of one column). The manifest maps every page of the bucket at its version to
``[file, offset, length, crc32c, rows, min, max, null_count]``: value columns (by column
id), the key columns, the rows' index hashes, and the deletion vector (a serialized
roaring bitmap blob) -- everything needed to rebuild the tablet and its index without
reading any WAL.

*Incremental*: a page that compaction left untouched is the same Arrow object as in the
previous base and still carries the location it was written to, so the new manifest
points at the old file; only changed pages are written (key pages, append-only, are
unchanged when they were full at the previous snapshot). When the bytes the manifest
references fall under half of the bytes of the files it references, every page is
rewritten into one new file, so old files can be collected.

Loading memory-maps the page files (zero-copy Arrow arrays); key, row-hash, index and
deletion-vector blobs are CRC-checked at load, value pages lazily: each when it is first
read (:class:`~cdc_sink.tablet.column.LazyPage`), before any of its data is returned.

Page statistics (``min``/``max``) are stored in the physical form of
:func:`cdc_sink.filters.physical_value` (integers for dates, timestamps and decimals; a
binary as ``{"b64": ...}``), so writing them never converts a value to Python's
``datetime`` or ``Decimal``. Manifests say so with ``"stats_format": 2``; a manifest
without it (format 1) held ISO strings and decimal strings (``{"ts"|"date"|"dec": ...}``),
which loading converts to the physical form.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import decimal
import json
import os
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

import google_crc32c
import numpy as np
import pyarrow as pa
from pyroaring import FrozenBitMap

from cdc_sink.errors import WalCorruption
from cdc_sink.filters import PageStats, physical_value
from cdc_sink.schema import TableSchema
from cdc_sink.storage.faults import fault_point, register
from cdc_sink.storage.framing import encode_file, read_records
from cdc_sink.storage.fsutil import (
    create_file,
    fsync_dir,
    fsync_file,
    makedirs,
    remove,
    write_file_durable,
)
from cdc_sink.tablet.column import Base, LazyPage, PageList
from cdc_sink.tablet.memtablet import MemTablet

__all__ = ["PageLoc", "SnapshotManifest", "apply_locations", "load_snapshot", "read_manifest",
           "write_snapshot"]

SNAPSHOT_MAGIC = b"CDCSNP\x00\x01"
#: Page statistics in physical form (see the module docstring).
STATS_FORMAT = 2
register("snapshot.pages_written", "snapshot.written")


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
        return [self.file, self.offset, self.length, self.crc, self.rows, self.min, self.max,
                self.null_count]

    @classmethod
    def from_list(cls, v: list[Any]) -> PageLoc:
        return cls(v[0], int(v[1]), int(v[2]), int(v[3]), int(v[4]), v[5], v[6], int(v[7]))


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

    @property
    def referenced_bytes(self) -> int:
        """Bytes of the blobs the manifest references."""
        locs = [p for ps in self.columns.values() for p in ps]
        locs += [p for ps in self.keys for p in ps] + self.row_hash
        locs += [p for p in (self.dv, self.index_slots) if p is not None]
        return sum(p.length for p in locs)

    def all_files(self) -> set[str]:
        """Page files this manifest references."""
        return set(self.files)

    def to_json(self) -> bytes:
        doc = {
            "bucket": self.bucket, "version": self.version, "schema_id": self.schema_id,
            "row_count": self.row_count, "page_rows": self.page_rows,
            "columns": {str(k): [p.to_list() for p in v] for k, v in self.columns.items()},
            "keys": [[p.to_list() for p in ps] for ps in self.keys],
            "row_hash": [p.to_list() for p in self.row_hash],
            "dv": self.dv.to_list() if self.dv else None,
            "files": self.files,
            "index_slots": self.index_slots.to_list() if self.index_slots else None,
            "stats_format": STATS_FORMAT,
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> SnapshotManifest:
        d = json.loads(data)
        return cls(
            bucket=d["bucket"], version=d["version"], schema_id=d["schema_id"],
            row_count=d["row_count"], page_rows=d["page_rows"],
            columns={int(k): [PageLoc.from_list(p) for p in v] for k, v in d["columns"].items()},
            keys=[[PageLoc.from_list(p) for p in ps] for ps in d["keys"]],
            row_hash=[PageLoc.from_list(p) for p in d["row_hash"]],
            dv=PageLoc.from_list(d["dv"]) if d["dv"] else None,
            files={k: int(v) for k, v in d["files"].items()},
            index_slots=PageLoc.from_list(d["index_slots"]) if d.get("index_slots") else None,
            stats_format=int(d.get("stats_format", 1)),
        )


def _json_stat(v: Any) -> Any:
    """A physical statistic (int, float, bool, str, bytes) as JSON."""
    if v is None or isinstance(v, (bool, int, float, str)):
        if isinstance(v, float) and v != v:
            return None
        return v
    if isinstance(v, bytes):
        return {"b64": base64.b64encode(v).decode()}
    return None


def _py_stat(v: Any, type: pa.DataType) -> Any:
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


def _blob(arr: pa.Array) -> bytes:
    sink = pa.BufferOutputStream()
    batch = pa.RecordBatch.from_arrays([arr], names=["v"])
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return bytes(sink.getvalue())


class _PageFileWriter:
    """Appends page blobs to one new page file."""

    def __init__(self, root: str, rel: str) -> None:
        self.root = root
        self.rel = rel
        self.path = os.path.join(root, rel)
        makedirs(os.path.dirname(self.path))
        self._f = create_file(self.path)  # closed in finish() or abort()
        self.offset = 0

    def add(self, data: bytes, rows: int, stats: PageStats | None) -> PageLoc:
        self._f.write(data)
        loc = PageLoc(self.rel, self.offset, len(data), google_crc32c.value(data), rows,
                      _json_stat(stats.min) if stats else None,
                      _json_stat(stats.max) if stats else None,
                      stats.null_count if stats else 0)
        self.offset += len(data)
        return loc

    def finish(self) -> int:
        fsync_file(self._f, path=self.path)
        self._f.close()
        fsync_dir(os.path.dirname(self.path))
        return self.offset

    def abort(self) -> None:
        # Abandoned whatever happened (a failed write or fsync: its data may be lost even
        # if a later fsync succeeded); created with O_EXCL, so the name is ours.
        with contextlib.suppress(OSError):
            self._f.close()  # may flush, and fail again (ENOSPC)
        remove(self.path, missing_ok=True)


LocationUpdate = tuple[Base, int, PageLoc]


def apply_locations(updates: list[LocationUpdate]) -> None:
    """Records where pages were written, once the snapshot's version is committed (an
    uncommitted snapshot's files may be deleted, so nothing may point at them before)."""
    for base, p, loc in updates:
        if len(base.locations) != len(base.pages):
            base.locations = [None] * len(base.pages)
        base.locations[p] = loc


def write_snapshot(root: str, tablet: MemTablet, version: int, schema_id: int, *,
                   previous: SnapshotManifest | None
                   ) -> tuple[str, SnapshotManifest, list[LocationUpdate]]:
    """Writes a snapshot of ``tablet`` at committed ``version`` (compacting it there).

    Args:
        root: Table root.
        tablet: The bucket's tablet; ``version`` must be retained in it.
        version: Version to snapshot.
        schema_id: Schema id at that version.
        previous: The bucket's newest earlier snapshot (enables incremental writes).

    Returns:
        The manifest's path relative to ``root``, the manifest, and the page locations to
        record with :func:`apply_locations` once the snapshot is committed.
    """
    b = tablet.bucket
    attempt = uuid.uuid4().hex[:12]
    stem = f"{version:020d}-{attempt}"
    pages_rel = f"_pages/{b}/{stem}.pages"
    man_rel = f"_snapshots/{b}/{stem}.manifest"
    tablet.compact(version)
    rows = tablet.row_count_at(version)
    pr = tablet.options.page_rows
    full = previous is None or previous.page_rows != pr
    if previous is not None and not full:
        total = sum(previous.files.values())
        full = total > 0 and previous.referenced_bytes < total // 2
    writer = _PageFileWriter(root, pages_rel)
    updates: list[LocationUpdate] = []
    try:
        columns: dict[int, list[PageLoc]] = {}
        live_ids = {c.id for c in tablet.schema.value_columns}
        for cid, store in tablet.columns.items():
            if cid not in live_ids:
                continue  # a dropped column: versions from this snapshot on never read it
            base = store.base_at(version)
            known = base.locations if len(base.locations) == len(base.pages) else []
            locs = []
            for p in range(len(base.pages)):  # a page already written is not read
                loc = None if full or not known else known[p]
                if loc is None:
                    page = base.pages[p]
                    loc = writer.add(_blob(page), len(page), base.page_stats(p))
                    updates.append((base, p, loc))
                locs.append(loc)
            columns[cid] = locs
        prev_full_pages = 0 if full or previous is None else previous.row_count // pr
        keys = []
        for k, key_store in enumerate(tablet.index.keys):
            locs = []
            for p in range(-(-rows // pr)):
                if p < prev_full_pages and previous is not None:
                    locs.append(previous.keys[k][p])
                else:
                    page = key_store.slice(p * pr, min((p + 1) * pr, rows))
                    locs.append(writer.add(_blob(page), len(page), None))
            keys.append(locs)
        hashes = []
        rh = tablet.index.row_hashes()
        for p in range(-(-rows // pr)):
            if p < prev_full_pages and previous is not None:
                hashes.append(previous.row_hash[p])
            else:
                page = pa.array(rh[p * pr: min((p + 1) * pr, rows)])
                hashes.append(writer.add(_blob(page), len(page), None))
        dv = tablet.deletion_vector(version)
        dv_loc = writer.add(dv.serialize(), len(dv), None) if len(dv) else None
        slots_loc = None
        if tablet.pending_version is None and tablet.index.count == rows:
            slots_loc = writer.add(_blob(pa.array(tablet.index.slots)), rows, None)
        size = writer.finish()
    except BaseException:
        writer.abort()
        raise
    fault_point("snapshot.pages_written")
    files: dict[str, int] = {}
    if previous is not None and not full:
        files.update(previous.files)
    if size:
        files[pages_rel] = size
    referenced = {loc.file for locs in columns.values() for loc in locs}
    referenced |= {loc.file for locs in keys for loc in locs} | {loc.file for loc in hashes}
    referenced |= {loc.file for loc in (dv_loc, slots_loc) if loc is not None}
    files = {f: s for f, s in files.items() if f in referenced}
    if not size:
        remove(os.path.join(root, pages_rel))
    manifest = SnapshotManifest(bucket=b, version=version, schema_id=schema_id, row_count=rows,
                                page_rows=pr, columns=columns, keys=keys, row_hash=hashes,
                                dv=dv_loc, files=files, index_slots=slots_loc)
    man_path = os.path.join(root, man_rel)
    makedirs(os.path.dirname(man_path))
    write_file_durable(man_path, encode_file([manifest.to_json()], magic=SNAPSHOT_MAGIC),
                       exclusive=True)
    fault_point("snapshot.written")
    return man_rel, manifest, updates


def read_manifest(root: str, rel: str) -> SnapshotManifest:
    """Reads and checks a manifest.

    Raises:
        WalCorruption: The manifest is damaged.
    """
    path = os.path.join(root, rel)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise WalCorruption("a committed snapshot manifest is missing", path=path,
                            offset=0) from None
    res = read_records(data, path=path, magic=SNAPSHOT_MAGIC, allow_torn_tail=False)
    if len(res.records) != 1:
        raise WalCorruption("snapshot manifest must hold one record", path=path, offset=0)
    return SnapshotManifest.from_json(res.records[0])


class _PageReader:
    """Page blobs of one snapshot's files, memory-mapped.

    Every file is mapped, and every location checked against its file's size, when the
    reader is made (a missing or truncated page file is found at load); a blob's CRC is
    checked when the blob is first read (:meth:`array`, :meth:`lazy`), before any of its
    data is returned.
    """

    def __init__(self, root: str, manifest: SnapshotManifest) -> None:
        self.root = root
        self._maps: dict[str, pa.Buffer] = {}
        locs = [p for ps in manifest.columns.values() for p in ps]
        locs += [p for ps in manifest.keys for p in ps] + manifest.row_hash
        locs += [p for p in (manifest.dv, manifest.index_slots) if p is not None]
        for loc in locs:
            buf = self._map(loc)
            if loc.offset < 0 or loc.offset + loc.length > buf.size:
                raise WalCorruption("a snapshot page file is truncated",
                                    path=os.path.join(self.root, loc.file), offset=loc.offset)

    def _map(self, loc: PageLoc) -> pa.Buffer:
        buf = self._maps.get(loc.file)
        if buf is None:
            path = os.path.join(self.root, loc.file)
            try:
                with pa.memory_map(path, "r") as mm:
                    buf = mm.read_buffer()
            except FileNotFoundError:
                raise WalCorruption("a snapshot page file is missing", path=path,
                                    offset=loc.offset) from None
            self._maps[loc.file] = buf
        return buf

    def blob(self, loc: PageLoc) -> pa.Buffer:
        """The blob at ``loc``, checked against its CRC.

        Raises:
            WalCorruption: The blob is damaged.
        """
        piece = self._map(loc).slice(loc.offset, loc.length)
        if len(piece) != loc.length or google_crc32c.value(piece) != loc.crc:
            raise WalCorruption("snapshot page fails its CRC",
                                path=os.path.join(self.root, loc.file), offset=loc.offset)
        return piece

    def array(self, loc: PageLoc, *, check_rows: bool = False) -> pa.Array:
        """The page at ``loc`` (CRC checked first).

        Raises:
            WalCorruption: The blob is damaged (or, with ``check_rows``, does not hold
                ``loc.rows`` rows).
        """
        blob = self.blob(loc)
        try:
            arr = pa.ipc.open_stream(blob).read_next_batch().column(0)
        except (pa.ArrowException, StopIteration) as exc:
            raise WalCorruption(f"snapshot page does not decode: {exc}",
                                path=os.path.join(self.root, loc.file),
                                offset=loc.offset) from None
        if check_rows and len(arr) != loc.rows:
            raise WalCorruption(f"snapshot page holds {len(arr)} rows, not {loc.rows}",
                                path=os.path.join(self.root, loc.file), offset=loc.offset)
        return arr

    def lazy(self, loc: PageLoc) -> LazyPage:
        """The page at ``loc``, read and CRC-checked on first access."""
        return LazyPage(loc.rows, lambda: self.array(loc, check_rows=True))


def load_snapshot(root: str, manifest: SnapshotManifest, schema: TableSchema,
                  tablet_factory: Any) -> MemTablet:
    """Builds a tablet at the manifest's version from its pages (zero-copy, memory-mapped).

    Value pages are lazy (:class:`~cdc_sink.tablet.column.LazyPage`): each is CRC-checked
    and decoded when first read, so loading reads only the key, row-hash, index and
    deletion-vector blobs (and the sequence column's pages, which the tablet keeps in a
    dense array); a damaged value page raises :class:`WalCorruption` from the read that
    first touches it, before any of its data is returned.

    Args:
        root: Table root.
        manifest: The snapshot to load.
        schema: The schema at the snapshot's version.
        tablet_factory: ``f(version) -> MemTablet`` making an empty tablet of the bucket.

    Raises:
        WalCorruption: A page file is missing or truncated, or a blob read at load is
            damaged.
    """
    reader = _PageReader(root, manifest)
    tablet: MemTablet = tablet_factory(manifest.version)
    v = manifest.version
    known = {c.id: c for c in schema.value_columns}
    for cid, locs in manifest.columns.items():
        if cid not in known:
            continue
        store = tablet.ensure_column(cid)
        pages = PageList(reader.lazy(loc) for loc in locs)
        t = known[cid].type
        # Physical statistics; a later (incremental) manifest reuses these locations,
        # so format-1 statistics are rewritten in format 2 here.
        locs = [replace(loc, min=_json_stat(_py_stat(loc.min, t)),
                        max=_json_stat(_py_stat(loc.max, t))) for loc in locs]
        stats: list[PageStats | None] = [
            PageStats(_py_stat(loc.min, t), _py_stat(loc.max, t), loc.null_count, loc.rows)
            for loc in locs]
        store.set_base(Base(version=v, num_rows=manifest.row_count, pages=pages, stats=stats,
                            locations=list(locs)))
        store.release_below(v)
    key_cols = [pa.concat_arrays([reader.array(loc) for loc in locs]) if locs else
                pa.array([], type=t) for locs, t in
                zip(manifest.keys, [c.type for c in schema.key_columns], strict=True)]
    hashes = (np.concatenate([np.asarray(reader.array(loc)) for loc in manifest.row_hash])
              if manifest.row_hash else np.empty(0, np.uint64))
    dv = (FrozenBitMap.deserialize(reader.blob(manifest.dv).to_pybytes()) if manifest.dv
          else FrozenBitMap())
    slots = (np.asarray(reader.array(manifest.index_slots)) if manifest.index_slots
             else None)
    tablet.restore(v, manifest.row_count, key_cols, hashes.astype(np.uint64), dv, slots)
    return tablet
