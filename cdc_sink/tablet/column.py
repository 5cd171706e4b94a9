"""One column of a tablet: bases of immutable pages plus per-version deltas.

In memory (the snapshot files of ``storage/`` hold the same pages on disk)::

    bases:  [Base(version=b0, pages=(p0, p1, ...)), Base(version=b1, ...), ...]
             each page an immutable Arrow array of page_rows rows (the last may be
             shorter); a newer base shares every page compaction did not touch
    deltas: [Delta(version=v, rows=uint32 sorted, values=Arrow array), ...]   (v ascending)

The value of row r at version v is the value in the newest delta with version in
(base.version, v] that contains r, else the base page's value, else the column default
(rows created after the base, and columns added by a schema change). A reader takes the
``(bases, deltas)`` tuple once, so compaction (which appends a base) and retention
(which drops old bases/deltas) never disturb it; nothing is ever mutated in place.

A page that is stored somewhere is a :class:`~cdc_sink.tablet.lazy_pages.LazyPage`, read
on first access, and a base loaded from a snapshot holds its pages as a
:class:`~cdc_sink.tablet.lazy_pages.PageList` (:mod:`cdc_sink.tablet.lazy_pages`;
re-exported here). Compaction shares an untouched page's entry, loaded or not, so the
page keeps its loader (and storage can tell that it is stored already).

A column widened by a schema change (:meth:`TableSchema.widen_column
<cdc_sink.schema.TableSchema.widen_column>`) keeps the pages and deltas written before
as they are, of the narrower type they were written with: the store reads every page and
delta through :meth:`ColumnStore.typed`, which casts it (one vectorized cast) to the
column's current type, so nothing is rewritten and every read sees one type.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TypeAlias

import numpy as np
import pyarrow as pa

from cdc_sink.filters import PageStats, page_stats
from cdc_sink.schema import Column
from cdc_sink.tablet.keystore import (
    arrow_validity,
    arrow_values_view,
    fixed_width_dtype,
    numpy_to_arrow,
    take,
)
from cdc_sink.tablet.lazy_pages import LazyPage, PageEntry, PageList, PageLoader, page_of
from cdc_sink.utils.arrays import one_array, search_sorted

__all__ = [
    "Base",
    "ColumnStore",
    "Delta",
    "LazyPage",
    "PageEntry",
    "PageList",
    "PageLoader",
    "PageSource",
]


def _is_sorted(a: np.ndarray) -> bool:
    return bool(len(a) < 2 or (a[1:] >= a[:-1]).all())


PageSource: TypeAlias = Callable[[int, bool], pa.Array]
"""``source(p, keep)``: page ``p`` of a column at a version
(:meth:`ColumnStore.page_source`); ``keep=False`` leaves a stored page it reads out of
memory (a scan that copies the page anyway)."""


@dataclass(frozen=True)
class Delta:
    """The new values one version wrote to one column."""

    version: int
    rows: np.ndarray  # uint32, sorted, unique
    values: pa.Array

    @cached_property
    def nbytes(self) -> int:
        """Bytes held by the row ids and values (counted once: a delta never changes, and
        a router counts every open table's bytes after each batch)."""
        return int(self.rows.nbytes + self.values.nbytes)

    def page_bounds(self, page_rows: int, num_pages: int) -> np.ndarray:
        """Index into ``rows`` where each page starts (length num_pages + 1)."""
        return search_sorted(self.rows, np.arange(num_pages + 1, dtype=np.int64) * page_rows)


@dataclass
class Base:
    """A column's full content at one version, as pages."""

    version: int
    num_rows: int
    pages: Sequence[pa.Array]  # a tuple, or a PageList of lazily read pages
    stats: list[PageStats | None] = field(default_factory=list)

    def page_stats(self, p: int) -> PageStats:
        """Min/max/null count of page ``p`` (computed once)."""
        if len(self.stats) != len(self.pages):
            self.stats = [None] * len(self.pages)
        s = self.stats[p]
        if s is None:
            s = page_stats(self.pages[p])
            self.stats[p] = s
        return s

    def page_length(self, p: int) -> int:
        """Rows of page ``p`` (a lazy page is not read)."""
        pages = self.pages
        return pages.length(p) if isinstance(pages, PageList) else len(pages[p])

    def page_entry(self, p: int) -> PageEntry:
        """Page ``p`` as held (a lazy page is not read)."""
        pages = self.pages
        return pages.entry(p) if isinstance(pages, PageList) else pages[p]

    def set_loader(self, p: int, loader: PageLoader) -> None:
        """Records that page ``p`` is stored where ``loader`` reads it (storage calls
        this once the snapshot that wrote the page is committed; see
        :meth:`PageList.set_loader`). A base shares the entry with the bases compacted
        from it later, so they know the page is stored too."""
        if not isinstance(self.pages, PageList):
            self.pages = PageList(self.pages)
        self.pages.set_loader(p, loader)


class ColumnStore:
    """Bases and deltas of one column (see the module docstring)."""

    def __init__(self, column: Column, page_rows: int, version: int = 0) -> None:
        self.column = column
        self.page_rows = page_rows
        self.state: tuple[tuple[Base, ...], tuple[Delta, ...]] = (
            (Base(version=version, num_rows=0, pages=()),),
            (),
        )

    @property
    def column(self) -> Column:
        """The column as the tablet's schema has it now (its values are read as its type)."""
        return self._column

    @column.setter
    def column(self, column: Column) -> None:
        self._column = column
        self.dtype = fixed_width_dtype(column.type)

    def typed(self, arr: pa.Array) -> pa.Array:
        """``arr`` (a page or a delta's values) as the column's type: one written before
        the column was widened holds the narrower type it was written with, and is cast."""
        t = self._column.type
        return arr if arr.type == t else arr.cast(t)

    # ------------------------------------------------------------------ writes
    def add_delta(self, delta: Delta) -> None:
        """Appends a delta of a version newer than every delta held."""
        bases, deltas = self.state
        self.state = (bases, (*deltas, delta))

    def drop_version(self, version: int) -> None:
        """Removes the delta of ``version`` (rollback of a pending version)."""
        bases, deltas = self.state
        self.state = (bases, tuple(d for d in deltas if d.version != version))

    def set_base(self, base: Base) -> None:
        """Adds a base (compaction result or a snapshot load)."""
        bases, deltas = self.state
        self.state = ((*bases, base), deltas)

    def release_below(self, oldest: int) -> None:
        """Drops what no version >= ``oldest`` needs: bases older than the newest base
        <= oldest, and deltas that base already covers."""
        bases, deltas = self.state
        keep_from = 0
        for i, b in enumerate(bases):
            if b.version <= oldest:
                keep_from = i
        bases = bases[keep_from:]
        floor = bases[0].version
        self.state = (bases, tuple(d for d in deltas if d.version > floor))

    # ------------------------------------------------------------------ reads
    @staticmethod
    def view(
        state: tuple[tuple[Base, ...], tuple[Delta, ...]], version: int
    ) -> tuple[Base, list[Delta]]:
        """The base and deltas that make up ``version``."""
        bases, deltas = state
        base = bases[0]
        for b in bases:
            if b.version <= version:
                base = b
        ds = [d for d in deltas if base.version < d.version <= version]
        return base, ds

    def page_source(
        self, version: int, num_rows: int, *, page_filter: np.ndarray | None = None
    ) -> PageSource:
        """Page ``p`` of the column at ``version`` (rows ``0..num_rows-1``), for each
        ``p`` where ``page_filter`` (default: every page) is True, produced when asked
        for, in any order and from any thread (a parallel scan builds pages in a pool).
        An untouched base page is returned without a copy; a whole-column rebuild, when
        many deltas make it cheaper, is done here, before any page is asked for."""
        base, ds = self.view(self.state, version)
        num_pages = -(-num_rows // self.page_rows)
        bounds = np.array(
            [d.page_bounds(self.page_rows, num_pages) for d in ds], dtype=np.int64
        ).reshape(len(ds), num_pages + 1)
        hits = bounds[:, 1:] > bounds[:, :-1]  # (delta, page) pairs with rows
        wanted = np.ones(num_pages, bool) if page_filter is None else page_filter
        whole: pa.Array | None = None
        if (
            self.dtype is not None
            and self.dtype != np.dtype(bool)
            and int(hits[:, wanted].sum()) > 4 * max(1, int(wanted.sum()))
        ):
            # Many deltas on many pages: one scatter per delta over the whole column is far
            # cheaper than one per (page, delta); pages are then zero-copy slices of it.
            whole = self._materialize_whole(base, ds, num_rows)
        touched_any: np.ndarray = np.asarray(hits.any(axis=0), dtype=bool)

        def page_at(p: int, keep: bool = True) -> pa.Array:
            start = p * self.page_rows
            length = min(self.page_rows, num_rows - start)
            page = self.typed(page_of(base.page_entry(p), keep)) if p < len(base.pages) else None
            if not touched_any[p] and page is not None and len(page) == length:
                return page
            if whole is not None:
                return whole.slice(start, length)
            touched = [
                (d, int(bounds[k, p]), int(bounds[k, p + 1]))
                for k, d in enumerate(ds)
                if hits[k, p]
            ]
            return self._materialize(page, start, length, touched)

        return page_at

    def page_stats(self, version: int, num_rows: int) -> list[PageStats | None]:
        """Per page: statistics when the page is an untouched base page, else None."""
        base, ds = self.view(self.state, version)
        num_pages = -(-num_rows // self.page_rows)
        touched = np.zeros(num_pages, dtype=bool)
        for d in ds:
            if len(d.rows):
                bounds = d.page_bounds(self.page_rows, num_pages)
                touched[bounds[1:] > bounds[:-1]] = True
        out: list[PageStats | None] = []
        for p in range(num_pages):
            full = p < len(base.pages) and base.page_length(p) == min(
                self.page_rows, num_rows - p * self.page_rows
            )
            out.append(base.page_stats(p) if full and not touched[p] else None)
        return out

    def _fill(self, length: int) -> pa.Array:
        d = self.column.default
        if d.is_valid:
            return (
                pa.repeat(d, length)
                if hasattr(pa, "repeat")
                else pa.array([d.as_py()] * length, type=self.column.type)
            )
        return pa.nulls(length, type=self.column.type)

    def _materialize(
        self, page: pa.Array | None, start: int, length: int, touched: list[tuple[Delta, int, int]]
    ) -> pa.Array:
        have = 0 if page is None else len(page)
        if have == 0 and len(touched) == 1:
            d, lo, hi = touched[0]
            rows = d.rows[lo:hi]
            if hi - lo == length and int(rows[0]) == start and int(rows[-1]) == start + length - 1:
                # A new page written whole by one delta (a load; delta rows are sorted
                # and unique): the page is that slice of the delta, not a copy.
                vals = d.values.slice(lo, length)
                return self.typed(one_array(vals))
        if self.dtype is not None:
            return self._materialize_fixed(page, have, start, length, touched)
        pieces = [page] if page is not None else []
        idx = np.empty(length, dtype=np.int64)
        idx[:have] = np.arange(have)
        off = have
        if have < length:
            pieces.append(self._fill(1))
            idx[have:] = off
            off += 1
        for d, lo, hi in touched:
            pieces.append(self.typed(d.values.slice(lo, hi - lo)))
            idx[d.rows[lo:hi].astype(np.int64) - start] = np.arange(off, off + hi - lo)
            off += hi - lo
        return pa.concat_arrays(pieces).take(pa.array(idx))

    def _materialize_whole(self, base: Base, ds: list[Delta], num_rows: int) -> pa.Array:
        """The whole fixed-width column at a version: base pages copied once, then one
        scatter per delta."""
        assert self.dtype is not None
        data = np.empty(num_rows, dtype=self.dtype)
        valid: np.ndarray | None = None
        off = 0
        for page in base.pages:
            n = len(page)
            valid = self._scatter(data, valid, slice(off, off + n), page)
            off += n
        if off < num_rows:
            valid = self._fill_default(data, valid, off)
        for d in ds:
            valid = self._scatter(data, valid, d.rows, d.values)
        return numpy_to_arrow(data, valid, self.column.type)

    def _materialize_fixed(
        self,
        page: pa.Array | None,
        have: int,
        start: int,
        length: int,
        touched: list[tuple[Delta, int, int]],
    ) -> pa.Array:
        assert self.dtype is not None
        data = np.empty(length, dtype=self.dtype)
        valid: np.ndarray | None = None
        if page is not None:
            valid = self._scatter(data, valid, slice(0, have), page)
        if have < length:
            valid = self._fill_default(data, valid, have)
        for d, lo, hi in touched:
            rows = d.rows[lo:hi].astype(np.int64) - start
            valid = self._scatter(data, valid, rows, d.values.slice(lo, hi - lo))
        return numpy_to_arrow(data, valid, self.column.type)

    def _fill_default(
        self, data: np.ndarray, valid: np.ndarray | None, start: int
    ) -> np.ndarray | None:
        """Fills ``data[start:]`` with the column's default (null when it has none).

        Returns:
            The validity mask, created (all valid) if the default is null and there was none.
        """
        assert self.dtype is not None
        default = self.column.default
        if default.is_valid:
            data[start:] = arrow_values_view(
                pa.array([default.as_py()], type=self.column.type), self.dtype
            )[0]
            return valid
        data[start:] = np.zeros(1, dtype=self.dtype)[0]
        if valid is None:
            valid = np.ones(len(data), dtype=bool)
        valid[start:] = False
        return valid

    def _scatter(
        self, data: np.ndarray, valid: np.ndarray | None, rows: np.ndarray | slice, values: pa.Array
    ) -> np.ndarray | None:
        """Writes ``values`` (a page or a delta) at ``rows`` of ``data`` and of the mask.

        Returns:
            The validity mask, created (all valid) if ``values`` hold nulls and there was none.
        """
        assert self.dtype is not None
        values = self.typed(values)
        data[rows] = arrow_values_view(values, self.dtype)
        dv = arrow_validity(values)
        if dv is not None:
            if valid is None:
                valid = np.ones(len(data), dtype=bool)
            valid[rows] = dv
        elif valid is not None:
            valid[rows] = True
        return valid

    def gather(self, rows: np.ndarray, version: int) -> pa.Array:
        """Values of the column at ``version`` for arbitrary row ids (point reads)."""
        n = len(rows)
        if n == 0:
            return pa.array([], type=self.column.type)
        uniq = rows
        inverse = None
        if not _is_sorted(rows) or (n > 1 and not (rows[1:] != rows[:-1]).all()):
            uniq, inverse = np.unique(rows, return_inverse=True)
        out = self._gather_sorted_unique(uniq, version)
        return out if inverse is None else take(out, inverse.reshape(-1))

    def _gather_sorted_unique(self, rows: np.ndarray, version: int) -> pa.Array:
        base, ds = self.view(self.state, version)
        n = len(rows)
        src = np.zeros(n, dtype=np.int64)  # 0: base/default, k: delta k-1
        off = np.zeros(n, dtype=np.int64)
        for k, d in enumerate(ds, start=1):
            if not len(d.rows):
                continue
            # Probes are sorted and unique: search the delta's rows among them, which
            # costs O(len(delta) log n) instead of O(n log len(delta)).
            lo, hi = search_sorted(d.rows, [rows[0], rows[-1] + 1]).tolist()
            if lo == hi:
                continue
            drows = d.rows[lo:hi]
            pos = np.searchsorted(rows, drows)
            pos_c = np.minimum(pos, n - 1)
            hit = rows[pos_c] == drows
            src[pos_c[hit]] = k
            off[pos_c[hit]] = np.flatnonzero(hit) + lo
        pieces: list[pa.Array] = []
        order_parts: list[np.ndarray] = []
        sel0 = np.flatnonzero(src == 0)
        if len(sel0):
            in_base = rows[sel0] < base.num_rows
            from_base = sel0[in_base]
            if len(from_base):
                pieces.append(self._gather_base(base, rows[from_base]))
                order_parts.append(from_base)
            rest = sel0[~in_base]
            if len(rest):
                pieces.append(self._fill(len(rest)))
                order_parts.append(rest)
        for k, d in enumerate(ds, start=1):
            sel = np.flatnonzero(src == k)
            if len(sel):
                pieces.append(self.typed(take(d.values, off[sel])))
                order_parts.append(sel)
        if len(pieces) == 1:
            return pieces[0]
        where = np.concatenate(order_parts)
        perm = np.empty(n, dtype=np.int64)
        perm[where] = np.arange(n)
        return take(pa.concat_arrays(pieces), perm)

    def _gather_base(self, base: Base, rows: np.ndarray) -> pa.Array:
        """Base values at sorted row ids, page by page (numpy for fixed width)."""
        pr = self.page_rows
        bounds = np.searchsorted(rows, np.arange(len(base.pages) + 1, dtype=np.int64) * pr)
        hit_pages = np.flatnonzero(bounds[1:] > bounds[:-1])
        if self.dtype is not None and self.dtype != np.dtype(bool):
            data = np.empty(len(rows), dtype=self.dtype)
            valid: np.ndarray | None = None
            for p in hit_pages.tolist():
                lo, hi = bounds[p], bounds[p + 1]
                page = base.pages[p]
                local = rows[lo:hi] - p * pr
                if page.type != self.column.type:  # written before a widening
                    page = self.typed(page.take(pa.array(local)))  # cast the rows only
                    local = np.arange(hi - lo)
                data[lo:hi] = arrow_values_view(page, self.dtype)[local]
                pv = arrow_validity(page)
                if pv is not None:
                    if valid is None:
                        valid = np.ones(len(rows), dtype=bool)
                    valid[lo:hi] = pv[local]
            return numpy_to_arrow(data, valid, self.column.type)
        parts = [
            self.typed(base.pages[p].take(pa.array(rows[bounds[p] : bounds[p + 1]] - p * pr)))
            for p in hit_pages.tolist()
        ]
        return pa.concat_arrays(parts) if parts else pa.array([], type=self.column.type)

    def compacted_base(self, version: int, num_rows: int) -> Base:
        """A base at ``version``: touched pages rebuilt, untouched pages shared (with
        their statistics, and their loaders when they are stored)."""
        old, ds = self.view(self.state, version)
        num_pages = -(-num_rows // self.page_rows)
        # Untouched full pages are shared as held (a lazy page stays unread).
        keep = np.zeros(num_pages, dtype=bool)
        keep[: min(num_pages, len(old.pages))] = True
        for d in ds:
            if len(d.rows):  # pages with rows of the delta (no pass over its rows)
                bounds = d.page_bounds(self.page_rows, num_pages)
                keep[bounds[1:] > bounds[:-1]] = False
        for p in np.flatnonzero(keep).tolist():
            keep[p] = old.page_length(p) == min(self.page_rows, num_rows - p * self.page_rows)
        source = self.page_source(version, num_rows, page_filter=~keep)
        rebuilt = {p: source(p, True) for p in np.flatnonzero(~keep).tolist()}
        entries = [old.page_entry(p) if keep[p] else rebuilt[p] for p in range(num_pages)]
        stats: list[PageStats | None] = [None] * num_pages
        if old.stats:
            for p in np.flatnonzero(keep).tolist():
                stats[p] = old.stats[p]
        return Base(version=version, num_rows=num_rows, pages=PageList(entries), stats=stats)

    def covers(self, version: int, num_rows: int) -> bool:
        """Whether the base at ``version`` is the column at ``version`` (``num_rows``
        rows, no delta on top): what :meth:`MemTablet.compact` makes."""
        base, ds = self.view(self.state, version)
        return not ds and base.num_rows == num_rows

    def base_at(self, version: int) -> Base:
        """The newest base at or below ``version``."""
        bases, _ = self.state
        i = bisect.bisect_right([b.version for b in bases], version) - 1
        return bases[max(i, 0)]

    @property
    def nbytes(self) -> int:
        """Bytes held by all bases (shared pages counted once; a lazy page not read yet
        holds none) and deltas."""
        bases, deltas = self.state
        seen: dict[int, int] = {}
        for b in bases:
            for p in range(len(b.pages)):
                e = b.page_entry(p)
                pg = e.array if isinstance(e, LazyPage) else e
                if pg is not None:  # a lazy page not read yet holds no memory
                    seen[id(pg)] = pg.nbytes
        return sum(seen.values()) + sum(d.nbytes for d in deltas)

    @property
    def num_deltas(self) -> int:
        """Number of deltas held (also those kept only for older retained versions)."""
        return len(self.state[1])

    @property
    def outstanding_deltas(self) -> int:
        """Deltas newer than the newest base: what a read of the latest version applies
        (and what compaction would fold)."""
        bases, deltas = self.state
        newest = bases[-1].version
        return sum(1 for d in deltas if d.version > newest)
