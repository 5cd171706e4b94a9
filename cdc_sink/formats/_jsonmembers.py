"""Members of each event, and a column's values with their reject reasons (private).

The layer between the structural index (:mod:`._jsonscan`) and the value conversion
(:mod:`._jsonvalues`) that both JSON decoders share: the top-level members of every
event (:func:`index_top`), the member of each event for each name, the children of an
object member, integer members, a column's array over all events (refusing bad values
with their reasons). All vectorized. Reject reasons that quote a member are formatted
once per refused event, for its first such member (an event keeps its first reason):
never per member, whatever an event holds (issue 38), and a quoted name is shortened.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from cdc_sink.formats._arrays import Parts, int_bounds, no_reason, refuse, scatter
from cdc_sink.formats._jsonnumbers import int_values
from cdc_sink.formats._jsonscan import (
    KIND_NULL,
    KIND_NUMBER,
    KIND_STRING,
    JsonScan,
    Members,
)
from cdc_sink.formats._jsonstrings import decode_string, match_strings, raw_text
from cdc_sink.formats._jsonvalues import Hints, column_values
from cdc_sink.formats.value_ranges import out_of_range_reason
from cdc_sink.schema import Column, type_to_str

__all__ = [
    "children",
    "column_array",
    "first_members",
    "index_top",
    "int_member",
    "member_kind",
    "refuse_members",
    "refuse_range",
    "string_codes",
]

_NAME_LIMIT = 120
"""Longest member name (in bytes of its JSON text) quoted whole in a reject reason."""


def index_top(
    parts: Parts,
    sc: JsonScan,
    names: Sequence[str],
    reasons: np.ndarray,
    *,
    prefix: str = "",
    what: str = "member",
) -> tuple[Members, np.ndarray]:
    """The opening of a JSON decode run, after :func:`~._jsonscan.scan`: takes the
    structure reasons into ``reasons`` (after ``prefix``) and finds each event's
    top-level member of each name.

    Returns:
        The members, and ``out[j, e]``: the member of event ``e`` named ``names[j]``
        (-1 when absent; an event holding a name twice is refused, naming ``what``).
    """
    bad_structure = np.flatnonzero(~no_reason(sc.reasons))
    if prefix:
        reasons[bad_structure] = [prefix + r for r in sc.reasons[bad_structure]]
    else:
        reasons[bad_structure] = sc.reasons[bad_structure]
    m = sc.members
    top = np.flatnonzero(m.level == 1)
    return m, named_members(parts, m, top, names, reasons, what)


def named_members(
    parts: Parts,
    m: Members,
    members: np.ndarray,
    names: Sequence[str],
    reasons: np.ndarray,
    what: str = "member",
) -> np.ndarray:
    """:func:`first_members` of ``members`` by their names (see :func:`index_top`)."""
    codes = match_strings(
        parts.data, m.name_start[members], m.name_end[members], m.name_escaped[members], names
    )
    return first_members(m, members, codes, names, len(reasons), reasons, what)


def string_codes(parts: Parts, m: Members, idx: np.ndarray, names: Sequence[str]) -> np.ndarray:
    """Index in ``names`` of the string value of member ``idx`` of each event (-1: the
    event has no such member, its value is not a string, or not one of ``names``)."""
    code = np.full(len(idx), -1, dtype=np.int64)
    at = np.flatnonzero(member_kind(m, idx) == KIND_STRING)
    mo = idx[at]
    code[at] = match_strings(
        parts.data, m.value_start[mo] + 1, m.value_end[mo] - 1, m.value_escaped[mo], names
    )
    return code


def children(
    m: Members, parent: np.ndarray, level: int | None = None, *, among: np.ndarray | None = None
) -> np.ndarray:
    """Members whose parent is the member ``parent[e]`` of their event ``e`` (in document
    order); only those at ``level`` when given, and only those of ``among`` (member
    indices, e.g. every member of a level, found once for several calls) when given."""
    if among is not None:
        cand = among
    elif level is None:
        cand = np.flatnonzero(m.level >= 2)
    else:
        cand = np.flatnonzero(m.level == level)
    par = m.parent[cand]
    found: np.ndarray = cand[(par >= 0) & (par == parent[m.event[cand]])]
    return found


def first_members(
    m: Members,
    members: np.ndarray,
    codes: np.ndarray,
    names: Sequence[str],
    n: int,
    reasons: np.ndarray,
    what: str = "member",
) -> np.ndarray:
    """The member of each event for each name: ``out[j, e]`` (-1 when absent).

    ``members`` must be in document order; an event holding a name twice is refused.
    """
    out = np.full((len(names), n), -1, dtype=np.int64)
    for j, name in enumerate(names):
        sel = members[codes == j]
        ev = m.event[sel]
        _refuse_repeats(reasons, ev, f"duplicate {what} {name!r}")
        out[j, ev] = sel
    return out


def _refuse_repeats(reasons: np.ndarray, events: np.ndarray, reason: str) -> None:
    """Refuses the events that appear more than once in ``events`` (sorted: the events of
    members in document order) with ``reason``."""
    dup = events[1:][events[1:] == events[:-1]]
    if len(dup):
        mask = np.zeros(len(reasons), dtype=bool)
        mask[dup] = True
        refuse(reasons, mask, reason)


def member_kind(m: Members, idx: np.ndarray) -> np.ndarray:
    """Kind of the member ``idx`` of each event (-1 where ``idx`` is -1)."""
    if len(m) == 0:
        return np.full(len(idx), -1, dtype=np.int64)
    kinds: np.ndarray = np.where(idx >= 0, m.kind[np.maximum(idx, 0)], -1)
    return kinds


def refuse_members(
    reasons: np.ndarray,
    parts: Parts,
    m: Members,
    sel: np.ndarray,
    template: str,
    *,
    use_name: bool = False,
) -> None:
    """Refuses the events of members ``sel`` with ``template`` formatted with a member's
    value text (``{raw}``) or decoded name (``{name!r}``): the first member of ``sel``
    (document order) of each event that has no reason yet, once per event."""
    if not len(sel):
        return
    first = _first_unrefused(reasons, m, sel)
    if not len(first):
        return
    data = parts.data
    if use_name:
        texts = [
            template.format(name=_name_text(data, int(a), int(b)))
            for a, b in zip(m.name_start[first].tolist(), m.name_end[first].tolist(), strict=True)
        ]
    else:
        texts = [
            template.format(raw=raw_text(data, int(a), int(b)))
            for a, b in zip(m.value_start[first].tolist(), m.value_end[first].tolist(), strict=True)
        ]
    _give(reasons, m.event[first], texts)


def _first_unrefused(reasons: np.ndarray, m: Members, sel: np.ndarray) -> np.ndarray:
    """The first member of ``sel`` (in document order) of each event, for the events
    that have no reason yet (vectorized: no work per member beyond a sort)."""
    if not len(sel):
        return sel
    sel = np.sort(sel, kind="stable")  # usually sorted already: a linear pass
    ev = m.event[sel]
    first = np.ones(len(sel), dtype=bool)
    first[1:] = ev[1:] != ev[:-1]
    cand = sel[first]
    fresh: np.ndarray = cand[no_reason(reasons[m.event[cand]])]
    return fresh


def _give(reasons: np.ndarray, events: np.ndarray, texts: list[str]) -> None:
    """Gives ``texts[i]`` to event ``events[i]`` (distinct events without a reason)."""
    out = np.empty(len(texts), dtype=object)
    out[:] = texts
    reasons[events] = out


def _name_text(data: np.ndarray, start: int, end: int) -> str | None:
    """A member name for a reject reason: decoded (``None`` if invalid); a long one is
    cut to its first :data:`_NAME_LIMIT` bytes (at a whole escape and character)."""
    if end - start <= _NAME_LIMIT:
        return decode_string(data, start, end)
    for cut in range(start + _NAME_LIMIT, start + _NAME_LIMIT - 8, -1):
        head = decode_string(data, start, cut)
        if head is not None:
            return head + "..."
    return raw_text(data, start, end, _NAME_LIMIT)


def column_array(
    parts: Parts,
    m: Members,
    sel: np.ndarray,
    c: Column,
    target: pa.DataType,
    n: int,
    reasons: np.ndarray,
    hints: Hints | None = None,
) -> pa.Array:
    """Values of column ``c`` from its members ``sel`` (document order) as an array of
    all ``n`` events; bad values and repeated members refuse their events."""
    rows = m.event[sel]
    _refuse_repeats(reasons, rows, f"duplicate column {c.name!r}")
    values, bad, oor = column_values(parts, m, sel, c, target, hints)
    if oor.any():
        refuse_range(reasons, parts, m, sel[oor], c)
    if bad.any():
        refuse_members(
            reasons,
            parts,
            m,
            sel[bad & ~oor],
            f"column {c.name!r}: {{raw}} is not a valid {type_to_str(c.type)}",
        )
    return scatter(values, rows, n)


def refuse_range(reasons: np.ndarray, parts: Parts, m: Members, sel: np.ndarray, c: Column) -> None:
    """Refuses the events of members ``sel``, values out of the range of column ``c``
    (reject path: one reason per event, naming its first such value and the range)."""
    first = _first_unrefused(reasons, m, sel)
    if not len(first):
        return
    texts = [
        out_of_range_reason(c, raw_text(parts.data, int(a), int(b)))
        for a, b in zip(m.value_start[first].tolist(), m.value_end[first].tolist(), strict=True)
    ]
    _give(reasons, m.event[first], texts)


def int_member(
    parts: Parts, m: Members, idx: np.ndarray, reasons: np.ndarray, template: str
) -> tuple[np.ndarray, np.ndarray]:
    """Integer value of the member ``idx`` of each event (-1: none; ``null`` counts as
    none). Other values refuse the event with ``template`` (``{raw}``).

    Returns:
        The values (0 where missing) and the mask of events that have one.
    """
    n = len(idx)
    kinds = member_kind(m, idx)
    num = np.flatnonzero(kinds == KIND_NUMBER)
    v, bad, _ = int_values(parts, m, idx[num], *int_bounds(pa.int64()))
    out = np.zeros(n, dtype=np.int64)
    given = np.zeros(n, dtype=bool)
    out[num[~bad]] = v[~bad]
    given[num[~bad]] = True
    wrong = np.concatenate(
        [idx[num[bad]], idx[(kinds >= 0) & (kinds != KIND_NUMBER) & (kinds != KIND_NULL)]]
    )
    refuse_members(reasons, parts, m, np.sort(wrong), template)
    return out, given
