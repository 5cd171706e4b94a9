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
Grammar details it does not check (a missing comma, a bad literal in an ignored member,
a bad escape) are checked by :func:`arrow_validate`, which runs Arrow's JSON parser over
the events straight from the input buffer (parse only: no column is converted),
bisecting to isolate the events it refuses.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.json as pj

from cdc_sink.formats._arrays import (
    Parts,
    cast_rows,
    gather,
    new_reasons,
    no_reason,
    scatter,
    spans,
    unaligned,
)

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
_CHUNK_BYTES = RUN_BYTES  # scan and Arrow validation chunks

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
    """

    reasons: np.ndarray
    members: Members


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
    counts: np.ndarray = (np.searchsorted(sorted_pos, hi) - np.searchsorted(sorted_pos, lo))
    return counts


def scan(parts: Parts, active: np.ndarray, max_level: int) -> JsonScan:
    """Indexes the members of every active event (see the module docstring).

    Args:
        parts: The message values.
        active: Events to index (others get no members and no reason).
        max_level: Deepest member level to index.

    Returns:
        The per-event structure reasons and the members.
    """
    n = parts.n
    reasons = new_reasons(n)
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
            pieces.append(_scan_chunk(parts, sel, max_level, reasons))
        e0 = e1
    if not pieces:
        empty = np.zeros(0, dtype=np.int64)
        return JsonScan(reasons, Members(empty, empty, empty, empty, empty,
                                         np.zeros(0, bool), np.zeros(0, np.int8), empty, empty,
                                         np.zeros(0, bool)))
    offset = 0
    for p in pieces:  # member indices are chunk-local: shift the parents
        p.parent = np.where(p.parent >= 0, p.parent + offset, p.parent)
        offset += len(p)
    fields = Members.__dataclass_fields__
    merged = Members(**{f: np.concatenate([getattr(p, f) for p in pieces]) for f in fields})
    return JsonScan(reasons, merged)


def _scan_chunk(parts: Parts, events: np.ndarray, max_level: int,
                reasons: np.ndarray) -> Members:
    data = parts.data
    size = len(data)
    starts, ends = parts.starts[events], parts.ends[events]
    n_ev = len(events)
    lo, hi = int(starts.min()), int(ends.max())
    # bytes.translate maps every byte through a table in one C loop (faster than a numpy
    # gather); flatnonzero on a bool view is the fastest way to list the tokens.
    is_tok = np.frombuffer(data[lo:hi].tobytes().translate(_IS_TOKEN), dtype=np.bool_)
    tok = np.flatnonzero(is_tok) + lo
    if n_ev > 1 and not (starts[1:] == ends[:-1]).all():  # drop bytes between events
        ev = np.searchsorted(starts, tok, side="right") - 1
        tok = tok[(ev >= 0) & (tok < ends[np.maximum(ev, 0)])]
    tcls = _CLASS[data[tok]]
    counts = np.bincount(tcls, minlength=5)
    if counts[4]:  # a quote after an odd run of backslashes is escaped
        bsl = tok[tcls == 4]
        brk = np.flatnonzero(np.diff(bsl) != 1)
        run_start = bsl[np.concatenate([[0], brk + 1])]
        run_end = bsl[np.concatenate([brk, [len(bsl) - 1]])] + 1
        esc = run_end[(run_end - run_start) % 2 == 1]
        ti = np.minimum(np.searchsorted(tok, esc), len(tok) - 1)
        ti = ti[(tok[ti] == esc) & (tcls[ti] == 1)]
        tcls[ti] = 0
    else:
        bsl = np.zeros(0, dtype=np.int64)
    # Everything is counted in token order: cq[t] = quotes before token t, whose parity
    # tells whether token t is inside a string (no binary search per token).
    local_reason = np.full(n_ev, None, dtype=object)
    isq = tcls == 1
    tb, te = np.searchsorted(tok, starts), np.searchsorted(tok, ends)
    cq = np.zeros(len(tok) + 1, dtype=np.int64)
    np.cumsum(isq, out=cq[1:])
    odd = ((cq[te] - cq[tb]) & 1) == 1
    if odd.any():
        local_reason[odd] = "invalid JSON: unterminated string"
        isq[np.flatnonzero(isq)[cq[te[odd]] - 1]] = False  # keeps the others paired
        np.cumsum(isq, out=cq[1:])
    qidx = np.flatnonzero(isq)
    q = tok[qidx]
    so, sc = q[0::2], q[1::2]  # the strings: opening and closing quotes
    sc_tok = qidx[1::2]
    kb, ke = cq[tb] // 2, cq[te] // 2
    outside = (cq[:-1] & 1) == 0
    if counts[3]:
        nl_in = tok[(tcls == 3) & ~outside]
        if len(nl_in):
            bad = np.zeros(n_ev, dtype=bool)
            bad[np.searchsorted(starts, nl_in, side="right") - 1] = True
            local_reason[bad & no_reason(local_reason)] = (
                "invalid JSON: raw line break inside a string")
    is_bo = (tcls == 2) & outside
    bo = tok[is_bo]  # brackets outside strings
    bcum = np.zeros(len(tok) + 1, dtype=np.int64)
    np.cumsum(is_bo, out=bcum[1:])

    # ---- bracket depth; each event must be exactly one object
    bch = data[bo]
    opener = (bch == ord("{")) | (bch == ord("["))
    bb, be = bcum[tb], bcum[te]
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
        single = (has & (zeros[be] - zeros[bb] == 1) & (depth[last_b] == 0)
                  & (bch[first_b] == ord("{")) & (bo[first_b] == head)
                  & (bo[last_b] == tail) & (bch[last_b] == ord("}")))
    else:
        single = np.zeros(n_ev, dtype=bool)
    local_reason[~has & no_reason(local_reason)] = "not a JSON object"
    local_reason[has & ~single & no_reason(local_reason)] = (
        "not a single JSON object (unbalanced brackets or trailing data)")

    # ---- members: strings followed by a colon
    nxt = skip_ws(data, np.minimum(sc + 1, size - 1), 1)
    is_name = (data[nxt] == ord(":")) & (sc + 1 < size)
    cum = np.concatenate([[0], np.cumsum(is_name)])
    mi = np.flatnonzero(is_name)
    ev = np.repeat(np.arange(n_ev), cum[ke] - cum[kb])
    keep = no_reason(local_reason)[ev]
    mi, ev = mi[keep], ev[keep]
    colon = nxt[mi]
    j = bcum[sc_tok[mi]] - 1  # the last bracket before the name (so before the colon)
    level = depth[j].astype(np.int64)
    keep = level <= max_level
    mi, ev, colon, j, level = mi[keep], ev[keep], colon[keep], j[keep], level[keep]
    # ---- values
    value_start = skip_ws(data, np.minimum(colon + 1, size - 1), 1)
    kind = _KIND[data[value_start]] if len(value_start) else np.zeros(0, np.int8)
    value_end = np.zeros(len(mi), dtype=np.int64)
    nxt_str = np.minimum(mi + 1, max(len(so) - 1, 0))
    is_str = kind == KIND_STRING
    value_end[is_str] = sc[nxt_str[is_str]] + 1
    str_ok = ~is_str | ((mi + 1 < len(so)) & (so[nxt_str] == value_start))
    container = np.flatnonzero((kind == KIND_OBJECT) | (kind == KIND_ARRAY))
    for lvl in np.unique(level[container]).tolist():
        at = container[level[container] == lvl]
        closes = np.flatnonzero(~opener & (depth == lvl))
        value_end[at] = bo[closes[np.searchsorted(closes, j[at] + 1)]] + 1
    scalar = np.flatnonzero(~is_str & (kind != KIND_OBJECT) & (kind != KIND_ARRAY))
    if len(scalar):
        bound = bo[np.minimum(j[scalar] + 1, len(bo) - 1)]
        has_next = mi[scalar] + 1 < len(so)
        bound = np.where(has_next, np.minimum(bound, so[nxt_str[scalar]]), bound)
        value_end[scalar] = _skip_back(data, bound - 1, _TRAIL) + 1
    # The parent of a level-L member is the last level L-1 member before it, when that
    # member's value is an object holding it (else the member is in an array element).
    parent = np.full(len(mi), -1, dtype=np.int64)
    idx = np.arange(len(mi))
    for lvl in range(2, max_level + 1):
        at = np.flatnonzero(level == lvl)
        if not len(at):
            continue
        last = np.maximum.accumulate(np.where(level == lvl - 1, idx, -1))[at]
        p = np.maximum(last, 0)
        found = (last >= 0) & (kind[p] == KIND_OBJECT) & (value_end[p] > colon[at]) & (
            ev[p] == ev[at])
        parent[at] = np.where(found, last, -2)
    malformed = ev[~str_ok]
    if len(malformed):
        bad = np.zeros(n_ev, dtype=bool)
        bad[malformed] = True
        local_reason[bad & no_reason(local_reason)] = "invalid JSON: malformed member"
        ok = ~bad[ev]
        remap = np.cumsum(ok) - 1
        parent = np.where(parent >= 0, remap[np.maximum(parent, 0)], parent)[ok]
        mi, ev, level, kind = mi[ok], ev[ok], level[ok], kind[ok]
        value_start, value_end = value_start[ok], value_end[ok]
    name_start = so[mi] + 1
    name_end = sc[mi]
    if len(bsl):
        name_escaped = _count_in(bsl, name_start, name_end) > 0
        value_escaped = (kind == KIND_STRING) & (
            _count_in(bsl, value_start + 1, value_end - 1) > 0)
    else:
        name_escaped = value_escaped = np.zeros(len(mi), dtype=bool)
    bad_events = np.flatnonzero(~no_reason(local_reason))
    reasons[events[bad_events]] = local_reason[bad_events]
    return Members(event=events[ev], level=level, parent=parent, name_start=name_start,
                   name_end=name_end, name_escaped=name_escaped, kind=kind.astype(np.int8),
                   value_start=value_start, value_end=value_end, value_escaped=value_escaped)


def _skip_back(data: np.ndarray, pos: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Moves each position back over the bytes marked in ``table``."""
    pos = pos.copy()
    todo = np.flatnonzero(table[data[pos]])
    while len(todo):
        pos[todo] -= 1
        todo = todo[table[data[pos[todo]]]]
    return pos


# ---------------------------------------------------------------------- names and strings
def _words(data: np.ndarray, pos: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """The first ``min(nbytes, 8)`` bytes at each ``pos`` as a little-endian uint64."""
    out = np.zeros(len(pos), dtype=np.uint64)
    u8 = unaligned(data, "<u8")
    fast = pos + 8 <= len(data)
    take = np.clip(nbytes, 0, 8).astype(np.uint64)
    mask = np.where(take >= 8, np.uint64(0xFFFFFFFFFFFFFFFF),
                    (np.uint64(1) << (take * np.uint64(8))) - np.uint64(1))
    if fast.any():
        out[fast] = u8[pos[fast]] & mask[fast]
    for k in range(8):  # the few words that would run past the buffer: byte by byte
        slow = np.flatnonzero(~fast & (take > k))
        if len(slow):
            out[slow] |= data[pos[slow] + k].astype(np.uint64) << np.uint64(8 * k)
    return out


def _hash(first: np.ndarray, last: np.ndarray, length: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        h: np.ndarray = (first * np.uint64(0x9E3779B97F4A7C15)) ^ (
            last * np.uint64(0xC2B2AE3D27D4EB4F)) ^ (length.astype(np.uint64)
                                                     * np.uint64(0x165667B19E3779F9))
    return h


def match_strings(data: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                  escaped: np.ndarray, names: Sequence[str]) -> np.ndarray:
    """Index in ``names`` of each JSON string content ``data[starts:ends]`` (-1: none).

    Vectorized: a hash of (first 8 bytes, last 8 bytes, length) finds the candidate name;
    those 8-byte words and the length identify a name of up to 16 bytes exactly, longer
    ones are verified byte by byte. A content with backslash escapes is decoded with
    :mod:`json` (per such string; escapes in names and ops are rare).
    """
    m = len(starts)
    codes = np.full(m, -1, dtype=np.int64)
    if m == 0 or not names:
        return codes
    enc = [nm.encode("utf-8") for nm in names]
    length = ends - starts
    first = _words(data, starts, length)
    last = np.zeros(m, dtype=np.uint64)
    long_ = np.flatnonzero(length > 8)
    if len(long_):
        last[long_] = _words(data, ends[long_] - 8, np.full(len(long_), 8))
    h = _hash(first, last, length)
    n_first = np.array([int.from_bytes(e[:8], "little") for e in enc], dtype=np.uint64)
    n_last = np.array([int.from_bytes(e[-8:], "little") if len(e) > 8 else 0 for e in enc],
                      dtype=np.uint64)
    n_len = np.array([len(e) for e in enc], dtype=np.int64)
    nh = _hash(n_first, n_last, n_len)
    order = np.argsort(nh)
    nh_sorted = nh[order]
    at = np.minimum(np.searchsorted(nh_sorted, h), len(enc) - 1)
    cand = order[at]
    ok = ((nh_sorted[at] == h) & (n_len[cand] == length) & (n_first[cand] == first)
          & (n_last[cand] == last))
    for code in [i for i, e in enumerate(enc) if len(e) > 16]:
        sel = np.flatnonzero(ok & (cand == code))
        if len(sel):
            e = np.frombuffer(enc[code], np.uint8)
            same = (data[starts[sel][:, None] + np.arange(len(e))] == e).all(axis=1)
            ok[sel[~same]] = False
    codes[ok] = cand[ok]
    lookup = {nm: i for i, nm in enumerate(names)}
    for i in np.flatnonzero(escaped & (codes < 0)).tolist():
        text = decode_string(data, int(starts[i]), int(ends[i]))
        if text in lookup:
            codes[i] = lookup[text]
    return codes


def decode_string(data: np.ndarray, start: int, end: int) -> str | None:
    """Decodes one JSON string content (between its quotes); ``None`` if invalid."""
    try:
        text = json.loads(b'"' + data[start:end].tobytes() + b'"')
    except ValueError:
        return None
    return text if isinstance(text, str) else None


def raw_text(data: np.ndarray, start: int, end: int, limit: int = 60) -> str:
    """The JSON text ``data[start:end]`` for a reject reason (shortened)."""
    text = data[start:min(end, start + limit)].tobytes().decode("utf-8", "replace")
    return text + ("..." if end - start > limit else "")


def string_values(parts: Parts, starts: np.ndarray, ends: np.ndarray,
                  escaped: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """The contents of JSON strings (between quotes), unescaped, as ``binary``.

    Strings without a backslash are views of the input; escaped ones are unescaped by
    Arrow's JSON parser (one small document for all of them).

    Returns:
        The contents and a mask of strings whose escapes are invalid.
    """
    plain = spans(parts, starts, ends).cast(pa.binary())
    esc = np.flatnonzero(escaped)
    bad = np.zeros(len(starts), dtype=bool)
    if not len(esc):
        return plain, bad
    decoded, bad_esc = _unescape(parts.data, starts[esc] - 1, ends[esc] + 1)
    bad[esc] = bad_esc
    index = np.arange(len(starts), dtype=np.int64)
    index[esc] = len(starts) + np.arange(len(esc))
    both = pa.concat_arrays([plain, decoded.cast(pa.binary())])
    return both.take(pa.array(index)), bad


def _unescape(data: np.ndarray, starts: np.ndarray, ends: np.ndarray
              ) -> tuple[pa.Array, np.ndarray]:
    """Parses quoted JSON strings ``data[starts:ends]`` with Arrow's JSON reader."""
    lengths = ends - starts
    toks = gather(data, starts, lengths)
    const = np.frombuffer(b'{"v":}\n', np.uint8)
    ext = np.concatenate([toks, const])
    c0 = len(toks)
    tok_start = np.cumsum(lengths) - lengths
    k = len(starts)
    seg_start = np.stack([np.full(k, c0), tok_start, np.full(k, c0 + 5)], axis=1).ravel()
    seg_len = np.stack([np.full(k, 5), lengths, np.full(k, 2)], axis=1).ravel()
    doc = gather(ext, seg_start, seg_len)
    line_ends = np.cumsum(lengths + 7)
    line_starts = line_ends - lengths - 7
    schema = pa.schema([("v", pa.string())])
    table, bad = _read_lines(doc, line_starts, line_ends, schema)
    return scatter(table.column("v").combine_chunks(), np.flatnonzero(~bad), k), bad


# ---------------------------------------------------------------------- Arrow validation
def _read_lines(doc: np.ndarray, line_starts: np.ndarray, line_ends: np.ndarray,
                schema: pa.Schema, *, separated: bool = True) -> tuple[pa.Table, np.ndarray]:
    """Reads the JSON objects ``doc[line_starts[i]:line_ends[i]]`` with Arrow, bisecting on
    failure. With ``separated=False`` the objects need no newline between them (Arrow's
    ``newlines_in_values`` chunker finds their boundaries); bytes between the ranges must
    be blank. Returns the rows of the objects that parsed (in order) and the mask of those
    that did not (or that did not read as exactly one object)."""
    k = len(line_starts)
    bad = np.zeros(k, dtype=bool)
    tables: list[pa.Table] = []
    longest = int((line_ends - line_starts).max()) if k else 0
    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore",
                              newlines_in_values=not separated)
    read = pj.ReadOptions(use_threads=True, block_size=max(1 << 20, 2 * longest + 64))

    def go(i: int, j: int) -> None:
        lo, hi = int(line_starts[i]), int(line_ends[j - 1])
        try:
            t = pj.read_json(pa.BufferReader(pa.py_buffer(doc[lo:hi])), read_options=read,
                             parse_options=options)
            if t.num_rows == j - i:
                tables.append(t)
                return
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        if j - i == 1:
            bad[i] = True
            return
        mid = (i + j) // 2
        go(i, mid)
        go(mid, j)

    if k:
        go(0, k)
    if not tables:
        return pa.table({f.name: pa.nulls(0, f.type) for f in schema}), bad
    return pa.concat_tables(tables), bad


def arrow_validate(parts: Parts, check: np.ndarray, reasons: np.ndarray) -> None:
    """Parses the events of ``check`` with Arrow's JSON reader (no column is converted)
    and refuses those it cannot parse as exactly one object, or that are not UTF-8.

    JSON text is UTF-8 (RFC 8259), and Arrow's parser does not check the bytes of
    members it skips, so the encoding of every event is checked first (one Arrow UTF-8
    validation of all of them; bad events are isolated by bisection).

    The values of a binary array are contiguous, so a chunk of events is read straight
    from the input buffer (zero copy) unless some of its events are left out, which are
    then blanked in a copy.
    """
    events = np.flatnonzero(check)
    if not len(events):
        return
    _, not_utf8 = cast_rows(spans(parts, parts.starts[events], parts.ends[events]),
                            pa.string_view())
    if not_utf8.any():
        bad = events[not_utf8]
        reasons[bad[no_reason(reasons[bad])]] = "invalid JSON: not valid UTF-8"
        check = check.copy()
        check[bad] = False
        events = events[~not_utf8]
        if not len(events):
            return
    n = parts.n
    csum = np.cumsum(parts.lengths)
    e0 = int(events[0])
    while e0 < n:
        base = csum[e0 - 1] if e0 else 0
        e1 = min(max(int(np.searchsorted(csum, base + _CHUNK_BYTES, side="right")), e0 + 1), n)
        sel = np.flatnonzero(check[e0:e1]) + e0
        if len(sel):
            lo, hi = int(parts.starts[e0]), int(parts.ends[e1 - 1])
            doc = parts.data[lo:hi]
            if len(sel) < e1 - e0:
                skip = ~check[e0:e1]
                doc = doc.copy()
                doc[np.repeat(skip, parts.lengths[e0:e1])] = 32
            starts, ends = parts.starts[sel] - lo, parts.ends[sel] - lo
            _, bad = _read_lines(doc, starts, ends, pa.schema([]), separated=False)
            for e in np.flatnonzero(bad).tolist():
                if reasons[sel[e]] is None:
                    reasons[sel[e]] = _arrow_reason(doc[int(starts[e]):int(ends[e])])
        e0 = e1


def _arrow_reason(doc: np.ndarray) -> str:
    try:
        t = pj.read_json(pa.BufferReader(pa.py_buffer(doc)),
                         parse_options=pj.ParseOptions(explicit_schema=pa.schema([]),
                                                       unexpected_field_behavior="ignore",
                                                       newlines_in_values=True))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        msg = str(exc).removeprefix("JSON parse error: ").removesuffix(" in row 0")
        return f"invalid JSON: {msg}"
    return f"invalid JSON: not a single object ({t.num_rows} values)"
