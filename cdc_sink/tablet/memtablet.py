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

import bisect
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
from pyroaring import BitMap, FrozenBitMap

from cdc_sink.batch import ChangeBatch
from cdc_sink.errors import TabletStateError, VersionNotFound
from cdc_sink.schema import Column, TableSchema
from cdc_sink.tablet.apply import (
    ApplyResult,
    KeyGroups,
    WritePlan,
    column_values,
    count_outcomes,
    fold,
    group_keys,
    is_increasing,
    split_truncates,
    u32,
)
from cdc_sink.tablet.column import ColumnStore, Delta
from cdc_sink.tablet.fold import SEQ_NONE, FoldResult
from cdc_sink.tablet.keyindex import KeyIndex, new_seed
from cdc_sink.tablet.reads import lookup, read_columns, scan
from cdc_sink.utils.arrays import GrowingArray, one_array

__all__ = ["ApplyResult", "MemTablet", "TabletOptions"]


@dataclass(frozen=True)
class TabletOptions:
    """Tuning of a tablet.

    Attributes:
        page_rows: Rows per page (64K; tests use tiny pages to force many pages).
        initial_capacity: Expected rows (sizes the index up front).
        index_seed: The key index's seed (:mod:`cdc_sink.tablet.keyindex`; None: the
            unsalted hash of tables created before the salt); by default a new one.
    """

    page_rows: int = 65536
    initial_capacity: int = 1024
    index_seed: int | None = field(default_factory=new_seed)

    @classmethod
    def for_tests(cls) -> TabletOptions:
        """Tiny pages so small tests cross page boundaries."""
        return cls(page_rows=8, initial_capacity=4)


#: Rows and their old values, to restore on rollback.
_Undo: TypeAlias = "tuple[np.ndarray, np.ndarray]"


@dataclass
class _Pending:
    """The version applied but not committed: its row count, deletion vector, the
    columns it wrote, and the undo of the dense liveness and sequence."""

    version: int
    row_count: int
    dv: FrozenBitMap
    columns: list[int]
    live_undo: _Undo
    seq_undo: _Undo | None


def _sources(
    plan: WritePlan,
    pres: np.ndarray | None,
    memo: list[tuple[np.ndarray | None, tuple[np.ndarray, np.ndarray]]],
) -> tuple[np.ndarray, np.ndarray]:
    """``plan.sources(pres)``, once per distinct presence mask of a batch (its columns
    mostly share one: the events that set every column, the deletes that set none)."""
    for seen, got in memo:
        if seen is pres or (seen is not None and pres is not None and np.array_equal(seen, pres)):
            return got
    got = plan.sources(pres)
    memo.append((pres, got))
    return got


class MemTablet:
    """One bucket's tablet (see the module docstring).

    Args:
        schema: The table schema.
        bucket: Bucket number (informational).
        options: Tuning; :meth:`TabletOptions.for_tests` in tests.
        version: Version the empty tablet starts at (the table's creation version).
    """

    def __init__(
        self,
        schema: TableSchema,
        *,
        bucket: int = 0,
        options: TabletOptions | None = None,
        version: int = 0,
    ) -> None:
        self.schema = schema
        self.bucket = bucket
        self.options = options or TabletOptions()
        cap, seed = self.options.initial_capacity, self.options.index_seed
        self.index = KeyIndex([c.type for c in schema.key_columns], cap, seed=seed)
        self.columns: dict[int, ColumnStore] = {
            c.id: ColumnStore(c, self.options.page_rows, version) for c in schema.value_columns
        }
        self._seq_col: Column | None = (
            schema.column(schema.sequence_column) if schema.sequence_column else None
        )
        self._live = GrowingArray(bool, False, cap)
        self._seq = GrowingArray(np.int64, SEQ_NONE, cap) if self._seq_col is not None else None
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
                version=version,
                oldest=self.oldest,
                latest=self.committed,
            )
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
        default for existing rows; dropped columns stay for older versions; a widened
        column reads what was written before cast to its new type, see
        :meth:`ColumnStore.typed <cdc_sink.tablet.column.ColumnStore.typed>`)."""
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

    def restore(
        self,
        version: int,
        row_count: int,
        keys: Sequence[pa.Array],
        row_hash: np.ndarray,
        dv: FrozenBitMap,
        slots: np.ndarray | None = None,
        *,
        index_seed: int | None,
    ) -> None:
        """Completes a tablet whose column bases were loaded from a snapshot at
        ``version``: rebuilds the index (``row_hash`` and ``slots`` built with
        ``index_seed``), the dense live/seq state and the version state."""
        self.index.load(row_hash, keys, slots, seed=index_seed)
        self._live.ensure(row_count)
        self._live.a[:row_count] = True
        if len(dv):
            self._live.a[np.asarray(dv.to_array(), dtype=np.int64)] = False
        if self._seq is not None and self._seq_col is not None:
            self._seq.ensure(row_count)
            store = self.columns[self._seq_col.id]
            base = store.base_at(version)
            if base.pages:
                # Pages written before the column was widened are of a narrower type.
                vals = pa.chunked_array(
                    [store.typed(p) for p in base.pages], type=store.column.type
                ).combine_chunks()
                arr = np.asarray(
                    vals.fill_null(SEQ_NONE).cast(pa.int64()).to_numpy(zero_copy_only=False),
                    dtype=np.int64,
                )
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
        sequence as their tombstone); the events after it apply normally. The phases are
        those of :mod:`cdc_sink.tablet.apply`.

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
        result = ApplyResult()
        keyed = split_truncates(batch)
        if len(keyed.batch) == 0:
            self._pending = self._apply_truncates_only(version, keyed.num_cuts, result)
            return result
        groups = group_keys(self.index, keyed.batch, self.row_count)
        f = fold(
            keyed, groups, self._live.a, None if self._seq is None else self._seq.a, self._required
        )
        row, row_count = self._assign_rows(keyed.batch, groups, f)
        dv, undo_live, undo_seq = self._update_rows(row, groups.existing, f, keyed.num_cuts, result)
        touched = self._write_columns(keyed.batch, version, f, WritePlan(f, groups.order, row))
        count_outcomes(keyed.batch, groups, f, result)
        self._pending = _Pending(version, row_count, FrozenBitMap(dv), touched, undo_live, undo_seq)
        return result

    def _apply_truncates_only(self, version: int, num_cuts: int, result: ApplyResult) -> _Pending:
        """The pending version of a batch without keyed events (truncates or nothing)."""
        rc0 = self.row_count
        dv0 = self._dvs[-1]
        if not num_cuts:
            return _Pending(version, rc0, dv0, [], (np.empty(0, np.int64), np.empty(0, bool)), None)
        dv_new = BitMap(dv0)
        undo = self._truncate_untouched(rc0, np.empty(0, np.int64), dv_new, result)
        return _Pending(version, rc0, FrozenBitMap(dv_new), [], undo, None)

    def _assign_rows(
        self, batch: ChangeBatch, groups: KeyGroups, f: FoldResult
    ) -> tuple[np.ndarray, int]:
        """Rows: existing keys keep theirs; a new key gets one (and enters the index) only
        if it ends live or leaves a tombstone (a delete with a sequence).

        Returns:
            The row of each group (``-1``: none), and the row count after the batch.
        """
        rc0 = self.row_count
        existing = groups.existing
        needed = ~existing & (f.final_live | (f.any_applied & (self._seq is not None)))
        new_groups = np.flatnonzero(needed)
        row = groups.row.copy()
        row[~existing] = -1
        row[new_groups] = rc0 + np.arange(len(new_groups))
        rc1 = rc0 + len(new_groups)
        if len(new_groups):
            rep_events = groups.order[groups.starts[new_groups]]
            if len(rep_events) == len(batch) and is_increasing(rep_events):  # all, in order
                self.index.insert(
                    None, list(batch.keys), hm=groups.index_hash
                )  # (a load): no copies
            else:
                sel = pa.array(rep_events)
                keys = [k.take(sel) for k in batch.keys]
                self.index.insert(None, keys, hm=groups.index_hash[rep_events])
            self._live.ensure(rc1)
            if self._seq is not None:
                self._seq.ensure(rc1)
        return row, rc1

    def _update_rows(
        self,
        row: np.ndarray,
        existing: np.ndarray,
        f: FoldResult,
        num_cuts: int,
        result: ApplyResult,
    ) -> tuple[BitMap, _Undo, _Undo | None]:
        """The deletion vector and the dense live/seq state after the batch (with a
        truncate, every live row of a key without events dies too).

        Returns:
            The new deletion vector, and the undo (rows, old values) of the liveness and
            the sequence for rollback.
        """
        rc0 = self.row_count
        dv0 = self._dvs[-1]
        has_row = row >= 0
        rows_g = row[has_row]
        live_now = f.final_live[has_row]
        undo_live = (rows_g, self._live.a[rows_g].copy())
        dead_rows = rows_g[~live_now]
        alive_rows = rows_g[live_now]
        dv_new = BitMap(dv0)
        if len(dead_rows):
            dv_new.update(u32(dead_rows))
        if len(alive_rows):
            revived = alive_rows[alive_rows < rc0]
            if len(revived) and len(dv0):
                dv_new.difference_update(BitMap(u32(revived)))
        if num_cuts:  # rows of keys without events in the batch: every live one dies
            t_rows, t_old = self._truncate_untouched(rc0, row[existing], dv_new, result)
            undo_live = (
                np.concatenate([undo_live[0], t_rows]),
                np.concatenate([undo_live[1], t_old]),
            )
        self._live.a[rows_g] = live_now
        undo_seq = None
        if self._seq is not None:
            undo_seq = (rows_g, self._seq.a[rows_g].copy())
            self._seq.a[rows_g] = f.final_seq[has_row]
        return dv_new, undo_live, undo_seq

    def _write_columns(
        self, batch: ChangeBatch, version: int, f: FoldResult, plan: WritePlan
    ) -> list[int]:
        """Adds the delta of ``version`` of every value column the batch writes.

        Returns:
            The ids of the columns written.
        """
        touched: list[int] = []
        memo: list[tuple[np.ndarray | None, tuple[np.ndarray, np.ndarray]]] = []
        for c in self.schema.value_columns:
            if self._seq_col is not None and c.id == self._seq_col.id:
                # The sequence column holds each key's sequence after the batch.
                wrote = f.any_applied & plan.has_row
                if wrote.any():
                    vals = pa.array(f.final_seq[wrote]).cast(c.type, safe=False)
                    self._add_delta(c, version, plan.rows[wrote], vals, touched)
                continue
            pres = batch.present.get(c.id)
            if pres is None and not plan.any_full:
                continue  # no event sets the column and no row is (re)created
            if plan.whole(pres):
                self._add_delta(c, version, plan.rows, batch.values[c.id], touched)
                continue
            write, src = _sources(plan, pres, memo)
            if len(write):
                vals = column_values(c, None if pres is None else batch.values[c.id], src)
                self._add_delta(c, version, plan.rows[write], vals, touched)
        return touched

    def _truncate_untouched(
        self, rc0: int, touched_rows: np.ndarray, dv: BitMap, result: ApplyResult
    ) -> tuple[np.ndarray, np.ndarray]:
        """Deletes every live row not in ``touched_rows`` (a truncate); their sequence
        stays as their tombstone. Returns the undo for rollback (rows, old liveness)."""
        live = self._live.a[:rc0].copy()
        live[touched_rows] = False
        rows = np.flatnonzero(live)
        if len(rows):
            dv.update(u32(rows))
            self._live.a[rows] = False
        result.truncated += len(rows)
        return rows, np.ones(len(rows), dtype=bool)

    def _add_delta(
        self, c: Column, version: int, rows: np.ndarray, vals: pa.Array, touched: list[int]
    ) -> None:
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
        self._live.a[rc0 : p.row_count] = False
        if self._seq is not None:
            self._seq.a[rc0 : p.row_count] = SEQ_NONE
        self._pending = None
        return p.version

    # ------------------------------------------------------------------ reads
    def batches(
        self,
        version: int | None = None,
        columns: Sequence[str] | None = None,
        filter: Any = None,
        *,
        schema: TableSchema | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Yields the live rows at ``version`` page by page as record batches.

        Pages whose statistics exclude the filter are skipped; pages no delta touched
        are yielded without copying (see :mod:`cdc_sink.tablet.reads`).

        Args:
            version: A retained committed version (default latest).
            columns: Column names to return (default all, schema order).
            filter: Conjunctive predicates ``[(column, op, value), ...]``.
            schema: The schema to read with (the one of ``version``; default current).

        Raises:
            VersionNotFound: The version is not retained in memory.
        """
        v = self.committed if version is None else version
        yield from scan(self, v, columns, filter, schema or self.schema)

    def read(
        self,
        version: int | None = None,
        columns: Sequence[str] | None = None,
        filter: Any = None,
        *,
        schema: TableSchema | None = None,
    ) -> pa.Table:
        """The live rows at ``version`` (default latest committed) as an Arrow table.

        Args:
            version: A retained committed version.
            columns: Column names to return (default all, in schema order).
            filter: Conjunctive predicates ``[(column, op, value), ...]``.

        Raises:
            VersionNotFound: The version is not retained in memory.
        """
        schema = schema or self.schema
        out = schema.arrow_schema([c.name for c in read_columns(schema, columns)])
        return pa.Table.from_batches(
            list(self.batches(version, columns, filter, schema=schema)), schema=out
        )

    def get(
        self,
        keys: pa.Table | Sequence[pa.Array],
        version: int | None = None,
        columns: Sequence[str] | None = None,
        *,
        schema: TableSchema | None = None,
    ) -> pa.Table:
        """Point lookups: the live rows at ``version`` whose keys are in ``keys``.

        Args:
            keys: A table with the key columns (by name) or arrays in key order.
            version: A retained committed version (default latest).
            columns: Columns to return (default all).

        Returns:
            The rows found, in the order of ``keys`` (missing keys are left out).
        """
        v = self.committed if version is None else version
        return lookup(self, keys, v, columns, schema or self.schema)

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
