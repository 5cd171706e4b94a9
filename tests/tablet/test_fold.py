"""Unit tests of cdc_sink.tablet.fold: the vectorized fold equals applying events one by one."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_sink.batch import OP_DELETE, OP_INSERT, OP_UPDATE, OP_UPSERT
from cdc_sink.tablet.fold import SEQ_NONE, FoldResult, _exclusive_segmented_max, fold_events


@dataclass
class Expected:
    """The sequential result, in the field names of FoldResult."""

    applied: list[bool] = field(default_factory=list)
    stale: list[bool] = field(default_factory=list)
    rejected: list[bool] = field(default_factory=list)
    live_before: list[bool] = field(default_factory=list)
    final_live: list[bool] = field(default_factory=list)
    reset_idx: list[int] = field(default_factory=list)
    final_seq: list[int] = field(default_factory=list)
    any_applied: list[bool] = field(default_factory=list)


def fold_one_by_one(
    groups: list[list[tuple[int, bool, int | None]]],
    live0: list[bool],
    seq0: list[int],
    with_seq: bool,
) -> Expected:
    """docs/architecture.md §3 applied event by event: each group is one key's events in
    batch order, each event ``(op, needs_live, seq)``."""
    out = Expected()
    i = 0
    for events, live, s in zip(groups, live0, seq0, strict=True):
        reset = -1
        any_applied = False
        for op, needs_live, seq in events:
            out.live_before.append(live)
            stale = with_seq and seq < s
            rejected = not stale and needs_live and not live
            applied = not stale and not rejected
            out.stale.append(stale)
            out.rejected.append(rejected)
            out.applied.append(applied)
            if applied:
                any_applied = True
                if with_seq:
                    s = seq
                if op == OP_INSERT or (op == OP_UPSERT and not needs_live and not live):
                    reset = i  # the row is (re)created from defaults
                if not needs_live:  # inserts, deletes, full upserts decide liveness
                    live = op != OP_DELETE
            i += 1
        out.final_live.append(live)
        out.reset_idx.append(reset)
        out.final_seq.append(s if with_seq else SEQ_NONE)
        out.any_applied.append(any_applied)
    return out


def run_fold(
    groups: list[list[tuple[int, bool, int | None]]],
    live0: list[bool],
    seq0: list[int],
    with_seq: bool,
) -> FoldResult:
    gid = np.array([g for g, evs in enumerate(groups) for _ in evs], dtype=np.int64)
    flat = [e for evs in groups for e in evs]
    op = np.array([e[0] for e in flat], dtype=np.int8)
    needs_live = np.array([e[1] for e in flat], dtype=bool)
    seq = np.array([e[2] for e in flat], dtype=np.int64) if with_seq else None
    return fold_events(
        gid, op, needs_live, seq, np.array(live0, dtype=bool), np.array(seq0, dtype=np.int64)
    )


def assert_fold_matches(
    groups: list[list[tuple[int, bool, int | None]]],
    live0: list[bool],
    seq0: list[int],
    with_seq: bool,
) -> None:
    got = run_fold(groups, live0, seq0, with_seq)
    want = fold_one_by_one(groups, live0, seq0, with_seq)
    for name in ("applied", "stale", "rejected", "live_before"):
        assert np.asarray(getattr(got, name)).tolist() == getattr(want, name), name
    for name in ("final_live", "reset_idx", "final_seq", "any_applied"):
        assert np.asarray(getattr(got, name)).tolist() == getattr(want, name), name
    starts = np.cumsum([0] + [len(g) for g in groups])[:-1]
    assert got.gstart.tolist() == starts.tolist()


# An update always needs a live key; an upsert does when it lacks a required column.
_event = st.one_of(
    st.tuples(st.just(OP_INSERT), st.just(False)),
    st.tuples(st.just(OP_UPSERT), st.booleans()),
    st.tuples(st.just(OP_UPDATE), st.just(True)),
    st.tuples(st.just(OP_DELETE), st.just(False)),
)
_seq = st.integers(0, 6)
_seq0 = st.one_of(st.just(int(SEQ_NONE)), _seq)


@st.composite
def batches(
    draw: st.DrawFn, max_groups: int = 8, max_events: int = 6
) -> tuple[list[list[tuple[int, bool, int | None]]], list[bool], list[int], bool]:
    """Keys (groups) of 1..``max_events`` events each, their state before the batch."""
    with_seq = draw(st.booleans())
    ngroups = draw(st.integers(1, max_groups))
    groups = []
    for _ in range(ngroups):
        evs = draw(st.lists(_event, min_size=1, max_size=max_events))
        groups.append([(op, nl, draw(_seq) if with_seq else None) for op, nl in evs])
    live0 = draw(st.lists(st.booleans(), min_size=ngroups, max_size=ngroups))
    seq0 = draw(st.lists(_seq0, min_size=ngroups, max_size=ngroups))
    return groups, live0, seq0, with_seq


@settings(max_examples=250, deadline=None)
@given(batches())
def test_fold_equals_applying_the_events_one_by_one(
    batch: tuple[list[list[tuple[int, bool, int | None]]], list[bool], list[int], bool],
):
    assert_fold_matches(*batch)


@pytest.mark.parametrize("with_seq", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_fold_of_thousands_of_random_keys_at_once_equals_one_by_one(seed: int, with_seq: bool):
    rng = np.random.default_rng(seed)
    ngroups = 3000
    groups = []
    for _ in range(ngroups):
        evs = []
        for _ in range(int(rng.integers(1, 7))):
            op = int(rng.integers(0, 4))
            needs_live = op == OP_UPDATE or (op == OP_UPSERT and bool(rng.integers(0, 2)))
            evs.append((op, needs_live, int(rng.integers(0, 7)) if with_seq else None))
        groups.append(evs)
    live0 = rng.integers(0, 2, ngroups).astype(bool).tolist()
    seq0 = np.where(
        rng.integers(0, 4, ngroups) == 0, SEQ_NONE, rng.integers(0, 7, ngroups)
    ).tolist()
    assert_fold_matches(groups, live0, seq0, with_seq)


# --------------------------------------------------------------------------- examples
def test_update_of_a_missing_key_is_rejected_and_does_not_raise_the_sequence():
    # key not live: update(seq 5) rejected, then insert(seq 3) applies (5 never counted).
    groups = [[(OP_UPDATE, True, 5), (OP_INSERT, False, 3)]]
    got = run_fold(groups, [False], [int(SEQ_NONE)], True)
    assert got.rejected.tolist() == [True, False]
    assert got.applied.tolist() == [False, True]
    assert got.final_seq.tolist() == [3] and got.final_live.tolist() == [True]
    assert_fold_matches(groups, [False], [int(SEQ_NONE)], True)


def test_older_insert_after_a_delete_tombstone_stays_dropped():
    groups = [[(OP_DELETE, False, 10), (OP_INSERT, False, 9), (OP_UPSERT, False, 10)]]
    got = run_fold(groups, [True], [1], True)
    assert got.stale.tolist() == [False, True, False]
    assert got.final_live.tolist() == [True]
    assert got.reset_idx.tolist() == [2]  # the upsert recreated the deleted row
    assert_fold_matches(groups, [True], [1], True)


def test_stale_event_is_dropped_before_it_could_be_rejected():
    groups = [[(OP_UPDATE, True, 1)]]
    got = run_fold(groups, [False], [4], True)
    assert got.stale.tolist() == [True] and got.rejected.tolist() == [False]
    assert got.any_applied.tolist() == [False] and got.final_seq.tolist() == [4]


def test_equal_seq_applies():
    got = run_fold([[(OP_UPSERT, False, 4)]], [True], [4], True)
    assert got.applied.tolist() == [True]


def test_upsert_of_a_live_key_does_not_reset_the_row_but_insert_does():
    got = run_fold(
        [[(OP_UPSERT, False, None)], [(OP_INSERT, False, None)]],
        [True, True],
        [int(SEQ_NONE)] * 2,
        False,
    )
    assert got.reset_idx.tolist() == [-1, 1]
    assert got.final_seq.tolist() == [int(SEQ_NONE)] * 2


def test_partial_upsert_applies_to_a_live_key_and_is_rejected_otherwise():
    groups = [
        [(OP_UPSERT, True, None)],
        [(OP_UPSERT, True, None)],
        [
            (OP_DELETE, False, None),
            (OP_UPSERT, True, None),
            (OP_UPSERT, False, None),
            (OP_UPSERT, True, None),
        ],
    ]
    got = run_fold(groups, [True, False, True], [int(SEQ_NONE)] * 3, False)
    assert got.applied.tolist() == [True, False, True, False, True, True]
    assert got.rejected.tolist() == [False, True, False, True, False, False]
    assert got.reset_idx.tolist() == [-1, -1, 4]
    assert got.live_before.tolist() == [True, False, True, False, False, True]


def test_chain_of_rejections_in_one_key_is_resolved():
    # Each update before the insert is rejected; the loop fixes one per round.
    groups = [
        [
            (OP_UPDATE, True, 6),
            (OP_UPDATE, True, 5),
            (OP_UPDATE, True, 4),
            (OP_INSERT, False, 1),
            (OP_UPDATE, True, 2),
            (OP_DELETE, False, 2),
            (OP_UPDATE, True, 3),
        ]
    ]
    got = run_fold(groups, [False], [int(SEQ_NONE)], True)
    assert got.rejected.tolist() == [True, True, True, False, False, False, True]
    assert got.final_seq.tolist() == [2] and got.final_live.tolist() == [False]
    assert_fold_matches(groups, [False], [int(SEQ_NONE)], True)


@pytest.mark.parametrize("with_seq", [False, True])
def test_empty_batch_folds_to_nothing(with_seq: bool):
    e = np.empty(0, dtype=np.int64)
    got = fold_events(
        e, e.astype(np.int8), e.astype(bool), e if with_seq else None, np.empty(0, bool), e
    )
    assert len(got.applied) == 0 and len(got.final_live) == 0 and len(got.reset_idx) == 0


# --------------------------------------------------------------------------- truncates
def fold_with_truncates_one_by_one(
    groups: list[list[tuple[int, bool, int | None, int]]],
    live0: list[bool],
    seq0: list[int],
    with_seq: bool,
    num_cuts: int,
) -> tuple[Expected, list[int]]:
    """As fold_one_by_one, each event ``(op, needs_live, seq, cut)`` with ``cut`` the
    number of truncates before it in the batch: a truncate deletes the live row and keeps
    the sequence. Also returns, per group, how many times a truncate deleted the row."""
    out = Expected()
    truncated = []
    i = 0
    for events, live, s in zip(groups, live0, seq0, strict=True):
        reset = -1
        any_applied = False
        seen_cuts = 0
        kills = 0
        for op, needs_live, seq, cut in [*events, (-1, False, None, num_cuts)]:
            if cut > seen_cuts:
                kills += live
                live = False
                seen_cuts = cut
            if op == -1:
                break
            out.live_before.append(live)
            stale = with_seq and seq is not None and seq < s
            rejected = not stale and needs_live and not live
            applied = not stale and not rejected
            out.stale.append(stale)
            out.rejected.append(rejected)
            out.applied.append(applied)
            if applied:
                any_applied = True
                if with_seq:
                    assert seq is not None
                    s = seq
                if op == OP_INSERT or (op == OP_UPSERT and not needs_live and not live):
                    reset = i
                if not needs_live:
                    live = op != OP_DELETE
            i += 1
        out.final_live.append(live)
        out.reset_idx.append(reset)
        out.final_seq.append(s if with_seq else SEQ_NONE)
        out.any_applied.append(any_applied)
        truncated.append(kills)
    return out, truncated


@st.composite
def batches_with_truncates(
    draw: st.DrawFn,
) -> tuple[list[list[tuple[int, bool, int | None, int]]], list[bool], list[int], bool, int]:
    groups, live0, seq0, with_seq = draw(batches())
    num_cuts = draw(st.integers(1, 4))
    out = []
    for evs in groups:
        cuts = sorted(
            draw(st.lists(st.integers(0, num_cuts), min_size=len(evs), max_size=len(evs)))
        )
        out.append([(*e, c) for e, c in zip(evs, cuts, strict=True)])
    return out, live0, seq0, with_seq, num_cuts


@settings(max_examples=150, deadline=None)
@given(batches_with_truncates())
def test_fold_with_truncates_equals_applying_the_events_one_by_one(
    batch: tuple[list[list[tuple[int, bool, int | None, int]]], list[bool], list[int], bool, int],
):
    groups, live0, seq0, with_seq, num_cuts = batch
    flat = [e for evs in groups for e in evs]
    gid = np.array([g for g, evs in enumerate(groups) for _ in evs], dtype=np.int64)
    got = fold_events(
        gid,
        np.array([e[0] for e in flat], dtype=np.int8),
        np.array([e[1] for e in flat], dtype=bool),
        np.array([e[2] for e in flat], dtype=np.int64) if with_seq else None,
        np.array(live0, dtype=bool),
        np.array(seq0, dtype=np.int64),
        cut=np.array([e[3] for e in flat], dtype=np.int64),
        num_cuts=num_cuts,
    )
    want, truncated = fold_with_truncates_one_by_one(groups, live0, seq0, with_seq, num_cuts)
    for name in (
        "applied",
        "stale",
        "rejected",
        "live_before",
        "final_live",
        "reset_idx",
        "final_seq",
        "any_applied",
    ):
        assert np.asarray(getattr(got, name)).tolist() == getattr(want, name), name
    assert got.truncated.tolist() == truncated


def test_a_truncate_keeps_the_sequence_so_an_older_insert_after_it_is_stale():
    # live row at seq 5; truncate; insert seq 4 (stale), insert seq 6 (applies).
    gid = np.zeros(2, np.int64)
    got = fold_events(
        gid,
        np.array([OP_INSERT, OP_INSERT], np.int8),
        np.zeros(2, bool),
        np.array([4, 6], np.int64),
        np.array([True]),
        np.array([5], np.int64),
        cut=np.array([1, 1], np.int64),
        num_cuts=1,
    )
    assert got.stale.tolist() == [True, False]
    assert got.live_before.tolist() == [False, False]
    assert got.truncated.tolist() == [1] and got.final_seq.tolist() == [6]


@settings(max_examples=300, deadline=None)
@given(batches(max_groups=40, max_events=1))
def test_one_event_per_key_folds_as_one_by_one_and_as_the_general_fold(
    batch: tuple[list[list[tuple[int, bool, int | None]]], list[bool], list[int], bool],
):
    """The fast path for batches of distinct keys (``_fold_single``) gives every field of
    the general fold, and the sequential result."""
    from cdc_sink.tablet.fold import _fold

    assert_fold_matches(*batch)
    groups, live0, seq0, with_seq = batch
    fast = run_fold(groups, live0, seq0, with_seq)
    n = len(groups)
    op = np.array([g[0][0] for g in groups], dtype=np.int8)
    needs_live = np.array([g[0][1] for g in groups], dtype=bool)
    seq = np.array([g[0][2] for g in groups], dtype=np.int64) if with_seq else None
    general = _fold(
        np.arange(n, dtype=np.int64),
        op,
        needs_live,
        seq,
        np.array(live0, dtype=bool),
        np.array(seq0, dtype=np.int64),
        None,
    )
    for name in FoldResult.__dataclass_fields__:
        assert (
            np.asarray(getattr(fast, name)).tolist() == np.asarray(getattr(general, name)).tolist()
        ), name


def _segmented_max_one_by_one(values: list[int], gid: list[int], init: list[int]) -> list[int]:
    """max(init of the group, the group's earlier values), event by event."""
    out, running, prev = [], 0, -1
    for v, g in zip(values, gid, strict=True):
        if g != prev:
            running, prev = init[g], g
        out.append(running)
        running = max(running, v)
    return out


_int64 = st.integers(int(SEQ_NONE), 2**63 - 1)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.lists(st.one_of(_seq, _int64, st.just(int(SEQ_NONE))), min_size=1, max_size=5),
        min_size=1,
        max_size=10,
    ),
    st.data(),
)
def test_running_sequence_maximum_by_offsets_and_by_ranks_equals_one_by_one(
    groups: list[list[int]], data: st.DataObject
):
    """The running maximum of the fold, over small ranges (codes by offset, no sort) and
    over all of int64 and SEQ_NONE (codes by rank), equals the maximum event by event."""
    init = data.draw(st.lists(st.one_of(_seq0, _int64), min_size=len(groups), max_size=len(groups)))
    values = [v for grp in groups for v in grp]
    gid = [g for g, grp in enumerate(groups) for _ in grp]
    starts = np.cumsum([0] + [len(grp) for grp in groups[:-1]])
    got = _exclusive_segmented_max(
        np.array(values, np.int64),
        np.array(gid, np.int64),
        starts.astype(np.int64),
        np.array(init, np.int64),
    )
    assert got.tolist() == _segmented_max_one_by_one(values, gid, init)
