"""Folding the events of one batch per key, exactly as if applied one by one.

Input: events sorted by key group (then by batch order), each key's state before the
batch (live?, current sequence ``S0`` of its live row or tombstone). Output: which events
apply, which are stale or rejected, and each key's final state. Everything is a handful
of numpy passes over the whole batch; there is no loop per event or per key.

The sequential semantics (docs/architecture.md §3) reduce to two facts that make this
possible:

* *Sequence.* An event applies only if ``seq >= S`` and then sets ``S = seq``; an event
  that does not apply has ``seq < S``. So ``S`` before event i is the running maximum of
  ``S0`` and the seqs of all earlier *non-rejected* events of the key: a segmented
  exclusive cumulative max.
* *Liveness* before event i is decided by the last applied insert/upsert/delete before it
  (updates never change it), a segmented forward fill.

The one circularity: an update (or an upsert that lacks a required column) applies only
if the key is live, and a rejected event does not raise ``S``. The loop below assumes no
such rejection, finds the *first* inconsistent event of each key, rejects it, and repeats;
everything before a key's first inconsistency is exactly the sequential result, so each
round fixes one rejection per key. It runs once when no event is rejected this way.

*Truncates* (``cut``): a truncate deletes every row live at its position in the batch.
For one key, only whether a truncate lies *between* two of its events matters (several
in a row act as one), so the fold inserts one synthetic delete per key gap holding a
truncate (before its first event, between two events, after its last one): at most
``2 * events``. A synthetic delete always applies (no seq check) and does not change the
key's sequence: a truncated row keeps its sequence as its tombstone, so older events
stay stale. Keys without events in the batch are the caller's (every live one dies).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from cdc_sink.batch import OP_DELETE, OP_INSERT, OP_UPSERT
from cdc_sink.utils.arrays import run_ends, run_starts

__all__ = ["SEQ_NONE", "FoldResult", "fold_events"]

SEQ_NONE = np.iinfo(np.int64).min


@dataclass
class FoldResult:
    """Outcome of :func:`fold_events` (event arrays are in the sorted input order).

    Attributes:
        applied: Event takes effect.
        stale: Event dropped because its seq is below the key's sequence.
        rejected: Update (or partial upsert) of a key that is not live.
        live_before: Whether the key was live just before the event.
        final_live: Per group, whether the key is live after the batch.
        reset_idx: Per group, index of the last event that (re)creates the row from
            defaults (an insert, or an upsert of a key that was not live); -1 if none.
        final_seq: Per group, the key's sequence after the batch (SEQ_NONE if none).
        any_applied: Per group, whether any event applied.
        gid: Group of each event (dense, non-decreasing).
        gstart: Index of the first event of each group.
        truncated: Per group, how many times a truncate deleted the key's live row.
    """

    applied: np.ndarray
    stale: np.ndarray
    rejected: np.ndarray
    live_before: np.ndarray
    final_live: np.ndarray
    reset_idx: np.ndarray
    final_seq: np.ndarray
    any_applied: np.ndarray
    gid: np.ndarray
    gstart: np.ndarray
    truncated: np.ndarray


def _exclusive_segmented_max(
    values: np.ndarray, gid: np.ndarray, gstart: np.ndarray, init: np.ndarray
) -> np.ndarray:
    """For each i: max(init[gid[i]], values[j] for j < i in the same group).

    Each group's initial value is placed before its events and one running maximum runs
    over keys that grow with the group (group * width + code of the value), so it never
    carries a value into the next group. The code of a value is its offset from the
    smallest one (one pass, no sort) when the values' range times the groups fits in
    int64, as sequence numbers do; else its rank among the values (a sort).
    """
    n = len(values)
    g = len(init)
    merged = np.empty(n + g, dtype=np.int64)
    init_pos = gstart + np.arange(g)
    ev_pos = np.arange(n) + gid + 1
    merged[init_pos] = init
    merged[ev_pos] = values
    group_of = np.empty(n + g, dtype=np.int64)
    group_of[init_pos] = np.arange(g)
    group_of[ev_pos] = gid
    code, width, value_of = _codes(merged, g)
    cm = np.maximum.accumulate(group_of * width + code)
    return value_of(cm[ev_pos - 1] - gid * width)


_WIDE = 1 << 62  # bound of group * width + code (int64, with room)


def _codes(
    merged: np.ndarray, groups: int
) -> tuple[np.ndarray, np.int64, Callable[[np.ndarray], np.ndarray]]:
    """Order-preserving codes in ``[0, width)`` of ``merged`` (int64), their width, and
    the function from codes back to values; ``groups * width`` stays below 2**62."""
    none = merged == SEQ_NONE
    real = merged[~none]
    if len(real) == 0:
        return np.zeros(len(merged), np.int64), np.int64(1), lambda c: np.full(len(c), SEQ_NONE)
    base = int(real.min()) - 1  # SEQ_NONE codes as 0, below every real value
    width = int(real.max()) - base + 1
    if groups * width < _WIDE:
        code = np.where(none, np.int64(base), merged) - np.int64(base)
        return (
            code,
            np.int64(width),
            lambda c: np.where(c == 0, SEQ_NONE, c + np.int64(base)),
        )
    uniq, rank = np.unique(merged, return_inverse=True)
    return rank.astype(np.int64).reshape(-1), np.int64(len(uniq)), lambda c: uniq[c]


def fold_events(
    gid: np.ndarray,
    op: np.ndarray,
    needs_live: np.ndarray,
    seq: np.ndarray | None,
    live0: np.ndarray,
    seq0: np.ndarray,
    *,
    cut: np.ndarray | None = None,
    num_cuts: int = 0,
) -> FoldResult:
    """Folds events per key group (see the module docstring).

    Args:
        gid: Dense group id per event, non-decreasing (events sorted by group, then by
            batch order).
        op: Op code per event (insert, upsert, update or delete).
        needs_live: Event applies only to a live key (updates, upserts lacking a
            required column); otherwise it is rejected.
        seq: Sequence per event, or None when the table has no sequence column.
        live0: Per group, whether the key is live before the batch.
        seq0: Per group, the key's sequence before the batch (SEQ_NONE if none).
        cut: Per event, how many truncates precede it in batch order (None: none).
        num_cuts: Truncates in the batch.

    Returns:
        The :class:`FoldResult` (of the given events; synthetic deletes are not in it).
    """
    n = len(gid)
    if cut is None or num_cuts == 0 or n == 0:
        if n == len(live0):  # one event per key (dense groups: gid is 0..n-1)
            return _fold_single(op, needs_live, seq, live0, seq0)
        return _fold(gid, op, needs_live, seq, live0, seq0, None)
    # One synthetic delete per key gap that holds a truncate, placed by a sort key:
    # 3j before event j, 3j + 1 the event, 3j + 2 after it.
    first = run_starts(gid)
    last = run_ends(gid)
    before = np.where(first, cut > 0, np.r_[False, cut[1:] != cut[:-1]])
    after = last & (cut < num_cuts)
    j = np.arange(n, dtype=np.int64)
    sb, sa = np.flatnonzero(before), np.flatnonzero(after)
    where = np.concatenate([3 * j + 1, 3 * sb, 3 * sa + 2])
    src = np.concatenate([j, sb, sa])
    forced = np.r_[np.zeros(n, bool), np.ones(len(sb) + len(sa), bool)]
    order = np.argsort(where, kind="stable")
    src, forced = src[order], forced[order]
    m_op = np.where(forced, OP_DELETE, op[src]).astype(op.dtype)
    m_seq = None if seq is None else np.where(forced, SEQ_NONE, seq[src])
    m = _fold(gid[src], m_op, needs_live[src] & ~forced, m_seq, live0, seq0, forced)
    real = ~forced
    real_index = np.cumsum(real) - 1
    reset_idx = np.where(m.reset_idx >= 0, real_index[np.maximum(m.reset_idx, 0)], -1)
    gstart = np.flatnonzero(first)
    return FoldResult(
        applied=m.applied[real],
        stale=m.stale[real],
        rejected=m.rejected[real],
        live_before=m.live_before[real],
        final_live=m.final_live,
        reset_idx=reset_idx,
        final_seq=m.final_seq,
        any_applied=m.any_applied,
        gid=gid,
        gstart=gstart,
        truncated=m.truncated,
    )


def _fold_single(
    op: np.ndarray,
    needs_live: np.ndarray,
    seq: np.ndarray | None,
    live0: np.ndarray,
    seq0: np.ndarray,
) -> FoldResult:
    """:func:`_fold` of a batch with one event per key (a load, most micro-batches of
    distinct keys), without the segmented passes: each event sees only its key's state
    before the batch. Same result as :func:`_fold` (``tests/tablet/test_fold.py``)."""
    n = len(op)
    idx = np.arange(n, dtype=np.int64)
    stale = seq < seq0 if seq is not None else np.zeros(n, dtype=bool)
    rejected = ~stale & needs_live & ~live0
    applied = ~stale & ~rejected
    changes = applied & ~needs_live
    final_live = np.where(changes, op != OP_DELETE, live0)
    resets = applied & ((op == OP_INSERT) | ((op == OP_UPSERT) & ~needs_live & ~live0))
    final_seq = np.where(applied, seq, seq0) if seq is not None else np.full(n, SEQ_NONE, np.int64)
    return FoldResult(
        applied=applied,
        stale=stale,
        rejected=rejected,
        live_before=live0.copy(),
        final_live=final_live,
        reset_idx=np.where(resets, idx, -1),
        final_seq=final_seq,
        any_applied=applied.copy(),
        gid=idx,
        gstart=idx,
        truncated=np.zeros(n, dtype=np.int64),
    )


def _fold(
    gid: np.ndarray,
    op: np.ndarray,
    needs_live: np.ndarray,
    seq: np.ndarray | None,
    live0: np.ndarray,
    seq0: np.ndarray,
    forced: np.ndarray | None,
) -> FoldResult:
    """The fold itself; ``forced`` marks synthetic truncate deletes."""
    n = len(gid)
    ngroups = len(live0)
    idx = np.arange(n, dtype=np.int64)
    gstart = np.flatnonzero(run_starts(gid))
    gend = np.append(gstart[1:], n) - 1 if n else np.empty(0, np.int64)
    my_start = gstart[gid]
    changes_live = ~needs_live
    rejected = np.zeros(n, dtype=bool)
    while True:
        active = ~rejected
        if seq is not None:
            masked = np.where(active, seq, SEQ_NONE)
            running = _exclusive_segmented_max(masked, gid, gstart, seq0)
            stale = active & (seq < running)
            if forced is not None:
                stale &= ~forced
        else:
            stale = np.zeros(n, dtype=bool)
        applied = active & ~stale
        changer = np.where(applied & changes_live, idx, -1)
        incl = np.maximum.accumulate(changer) if n else changer
        excl = np.r_[-1, incl[:-1]] if n else incl
        has_prev = excl >= my_start
        prev_op = op[np.maximum(excl, 0)]
        live_before = np.where(has_prev, prev_op != OP_DELETE, live0[gid])
        bad = applied & needs_live & ~live_before
        if not bad.any():
            break
        bi = np.flatnonzero(bad)
        gb = gid[bi]
        rejected[bi[run_starts(gb)]] = True

    # Final state per group.
    last_changer = incl[gend] if n else np.empty(0, np.int64)
    has_changer = last_changer >= gstart
    final_live = np.where(has_changer, op[np.maximum(last_changer, 0)] != OP_DELETE, live0)
    resets = applied & ((op == OP_INSERT) | ((op == OP_UPSERT) & changes_live & ~live_before))
    reset_at = np.maximum.accumulate(np.where(resets, idx, -1)) if n else idx
    reset_idx = reset_at[gend] if n else np.empty(0, np.int64)
    reset_idx = np.where(reset_idx >= gstart, reset_idx, -1)
    own = applied if forced is None else applied & ~forced  # the events' own effects
    any_applied = np.zeros(ngroups, dtype=bool)
    any_applied[gid[own]] = True
    truncated = np.zeros(ngroups, dtype=np.int64)
    if forced is not None:
        truncated = np.bincount(gid[forced & live_before], minlength=ngroups).astype(np.int64)
    if seq is not None:
        last_applied = np.maximum.accumulate(np.where(own, idx, -1))[gend] if n else idx
        final_seq = np.where(last_applied >= gstart, seq[np.maximum(last_applied, 0)], seq0)
    else:
        final_seq = np.full(ngroups, SEQ_NONE, dtype=np.int64)
    return FoldResult(
        applied=applied,
        stale=stale,
        rejected=rejected,
        live_before=live_before,
        final_live=final_live,
        reset_idx=reset_idx,
        final_seq=final_seq,
        any_applied=any_applied,
        gid=gid,
        gstart=gstart,
        truncated=truncated,
    )
