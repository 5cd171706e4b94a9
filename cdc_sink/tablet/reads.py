"""Reads of one retained version of a tablet: page-by-page scans and point lookups.

A scan yields the live rows of a version page by page: pages whose statistics exclude the
filter are skipped, pages no delta touched are yielded without copying, and the rows of
the version's deletion vector (and those the filter rejects) are masked out. A point
lookup finds the keys' rows in the index and gathers each column once per distinct row.
(:meth:`MemTablet.batches <cdc_sink.tablet.memtablet.MemTablet.batches>`,
:meth:`~cdc_sink.tablet.memtablet.MemTablet.get` and
:meth:`~cdc_sink.tablet.memtablet.MemTablet.read` are the public face.)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from cdc_sink.filters import Predicate, evaluate, may_match, parse_filter, physical_predicate
from cdc_sink.schema import Column, TableSchema
from cdc_sink.tablet.apply import u32
from cdc_sink.tablet.keystore import take
from cdc_sink.tablet.page_loads import load_pages, unloaded_pages

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
    key_names = set(schema.primary_key)
    for p in preds:
        if p.column in key_names:
            continue
        col = schema.column(p.column)
        phys = physical_predicate(p, col.type)  # the form of the page statistics
        if phys is None:
            continue
        stats = tablet.ensure_column(col).page_stats(version, rows)
        for i, s in enumerate(stats):
            if s is not None and page_ok[i] and not may_match(s, phys):
                page_ok[i] = False
    return page_ok


def _page_iter(
    tablet: MemTablet, c: Column, version: int, rows: int, page_ok: np.ndarray
) -> Iterator[pa.Array]:
    """The pages of column ``c`` at ``version`` where ``page_ok``."""
    kpos = _key_position(tablet, c)
    if kpos is not None:
        store = tablet.index.keys[kpos]
        pr = tablet.options.page_rows
        for p in np.flatnonzero(page_ok).tolist():
            yield store.slice(p * pr, min((p + 1) * pr, rows))
        return
    store_c = tablet.ensure_column(c)
    for _, arr in store_c.pages(version, rows, page_filter=page_ok):
        yield arr if arr.type == c.type else arr.cast(c.type)


def scan(
    tablet: MemTablet, version: int, columns: Sequence[str] | None, filter: Any, schema: TableSchema
) -> Iterator[pa.RecordBatch]:
    """Yields the live rows of ``tablet`` at retained ``version`` page by page (see
    :meth:`MemTablet.batches <cdc_sink.tablet.memtablet.MemTablet.batches>`)."""
    rows = tablet.row_count_at(version)
    dv = tablet.deletion_vector(version)
    cols = read_columns(schema, columns)
    preds = parse_filter(filter, schema.names)
    out_schema = schema.arrow_schema([c.name for c in cols])
    pr = tablet.options.page_rows
    page_ok = _pages_that_may_match(tablet, schema, preds, version, rows)
    num_pages = len(page_ok)
    dead = np.asarray(dv.to_array(), dtype=np.int64) if len(dv) else np.empty(0, np.int64)
    dead_bounds = np.searchsorted(dead, np.arange(num_pages + 1, dtype=np.int64) * pr)
    pred_cols = list({c.id: c for c in (schema.column(p.column) for p in preds)}.values())
    need = list({c.id: c for c in [*cols, *pred_cols]}.values())
    load_pages(  # the stored pages the scan reads, in parallel (page_loads)
        [
            page
            for c in need
            if _key_position(tablet, c) is None
            for page in unloaded_pages(tablet.ensure_column(c), version, page_ok)
        ]
    )
    iters = {c.id: _page_iter(tablet, c, version, rows, page_ok) for c in need}
    for page_no in np.flatnonzero(page_ok).tolist():
        start = page_no * pr
        length = min(pr, rows - start)
        arrays = {cid: next(it) for cid, it in iters.items()}
        mask = None
        lo, hi = dead_bounds[page_no], dead_bounds[page_no + 1]
        if hi > lo:
            mask = np.ones(length, dtype=bool)
            mask[dead[lo:hi] - start] = False
        if preds:
            pb = pa.RecordBatch.from_arrays(
                [arrays[c.id] for c in pred_cols], names=[c.name for c in pred_cols]
            )
            m2 = evaluate(pb, preds)
            mask = m2 if mask is None else mask & m2
        batch = pa.RecordBatch.from_arrays([arrays[c.id] for c in cols], schema=out_schema)
        if mask is not None:
            if not mask.any():
                continue
            if not mask.all():
                batch = batch.filter(pa.array(mask))
        yield batch


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
    from cdc_sink.bucketing import spark_xxhash64

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
        out.append(take(got, inverse))
    return pa.Table.from_arrays(out, schema=schema.arrow_schema([c.name for c in cols]))
