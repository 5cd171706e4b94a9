"""The numpy structural scanner: the member index of a chunk of JSON events (private).

The fallback of the compiled pass (:mod:`._jsonscan`), and the scanner that gives an
invalid event its reason. It indexes all the events of a chunk at once, phase by phase,
with no loop per event, byte or token:

1. **quotes**: the quotes, backslashes and line breaks of the chunk. A quote after an odd
   run of backslashes (within its event) is escaped and dropped. An event with an odd
   number of quotes is refused and its last quote dropped, so the pairing of the next
   events holds. The running parity of the quotes, one byte per input byte, tells which
   bytes are outside strings;
2. **depth**: the brackets (``{}[]``) outside strings, and the depth after each (a running
   sum of openers minus closers, per event); an event must be exactly one balanced
   object, from its first to its last non-blank byte;
3. **members**: quotes pair into strings; a string followed by ``:`` is a member name.
   Its level is the depth after the last bracket before it; its value starts at the first
   non-blank byte after the colon (that byte gives the value's kind: object, array,
   string, number, true, false, null) and ends at its closing quote, its matching bracket,
   or before the next member/closing bracket (scalars). Its parent is the last member one
   level up, when that member's value is an object holding it (else the member is in an
   array element).

The index is exact for valid JSON; presence is derived from it, never from a substring
test. An event beyond the :class:`~._jsonindex.Budget` is refused (depth first, then
members) and leaves no members.

What it holds is bounded per input byte whatever the input (issue 38): positions are
chunk-relative and 32-bit; byte masks are built and listed in blocks, so no array holds
an entry per byte beyond one-byte masks and the quote parity; the depth is summed in
blocks, and only the brackets of the indexed levels (and one below) are held, with a
16-bit depth; a backslash run is measured only before a quote. The largest arrays are
the positions of the quotes, backslashes and shallow brackets (four bytes each), for
input made of nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from cdc_sink.formats._arrays import Parts, no_reason
from cdc_sink.formats._jsonindex import (
    KIND_ARRAY,
    KIND_FALSE,
    KIND_NULL,
    KIND_NUMBER,
    KIND_OBJECT,
    KIND_STRING,
    KIND_TRUE,
    Budget,
    Members,
)

__all__ = ["numpy_chunk", "skip_ws"]

_BLOCK = 1 << 16
"""Bytes (or entries) of a blocked pass: bounds the temporaries (int64 indices) of a
mask or a sum to a fixed size, whatever the chunk."""

_QUOTE, _BSL, _NL = ord('"'), ord("\\"), 3
_BRACKET = 2
_CLASS = np.zeros(256, dtype=np.uint8)
_CLASS[np.frombuffer(b"{}[]", np.uint8)] = _BRACKET
_CLASS[np.frombuffer(b"\n\r", np.uint8)] = _NL
_WS = np.zeros(256, dtype=bool)
_WS[np.frombuffer(b" \t\n\r", np.uint8)] = True
_TRAIL = _WS.copy()
_TRAIL[ord(",")] = True
_KIND = np.zeros(256, dtype=np.int8)
_KIND[ord("{")] = KIND_OBJECT
_KIND[ord("[")] = KIND_ARRAY
_KIND[ord('"')] = KIND_STRING
_KIND[np.frombuffer(b"-0123456789NI", np.uint8)] = KIND_NUMBER
_KIND[ord("t")] = KIND_TRUE
_KIND[ord("f")] = KIND_FALSE
_KIND[ord("n")] = KIND_NULL
_DEPTH_MIN = np.iinfo(np.int16).min  # kept depths below it (unbalanced events) are stored as it


def skip_ws(data: np.ndarray, pos: np.ndarray, step: int) -> np.ndarray:
    """Moves each position forward (``step=1``) or back (``-1``) over blanks."""
    pos = pos.copy()
    if len(data) == 0:
        return pos
    todo = np.flatnonzero(_WS[data[np.clip(pos, 0, len(data) - 1)]])
    while len(todo):
        pos[todo] += step
        at = np.clip(pos[todo], 0, len(data) - 1)
        todo = todo[_WS[data[at]] & (pos[todo] == at)]
    return pos


def _count_in(sorted_pos: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """How many of ``sorted_pos`` fall in each ``[lo, hi)``."""
    counts: np.ndarray = np.searchsorted(sorted_pos, hi) - np.searchsorted(sorted_pos, lo)
    return counts


@dataclass
class _Chunk:
    """The bytes of one chunk of events and where the events are (chunk-relative)."""

    d: np.ndarray  # the bytes from the first event's start to the last one's end
    starts: np.ndarray
    ends: np.ndarray
    pos_t: type[np.signedinteger]  # int32 (int64 for a chunk of 2 GiB or more)
    inside: np.ndarray | None  # per byte, whether it is in an event (None: all are)
    reason: np.ndarray  # per event of the chunk

    def positions(self, test: Callable[[np.ndarray, int], np.ndarray]) -> np.ndarray:
        """The sorted positions of the bytes (inside events) for which ``test(block,
        a)`` is true (``block`` the bytes from ``a``), listed block by block into one
        array of ``pos_t``."""
        size = len(self.d)
        masks: list[tuple[int, np.ndarray | None]] = []
        total = 0
        for a in range(0, size, _BLOCK):
            m = test(self.d[a : a + _BLOCK], a)
            if self.inside is not None:
                m &= self.inside[a : a + _BLOCK]
            count = int(np.count_nonzero(m))
            masks.append((a, m if count else None))
            total += count
        out = np.empty(total, dtype=self.pos_t)
        k = 0
        for a, kept in masks:
            if kept is None:
                continue
            hit = np.flatnonzero(kept)
            out[k : k + len(hit)] = hit + a
            k += len(hit)
        return out


def _inside(size: int, starts: np.ndarray, ends: np.ndarray) -> np.ndarray | None:
    """Per byte, whether it lies in an event; ``None`` when the events are contiguous."""
    contiguous = len(starts) <= 1 or bool((starts[1:] == ends[:-1]).all())
    if contiguous and int(starts[0]) == 0 and int(ends[-1]) == size:
        return None
    delta = np.zeros(size + 1, dtype=np.int8)
    np.add.at(delta, starts, 1)
    np.add.at(delta, ends, -1)
    inside: np.ndarray = np.cumsum(delta[:-1], dtype=np.int8).view(bool)
    return inside


@dataclass
class _Strings:
    """Phase 1: the strings (paired quotes), the backslashes, the quote parity."""

    so: np.ndarray  # opening quote of each string
    sc: np.ndarray  # closing quote of each string
    kb: np.ndarray  # first string of each event
    ke: np.ndarray  # one past each event's last string
    bsl: np.ndarray  # positions of the backslashes
    parity: np.ndarray | None  # per byte: quotes up to it (mod 256); None: no quote


@dataclass
class _Brackets:
    """Phase 2: the brackets outside strings and the depth after each."""

    bo: np.ndarray  # position of each bracket outside strings
    opener: np.ndarray  # whether each bracket opens
    depth: np.ndarray  # depth after each bracket, within its event (int16)
    bb: np.ndarray  # first bracket of each event
    be: np.ndarray  # one past each event's last bracket
    deepest: np.ndarray  # per event, the deepest depth after any of its brackets


def _empty_index() -> np.ndarray:
    return np.zeros(0, dtype=np.int64)


@dataclass
class _Found:
    """Phase 3: the members found so far (one entry per member)."""

    mi: np.ndarray  # the string of its name
    ev: np.ndarray  # its event (chunk-local)
    colon: np.ndarray  # position of the colon after the name
    j: np.ndarray  # the last bracket before the name
    level: np.ndarray
    value_start: np.ndarray = field(default_factory=_empty_index)
    value_end: np.ndarray = field(default_factory=_empty_index)
    kind: np.ndarray = field(default_factory=_empty_index)
    str_ok: np.ndarray = field(default_factory=_empty_index)  # a string value is a whole string
    parent: np.ndarray = field(default_factory=_empty_index)


def numpy_chunk(
    parts: Parts,
    events: np.ndarray,
    max_level: int,
    reasons: np.ndarray,
    budget: Budget | None = None,
) -> Members:
    """Indexes the members of ``events`` (one chunk, ascending) with numpy, phase by phase
    as the module docstring numbers them; an event whose structure is invalid, or that is
    beyond the ``budget``, gets its reason in ``reasons`` and no members."""
    starts_abs, ends_abs = parts.starts[events], parts.ends[events]
    lo = int(starts_abs.min()) if len(events) else 0
    hi = max(int(ends_abs.max()), lo) if len(events) else 0
    pos_t: type[np.signedinteger] = np.int32 if hi - lo < 2**31 - 1 else np.int64
    starts = (starts_abs - lo).astype(pos_t)
    ends = np.maximum(ends_abs - lo, starts).astype(pos_t)
    c = _Chunk(
        d=parts.data[lo:hi],
        starts=starts,
        ends=ends,
        pos_t=pos_t,
        inside=_inside(hi - lo, starts, ends) if hi > lo else None,
        reason=np.full(len(events), None, dtype=object),
    )
    s = _strings(c)
    b = _brackets(c, s, max_level + 1)
    s.parity = None
    c.inside = None
    if budget is not None:
        _refuse_deep(b, budget, c.reason)
    f = _names(c, s, b, max_level)
    if budget is not None:
        _refuse_many(f, budget, c.reason)
    _values(c.d, s, b, f)
    _parents(f, max_level)
    _drop_malformed(f, c.reason)
    name_start = s.so[f.mi].astype(np.int64) + 1
    name_end = s.sc[f.mi].astype(np.int64)
    if len(s.bsl):
        name_escaped = _count_in(s.bsl, name_start, name_end) > 0
        value_escaped = (f.kind == KIND_STRING) & (
            _count_in(s.bsl, f.value_start + 1, f.value_end - 1) > 0
        )
    else:
        name_escaped = value_escaped = np.zeros(len(f.mi), dtype=bool)
    bad_events = np.flatnonzero(~no_reason(c.reason))
    reasons[events[bad_events]] = c.reason[bad_events]
    return Members(
        event=events[f.ev],
        level=f.level.astype(np.int64),
        parent=f.parent,
        name_start=name_start + lo,
        name_end=name_end + lo,
        name_escaped=name_escaped,
        kind=f.kind.astype(np.int8),
        value_start=f.value_start + lo,
        value_end=f.value_end + lo,
        value_escaped=value_escaped,
    )


def _strings(c: _Chunk) -> _Strings:
    """Phase 1: pairs the quotes into strings (an escaped quote is none); refuses events
    with an odd number of quotes (their last quote is dropped so the next events stay
    paired) or a raw line break inside a string."""
    bsl = c.positions(lambda blk, a: blk == _BSL)
    q = c.positions(lambda blk, a: blk == _QUOTE)
    if len(bsl) and len(q):
        q = q[~_escaped(c, q, bsl)]
    q0, q1 = np.searchsorted(q, c.starts), np.searchsorted(q, c.ends)
    odd = ((q1 - q0) & 1) == 1
    if odd.any():
        c.reason[odd] = "invalid JSON: unterminated string"
        q = np.delete(q, q1[odd] - 1)  # keeps the others paired
        q0, q1 = np.searchsorted(q, c.starts), np.searchsorted(q, c.ends)
    parity = None
    if len(q):
        parity = np.zeros(len(c.d), dtype=np.uint8)
        parity[q] = 1
        np.cumsum(parity, dtype=np.uint8, out=parity)
        pr = parity
        nl_in = c.positions(lambda blk, a: (_CLASS[blk] == _NL) & ((pr[a : a + len(blk)] & 1) == 1))
        if len(nl_in):
            bad = np.zeros(len(c.starts), dtype=bool)
            bad[np.searchsorted(c.starts, nl_in, side="right") - 1] = True
            c.reason[bad & no_reason(c.reason)] = "invalid JSON: raw line break inside a string"
    return _Strings(
        so=q[0::2].copy(), sc=q[1::2].copy(), kb=q0 // 2, ke=q1 // 2, bsl=bsl, parity=parity
    )


def _escaped(c: _Chunk, q: np.ndarray, bsl: np.ndarray) -> np.ndarray:
    """Which quotes ``q`` follow an odd run of backslashes within their event (a run
    stops at its event's start: a backslash ending one event escapes nothing of the next,
    so an event decodes the same whatever its neighbours)."""
    out = np.zeros(len(q), dtype=bool)
    cand = np.flatnonzero(q > 0)
    cand = cand[c.d[q[cand] - 1] == _BSL]
    if not len(cand):
        return out
    qc = q[cand]
    ev_start = c.starts[np.searchsorted(c.starts, qc, side="right") - 1]
    # a run of backslashes is where bsl[i] - i is constant (it never decreases): the
    # first backslash of the run ending before a quote is the first one of its key
    key = np.empty_like(bsl)
    for a in range(0, len(bsl), _BLOCK):
        b = min(a + _BLOCK, len(bsl))
        key[a:b] = bsl[a:b] - np.arange(a, b, dtype=bsl.dtype)
    last = np.searchsorted(bsl, qc) - 1
    run_start = bsl[np.searchsorted(key, key[last])]
    del key
    run = qc - np.maximum(run_start, ev_start)
    out[cand] = (qc > ev_start) & ((run & 1) == 1)
    return out


def _brackets(c: _Chunk, s: _Strings, kept: int) -> _Brackets:
    """Phase 2: the brackets outside strings, the depth after each within its event, and
    per event its deepest and final depth; refuses events that are not exactly one object
    from their first to their last non-blank byte.

    Only the brackets of depth ``kept`` or less are listed: every one the members of the
    levels below ``kept`` need (the last bracket before such a member, the one closing its
    value, the one after a scalar), while a deeper member finds one of depth ``kept`` last
    before it. The others are summed in blocks and not held, so nesting of any depth
    costs nothing per level."""
    d, pr, inside = c.d, s.parity, c.inside

    def mask(a: int) -> np.ndarray:
        m: np.ndarray = _CLASS[d[a : a + _BLOCK]] == _BRACKET
        if pr is not None:
            m &= (pr[a : a + _BLOCK] & 1) == 0
        if inside is not None:
            m &= inside[a : a + _BLOCK]
        return m

    blocks = range(0, len(d), _BLOCK)
    total = sum(int(np.count_nonzero(mask(a))) for a in blocks)
    # sized for every bracket, written only as far as the kept ones reach (pages never
    # written take no memory)
    bo = np.empty(total, dtype=c.pos_t)
    opener = np.empty(total, dtype=bool)
    depth = np.empty(total, dtype=np.int16)
    sums = _EventSums(len(c.starts))
    k = 0
    for a in blocks:
        pos = np.flatnonzero(mask(a)) + a
        if not len(pos):
            continue
        ch = d[pos]
        op = (ch == ord("{")) | (ch == ord("["))
        rel = sums.add(np.searchsorted(c.starts, pos, side="right") - 1, op)
        keep = rel <= kept
        m = int(np.count_nonzero(keep))
        bo[k : k + m] = pos[keep]
        opener[k : k + m] = op[keep]
        depth[k : k + m] = np.maximum(rel[keep], _DEPTH_MIN)
        k += m
    bo, opener, depth = bo[:k], opener[:k], depth[:k]
    bb, be = np.searchsorted(bo, c.starts), np.searchsorted(bo, c.ends)
    has = sums.seen
    if k:
        zeros = _counts(lambda a, b: depth[a:b] == 0, k, bb, be)
        first_b = np.minimum(bb, k - 1)
        last_b = np.maximum(be - 1, 0)
        size = len(d)
        head = skip_ws(d, np.minimum(c.starts, size - 1), 1)
        tail = skip_ws(d, np.maximum(c.ends - 1, 0), -1)
        single = (
            has
            & (zeros == 1)
            & (sums.final == 0)
            & (d[bo[first_b]] == ord("{"))
            & (bo[first_b] == head)
            & (bo[last_b] == tail)
            & (d[bo[last_b]] == ord("}"))
        )
    else:
        single = np.zeros(len(c.starts), dtype=bool)
    c.reason[~has & no_reason(c.reason)] = "not a JSON object"
    c.reason[has & ~single & no_reason(c.reason)] = (
        "not a single JSON object (unbalanced brackets or trailing data)"
    )
    return _Brackets(bo=bo, opener=opener, depth=depth, bb=bb, be=be, deepest=sums.deepest)


class _EventSums:
    """The running depth of the brackets of a chunk's events, fed in blocks in byte
    order: per event whether it has a bracket, its deepest and its final depth."""

    def __init__(self, n_events: int) -> None:
        self.total = 0  # openers minus closers of every bracket so far
        self.base = np.zeros(n_events, dtype=np.int64)  # the total before each event
        self.seen = np.zeros(n_events, dtype=bool)
        self.final = np.zeros(n_events, dtype=np.int64)
        self.deepest = np.zeros(n_events, dtype=np.int64)

    def add(self, ev: np.ndarray, opener: np.ndarray) -> np.ndarray:
        """Adds the next brackets (their events ``ev``, ascending, and whether each
        opens); returns the depth after each within its event."""
        inc = opener.astype(np.int64) * 2 - 1
        run = np.cumsum(inc) + self.total
        self.total = int(run[-1])
        first = np.ones(len(ev), dtype=bool)
        first[1:] = ev[1:] != ev[:-1]
        seg = np.flatnonzero(first)  # where each event's brackets of the block start
        new = seg[~self.seen[ev[seg]]]  # an event's first bracket
        self.base[ev[new]] = run[new] - inc[new]
        self.seen[ev[new]] = True
        rel: np.ndarray = run - self.base[ev]
        at = ev[seg]
        self.final[at] = rel[np.append(seg[1:] - 1, len(ev) - 1)]
        self.deepest[at] = np.maximum(self.deepest[at], np.maximum.reduceat(rel, seg))
        return rel


def _counts(
    flags: Callable[[int, int], np.ndarray], size: int, lo: np.ndarray, hi: np.ndarray
) -> np.ndarray:
    """How many of ``size`` flags are set in each ``[lo, hi)`` (``flags(a, b)`` gives
    flags ``a..b`` as bool), by a running count in blocks sampled at the bounds (no
    count array of the flags' length)."""
    at = np.concatenate([lo, hi]).astype(np.int64)
    order = np.argsort(at, kind="stable")
    sorted_at = at[order]
    before = np.empty(len(at), dtype=np.int64)  # flags before each bound, in bound order
    carry = 0
    j0 = 0
    for a in range(0, size, _BLOCK):
        b = min(a + _BLOCK, size)
        run = np.cumsum(flags(a, b), dtype=np.int64)
        j1 = int(np.searchsorted(sorted_at, b, side="left"))
        x = sorted_at[j0:j1] - a  # bounds in [a, b): the flags a..x-1
        before[j0:j1] = carry + np.where(x > 0, run[np.maximum(x - 1, 0)], 0)
        carry += int(run[-1])
        j0 = j1
    before[j0:] = carry  # bounds at the end
    out = np.empty(len(at), dtype=np.int64)
    out[order] = before
    counts: np.ndarray = out[len(lo) :] - out[: len(lo)]
    return counts


def _names(c: _Chunk, s: _Strings, b: _Brackets, max_level: int) -> _Found:
    """Phase 3: the member names (strings followed by a colon) of the valid events, and
    their levels (the depth after the last bracket before them), up to ``max_level``."""
    d = c.d
    size = len(d)
    # blanks after a string may run to the end of the data (the last event, or a blank
    # one after it): such a string is no name
    nxt = np.minimum(skip_ws(d, np.minimum(s.sc + 1, size - 1), 1), size - 1)
    mi = np.flatnonzero((d[nxt] == ord(":")) & (s.sc + 1 < size))
    colon = nxt[mi].astype(np.int64)
    del nxt
    ev = np.searchsorted(s.ke, mi, side="right")  # the strings of an event are contiguous
    keep = no_reason(c.reason)[ev]
    if not keep.all():  # (no copies when every event is valid, as usual)
        mi, ev, colon = mi[keep], ev[keep], colon[keep]
    j = np.searchsorted(b.bo, s.sc[mi]) - 1  # the last bracket before the name
    level = b.depth[j].astype(np.int64)
    keep = (level <= max_level) & (level >= 1)
    if not keep.all():
        mi, ev, colon, j, level = mi[keep], ev[keep], colon[keep], j[keep], level[keep]
    return _Found(mi=mi, ev=ev, colon=colon, j=j, level=level)


def _refuse_deep(b: _Brackets, budget: Budget, reason: np.ndarray) -> None:
    """Refuses the (well-formed) events nested deeper than the budget."""
    deep = np.flatnonzero(b.deepest > budget.depth)
    reason[deep[no_reason(reason[deep])]] = budget.depth_reason


def _refuse_many(f: _Found, budget: Budget, reason: np.ndarray) -> None:
    """Refuses the events holding more members than the budget, and drops their members
    (found before their values and parents: nothing to remap)."""
    counts = np.bincount(f.ev, minlength=len(reason))
    many = np.flatnonzero(counts > budget.members)
    if not len(many):
        return
    reason[many[no_reason(reason[many])]] = budget.members_reason
    bad = np.zeros(len(reason), dtype=bool)
    bad[many] = True
    ok = ~bad[f.ev]
    f.mi, f.ev, f.colon, f.j, f.level = f.mi[ok], f.ev[ok], f.colon[ok], f.j[ok], f.level[ok]


def _values(d: np.ndarray, s: _Strings, b: _Brackets, f: _Found) -> None:
    """Each member's value: its kind (from its first byte) and end (its closing quote,
    its matching bracket, or before the next member/closing bracket)."""
    size = len(d)
    mi, so, bo = f.mi, s.so, b.bo
    value_start = skip_ws(d, np.minimum(f.colon + 1, size - 1), 1)
    kind = _KIND[d[value_start]] if len(value_start) else np.zeros(0, np.int8)
    value_end = np.zeros(len(mi), dtype=np.int64)
    nxt_str = np.minimum(mi + 1, max(len(so) - 1, 0))
    is_str = kind == KIND_STRING
    value_end[is_str] = s.sc[nxt_str[is_str]].astype(np.int64) + 1
    container = np.flatnonzero((kind == KIND_OBJECT) | (kind == KIND_ARRAY))
    for lvl in np.unique(f.level[container]).tolist():
        at = container[f.level[container] == lvl]
        closes = np.flatnonzero(~b.opener & (b.depth == lvl))
        value_end[at] = bo[closes[np.searchsorted(closes, f.j[at] + 1)]] + 1
    scalar = np.flatnonzero(~is_str & (kind != KIND_OBJECT) & (kind != KIND_ARRAY))
    if len(scalar):
        bound = bo[np.minimum(f.j[scalar] + 1, len(bo) - 1)].astype(np.int64)
        has_next = mi[scalar] + 1 < len(so)
        bound = np.where(has_next, np.minimum(bound, so[nxt_str[scalar]]), bound)
        value_end[scalar] = _skip_back(d, bound - 1, _TRAIL) + 1
    f.value_start, f.value_end, f.kind = value_start, value_end, kind
    f.str_ok = ~is_str | ((mi + 1 < len(so)) & (so[nxt_str] == value_start))


def _parents(f: _Found, max_level: int) -> None:
    """The parent of a level-L member is the last level L-1 member before it, when that
    member's value is an object holding it (else the member is in an array element)."""
    level, kind = f.level, f.kind
    parent = np.full(len(f.mi), -1, dtype=np.int64)
    idx = np.arange(len(f.mi))
    for lvl in range(2, max_level + 1):
        at = np.flatnonzero(level == lvl)
        if not len(at):
            continue
        last = np.maximum.accumulate(np.where(level == lvl - 1, idx, -1))[at]
        p = np.maximum(last, 0)
        found = (
            (last >= 0)
            & (kind[p] == KIND_OBJECT)
            & (f.value_end[p] > f.colon[at])
            & (f.ev[p] == f.ev[at])
        )
        parent[at] = np.where(found, last, -2)
    f.parent = parent


def _drop_malformed(f: _Found, reason: np.ndarray) -> None:
    """Refuses the events holding a string value that is not a whole string, and drops
    their members (remapping the parents of the others)."""
    malformed = f.ev[~f.str_ok]
    if not len(malformed):
        return
    bad = np.zeros(len(reason), dtype=bool)
    bad[malformed] = True
    reason[bad & no_reason(reason)] = "invalid JSON: malformed member"
    ok = ~bad[f.ev]
    remap = np.cumsum(ok) - 1
    f.parent = np.where(f.parent >= 0, remap[np.maximum(f.parent, 0)], f.parent)[ok]
    f.mi, f.ev, f.level, f.kind = f.mi[ok], f.ev[ok], f.level[ok], f.kind[ok]
    f.value_start, f.value_end = f.value_start[ok], f.value_end[ok]


def _skip_back(data: np.ndarray, pos: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Moves each position back over the bytes marked in ``table``."""
    pos = pos.copy()
    todo = np.flatnonzero(table[data[pos]])
    while len(todo):
        pos[todo] -= 1
        todo = todo[table[data[pos[todo]]]]
    return pos
