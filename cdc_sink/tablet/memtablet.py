"""MemTablet: one bucket's in-memory column tablet (the Doris memory-optimized design).

In memory, owned by one writer (the table's applier for this bucket)::

    index      KeyIndex: key -> dense row id (uint32), stable for the key's lifetime
               (a deleted then re-inserted key gets its old row id back)
    keys       the key columns, by row id (inside the index; keys never change)
    columns    ColumnStore per value column id: bases of 64K-row pages + deltas per version
    versions   per version that changed the tablet: row count and deletion vector
               (pyroaring FrozenBitMap of rows that are not live: deleted rows and
               tombstones of keys whose last event was a delete)
    live, seq  dense arrays of the latest state (liveness, sequence), used by apply

Versions: ``apply(batch, v)`` folds the batch into *pending* version v (the semantics
of docs/architecture.md §3), ``commit(v)`` publishes it, ``rollback()`` discards it.
``read(v)`` / ``get(keys, v)`` serve any retained committed version; ``compact()`` moves
column bases forward without disturbing readers; ``release(oldest)`` drops what no
retained version needs. The tablet never touches disk; ``storage/`` makes it durable.
"""

from __future__ import annotations

import array
import bisect
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap, FrozenBitMap

from cdc_sink.arrays import one_array
from cdc_sink.changes import OP_DELETE, OP_TRUNCATE, OP_UPDATE, OP_UPSERT, ChangeBatch, Rejects
from cdc_sink.errors import TabletStateError, VersionNotFound
from cdc_sink.filters import evaluate, may_match, parse_filter, physical_predicate
from cdc_sink.schema import Column, TableSchema
from cdc_sink.tablet.column import ColumnStore, Delta
from cdc_sink.tablet.fold import SEQ_NONE, fold_events
from cdc_sink.tablet.keyindex import KeyIndex
from cdc_sink.tablet.keystore import take

__all__ = ["ApplyResult", "MemTablet", "TabletOptions"]


@dataclass(frozen=True)
class TabletOptions:
    """Tuning of a tablet.

    Attributes:
        page_rows: Rows per page (64K; tests use tiny pages to force many pages).
        initial_capacity: Expected rows (sizes the index up front).
    """

    page_rows: int = 65536
    initial_capacity: int = 1024

    @classmethod
    def for_tests(cls) -> TabletOptions:
        """Tiny pages so small tests cross page boundaries."""
        return cls(page_rows=8, initial_capacity=4)


@dataclass
class ApplyResult:
    """What one ``apply`` did, counted per event.

    Attributes:
        inserted: Events that created a row (key not live before).
        updated: Events that changed a live row (including inserts replacing it).
        deleted: Deletes of a live row.
        ignored: Deletes of a key that was not live.
        stale: Events dropped because their seq was older than the key's sequence.
        rejected: Events refused (e.g. update of a missing key).
        truncated: Live rows deleted by truncates (a count of rows, not of events).
        rejects: Positions and reasons of the refused events.
    """

    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    ignored: int = 0
    stale: int = 0
    rejected: int = 0
    truncated: int = 0
    rejects: Rejects = field(default_factory=Rejects)

    def add(self, other: ApplyResult) -> None:
        """Adds another result's counts (and rejects) to this one."""
        self.inserted += other.inserted
        self.updated += other.updated
        self.deleted += other.deleted
        self.ignored += other.ignored
        self.stale += other.stale
        self.rejected += other.rejected
        self.truncated += other.truncated
        self.rejects.extend(other.rejects)

    def counts(self) -> dict[str, int]:
        """The counts as a dict."""
        return {"inserted": self.inserted, "updated": self.updated, "deleted": self.deleted,
                "ignored": self.ignored, "stale": self.stale, "rejected": self.rejected,
                "truncated": self.truncated}


@dataclass
class _Pending:
    version: int
    row_count: int
    dv: FrozenBitMap
    columns: list[int]
    live_undo: tuple[np.ndarray, np.ndarray]
    seq_undo: tuple[np.ndarray, np.ndarray] | None


def _is_identity(idx: np.ndarray) -> bool:
    """Whether ``idx`` is ``0, 1, ..., len - 1``."""
    n = len(idx)
    return n == 0 or (int(idx[0]) == 0 and int(idx[-1]) == n - 1
                      and bool((np.diff(idx) == 1).all()))


def _u32(rows: np.ndarray) -> array.array[int]:
    """Row ids as an ``array('I')`` (the fastest input pyroaring takes)."""
    return array.array("I", rows.astype(np.uint32).tobytes())


class _Grow:
    """A numpy array that grows by doubling (dense per-row state)."""

    def __init__(self, dtype: Any, fill: Any, capacity: int) -> None:
        self.fill = fill
        self.a = np.full(max(capacity, 16), fill, dtype=dtype)

    def ensure(self, n: int) -> None:
        if n > len(self.a):
            grown = np.full(max(2 * len(self.a), n), self.fill, dtype=self.a.dtype)
            grown[: len(self.a)] = self.a
            self.a = grown


class MemTablet:
    """One bucket's tablet (see the module docstring).

    Args:
        schema: The table schema.
        bucket: Bucket number (informational).
        options: Tuning; :meth:`TabletOptions.for_tests` in tests.
        version: Version the empty tablet starts at (the table's creation version).
    """

    def __init__(self, schema: TableSchema, *, bucket: int = 0,
                 options: TabletOptions | None = None, version: int = 0) -> None:
        self.schema = schema
        self.bucket = bucket
        self.options = options or TabletOptions()
        cap = self.options.initial_capacity
        self.index = KeyIndex([c.type for c in schema.key_columns], cap)
        self.columns: dict[int, ColumnStore] = {
            c.id: ColumnStore(c, self.options.page_rows, version) for c in schema.value_columns}
        self._seq_col: Column | None = (schema.column(schema.sequence_column)
                                        if schema.sequence_column else None)
        self._live = _Grow(bool, False, cap)
        self._seq = _Grow(np.int64, SEQ_NONE, cap) if self._seq_col is not None else None
        self._required = {c.id for c in schema.required_columns}
        # Per changed version: row count and deletion vector (parallel lists).
        self._versions: list[int] = [version]
        self._row_counts: list[int] = [0]
        self._dvs: list[FrozenBitMap] = [FrozenBitMap()]
        self.committed = version
        self.oldest = version
        self._pending: _Pending | None = None
        self._pins: Counter[int] = Counter()
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ version state
    @property
    def row_count(self) -> int:
        """Rows (live or not) at the latest committed version."""
        return self._row_counts[-1]

    @property
    def pending_version(self) -> int | None:
        """The version applied but not committed yet, if any."""
        return self._pending.version if self._pending else None

    def _slot(self, version: int) -> int:
        if version > self.committed or version < self.oldest:
            raise VersionNotFound(
                f"bucket {self.bucket}: version {version} is not retained in memory "
                f"(retained: {self.oldest}..{self.committed})",
                version=version, oldest=self.oldest, latest=self.committed)
        return bisect.bisect_right(self._versions, version) - 1

    def row_count_at(self, version: int) -> int:
        """Rows (live or not) at a retained version."""
        return self._row_counts[self._slot(version)]

    def deletion_vector(self, version: int) -> FrozenBitMap:
        """Rows that are not live at a retained version (deleted rows, tombstones)."""
        return self._dvs[self._slot(version)]

    def ensure_column(self, column: int | Column) -> ColumnStore:
        """The store of a column (by id, or the Column of the schema being read, which
        may be older than the tablet's), created (reading its default) if missing."""
        cid = column if isinstance(column, int) else column.id
        store = self.columns.get(cid)
        if store is None:
            col = self.schema.column_by_id(cid) if isinstance(column, int) else column
            store = ColumnStore(col, self.options.page_rows, self.oldest)
            self.columns[cid] = store
        return store

    def set_schema(self, schema: TableSchema) -> None:
        """Switches to a newer schema of the same table (added columns read their
        default for existing rows; dropped columns stay for older versions)."""
        if self._pending is not None:
            raise TabletStateError("cannot change the schema with a pending version")
        self.schema = schema
        for c in schema.value_columns:
            store = self.columns.get(c.id)
            if store is None:
                self.columns[c.id] = ColumnStore(c, self.options.page_rows, self.oldest)
            else:
                store.column = c
        self._required = {c.id for c in schema.required_columns}

    def restore(self, version: int, row_count: int, keys: Sequence[pa.Array],
                row_hash: np.ndarray, dv: FrozenBitMap,
                slots: np.ndarray | None = None) -> None:
        """Completes a tablet whose column bases were loaded from a snapshot at
        ``version``: rebuilds the index, the dense live/seq state and the version state."""
        self.index.load(row_hash, keys, slots)
        self._live.ensure(row_count)
        self._live.a[:row_count] = True
        if len(dv):
            self._live.a[np.asarray(dv.to_array(), dtype=np.int64)] = False
        if self._seq is not None and self._seq_col is not None:
            self._seq.ensure(row_count)
            store = self.columns[self._seq_col.id]
            base = store.base_at(version)
            if base.pages:
                vals = pa.chunked_array(base.pages).combine_chunks()
                arr = np.asarray(vals.fill_null(SEQ_NONE).cast(pa.int64()).to_numpy(
                    zero_copy_only=False), dtype=np.int64)
                self._seq.a[: len(arr)] = arr
        self._versions = [version]
        self._row_counts = [row_count]
        self._dvs = [dv]
        self.committed = version
        self.oldest = version

    def num_rows(self, version: int | None = None) -> int:
        """Live rows at ``version`` (default: latest committed)."""
        i = self._slot(self.committed if version is None else version)
        return self._row_counts[i] - len(self._dvs[i])

    def advance(self, version: int) -> None:
        """Marks the table at ``version`` without a change in this bucket."""
        if self._pending is not None:
            raise TabletStateError("cannot advance with a pending version")
        if version < self.committed:
            raise TabletStateError(f"cannot move back from {self.committed} to {version}")
        self.committed = version

    @contextmanager
    def pin(self, version: int) -> Iterator[int]:
        """Keeps ``version`` readable (``release`` will not drop it) inside the block."""
        self._slot(version)
        with self._lock:
            self._pins[version] += 1
        try:
            yield version
        finally:
            with self._lock:
                self._pins[version] -= 1
                if self._pins[version] <= 0:
                    del self._pins[version]

    # ------------------------------------------------------------------ apply
    def apply(self, batch: ChangeBatch, version: int) -> ApplyResult:
        """Folds ``batch`` into pending version ``version`` (docs/architecture.md §3).

        A truncate deletes every row live at its position in the batch (rows keep their
        sequence as their tombstone); the events after it apply normally.

        Args:
            batch: Validated events of this tablet's schema, in apply order.
            version: The version to create; must be newer than the committed one.

        Returns:
            Counts per outcome and the rejects (e.g. update of a missing key).

        Raises:
            TabletStateError: A version is already pending, or ``version`` is not newer.
        """
        if self._pending is not None:
            raise TabletStateError(f"version {self._pending.version} is still pending")
        if version <= self.committed:
            raise TabletStateError(f"version {version} <= committed {self.committed}")
        rc0 = self.row_count
        dv0 = self._dvs[-1]
        result = ApplyResult()
        is_truncate = batch.op == OP_TRUNCATE
        num_cuts = int(is_truncate.sum())
        cut_all: np.ndarray | None = None
        if num_cuts:
            # Keyed events only; each knows how many truncates precede it.
            cut_all = np.cumsum(is_truncate) - is_truncate
            keyed = np.flatnonzero(~is_truncate)
            batch = batch.take(keyed)
            cut_all = cut_all[keyed]
        n = len(batch)
        if n == 0:
            dv_new = BitMap(dv0)
            undo = self._truncate_untouched(rc0, np.empty(0, np.int64), dv_new, result) \
                if num_cuts else (np.empty(0, np.int64), np.empty(0, bool))
            self._pending = _Pending(version, rc0, FrozenBitMap(dv_new) if num_cuts else dv0,
                                     [], undo, None)
            return result
        h = batch.key_hash()
        rid = self.index.lookup(h, batch.keys)
        missing = np.flatnonzero(rid < 0)
        gkey = rid.copy()
        if len(missing):
            sub_keys = [k.take(pa.array(missing)) for k in batch.keys]
            rep = self.index.group_new(h[missing], sub_keys)
            _, inv = np.unique(rep, return_inverse=True)
            gkey[missing] = rc0 + inv.reshape(-1)
        order = np.argsort(gkey, kind="stable")
        gk = gkey[order]
        op = batch.op[order]
        starts = np.flatnonzero(np.r_[True, gk[1:] != gk[:-1]])
        gid = np.cumsum(np.r_[False, gk[1:] != gk[:-1]]).astype(np.int64)
        grow = gk[starts]
        existing = grow < rc0
        live0 = np.zeros(len(grow), dtype=bool)
        live0[existing] = self._live.a[grow[existing]]
        seq0 = np.full(len(grow), SEQ_NONE, dtype=np.int64)
        if self._seq is not None:
            seq0[existing] = self._seq.a[grow[existing]]
        needs_live = op == OP_UPDATE
        if self._required:
            lacks_required = np.zeros(n, dtype=bool)
            for cid in self._required:
                pres = batch.present.get(cid)
                lacks_required |= True if pres is None else ~pres[order]
            needs_live |= (op == OP_UPSERT) & lacks_required
        seq = None if batch.seq is None or self._seq is None else batch.seq[order]
        f = fold_events(gid, op, needs_live, seq, live0, seq0,
                        cut=None if cut_all is None else cut_all[order], num_cuts=num_cuts)

        # Rows: existing keys keep theirs; new keys get one only if they end up live or
        # leave a tombstone (a delete with a sequence).
        needed = ~existing & (f.final_live | (f.any_applied & (self._seq is not None)))
        new_groups = np.flatnonzero(needed)
        grow = grow.copy()
        grow[~existing] = -1
        grow[new_groups] = rc0 + np.arange(len(new_groups))
        rc1 = rc0 + len(new_groups)
        if len(new_groups):
            rep_events = order[starts[new_groups]]
            sel = pa.array(rep_events)
            self.index.insert(h[rep_events], [k.take(sel) for k in batch.keys])
            self._live.ensure(rc1)
            if self._seq is not None:
                self._seq.ensure(rc1)

        # Deletion vector and dense live/seq state (with undo for rollback).
        has_row = grow >= 0
        rows_g = grow[has_row]
        live_now = f.final_live[has_row]
        undo_live = (rows_g, self._live.a[rows_g].copy())
        dead_rows = rows_g[~live_now]
        alive_rows = rows_g[live_now]
        dv_new = BitMap(dv0)
        if len(dead_rows):
            dv_new.update(_u32(dead_rows))
        if len(alive_rows):
            revived = alive_rows[alive_rows < rc0]
            if len(revived) and len(dv0):
                dv_new.difference_update(BitMap(_u32(revived)))
        if num_cuts:  # rows of keys without events in the batch: every live one dies
            t_rows, t_old = self._truncate_untouched(rc0, grow[existing], dv_new, result)
            undo_live = (np.concatenate([undo_live[0], t_rows]),
                         np.concatenate([undo_live[1], t_old]))
        self._live.a[rows_g] = live_now
        undo_seq = None
        if self._seq is not None:
            undo_seq = (rows_g, self._seq.a[rows_g].copy())
            self._seq.a[rows_g] = f.final_seq[has_row]

        touched: list[int] = []
        ngroups = len(grow)
        unique_keys = ngroups == n
        grow32 = grow.astype(np.uint32)
        # Per event in *input* order: its group, and whether a value it sets is kept
        # (applied, the key ends live, at or after the key's last reset).
        idx = np.arange(n, dtype=np.int64)
        keep_sorted = f.applied & f.final_live[f.gid] & (idx >= f.reset_idx[f.gid]) \
            & has_row[f.gid]
        ev_group = np.empty(n, dtype=np.int64)
        ev_group[order] = f.gid
        ev_keep = np.empty(n, dtype=bool)
        ev_keep[order] = keep_sorted
        full_groups = f.final_live & (f.reset_idx >= 0) & has_row
        any_full = bool(full_groups.any())
        # One event per key, every event kept, groups in input order (a load): a column
        # every event sets is written whole, in order, without per-column masks.
        in_order = unique_keys and bool(ev_keep.all()) and bool(has_row.all()) \
            and _is_identity(ev_group)
        for c in self.schema.value_columns:
            if self._seq_col is not None and c.id == self._seq_col.id:
                wrote = f.any_applied & has_row
                if wrote.any():
                    vals = pa.array(f.final_seq[wrote]).cast(c.type, safe=False)
                    self._add_delta(c, version, grow32[wrote], vals, touched)
                continue
            pres = batch.present.get(c.id)
            if pres is None and not any_full:
                continue  # no event sets the column and no row is (re)created
            if in_order and pres is not None and bool(pres.all()):
                self._add_delta(c, version, grow32, batch.values[c.id], touched)
                continue
            e = np.flatnonzero(pres) if pres is not None else np.empty(0, np.int64)
            e = e[ev_keep[e]]
            g = ev_group[e]
            if not unique_keys and len(e):
                # Several setters of one key: the last one (input order) wins.
                o = np.argsort(g, kind="stable")
                g, e = g[o], e[o]
                last = np.r_[g[1:] != g[:-1], True]
                g, e = g[last], e[last]
            if any_full:
                src = np.full(ngroups, -1, dtype=np.int64)
                src[g] = e
                write = np.flatnonzero((src >= 0) | full_groups)
                wsrc = src[write]
            else:
                if unique_keys:
                    o = np.argsort(g)
                    g, e = g[o], e[o]
                write, wsrc = g, e
            if not len(write):
                continue
            if pres is not None:
                src_vals = batch.values[c.id]
                if len(wsrc) == len(src_vals) and _is_identity(wsrc):
                    vals = src_vals  # every event's value, in order (a load): no copy
                else:
                    vals = take(src_vals, np.where(wsrc >= 0, wsrc, 0))
            else:
                vals = pa.nulls(len(wsrc), c.type)
            use_default = wsrc < 0
            if use_default.any():
                vals = pc.if_else(pa.array(use_default), c.default, vals)
            self._add_delta(c, version, grow32[write], vals, touched)

        # Counts and rejects.
        is_del = op == OP_DELETE
        ev_applied = f.applied
        result.stale = int(f.stale.sum())
        result.rejected = int(f.rejected.sum())
        result.deleted = int((ev_applied & is_del & f.live_before).sum())
        result.ignored = int((ev_applied & is_del & ~f.live_before).sum())
        result.inserted = int((ev_applied & ~is_del & ~f.live_before).sum())
        result.updated = int((ev_applied & ~is_del & f.live_before).sum())
        result.truncated += int(f.truncated.sum())
        if result.rejected:
            rej_events = order[f.rejected]
            rej_ops = batch.op[rej_events]
            reasons = ["update of missing key" if o == OP_UPDATE else
                       "upsert of missing key does not set every non-nullable column "
                       "without a default" for o in rej_ops.tolist()]
            pos = batch.positions[rej_events]
            sort = np.argsort(pos, kind="stable")
            result.rejects = Rejects(positions=pos[sort],
                                     reasons=[reasons[i] for i in sort.tolist()])
        self._pending = _Pending(version, rc1, FrozenBitMap(dv_new), touched, undo_live,
                                 undo_seq)
        return result

    def _truncate_untouched(self, rc0: int, touched_rows: np.ndarray, dv: BitMap,
                            result: ApplyResult) -> tuple[np.ndarray, np.ndarray]:
        """Deletes every live row not in ``touched_rows`` (a truncate); their sequence
        stays as their tombstone. Returns the undo for rollback (rows, old liveness)."""
        live = self._live.a[:rc0].copy()
        live[touched_rows] = False
        rows = np.flatnonzero(live)
        if len(rows):
            dv.update(_u32(rows))
            self._live.a[rows] = False
        result.truncated += len(rows)
        return rows, np.ones(len(rows), dtype=bool)

    def _add_delta(self, c: Column, version: int, rows: np.ndarray, vals: pa.Array,
                   touched: list[int]) -> None:
        vals = one_array(vals)
        self.columns[c.id].add_delta(Delta(version, rows, vals))
        touched.append(c.id)

    def commit(self, version: int) -> None:
        """Publishes pending ``version``: it becomes the latest readable version.

        Raises:
            TabletStateError: ``version`` is not the pending version.
        """
        p = self._pending
        if p is None or p.version != version:
            raise TabletStateError(f"version {version} is not pending")
        self._versions.append(version)
        self._row_counts.append(p.row_count)
        self._dvs.append(p.dv)
        self.committed = version
        self._pending = None

    def rollback(self) -> int | None:
        """Discards the pending version, restoring the committed state exactly.

        Returns:
            The discarded version, or None when nothing was pending.
        """
        p = self._pending
        if p is None:
            return None
        for cid in set(p.columns):
            self.columns[cid].drop_version(p.version)
        rows, old = p.live_undo
        self._live.a[rows] = old
        if p.seq_undo is not None and self._seq is not None:
            srows, sold = p.seq_undo
            self._seq.a[srows] = sold
        rc0 = self.row_count
        self.index.truncate(rc0)
        self._live.a[rc0: p.row_count] = False
        if self._seq is not None:
            self._seq.a[rc0: p.row_count] = SEQ_NONE
        self._pending = None
        return p.version

    # ------------------------------------------------------------------ reads
    def _read_columns(self, columns: Sequence[str] | None,
                      schema: TableSchema | None = None) -> list[Column]:
        schema = schema or self.schema
        if columns is None:
            return list(schema.columns)
        return [schema.column(n) for n in columns]

    def batches(self, version: int | None = None, columns: Sequence[str] | None = None,
                filter: Any = None, *, schema: TableSchema | None = None
                ) -> Iterator[pa.RecordBatch]:
        """Yields the live rows at ``version`` page by page as record batches.

        Pages whose statistics exclude the filter are skipped; pages no delta touched
        are yielded without copying.

        Args:
            version: A retained committed version (default latest).
            columns: Column names to return (default all, schema order).
            filter: Conjunctive predicates ``[(column, op, value), ...]``.
            schema: The schema to read with (the one of ``version``; default current).
        """
        v = self.committed if version is None else version
        slot = self._slot(v)
        rows = self._row_counts[slot]
        dv = self._dvs[slot]
        schema = schema or self.schema
        cols = self._read_columns(columns, schema)
        preds = parse_filter(filter, schema.names)
        out_schema = schema.arrow_schema([c.name for c in cols])
        pr = self.options.page_rows
        num_pages = -(-rows // pr)
        page_ok = np.ones(num_pages, dtype=bool)
        key_names = set(schema.primary_key)
        for p in preds:
            if p.column in key_names:
                continue
            col = schema.column(p.column)
            phys = physical_predicate(p, col.type)  # the form of the page statistics
            if phys is None:
                continue
            stats = self.ensure_column(col).page_stats(v, rows)
            for i, s in enumerate(stats):
                if s is not None and page_ok[i] and not may_match(s, phys):
                    page_ok[i] = False
        dead = np.asarray(dv.to_array(), dtype=np.int64) if len(dv) else np.empty(0, np.int64)
        dead_bounds = np.searchsorted(dead, np.arange(num_pages + 1, dtype=np.int64) * pr)
        pred_cols = list({c.id: c for c in (schema.column(p.column) for p in preds)}.values())
        need = list({c.id: c for c in [*cols, *pred_cols]}.values())
        iters = {c.id: self._page_iter(c, v, rows, page_ok) for c in need}
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
                pb = pa.RecordBatch.from_arrays([arrays[c.id] for c in pred_cols],
                                                names=[c.name for c in pred_cols])
                m2 = evaluate(pb, preds)
                mask = m2 if mask is None else mask & m2
            batch = pa.RecordBatch.from_arrays([arrays[c.id] for c in cols],
                                               schema=out_schema)
            if mask is not None:
                if not mask.any():
                    continue
                if not mask.all():
                    batch = batch.filter(pa.array(mask))
            yield batch

    def _key_position(self, c: Column) -> int | None:
        for i, k in enumerate(self.schema.key_columns):
            if k.id == c.id:
                return i
        return None

    def _page_iter(self, c: Column, version: int, rows: int,
                   page_ok: np.ndarray) -> Iterator[pa.Array]:
        kpos = self._key_position(c)
        if kpos is not None:
            store = self.index.keys[kpos]
            pr = self.options.page_rows
            for p in np.flatnonzero(page_ok).tolist():
                yield store.slice(p * pr, min((p + 1) * pr, rows))
            return
        store_c = self.ensure_column(c)
        for _, arr in store_c.pages(version, rows, page_filter=page_ok):
            yield arr if arr.type == c.type else arr.cast(c.type)

    def read(self, version: int | None = None, columns: Sequence[str] | None = None,
             filter: Any = None, *, schema: TableSchema | None = None) -> pa.Table:
        """The live rows at ``version`` (default latest committed) as an Arrow table.

        Args:
            version: A retained committed version.
            columns: Column names to return (default all, in schema order).
            filter: Conjunctive predicates ``[(column, op, value), ...]``.

        Raises:
            VersionNotFound: The version is not retained in memory.
        """
        schema = schema or self.schema
        cols = self._read_columns(columns, schema)
        out = schema.arrow_schema([c.name for c in cols])
        return pa.Table.from_batches(
            list(self.batches(version, columns, filter, schema=schema)), schema=out)

    def get(self, keys: pa.Table | Sequence[pa.Array], version: int | None = None,
            columns: Sequence[str] | None = None, *,
            schema: TableSchema | None = None) -> pa.Table:
        """Point lookups: the live rows at ``version`` whose keys are in ``keys``.

        Args:
            keys: A table with the key columns (by name) or arrays in key order.
            version: A retained committed version (default latest).
            columns: Columns to return (default all).

        Returns:
            The rows found, in the order of ``keys`` (missing keys are left out).
        """
        from cdc_sink.bucketing import spark_xxhash64

        v = self.committed if version is None else version
        slot = self._slot(v)
        schema = schema or self.schema
        key_cols = schema.key_columns
        if isinstance(keys, pa.Table):
            arrays = [keys.column(c.name).combine_chunks().cast(c.type) for c in key_cols]
        else:
            arrays = [pa.array(a).cast(c.type) if not isinstance(a, pa.Array) else a.cast(c.type)
                      for a, c in zip(keys, key_cols, strict=True)]
        h = spark_xxhash64(arrays)
        rid = self.index.lookup(h, arrays)
        ok = (rid >= 0) & (rid < self._row_counts[slot])
        dv = self._dvs[slot]
        if len(dv) and ok.any():
            cand = rid[ok].astype(np.uint32)
            dead = np.asarray((BitMap(_u32(cand)) & dv).to_array(), dtype=np.int64)
            if len(dead):
                ok &= ~np.isin(rid, dead)
        rows = rid[ok]
        # Gather once per distinct row in row order (sorted probes), then expand to the
        # order of ``keys``.
        uniq, inverse = np.unique(rows, return_inverse=True)
        inverse = inverse.reshape(-1)
        cols = self._read_columns(columns, schema)
        out = []
        for c in cols:
            kpos = self._key_position(c)
            if kpos is not None:
                got = self.index.keys[kpos].take(uniq)
            else:
                got = self.ensure_column(c).gather(uniq, v)
            out.append(take(got, inverse))
        return pa.Table.from_arrays(out, schema=schema.arrow_schema([c.name for c in cols]))

    # ------------------------------------------------------------------ maintenance
    def compact(self, version: int | None = None) -> int:
        """Moves every column's base to ``version`` (default latest committed).

        Readers of older retained versions keep their base and deltas; untouched pages
        are shared between the old and the new base.

        Returns:
            Number of columns whose base moved.
        """
        v = self.committed if version is None else version
        slot = self._slot(v)
        rows = self._row_counts[slot]
        moved = 0
        for store in self.columns.values():
            if not store.covers(v, rows):
                store.set_base(store.compacted_base(v, rows))
                moved += 1
        return moved

    def is_compacted(self, version: int) -> bool:
        """Whether every column's base is the column at ``version`` (a retained committed
        version): what :meth:`compact` makes, and what a snapshot writes."""
        rows = self._row_counts[self._slot(version)]
        return all(store.covers(version, rows) for store in self.columns.values())

    def release(self, oldest: int) -> int:
        """Drops in-memory state no version >= ``oldest`` needs (never a pinned one).

        Returns:
            The new oldest retained version.
        """
        with self._lock:
            if self._pins:
                oldest = min(oldest, min(self._pins))
        oldest = min(oldest, self.committed)
        if oldest <= self.oldest:
            return self.oldest
        i = bisect.bisect_right(self._versions, oldest) - 1
        self._versions = self._versions[i:]
        self._row_counts = self._row_counts[i:]
        self._dvs = self._dvs[i:]
        for store in self.columns.values():
            store.release_below(oldest)
        self.oldest = oldest
        return oldest

    def memory_bytes(self) -> int:
        """Bytes held by the index, the key columns, the column data and the dense state."""
        unique_dvs = {id(d): d for d in self._dvs}.values()
        dv = sum(len(d.serialize()) for d in unique_dvs)
        total = self.index.nbytes + self._live.a.nbytes + dv
        if self._seq is not None:
            total += self._seq.a.nbytes
        return int(total + sum(s.nbytes for s in self.columns.values()))

    def delta_versions(self) -> int:
        """Largest number of outstanding deltas of one column: deltas newer than its
        newest base, which a read of the latest version applies. (Older deltas kept for
        retained versions, already covered by a newer base, do not count: compacting
        because of them would only add bases.)"""
        return max((s.outstanding_deltas for s in self.columns.values()), default=0)
