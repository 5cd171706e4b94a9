"""The changes of one version in one bucket, read from a tablet that holds both the
version and the one before it.

A tablet keeps each version as per-column deltas (sorted row ids and their new values),
a row count and a deletion vector (:mod:`cdc_sink.tablet.memtablet`). The rows version
``v`` changed are therefore known without a scan: the rows of every column's delta at
``v``, the rows whose liveness differs between the deletion vectors of ``v - 1`` and
``v`` (their symmetric difference), and the rows ``v`` appended. Their pre-images are
gathered at ``v - 1`` and their post-images at ``v`` (:meth:`ColumnStore.gather
<cdc_sink.tablet.column.ColumnStore.gather>` reads only the pages holding those rows),
and every step is a numpy or Arrow operation over the changed rows, never a loop per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_sink.schema import Column, TableSchema
from cdc_sink.tablet import MemTablet
from cdc_sink.tablet.reads import gather_columns, live_at

__all__ = [
    "CHANGE_TYPES",
    "ChangedRows",
    "all_live_rows",
    "changed_rows",
    "full_images",
    "gather_columns",
    "live_at",
    "set_images",
]

CHANGE_TYPES = ("insert", "update_preimage", "update_postimage", "delete")
"""The values of ``_change_type``, by code (0..3)."""

_INSERT, _PRE, _POST, _DELETE = range(4)


@dataclass(frozen=True)
class ChangedRows:
    """Rows one version may have changed in one bucket, and their liveness around it.

    Attributes:
        rows: Row ids, sorted and unique (row ids of the tablet holding the version).
        before: Per row, whether it was live at the version before.
        after: Per row, whether it is live at the version.
        set_masks: Per column id, which rows the version's delta of that column wrote.
    """

    rows: np.ndarray
    before: np.ndarray
    after: np.ndarray
    set_masks: dict[int, np.ndarray]


def changed_rows(t: MemTablet, version: int) -> ChangedRows:
    """The rows ``version`` touched in ``t`` (which holds ``version - 1`` and ``version``).

    Args:
        t: A tablet retaining both versions, with ``version``'s deltas kept apart.
        version: The version whose changes are wanted.
    """
    prev = version - 1
    parts = [np.arange(t.row_count_at(prev), t.row_count_at(version), dtype=np.int64)]
    delta_rows: dict[int, np.ndarray] = {}
    for cid, store in t.columns.items():
        for d in store.state[1]:
            if d.version == version:
                delta_rows[cid] = np.asarray(d.rows, dtype=np.int64)
                parts.append(delta_rows[cid])
    dv0, dv1 = t.deletion_vector(prev), t.deletion_vector(version)
    if dv0 is not dv1:
        parts.append(np.asarray((dv0 ^ dv1).to_array(), dtype=np.int64))
    rows = np.unique(np.concatenate(parts))
    masks = {cid: np.isin(rows, r, assume_unique=True) for cid, r in delta_rows.items()}
    return ChangedRows(rows, live_at(t, rows, prev), live_at(t, rows, version), masks)


def all_live_rows(t: MemTablet, version: int, *, before: bool) -> ChangedRows:
    """Every row live at ``version``, as changed rows: live before as well (``before``:
    a schema change that gives existing rows a new value) or not (a bulk load into a
    bucket that held no rows, which wrote every cell)."""
    rows = np.arange(t.row_count_at(version), dtype=np.int64)
    live = live_at(t, rows, version)
    rows = rows[live]
    ones = np.ones(len(rows), dtype=bool)
    if before:
        return ChangedRows(rows, ones, ones, {})
    return ChangedRows(rows, np.zeros(len(rows), dtype=bool), ones, dict.fromkeys(t.columns, ones))


def _same(a: pa.Array, b: pa.Array) -> np.ndarray:
    """Per position, whether ``a`` and ``b`` hold the same value (two nulls are equal)."""
    eq = pc.fill_null(pc.equal(a, b), False)
    both_null = pc.and_(pc.is_null(a), pc.is_null(b))
    return np.asarray(pc.or_(eq, both_null).to_numpy(zero_copy_only=False), dtype=bool)


def full_images(
    pre: tuple[MemTablet, int, TableSchema] | None,
    post: tuple[MemTablet, int, TableSchema],
    ch: ChangedRows,
    cols: Sequence[Column],
) -> tuple[list[pa.Array], np.ndarray]:
    """Full-row change records of ``ch``: a delete (pre-image) per row that stopped being
    live, an insert (post-image) per row that became live, and a pre-image and a
    post-image per row live on both sides whose values of ``cols`` differ (an update
    that changed none of them is no change of what is read).

    Args:
        pre: The tablet, version and schema of the pre-images (``None``: no row was live).
        post: The tablet, version and schema of the post-images.
        ch: The rows, with their liveness on both sides.
        cols: The output columns (keys first).

    Returns:
        The columns of the records, in change order (per row: pre-image, post-image),
        and their change type codes (indices into :data:`CHANGE_TYPES`).
    """
    b_rows, a_rows = ch.rows[ch.before], ch.rows[ch.after]
    pre_vals = (
        gather_columns(pre[0], b_rows, pre[1], cols, pre[2])
        if pre
        else [pa.array([], type=c.type) for c in cols]
    )
    post_vals = gather_columns(post[0], a_rows, post[1], cols, post[2])
    both = ch.before & ch.after
    # Positions of the rows live on both sides within the pre- and post-image arrays.
    pb = (np.cumsum(ch.before) - 1)[both]
    pa_ = (np.cumsum(ch.after) - 1)[both]
    changed = np.zeros(len(pb), dtype=bool)
    for x, y in zip(pre_vals, post_vals, strict=True):
        if len(pb):
            changed |= ~_same(x.take(pa.array(pb)), y.take(pa.array(pa_)))
    keep_pair = np.zeros(len(ch.rows), dtype=bool)
    keep_pair[np.flatnonzero(both)[changed]] = True
    pre_take = ch.before & (~ch.after | keep_pair)
    post_take = ch.after & (~ch.before | keep_pair)
    pos = np.arange(len(ch.rows), dtype=np.int64)
    pre_idx = (np.cumsum(ch.before) - 1)[pre_take]
    post_idx = (np.cumsum(ch.after) - 1)[post_take] + len(b_rows)
    order = np.argsort(np.concatenate([pos[pre_take] * 2, pos[post_take] * 2 + 1]), kind="stable")
    take = pa.array(np.concatenate([pre_idx, post_idx])[order])
    codes = np.concatenate(
        [
            np.where(ch.after[pre_take], _PRE, _DELETE),
            np.where(ch.before[post_take], _POST, _INSERT),
        ]
    )[order].astype(np.int8)
    arrays = [pa.concat_arrays([x, y]).take(take) for x, y in zip(pre_vals, post_vals, strict=True)]
    return arrays, codes


def set_images(
    post: tuple[MemTablet, int, TableSchema],
    ch: ChangedRows,
    cols: Sequence[Column],
    nkeys: int,
) -> tuple[list[pa.Array], np.ndarray, list[np.ndarray]]:
    """Change records of ``ch`` with only what the version set: an insert or an
    ``update_postimage`` per row live after it holding the values of the cells the
    version wrote (null elsewhere), a delete (the key only) per row that stopped being
    live; plus, per value column, a mask of the cells the version wrote.

    Args:
        post: The tablet, version and schema of the version.
        ch: The rows, with their liveness and the version's per-column write masks.
        cols: The output columns, the ``nkeys`` key columns first.
        nkeys: How many of ``cols`` are key columns.

    Returns:
        The columns of the records, their change type codes, and the masks of the
        value columns (in the order of ``cols[nkeys:]``).
    """
    none = np.zeros(len(ch.rows), dtype=bool)
    wrote = [ch.set_masks.get(c.id, none) & ch.after for c in cols[nkeys:]]
    # A row live on both sides is an update only if the version wrote a cell asked for.
    keep = ch.after ^ ch.before
    for m in wrote:
        keep |= m
    rows = ch.rows[keep]
    after = ch.after[keep]
    masks = [m[keep] for m in wrote]
    vals = gather_columns(post[0], rows, post[1], cols[:nkeys], post[2])
    for c, m in zip(cols[nkeys:], masks, strict=True):
        # Only the written cells: they are in the version's delta, so no page is read.
        got = gather_columns(post[0], rows[m], post[1], [c], post[2])[0]
        full = pa.concat_arrays([got, pa.nulls(1, type=c.type)])
        vals.append(full.take(pa.array(np.where(m, np.cumsum(m) - 1, len(got)))))
    before = ch.before[keep]
    codes = np.where(after, np.where(before, _POST, _INSERT), _DELETE).astype(np.int8)
    return vals, codes, masks
