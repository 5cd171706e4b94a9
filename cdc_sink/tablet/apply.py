"""The phases of :meth:`MemTablet.apply <cdc_sink.tablet.memtablet.MemTablet.apply>`.

Applying a batch (the semantics of docs/architecture.md §3) is a handful of numpy passes
over the whole batch, never a loop per event or per key:

1. :func:`split_truncates`: the keyed events, each knowing how many truncates precede it;
2. :func:`group_keys`: the events grouped by key, in batch order within a key (a key
   without a row gets a provisional row number after the existing rows);
3. :func:`fold`: each key's state before the batch, then :func:`~.fold.fold_events`;
4. the tablet gives a row to each new key that ends live or leaves a tombstone, and
   updates the deletion vector and its dense live/sequence state (``MemTablet``);
5. :class:`WritePlan`: per value column, which event's value each row gets; a load (one
   event per key, every event kept, keys in input order) writes a column every event sets
   whole, without per-column masks;
6. :func:`count_outcomes`: the counts and rejects of :class:`ApplyResult`.
"""

from __future__ import annotations

import array
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_sink.batch import OP_DELETE, OP_TRUNCATE, OP_UPDATE, OP_UPSERT, ChangeBatch, Rejects
from cdc_sink.schema import Column
from cdc_sink.tablet.fold import SEQ_NONE, FoldResult, fold_events
from cdc_sink.tablet.keyindex import KeyIndex
from cdc_sink.tablet.keystore import take
from cdc_sink.utils.arrays import run_ends, run_starts

__all__ = [
    "ApplyResult",
    "KeyGroups",
    "Keyed",
    "WritePlan",
    "column_values",
    "count_outcomes",
    "fold",
    "group_keys",
    "is_increasing",
    "split_truncates",
]


@dataclass
class ApplyResult:
    """What one ``apply`` did, counted per event (each attribute's docstring follows it)."""

    inserted: int = 0
    """Events that created a row (key not live before)."""
    updated: int = 0
    """Events that changed a live row (including inserts replacing it)."""
    deleted: int = 0
    """Deletes of a live row."""
    ignored: int = 0
    """Deletes of a key that was not live."""
    stale: int = 0
    """Events dropped because their seq was older than the key's sequence."""
    rejected: int = 0
    """Events refused (e.g. update of a missing key)."""
    truncated: int = 0
    """Live rows deleted by truncates (a count of rows, not of events)."""
    rejects: Rejects = field(default_factory=Rejects)
    """Positions and reasons of the refused events."""

    def add(self, other: ApplyResult) -> None:
        """Adds another result's counts (and rejects) to this one."""
        for name in _COUNTS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.rejects.extend(other.rejects)

    def counts(self) -> dict[str, int]:
        """The counts as a dict."""
        return {name: getattr(self, name) for name in _COUNTS}


_COUNTS = ("inserted", "updated", "deleted", "ignored", "stale", "rejected", "truncated")
"""The count fields of :class:`ApplyResult`, in order."""


def is_identity(idx: np.ndarray) -> bool:
    """Whether ``idx`` is ``0, 1, ..., len - 1``."""
    n = len(idx)
    return n == 0 or (
        int(idx[0]) == 0 and int(idx[-1]) == n - 1 and is_increasing(idx)
    )  # n strictly increasing integers from 0 to n - 1 are exactly those


def u32(rows: np.ndarray) -> array.array[int]:
    """Row ids as an ``array('I')`` (the fastest input pyroaring takes)."""
    return array.array("I", rows.astype(np.uint32).tobytes())


# ---------------------------------------------------------------------- 1. truncates
@dataclass
class Keyed:
    """The keyed events of a batch (truncates taken out).

    Attributes:
        batch: The keyed events, in batch order.
        cut: Per event, how many truncates precede it (None when there are none).
        num_cuts: Truncates in the batch.
    """

    batch: ChangeBatch
    cut: np.ndarray | None
    num_cuts: int


def split_truncates(batch: ChangeBatch) -> Keyed:
    """Takes the truncates out of ``batch``; each keyed event remembers how many
    truncates precede it (a truncate deletes every row live at its position)."""
    is_truncate = batch.op == OP_TRUNCATE
    num_cuts = int(is_truncate.sum())
    if not num_cuts:
        return Keyed(batch, None, 0)
    cut_all = np.cumsum(is_truncate) - is_truncate
    keyed = np.flatnonzero(~is_truncate)
    return Keyed(batch.take(keyed), cut_all[keyed], num_cuts)


# ---------------------------------------------------------------------- 2. key groups
@dataclass
class KeyGroups:
    """The events of a batch grouped by key.

    Attributes:
        index_hash: Per event (batch order), its key's hash in the tablet's key index
            (:meth:`~cdc_sink.tablet.keyindex.KeyIndex.index_hash`: what an insert of
            the new keys reuses).
        order: The events sorted by group, in batch order within a group.
        gid: Per sorted event, its group (dense, non-decreasing).
        starts: Per group, the index in ``order`` of its first event.
        row: Per group, the key's row id, or (a key without a row) ``row_count`` plus a
            provisional number per new key.
        existing: Per group, whether the key has a row.
        op: Per sorted event, its op.
    """

    index_hash: np.ndarray
    order: np.ndarray
    gid: np.ndarray
    starts: np.ndarray
    row: np.ndarray
    existing: np.ndarray
    op: np.ndarray


def group_keys(index: KeyIndex, batch: ChangeBatch, row_count: int) -> KeyGroups:
    """Groups the events of ``batch`` by key (see :class:`KeyGroups`).

    Args:
        index: The tablet's key index (only read).
        batch: Keyed events.
        row_count: The tablet's rows before the batch.
    """
    # A salted index hashes the keys itself: the batch's routing hash is not needed
    h = index.index_hash(None if index.seed is not None else batch.key_hash(), batch.keys)
    rid = index.lookup(None, batch.keys, hm=h)
    missing = np.flatnonzero(rid < 0)
    gkey = rid  # a fresh array: ours to change
    if len(missing):
        rep = _first_equal(index, h, batch.keys, missing)
        if is_increasing(rep):  # distinct new keys: each its own group, in order
            if len(missing) == len(h):  # and no old key (a load)
                return _singletons(h, row_count, batch.op)
            gkey[missing] = row_count + np.arange(len(rep))
        else:
            _, inv = np.unique(rep, return_inverse=True)  # a sort: only when new keys repeat
            gkey[missing] = row_count + inv.reshape(-1)
    order = np.arange(len(gkey)) if is_increasing(gkey) else np.argsort(gkey, kind="stable")
    gk = gkey[order]
    new_group = run_starts(gk)
    starts = np.flatnonzero(new_group)
    new_group[:1] = False
    gid = np.cumsum(new_group, dtype=np.int64)
    grow = gk[starts]
    return KeyGroups(h, order, gid, starts, grow, grow < row_count, batch.op[order])


def _first_equal(
    index: KeyIndex, h: np.ndarray, keys: Sequence[pa.Array], missing: np.ndarray
) -> np.ndarray:
    """:meth:`KeyIndex.group_new` of the events ``missing`` (copies of their keys only
    when some events are not missing)."""
    if len(missing) == len(h):
        return index.group_new(h, list(keys))
    return index.group_new(h[missing], [k.take(pa.array(missing)) for k in keys])


def _singletons(h: np.ndarray, row_count: int, op: np.ndarray) -> KeyGroups:
    """The groups of a batch of distinct new keys: event ``i`` is group ``i`` and gets
    row ``row_count + i`` (one shared index array: every reader only reads it)."""
    idx = np.arange(len(h), dtype=np.int64)
    return KeyGroups(h, idx, idx, idx, row_count + idx, np.zeros(len(h), bool), op)


def is_increasing(a: np.ndarray) -> bool:
    """Whether ``a`` is strictly increasing (one pass, against a sort)."""
    return len(a) < 2 or bool((a[1:] > a[:-1]).all())


# ---------------------------------------------------------------------- 3. fold
def _needs_live(
    batch: ChangeBatch, op: np.ndarray, order: np.ndarray, required: Collection[int]
) -> np.ndarray:
    """Per sorted event: whether it applies only to a live key (an update, or an upsert
    that does not set every required column)."""
    needs_live: np.ndarray = op == OP_UPDATE
    if required:
        lacks_required = np.zeros(len(op), dtype=bool)
        for cid in required:
            pres = batch.present.get(cid)
            lacks_required |= True if pres is None else ~pres[order]
        needs_live |= (op == OP_UPSERT) & lacks_required
    return needs_live


def fold(
    keyed: Keyed,
    groups: KeyGroups,
    live: np.ndarray,
    seq: np.ndarray | None,
    required: Collection[int],
) -> FoldResult:
    """Folds each key's events onto its state before the batch (:func:`fold_events`).

    Args:
        keyed: The keyed events.
        groups: Their key groups.
        live: The tablet's dense liveness by row (only read).
        seq: The tablet's dense sequence by row, None without a sequence column.
        required: Ids of the columns an upsert of a key that is not live must set.
    """
    batch, order, op = keyed.batch, groups.order, groups.op
    grow, existing = groups.row, groups.existing
    live0 = np.zeros(len(grow), dtype=bool)
    live0[existing] = live[grow[existing]]
    seq0 = np.full(len(grow), SEQ_NONE, dtype=np.int64)
    if seq is not None:
        seq0[existing] = seq[grow[existing]]
    needs_live = _needs_live(batch, op, order, required)
    ev_seq = None if batch.seq is None or seq is None else batch.seq[order]
    return fold_events(
        groups.gid,
        op,
        needs_live,
        ev_seq,
        live0,
        seq0,
        cut=None if keyed.cut is None else keyed.cut[order],
        num_cuts=keyed.num_cuts,
    )


# ---------------------------------------------------------------------- 5. column writes
class WritePlan:
    """Which event's value each row gets, for any value column (phase 5).

    Args:
        f: The fold of the batch.
        order: The events sorted by group (:attr:`KeyGroups.order`).
        row: Per group, the row it writes (``-1``: the key gets no row).
    """

    def __init__(self, f: FoldResult, order: np.ndarray, row: np.ndarray) -> None:
        n = len(order)
        self.has_row = has_row = row >= 0
        self.rows = row.astype(np.uint32)
        self.ngroups = len(row)
        self.unique_keys = self.ngroups == n
        # Per event in group order (``order``; its group is ``f.gid``): whether a value
        # it sets is kept (applied, the key ends live, at or after the key's last reset).
        if self.unique_keys:  # dense groups, one event each: event i is group i
            keep = f.applied & f.final_live & has_row  # (its own reset, if any, is itself)
        else:
            idx = np.arange(n, dtype=np.int64)
            keep = f.applied & f.final_live[f.gid] & has_row[f.gid]
            keep &= idx >= f.reset_idx[f.gid]
        self.order, self.gid, self.keep_sorted = order, f.gid, keep
        # Groups whose row is (re)created: every column is written (default if unset).
        self.full_groups = f.final_live & (f.reset_idx >= 0) & has_row
        self.any_full = bool(self.full_groups.any())
        # One event per key, every event kept, groups in input order (a load): a column
        # every event sets is written whole, in order, without per-column masks. With one
        # event per key, group i is the i-th key in sorted order, so "groups in input
        # order" is ``order`` being the identity.
        self.in_order = (
            self.unique_keys and bool(keep.all()) and bool(has_row.all()) and is_identity(order)
        )

    def whole(self, pres: np.ndarray | None) -> bool:
        """Whether a column set where ``pres`` is written whole (the load fast path)."""
        return self.in_order and pres is not None and bool(pres.all())

    def sources(self, pres: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """For a column set by the events where ``pres`` (None: by none): the groups
        written, and per group the event whose value it gets (``-1``: the default)."""
        # In group order (events of a group contiguous, in input order), so the groups
        # come out sorted and a group's last setter is the last of its run: no sort.
        if pres is None:
            idx = np.empty(0, np.int64)
        else:
            kept = pres[self.order]
            kept &= self.keep_sorted
            idx = np.flatnonzero(kept)
        g = self.gid[idx]
        if not self.unique_keys and len(idx):
            # Several setters of one key: the last one (input order) wins.
            last = run_ends(g)
            g, idx = g[last], idx[last]
        e = self.order[idx]
        if self.any_full:
            src = np.full(self.ngroups, -1, dtype=np.int64)
            src[g] = e
            write = np.flatnonzero((src >= 0) | self.full_groups)
            return write, src[write]
        return g, e


def column_values(c: Column, values: pa.Array | None, src: np.ndarray) -> pa.Array:
    """The values column ``c`` gets from the events ``src`` (``-1``: its default), out
    of the batch's ``values`` of the column (None: no event sets it)."""
    if values is not None:
        if len(src) == len(values) and is_identity(src):
            vals = values  # every event's value, in order (a load): no copy
        else:
            vals = take(values, np.where(src >= 0, src, 0))
    else:
        vals = pa.nulls(len(src), c.type)
    use_default = src < 0
    if use_default.any():
        vals = pc.if_else(pa.array(use_default), c.default, vals)
    return vals


# ---------------------------------------------------------------------- 6. counts
def count_outcomes(
    batch: ChangeBatch, groups: KeyGroups, f: FoldResult, result: ApplyResult
) -> None:
    """Adds the counts per outcome, and the rejects in batch order, to ``result``."""
    order = groups.order
    is_del = groups.op == OP_DELETE
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
        reasons = [
            "update of missing key"
            if o == OP_UPDATE
            else "upsert of missing key does not set every non-nullable column without a default"
            for o in rej_ops.tolist()
        ]
        pos = batch.positions[rej_events]
        sort = np.argsort(pos, kind="stable")
        result.rejects = Rejects(positions=pos[sort], reasons=[reasons[i] for i in sort.tolist()])
