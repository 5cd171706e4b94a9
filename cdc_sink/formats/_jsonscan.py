"""A vectorized structural index of many JSON objects at once (private).

Arrow's JSON reader cannot tell an absent member from one set to ``null`` (both read as
null), and *absent is not null* for change events. So the JSON decoders find the members
of every event themselves, for all events at once, with numpy (in chunks of a few MB so
the working arrays stay in cache):

1. **tokens**: every quote, bracket (``{}[]``), backslash and line break, found with one
   ``bytes.translate`` + ``flatnonzero`` pass over the bytes. A quote after an odd run of
   backslashes is escaped and dropped. A running count of quotes *in token order* tells
   which brackets are outside strings (an event with an odd number of quotes is refused,
   and its last quote dropped so the pairing of the next events holds);
2. **depth**: a running sum of openers minus closers over the brackets outside strings;
   an event must be exactly one balanced object, from its first to its last non-blank
   byte;
3. **members**: quotes pair into strings; a string followed by ``:`` is a member name.
   Its level is the depth after the last bracket before it; its value starts at the first
   non-blank byte after the colon (that byte gives the value's kind: object, array,
   string, number, true, false, null) and ends at its closing quote, its matching bracket,
   or before the next member/closing bracket (scalars). Its parent is the last member one
   level up, when that member's value is an object holding it (else the member is in an
   array element).

No binary search runs per byte or per token, and nothing loops per event. The index is
exact for valid JSON; presence is derived from it, never from a substring test.

**The compiled pass.** When the C extension :mod:`._cscan` (``_cscan.c``) is built, each
chunk is first indexed by it: a strict parser that accepts only well-formed JSON objects,
for which its index equals the numpy one above; a chunk holding any event it does not
accept is indexed by numpy instead (which gives the reasons). It also marks the events
that are valid JSON text as a whole (:attr:`JsonScan.verified`), which then skip Arrow's
grammar check. ``tests/formats/test_compiled_scan.py`` checks both against numpy and Arrow.
Grammar details it does not check (a missing comma, a bad literal in an ignored member,
a bad escape) are checked by :func:`._jsongrammar.check_grammar`, which gives the verdict
of Arrow's JSON reader (compiled, or Arrow's reader itself when the pass is not built).

**Budgets (issue 38).** A decoder passes a :class:`Budget`: the most members an event may
hold at the levels it indexes (what its schema can use, and a margin for ignored
members), and the deepest nesting it accepts. An event beyond either is refused with one
reason (the same string for every such event, built once) and leaves no members in the
index, so what the decoder then allocates per event is bounded by the schema, not by
what a message declares. Both scanners check the structure first and the budgets next
(depth before members), so they give the same reason: the compiled pass parses an event
over budget to its end without recording more members (its open containers take one bit
per level), the numpy scanner counts the members it found.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from cdc_sink.formats._arrays import (
    Parts,
    new_reasons,
    no_reason,
)

try:  # the compiled pass (cdc_sink/formats/_cscan.c); numpy alone when it is not built
    from cdc_sink.formats import _cscan as _cscan  # re-exported: one switch for every use
except ImportError:  # pragma: no cover - depends on the install
    _cscan = None  # type: ignore[assignment]

KIND_BAD = 0
KIND_OBJECT = 1
KIND_ARRAY = 2
KIND_STRING = 3
KIND_NUMBER = 4
KIND_TRUE = 5
KIND_FALSE = 6
KIND_NULL = 7
KIND_NAMES = ("invalid", "object", "array", "string", "number", "true", "false", "null")

RUN_BYTES = 4 << 20
"""The JSON decoders process runs of events of about this many bytes at a time."""
_CHUNK_BYTES = RUN_BYTES  # scan chunks (Arrow validation uses the same size)

_CLASS = np.zeros(256, dtype=np.uint8)
_CLASS[ord('"')] = 1
_CLASS[np.frombuffer(b"{}[]", np.uint8)] = 2
_CLASS[np.frombuffer(b"\n\r", np.uint8)] = 3
_CLASS[ord("\\")] = 4
_IS_TOKEN = (_CLASS > 0).astype(np.uint8).tobytes()
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


@dataclass(frozen=True)
class Budget:
    """What one event may declare, at most (see the module docstring).

    Attributes:
        members: Members at the levels the scan indexes (1..``max_level``).
        depth: Nesting of objects and arrays (the event itself is level 1).
        what: What is nested too deep, in the reason (the format's words).
    """

    members: int
    depth: int
    what: str = "nested"

    def __post_init__(self) -> None:
        if self.members < 1 or self.depth < 1:
            raise ValueError(f"a budget must allow a member and a level, got {self}")

    @property
    def members_reason(self) -> str:
        """The reason of an event holding too many members."""
        return f"event has more than {self.members} members (more than the schema can use)"

    @property
    def depth_reason(self) -> str:
        """The reason of an event nested too deep."""
        return f"{self.what} deeper than {self.depth} levels"


# status of each event from the compiled pass (ST_* of _cscan.c)
_ST_ACCEPTED, _ST_VERIFIED, _ST_MEMBERS, _ST_DEEP, _ST_ROOM = range(5)


def _empty_index() -> np.ndarray:
    """An empty index array (a default of the fields of :class:`_Found` set later)."""
    return np.zeros(0, dtype=np.int64)


@dataclass
class Members:
    """Object members of the events, in document order.

    Attributes:
        event: Index of the event holding the member.
        level: 1 for members of the top-level object, 2 for members of their values...
        parent: Index of the member whose value is the enclosing object; -1 for level 1;
            -2 when the enclosing object is an array element.
        name_start: First byte of the name (after its opening quote).
        name_end: The name's closing quote.
        name_escaped: Whether the name holds a backslash escape.
        kind: ``KIND_*`` of the value.
        value_start: First byte of the value.
        value_end: One past the value's last byte.
        value_escaped: Whether a string value holds a backslash escape.
    """

    event: np.ndarray
    level: np.ndarray
    parent: np.ndarray
    name_start: np.ndarray
    name_end: np.ndarray
    name_escaped: np.ndarray
    kind: np.ndarray
    value_start: np.ndarray
    value_end: np.ndarray
    value_escaped: np.ndarray

    def __len__(self) -> int:
        return len(self.event)


@dataclass
class JsonScan:
    """The structural index of a batch of JSON events.

    Attributes:
        reasons: Per event, why its structure is invalid (``None`` when it is one object).
        members: The object members up to the scan's ``max_level``.
        verified: Per event, whether the compiled pass found it valid JSON text as a
            whole (RFC 8259 grammar of every value, UTF-8): such an event needs no
            grammar check by Arrow's parser. All false with the numpy scanner.
    """

    reasons: np.ndarray
    members: Members
    verified: np.ndarray


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


def scan(
    parts: Parts, active: np.ndarray, max_level: int, budget: Budget | None = None
) -> JsonScan:
    """Indexes the members of every active event (see the module docstring).

    Args:
        parts: The message values.
        active: Events to index (others get no members and no reason).
        max_level: Deepest member level to index.
        budget: Bounds of each event; an event beyond them is refused (no bound when
            ``None``).

    Returns:
        The per-event structure reasons and the members.
    """
    n = parts.n
    reasons = new_reasons(n)
    verified = np.zeros(n, dtype=bool)
    pieces: list[Members] = []
    lengths = np.where(active, parts.lengths, 0)
    csum = np.cumsum(lengths)
    e0 = 0
    while e0 < n:
        base = csum[e0 - 1] if e0 else 0
        e1 = max(int(np.searchsorted(csum, base + _CHUNK_BYTES, side="right")), e0 + 1)
        e1 = min(e1, n)
        sel = np.arange(e0, e1)[active[e0:e1]]
        if len(sel):
            pieces.append(_scan_chunk(parts, sel, max_level, reasons, verified, budget))
        e0 = e1
    if not pieces:
        empty = np.zeros(0, dtype=np.int64)
        return JsonScan(
            reasons,
            verified=verified,
            members=Members(
                empty,
                empty,
                empty,
                empty,
                empty,
                np.zeros(0, bool),
                np.zeros(0, np.int8),
                empty,
                empty,
                np.zeros(0, bool),
            ),
        )
    if len(pieces) == 1:  # one chunk (the decoders scan runs of about one chunk)
        return JsonScan(reasons, pieces[0], verified)
    offset = 0
    for p in pieces:  # member indices are chunk-local: shift the parents
        p.parent = np.where(p.parent >= 0, p.parent + offset, p.parent)
        offset += len(p)
    fields = Members.__dataclass_fields__
    merged = Members(**{f: np.concatenate([getattr(p, f) for p in pieces]) for f in fields})
    return JsonScan(reasons, merged, verified)


def _scan_chunk(
    parts: Parts,
    events: np.ndarray,
    max_level: int,
    reasons: np.ndarray,
    verified: np.ndarray,
    budget: Budget | None = None,
) -> Members:
    """Indexes the members of ``events`` (one chunk): with the compiled pass when it is
    built and accepts every event of the chunk (marking in ``verified`` those that are
    valid JSON text, and refusing those beyond the budget), else with numpy (which gives
    every invalid event its reason)."""
    found = _compiled(parts, events, max_level, budget)
    if found is None:
        return numpy_chunk(parts, events, max_level, reasons, budget)
    members, status = found
    verified[events] = status == _ST_VERIFIED
    if budget is not None:
        reasons[events[status == _ST_DEEP]] = budget.depth_reason
        reasons[events[status == _ST_MEMBERS]] = budget.members_reason
    return members


def compiled_chunk(
    parts: Parts, events: np.ndarray, max_level: int
) -> tuple[Members, np.ndarray] | None:
    """The members of ``events`` from the compiled pass (:mod:`._cscan`) and whether
    each event is valid JSON text as a whole; ``None`` when the pass is not built or does
    not accept an event of the chunk (it accepts only well-formed JSON objects, for which
    its index equals :func:`numpy_chunk`'s). No budget."""
    found = _compiled(parts, events, max_level, None)
    return None if found is None else (found[0], found[1] == _ST_VERIFIED)


def _compiled(
    parts: Parts, events: np.ndarray, max_level: int, budget: Budget | None
) -> tuple[Members, np.ndarray] | None:
    """:func:`compiled_chunk` with a budget: the members and each event's status."""
    if _cscan is None or not len(events):
        return None
    starts = np.ascontiguousarray(parts.starts[events], dtype=np.int64)
    ends = np.ascontiguousarray(parts.ends[events], dtype=np.int64)
    lo, hi = int(starts.min()), int(ends.max())
    # A member takes 4 bytes at least ("":0 and a comma or brace), and within a budget
    # an event holds so many at most. The first try leaves room for one member every 8
    # bytes (events of short members run out of it and are scanned again with the bound).
    bound = (hi - lo) // 4 + 1
    if budget is not None:
        bound = min(bound, len(events) * budget.members)
    cap = min(bound, (hi - lo) // 8 + 4 * len(events) + 64)
    while True:
        found = _compiled_run(parts, starts, ends, events, max_level, budget, cap)
        if not isinstance(found, int):
            return found
        if found != _ST_ROOM or cap >= bound:
            return None
        cap = bound


def _compiled_run(
    parts: Parts,
    starts: np.ndarray,
    ends: np.ndarray,
    events: np.ndarray,
    max_level: int,
    budget: Budget | None,
    cap: int,
) -> tuple[Members, np.ndarray] | int:
    """One run of the compiled pass with room for ``cap`` members: the members and the
    status of each event, or the status of the event it stopped at."""
    ev, level, parent, name_start, name_end, value_start, value_end = (
        np.empty(cap, dtype=np.int64) for _ in range(7)
    )
    name_escaped, value_escaped = (np.empty(cap, dtype=np.uint8) for _ in range(2))
    kind = np.empty(cap, dtype=np.int8)
    status = np.empty(len(events), dtype=np.uint8)
    n = _cscan.scan(
        np.ascontiguousarray(parts.data),
        starts,
        ends,
        max_level,
        0 if budget is None else budget.members,
        0 if budget is None else budget.depth,
        ev,
        level,
        parent,
        name_start,
        name_end,
        name_escaped,
        kind,
        value_start,
        value_end,
        value_escaped,
        status,
    )
    if n < 0:
        return int(status[-1 - n])
    members = Members(
        event=events[ev[:n]],
        level=level[:n],
        parent=parent[:n],
        name_start=name_start[:n],
        name_end=name_end[:n],
        name_escaped=name_escaped[:n].view(bool),
        kind=kind[:n],
        value_start=value_start[:n],
        value_end=value_end[:n],
        value_escaped=value_escaped[:n].view(bool),
    )
    return members, status


def numpy_chunk(
    parts: Parts,
    events: np.ndarray,
    max_level: int,
    reasons: np.ndarray,
    budget: Budget | None = None,
) -> Members:
    """Indexes the members of ``events`` (one chunk) with numpy, phase by phase as the
    module docstring numbers them; an event whose structure is invalid, or that is beyond
    the ``budget``, gets its reason in ``reasons`` and no members."""
    data = parts.data
    starts, ends = parts.starts[events], parts.ends[events]
    local_reason = np.full(len(events), None, dtype=object)
    t = _tokens(data, starts, ends)
    s = _strings(t, starts, ends, local_reason)
    b = _brackets(data, t, s, starts, ends, local_reason)
    if budget is not None:
        _refuse_deep(b, t, budget, local_reason)
    f = _names(data, t, s, b, local_reason, max_level)
    if budget is not None:
        _refuse_many(f, budget, local_reason)
    _values(data, s, b, f)
    _parents(f, max_level)
    _drop_malformed(f, local_reason)
    name_start = s.so[f.mi] + 1
    name_end = s.sc[f.mi]
    if len(t.bsl):
        name_escaped = _count_in(t.bsl, name_start, name_end) > 0
        value_escaped = (f.kind == KIND_STRING) & (
            _count_in(t.bsl, f.value_start + 1, f.value_end - 1) > 0
        )
    else:
        name_escaped = value_escaped = np.zeros(len(f.mi), dtype=bool)
    bad_events = np.flatnonzero(~no_reason(local_reason))
    reasons[events[bad_events]] = local_reason[bad_events]
    return Members(
        event=events[f.ev],
        level=f.level,
        parent=f.parent,
        name_start=name_start,
        name_end=name_end,
        name_escaped=name_escaped,
        kind=f.kind.astype(np.int8),
        value_start=f.value_start,
        value_end=f.value_end,
        value_escaped=value_escaped,
    )


@dataclass
class _Tokens:
    """Phase 1: the structural tokens of a chunk, in byte order."""

    tok: np.ndarray  # byte position of each token
    tcls: np.ndarray  # its _CLASS (an escaped quote: 0)
    counts: np.ndarray  # tokens per class
    bsl: np.ndarray  # positions of the backslashes
    tb: np.ndarray  # first token of each event
    te: np.ndarray  # one past each event's last token


@dataclass
class _Strings:
    """Phase 1 (quotes): the strings of a chunk, paired quotes in token order."""

    so: np.ndarray  # opening quote of each string
    sc: np.ndarray  # closing quote of each string
    sc_tok: np.ndarray  # token index of each closing quote
    kb: np.ndarray  # first string of each event
    ke: np.ndarray  # one past each event's last string
    outside: np.ndarray  # whether each token is outside strings


@dataclass
class _Brackets:
    """Phase 2: the brackets outside strings and the depth after each."""

    bo: np.ndarray  # byte position of each bracket outside strings
    bcum: np.ndarray  # brackets outside strings before each token
    opener: np.ndarray  # whether each bracket opens
    depth: np.ndarray  # depth after each bracket (within its event)


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


def _tokens(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> _Tokens:
    """Every quote, bracket, backslash and line break of the events, in one pass; a quote
    after an odd run of backslashes is escaped (class 0)."""
    lo, hi = int(starts.min()), int(ends.max())
    # bytes.translate maps every byte through a table in one C loop (faster than a numpy
    # gather); flatnonzero on a bool view is the fastest way to list the tokens.
    is_tok = np.frombuffer(data[lo:hi].tobytes().translate(_IS_TOKEN), dtype=np.bool_)
    tok = np.flatnonzero(is_tok) + lo
    if len(starts) > 1 and not (starts[1:] == ends[:-1]).all():  # drop bytes between events
        ev = np.searchsorted(starts, tok, side="right") - 1
        tok = tok[(ev >= 0) & (tok < ends[np.maximum(ev, 0)])]
    tcls = _CLASS[data[tok]]
    counts = np.bincount(tcls, minlength=5)
    if counts[4]:  # a quote after an odd run of backslashes is escaped
        bsl = tok[tcls == 4]
        # a run stops at its event's end: a backslash ending one event escapes nothing
        # of the next (an event decodes the same whatever its neighbours)
        bev = np.searchsorted(starts, bsl, side="right") - 1
        brk = np.flatnonzero((np.diff(bsl) != 1) | (np.diff(bev) != 0))
        last = np.concatenate([brk, [len(bsl) - 1]])
        run_start = bsl[np.concatenate([[0], brk + 1])]
        run_end = bsl[last] + 1
        esc = run_end[((run_end - run_start) % 2 == 1) & (run_end < ends[bev[last]])]
        ti = np.minimum(np.searchsorted(tok, esc), len(tok) - 1)
        ti = ti[(tok[ti] == esc) & (tcls[ti] == 1)]
        tcls[ti] = 0
    else:
        bsl = np.zeros(0, dtype=np.int64)
    return _Tokens(
        tok=tok,
        tcls=tcls,
        counts=counts,
        bsl=bsl,
        tb=np.searchsorted(tok, starts),
        te=np.searchsorted(tok, ends),
    )


def _strings(
    t: _Tokens, starts: np.ndarray, ends: np.ndarray, local_reason: np.ndarray
) -> _Strings:
    """Pairs the quotes into strings; refuses events with an odd number of quotes (their
    last quote is dropped so the next events stay paired) or a raw line break inside a
    string."""
    # Everything is counted in token order: cq[t] = quotes before token t, whose parity
    # tells whether token t is inside a string (no binary search per token).
    tok, tcls, tb, te = t.tok, t.tcls, t.tb, t.te
    isq = tcls == 1
    cq = np.zeros(len(tok) + 1, dtype=np.int64)
    np.cumsum(isq, out=cq[1:])
    odd = ((cq[te] - cq[tb]) & 1) == 1
    if odd.any():
        local_reason[odd] = "invalid JSON: unterminated string"
        isq[np.flatnonzero(isq)[cq[te[odd]] - 1]] = False  # keeps the others paired
        np.cumsum(isq, out=cq[1:])
    qidx = np.flatnonzero(isq)
    q = tok[qidx]
    outside = (cq[:-1] & 1) == 0
    if t.counts[3]:
        nl_in = tok[(tcls == 3) & ~outside]
        if len(nl_in):
            bad = np.zeros(len(starts), dtype=bool)
            bad[np.searchsorted(starts, nl_in, side="right") - 1] = True
            local_reason[bad & no_reason(local_reason)] = (
                "invalid JSON: raw line break inside a string"
            )
    return _Strings(
        so=q[0::2], sc=q[1::2], sc_tok=qidx[1::2], kb=cq[tb] // 2, ke=cq[te] // 2, outside=outside
    )


def _brackets(
    data: np.ndarray,
    t: _Tokens,
    s: _Strings,
    starts: np.ndarray,
    ends: np.ndarray,
    local_reason: np.ndarray,
) -> _Brackets:
    """The depth after every bracket outside strings; refuses events that are not
    exactly one object from their first to their last non-blank byte."""
    size = len(data)
    is_bo = (t.tcls == 2) & s.outside
    bo = t.tok[is_bo]  # brackets outside strings
    bcum = np.zeros(len(t.tok) + 1, dtype=np.int64)
    np.cumsum(is_bo, out=bcum[1:])
    bch = data[bo]
    opener = (bch == ord("{")) | (bch == ord("["))
    bb, be = bcum[t.tb], bcum[t.te]
    cnt = be - bb
    cs = np.cumsum(np.where(opener, 1, -1).astype(np.int32))
    base = np.where(bb > 0, cs[np.maximum(bb - 1, 0)] if len(cs) else 0, 0)
    depth = cs - np.repeat(base, cnt)
    zeros = np.concatenate([[0], np.cumsum(depth == 0)])
    has = cnt > 0
    first_b = np.minimum(bb, max(len(bo) - 1, 0))
    last_b = np.maximum(be - 1, 0)
    if len(bo):
        head = skip_ws(data, np.minimum(starts, size - 1), 1)
        tail = skip_ws(data, np.maximum(ends - 1, 0), -1)
        single = (
            has
            & (zeros[be] - zeros[bb] == 1)
            & (depth[last_b] == 0)
            & (bch[first_b] == ord("{"))
            & (bo[first_b] == head)
            & (bo[last_b] == tail)
            & (bch[last_b] == ord("}"))
        )
    else:
        single = np.zeros(len(starts), dtype=bool)
    local_reason[~has & no_reason(local_reason)] = "not a JSON object"
    local_reason[has & ~single & no_reason(local_reason)] = (
        "not a single JSON object (unbalanced brackets or trailing data)"
    )
    return _Brackets(bo=bo, bcum=bcum, opener=opener, depth=depth)


def _names(
    data: np.ndarray,
    t: _Tokens,
    s: _Strings,
    b: _Brackets,
    local_reason: np.ndarray,
    max_level: int,
) -> _Found:
    """The member names (strings followed by a colon) of the valid events, and their
    levels (the depth after the last bracket before them), up to ``max_level``."""
    size = len(data)
    # blanks after a string may run to the end of the data (the last event, or a blank
    # one after it): such a string is no name
    nxt = np.minimum(skip_ws(data, np.minimum(s.sc + 1, size - 1), 1), size - 1)
    mi = np.flatnonzero((data[nxt] == ord(":")) & (s.sc + 1 < size))
    colon = nxt[mi]
    del nxt
    ev = np.searchsorted(s.ke, mi, side="right")  # the strings of an event are contiguous
    keep = no_reason(local_reason)[ev]
    if not keep.all():  # (no copies when every event is valid, as usual)
        mi, ev, colon = mi[keep], ev[keep], colon[keep]
    j = b.bcum[s.sc_tok[mi]] - 1  # the last bracket before the name (so before the colon)
    level = b.depth[j].astype(np.int64)
    keep = level <= max_level
    if not keep.all():
        mi, ev, colon, j, level = mi[keep], ev[keep], colon[keep], j[keep], level[keep]
    return _Found(mi=mi, ev=ev, colon=colon, j=j, level=level)


def _refuse_deep(b: _Brackets, t: _Tokens, budget: Budget, local_reason: np.ndarray) -> None:
    """Refuses the (well-formed) events nested deeper than the budget."""
    bb, be = b.bcum[t.tb], b.bcum[t.te]
    has = np.flatnonzero(be > bb)
    if not len(b.depth) or not len(has):
        return
    deepest = np.maximum.reduceat(b.depth, bb[has])
    deep = has[deepest > budget.depth]
    local_reason[deep[no_reason(local_reason[deep])]] = budget.depth_reason


def _refuse_many(f: _Found, budget: Budget, local_reason: np.ndarray) -> None:
    """Refuses the events holding more members than the budget, and drops their members
    (found before their values and parents: nothing to remap)."""
    counts = np.bincount(f.ev, minlength=len(local_reason))
    many = np.flatnonzero(counts > budget.members)
    if not len(many):
        return
    local_reason[many[no_reason(local_reason[many])]] = budget.members_reason
    bad = np.zeros(len(local_reason), dtype=bool)
    bad[many] = True
    ok = ~bad[f.ev]
    f.mi, f.ev, f.colon, f.j, f.level = f.mi[ok], f.ev[ok], f.colon[ok], f.j[ok], f.level[ok]


def _values(data: np.ndarray, s: _Strings, b: _Brackets, f: _Found) -> None:
    """Each member's value: its kind (from its first byte) and end (its closing quote,
    its matching bracket, or before the next member/closing bracket)."""
    size = len(data)
    mi, so, bo = f.mi, s.so, b.bo
    value_start = skip_ws(data, np.minimum(f.colon + 1, size - 1), 1)
    kind = _KIND[data[value_start]] if len(value_start) else np.zeros(0, np.int8)
    value_end = np.zeros(len(mi), dtype=np.int64)
    nxt_str = np.minimum(mi + 1, max(len(so) - 1, 0))
    is_str = kind == KIND_STRING
    value_end[is_str] = s.sc[nxt_str[is_str]] + 1
    container = np.flatnonzero((kind == KIND_OBJECT) | (kind == KIND_ARRAY))
    for lvl in np.unique(f.level[container]).tolist():
        at = container[f.level[container] == lvl]
        closes = np.flatnonzero(~b.opener & (b.depth == lvl))
        value_end[at] = bo[closes[np.searchsorted(closes, f.j[at] + 1)]] + 1
    scalar = np.flatnonzero(~is_str & (kind != KIND_OBJECT) & (kind != KIND_ARRAY))
    if len(scalar):
        bound = bo[np.minimum(f.j[scalar] + 1, len(bo) - 1)]
        has_next = mi[scalar] + 1 < len(so)
        bound = np.where(has_next, np.minimum(bound, so[nxt_str[scalar]]), bound)
        value_end[scalar] = _skip_back(data, bound - 1, _TRAIL) + 1
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


def _drop_malformed(f: _Found, local_reason: np.ndarray) -> None:
    """Refuses the events holding a string value that is not a whole string, and drops
    their members (remapping the parents of the others)."""
    malformed = f.ev[~f.str_ok]
    if not len(malformed):
        return
    bad = np.zeros(len(local_reason), dtype=bool)
    bad[malformed] = True
    local_reason[bad & no_reason(local_reason)] = "invalid JSON: malformed member"
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
