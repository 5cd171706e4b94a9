"""The structural scan of many JSON events at once: which scanner indexes each chunk (private).

Arrow's JSON reader cannot tell an absent member from one set to ``null`` (both read as
null), and *absent is not null* for change events. So the JSON decoders find the members
of every event themselves, for all events at once (:func:`scan`), in chunks of a few MB
so the working arrays stay small. What a scan produces and the budgets it enforces are
in :mod:`._jsonindex`; this module cuts the chunks and picks the scanner of each:

- **the compiled pass**: when the C extension :mod:`._cscan` (``_cscan.c``) is built,
  each chunk is first indexed by it: a strict parser that accepts only well-formed JSON
  objects, for which its index equals the numpy one. It also marks the events that are
  valid JSON text as a whole (:attr:`JsonScan.verified`), which then skip Arrow's
  grammar check. ``tests/formats/test_compiled_scan.py`` checks both against numpy and
  Arrow. Grammar details it does not check (a missing comma, a bad literal in an ignored
  member, a bad escape) are checked by :func:`._jsongrammar.check_grammar`, which gives
  the verdict of Arrow's JSON reader (compiled, or Arrow's reader itself when the pass
  is not built);
- **the numpy scanner** (:mod:`._jsonscan_numpy`): a chunk holding any event the compiled
  pass does not accept, or every chunk when the pass is not built. It gives every
  invalid event its reason.

Both refuse an event beyond its :class:`~._jsonindex.Budget` with the same reason.
"""

from __future__ import annotations

import numpy as np

from cdc_sink.formats._arrays import Parts, new_reasons
from cdc_sink.formats._jsonindex import (
    KIND_ARRAY,
    KIND_BAD,
    KIND_FALSE,
    KIND_NAMES,
    KIND_NULL,
    KIND_NUMBER,
    KIND_OBJECT,
    KIND_STRING,
    KIND_TRUE,
    Budget,
    JsonScan,
    Members,
    no_members,
)
from cdc_sink.formats._jsonscan_numpy import numpy_chunk, skip_ws

try:  # the compiled pass (cdc_sink/formats/_cscan.c); numpy alone when it is not built
    from cdc_sink.formats import _cscan as _cscan  # re-exported: one switch for every use
except ImportError:  # pragma: no cover - depends on the install
    _cscan = None  # type: ignore[assignment]

__all__ = [  # the scan, and the index it produces (re-exported for the decoders)
    "KIND_ARRAY",
    "KIND_BAD",
    "KIND_FALSE",
    "KIND_NAMES",
    "KIND_NULL",
    "KIND_NUMBER",
    "KIND_OBJECT",
    "KIND_STRING",
    "KIND_TRUE",
    "RUN_BYTES",
    "Budget",
    "JsonScan",
    "Members",
    "compiled_chunk",
    "numpy_chunk",
    "scan",
    "skip_ws",
]

RUN_BYTES = 1 << 20
"""The JSON decoders process runs of events of about this many bytes at a time."""
_CHUNK_BYTES = RUN_BYTES  # scan chunks (Arrow validation uses the same size)


# status of each event from the compiled pass (ST_* of _cscan.c)
_ST_ACCEPTED, _ST_VERIFIED, _ST_MEMBERS, _ST_DEEP, _ST_ROOM = range(5)


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
        return JsonScan(reasons, no_members(), verified)
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
