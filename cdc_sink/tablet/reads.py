"""Reads of one retained version of a tablet: page-by-page scans and point lookups.

A scan yields the live rows of a version page by page: pages whose statistics exclude the
filter are skipped, pages no delta touched are yielded without copying, and the rows of
the version's deletion vector (and those the filter rejects) are masked out. A point
lookup finds the keys' rows in the index and gathers each column once per distinct row.
(:meth:`MemTablet.batches <cdc_sink.tablet.memtablet.MemTablet.batches>`,
:meth:`~cdc_sink.tablet.memtablet.MemTablet.get` and
:meth:`~cdc_sink.tablet.memtablet.MemTablet.read` are the public face.)

Their row-level parts are also what the change feed and the pre-images stored with a
commit read: :func:`live_at` (which rows of a version are live) and
:func:`gather_columns` (the values of some rows at a version).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from pyroaring import BitMap, FrozenBitMap

from cdc_sink.filters import (
    PageStats,
    Predicate,
    evaluate,
    may_match,
    page_stats,
    parse_filter,
    physical_predicate,
)
from cdc_sink.schema import Column, TableSchema
from cdc_sink.tablet.apply import u32
from cdc_sink.tablet.column import PageSource
from cdc_sink.tablet.keystore import take
from cdc_sink.tablet.page_loads import load_pages, prefetched, unloaded_pages, usable_cores
from cdc_sink.utils.parallel import ordered_map

if TYPE_CHECKING:
    from cdc_sink.tablet.memtablet import MemTablet

__all__ = ["lookup", "read_columns", "scan"]


def read_columns(schema: TableSchema, columns: Sequence[str] | None) -> list[Column]:
    """The columns to return: ``columns`` by name, or every column in schema order."""
    if columns is None:
        return list(schema.columns)
    return [schema.column(n) for n in columns]


def _key_position(tablet: MemTablet, c: Column) -> int | None:
    """The position of ``c`` among the key columns (None: a value column)."""
    for i, k in enumerate(tablet.schema.key_columns):
        if k.id == c.id:
            return i
    return None


def _pages_that_may_match(
    tablet: MemTablet, schema: TableSchema, preds: list[Predicate], version: int, rows: int
) -> np.ndarray:
    """Per page: False when the page statistics of a predicate's column exclude it."""
    num_pages = -(-rows // tablet.options.page_rows)
    page_ok = np.ones(num_pages, dtype=bool)
    for p in preds:
        col = schema.column(p.column)
        phys = physical_predicate(p, col.type)  # the form of the page statistics
        if phys is None:
            continue
        kpos = _key_position(tablet, col)
        stats = (
            tablet.ensure_column(col).page_stats(version, rows)
            if kpos is None
            else _key_page_stats(tablet, kpos, rows, page_ok)
        )
        for i, s in enumerate(stats):
            if s is not None and page_ok[i] and not may_match(s, phys):
                page_ok[i] = False
    return page_ok


def _key_page_stats(
    tablet: MemTablet, kpos: int, rows: int, page_ok: np.ndarray
) -> list[PageStats | None]:
    """The statistics of each key page not excluded yet (a row's key never changes, so
    they hold at every version; computed from the keys in memory)."""
    store = tablet.index.keys[kpos]
    pr = tablet.options.page_rows
    return [
        page_stats(store.slice(i * pr, min((i + 1) * pr, rows))) if ok else None
        for i, ok in enumerate(page_ok.tolist())
    ]


def _page_source(
    tablet: MemTablet, c: Column, version: int, rows: int, page_ok: np.ndarray
) -> PageSource:
    """Page ``p`` of column ``c`` at ``version``, for the pages where ``page_ok``."""
    kpos = _key_position(tablet, c)
    if kpos is not None:
        store = tablet.index.keys[kpos]
        pr = tablet.options.page_rows
        return lambda p, _keep: store.slice(p * pr, min((p + 1) * pr, rows))
    source = tablet.ensure_column(c).page_source(version, rows, page_filter=page_ok)
    return lambda p, keep: _as_type(source(p, keep), c)


def _as_type(arr: pa.Array, c: Column) -> pa.Array:
    """``arr`` as the type ``c`` has in the schema read: a column widened since that
    version is held as its newer type, and its values then all fit the older one."""
    return arr if arr.type == c.type else arr.cast(c.type)


def scan(
    tablet: MemTablet, version: int, columns: Sequence[str] | None, filter: Any, schema: TableSchema
) -> Iterator[pa.RecordBatch]:
    """Yields the live rows of ``tablet`` at retained ``version`` page by page (see
    :meth:`MemTablet.batches <cdc_sink.tablet.memtablet.MemTablet.batches>`).

    Each output page is built (its stored pages read, deltas applied, dead and
    filtered-out rows dropped, column by column while the page is in cache) by
    :class:`_PageBuilder`; a scan of at least :data:`MIN_PARALLEL_CELLS` cells builds its
    pages in a few threads (:func:`~cdc_sink.utils.parallel.ordered_map`), since decoding,
    rebuilding and Arrow's ``filter`` release the GIL.

    A stored page the scan reads stays in memory only if the scan returns it as it is
    (no row of it dropped, no delta on it). A page the scan copies anyway is read again
    by the next reader that needs it: a cold read of a compressed table then decodes
    each such page into memory that the next page reuses, instead of keeping a decoded
    copy beside the filtered one (docs/benchmarks-history.md, "Cold reads built page by page").

    The stored pages are fetched ahead of their decoding, a window of
    :data:`PREFETCH_CELLS` cells at a time, each window's together
    (:func:`~cdc_sink.tablet.page_loads.prefetched`: on an object store, one request per
    run of near pages, issued concurrently).
    """
    rows = tablet.row_count_at(version)
    cols = read_columns(schema, columns)
    preds = parse_filter(filter, schema.names)
    page_ok = _pages_that_may_match(tablet, schema, preds, version, rows)
    pred_cols = list({c.id: c for c in (schema.column(p.column) for p in preds)}.values())
    need = list({c.id: c for c in [*cols, *pred_cols]}.values())
    builder = _PageBuilder(
        tablet.options.page_rows,
        rows,
        tablet.deletion_vector(version),
        {c.id: _page_source(tablet, c, version, rows, page_ok) for c in need},
        cols,
        pred_cols,
        preds,
        schema.arrow_schema([c.name for c in cols]),
    )
    pages = np.flatnonzero(page_ok).tolist()
    threads = min(usable_cores(), MAX_SCAN_THREADS)
    small = len(pages) < 2 or sum(builder.length(p) for p in pages) * len(need) < MIN_PARALLEL_CELLS
    stores = [tablet.ensure_column(c) for c in need if _key_position(tablet, c) is None]
    for window in _windows(pages, builder, len(need)):
        in_window = np.zeros_like(page_ok)
        in_window[window] = True
        # The stored bytes of the window's pages fetched together first (page_loads)
        with prefetched(p for s in stores for p in unloaded_pages(s, version, in_window)):
            if small:  # the stored pages it returns as they are, in parallel (page_loads)
                whole = in_window & (builder.dead_bounds[1:] == builder.dead_bounds[:-1])
                load_pages([p for s in stores for p in unloaded_pages(s, version, whole)])
            for batch in ordered_map(
                builder.build, window, 1 if small else threads, name="cdc_sink-scan"
            ):
                if batch is not None:
                    yield batch


PREFETCH_CELLS = 1 << 23
"""A scan fetches the stored pages of this many cells (rows x columns read) at a time
(:func:`~cdc_sink.tablet.page_loads.prefetched`), so the bytes fetched ahead of their
decoding stay bounded whatever the table's size."""


def _windows(pages: list[int], builder: _PageBuilder, columns: int) -> list[list[int]]:
    """``pages`` in runs of at most :data:`PREFETCH_CELLS` cells (at least a page each)."""
    out: list[list[int]] = []
    run: list[int] = []
    cells = 0
    for p in pages:
        n = builder.length(p) * columns
        if run and cells + n > PREFETCH_CELLS:
            out.append(run)
            run, cells = [], 0
        run.append(p)
        cells += n
    if run:
        out.append(run)
    return out


MIN_PARALLEL_CELLS = 1 << 20
"""A scan of fewer cells (rows x columns read) builds its pages in the calling thread."""

MAX_SCAN_THREADS = 8


class _PageBuilder:
    """Builds one output page of a scan: callable from any thread."""

    def __init__(
        self,
        page_rows: int,
        rows: int,
        dv: BitMap | FrozenBitMap,
        sources: dict[int, PageSource],
        cols: list[Column],
        pred_cols: list[Column],
        preds: list[Predicate],
        out_schema: pa.Schema,
    ) -> None:
        self.page_rows = page_rows
        self.rows = rows
        self.dead = np.asarray(dv.to_array(), dtype=np.int64) if len(dv) else np.empty(0, np.int64)
        num_pages = -(-rows // page_rows)
        self.dead_bounds = np.searchsorted(
            self.dead, np.arange(num_pages + 1, dtype=np.int64) * page_rows
        )
        self.sources = sources
        self.cols = cols
        self.pred_cols = pred_cols
        self.preds = preds
        self.out_schema = out_schema

    def length(self, page_no: int) -> int:
        """The row count of page ``page_no``."""
        return min(self.page_rows, self.rows - page_no * self.page_rows)

    def build(self, page_no: int) -> pa.RecordBatch | None:
        """The live rows of page ``page_no`` that pass the filter (None: not one)."""
        start = page_no * self.page_rows
        mask = None
        lo, hi = self.dead_bounds[page_no], self.dead_bounds[page_no + 1]
        if hi > lo:
            mask = np.ones(self.length(page_no), dtype=bool)
            mask[self.dead[lo:hi] - start] = False
        got: dict[int, pa.Array] = {}
        if self.preds:
            got = {c.id: self.sources[c.id](page_no, mask is None) for c in self.pred_cols}
            pb = pa.RecordBatch.from_arrays(
                [got[c.id] for c in self.pred_cols], names=[c.name for c in self.pred_cols]
            )
            m2 = evaluate(pb, self.preds)
            mask = m2 if mask is None else mask & m2
        keep: pa.Array | None = None
        if mask is not None:
            if not mask.any():
                return None
            if not mask.all():
                keep = pa.array(mask)
        arrays = []
        for c in self.cols:  # each column filtered as soon as it is read (still in cache)
            arr = got[c.id] if c.id in got else self.sources[c.id](page_no, keep is None)
            arrays.append(arr if keep is None else arr.filter(keep))
        return pa.RecordBatch.from_arrays(arrays, schema=self.out_schema)


def _key_arrays(schema: TableSchema, keys: pa.Table | Sequence[pa.Array]) -> list[pa.Array]:
    """The probe keys as arrays of the key columns' types, in key order."""
    key_cols = schema.key_columns
    if isinstance(keys, pa.Table):
        return [keys.column(c.name).combine_chunks().cast(c.type) for c in key_cols]
    return [
        pa.array(a).cast(c.type) if not isinstance(a, pa.Array) else a.cast(c.type)
        for a, c in zip(keys, key_cols, strict=True)
    ]


def _live_rows(
    tablet: MemTablet, arrays: list[pa.Array], version: int, row_count: int
) -> np.ndarray:
    """The rows of the probe keys that are live at ``version`` (missing keys left out)."""
    from cdc_sink.xxhash64 import spark_xxhash64

    h = spark_xxhash64(arrays)
    rid = tablet.index.lookup(h, arrays)
    ok = (rid >= 0) & (rid < row_count)
    dv = tablet.deletion_vector(version)
    if len(dv) and ok.any():
        cand = rid[ok].astype(np.uint32)
        dead = np.asarray((BitMap(u32(cand)) & dv).to_array(), dtype=np.int64)
        if len(dead):
            ok &= ~np.isin(rid, dead)
    return rid[ok]


def lookup(
    tablet: MemTablet,
    keys: pa.Table | Sequence[pa.Array],
    version: int,
    columns: Sequence[str] | None,
    schema: TableSchema,
) -> pa.Table:
    """Point lookups of ``keys`` at retained ``version`` (see
    :meth:`MemTablet.get <cdc_sink.tablet.memtablet.MemTablet.get>`)."""
    row_count = tablet.row_count_at(version)  # raises VersionNotFound first
    rows = _live_rows(tablet, _key_arrays(schema, keys), version, row_count)
    # Gather once per distinct row in row order (sorted probes), then expand to the
    # order of ``keys``.
    uniq, inverse = np.unique(rows, return_inverse=True)
    inverse = inverse.reshape(-1)
    cols = read_columns(schema, columns)
    out = []
    for c in cols:
        kpos = _key_position(tablet, c)
        if kpos is not None:
            got = tablet.index.keys[kpos].take(uniq)
        else:
            got = tablet.ensure_column(c).gather(uniq, version)
        out.append(_as_type(take(got, inverse), c))
    return pa.Table.from_arrays(out, schema=schema.arrow_schema([c.name for c in cols]))


def live_at(t: MemTablet, rows: np.ndarray, version: int) -> np.ndarray:
    """Per row id of ``rows`` (sorted, unique), whether it is live at ``version``."""
    live = rows < t.row_count_at(version)
    dv = t.deletion_vector(version)
    if len(dv) and len(rows):
        dead = np.asarray((BitMap(rows.astype(np.uint32)) & dv).to_array(), dtype=np.int64)
        live &= ~np.isin(rows, dead, assume_unique=True)
    return live


def gather_columns(
    t: MemTablet, rows: np.ndarray, version: int, cols: Sequence[Column], schema: TableSchema
) -> list[pa.Array]:
    """The values of ``cols`` (columns of the output schema) for ``rows`` at ``version``,
    whose schema is ``schema``: a column that version did not have reads null."""
    key_ids = [k.id for k in t.schema.key_columns]
    have = {c.id for c in schema.columns}
    out: list[pa.Array] = []
    for c in cols:
        if c.id in key_ids:
            arr = t.index.keys[key_ids.index(c.id)].take(pa.array(rows))
        elif c.id not in have:
            arr = pa.nulls(len(rows), type=c.type)
        else:
            arr = t.ensure_column(schema.column_by_id(c.id)).gather(rows, version)
        out.append(_as_type(arr, c))
    return out
