"""Typed column values from indexed JSON members, vectorized (private).

Given the members of one column (see :mod:`._jsonscan`), builds an Arrow array of the
column's type. Every kind of JSON value is converted by one Arrow/numpy operation over
all the members of that kind:

=====================  ===============================================================
column type            accepted JSON values
=====================  ===============================================================
int8 .. int64          integer numbers in range
float32, float64       numbers (``NaN``/``Infinity`` included); float32 refuses finite
                       values that overflow it
bool                   ``true``/``false``
string                 strings (unescaped, valid UTF-8)
binary                 base64 strings (standard alphabet, padded)
date32                 ISO dates ``"YYYY-MM-DD"`` or integers (days since the epoch)
timestamp[us, UTC]     ISO 8601 strings (with ``Z``/offset, or naive = UTC) or integers
                       (microseconds, or the unit of :class:`Hints`)
decimal128(p, s)       decimal strings or numbers (exact at scale s, at most p digits),
                       or base64 big-endian unscaled integers (Debezium "precise")
=====================  ===============================================================

``null`` is a null value of any column (nullability is checked by
:meth:`~cdc_sink.changes.ChangeBatch.from_arrow`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_sink.formats._arrays import (
    Parts,
    b64decode,
    binary_parts,
    cast_rows,
    decimal_fits,
    decimal_overflow,
    fixed_array,
    int_bounds,
    refuse,
    refuse_each,
    scatter,
    spans,
)
from cdc_sink.formats._jsonscan import (
    KIND_FALSE,
    KIND_NULL,
    KIND_NUMBER,
    KIND_STRING,
    KIND_TRUE,
    Members,
    decode_string,
    raw_text,
    string_values,
)
from cdc_sink.schema import Column, type_to_str

UNIT_US, UNIT_MS, UNIT_NS = 0, 1, 2
"""Units of integer timestamps (:attr:`Hints.ts_unit`)."""

_ZONED = r"[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:[zZ]|[+-]\d{2}(?::?\d{2})?)$"


@dataclass
class Hints:
    """Per-member encoding hints (Debezium field schemas); ``None`` = the defaults.

    Attributes:
        ts_unit: ``UNIT_*`` of integer timestamps.
        dec_base64: Whether a decimal string is base64 of the unscaled big-endian
            integer (rather than decimal text).
        dec_scale: Scale of base64 decimals (defaults to the column's scale).
    """

    ts_unit: np.ndarray | None = None
    dec_base64: np.ndarray | None = None
    dec_scale: np.ndarray | None = None


class _Out:
    """Collects typed pieces (member subsets) and merges them in member order."""

    def __init__(self, m: int, target: pa.DataType) -> None:
        self.m = m
        self.target = target
        self.index = np.full(m, -1, dtype=np.int64)
        self.arrays: list[pa.Array] = []
        self.size = 0

    def put(self, at: np.ndarray, arr: pa.Array) -> None:
        if not len(at):
            return
        self.index[at] = self.size + np.arange(len(at))
        self.arrays.append(arr.cast(self.target) if arr.type != self.target else arr)
        self.size += len(at)

    def result(self) -> pa.Array:
        if not self.arrays:
            return pa.nulls(self.m, self.target)
        merged = pa.concat_arrays(self.arrays)
        idx = self.index
        if self.size == self.m and (idx == np.arange(self.m)).all():
            return merged
        return merged.take(pa.array(idx, mask=idx < 0))


def _tokens(parts: Parts, m: Members, sel: np.ndarray) -> pa.Array:
    """The raw JSON text of number members as ``string`` (null where not UTF-8: such a
    token is no number, and the cast that follows refuses it)."""
    views = spans(parts, m.value_start[sel], m.value_end[sel])
    try:
        return views.cast(pa.string())
    except pa.ArrowInvalid:
        arr, _ = cast_rows(views.cast(pa.binary()), pa.string())
        return arr.fill_null("?")


def _strings(parts: Parts, m: Members, sel: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """Unescaped contents of string members (``binary``) and a mask of bad escapes."""
    return string_values(parts, m.value_start[sel] + 1, m.value_end[sel] - 1,
                         m.value_escaped[sel])


def _ints(parts: Parts, m: Members, sel: np.ndarray, lo: int, hi: int
          ) -> tuple[np.ndarray, np.ndarray]:
    """Integer number members as int64, with a mask of non-integers/out of range."""
    arr, bad = cast_rows(_tokens(parts, m, sel), pa.int64())
    v = np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    bad |= (v < lo) | (v > hi)
    return v, bad


def column_values(parts: Parts, m: Members, sel: np.ndarray, c: Column, target: pa.DataType,
                  hints: Hints | None = None) -> tuple[pa.Array, np.ndarray]:
    """Converts the members ``sel`` (values of column ``c``) to ``target``.

    Args:
        parts: The message values.
        m: The member index.
        sel: Indices of the column's members.
        c: The column (its type decides the accepted JSON values).
        target: Arrow type of the result (``c.type``, or int64 for a sequence column).
        hints: Optional per-member encoding hints (aligned with ``sel``).

    Returns:
        One value per member (null for ``null`` and for bad members) and the mask of bad
        members (a JSON value the column type does not accept).
    """
    n = len(sel)
    kind = m.kind[sel]
    t = c.type
    out = _Out(n, target)
    bad = (kind != KIND_NULL) & ~_accepted(t, kind)
    num = np.flatnonzero(kind == KIND_NUMBER)
    txt = np.flatnonzero(kind == KIND_STRING)
    if pa.types.is_integer(t):
        lo, hi = int_bounds(t)
        v, b = _ints(parts, m, sel[num], lo, hi)
        bad[num[b]] = True
        out.put(num, fixed_array(v, ~b, pa.int64()))
    elif pa.types.is_floating(t):
        arr, b = cast_rows(_tokens(parts, m, sel[num]), pa.float64())
        if t == pa.float32():
            f = np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.float64)
            with np.errstate(over="ignore"):
                b |= np.isfinite(f) & ~np.isfinite(f.astype(np.float32))
        bad[num[b]] = True
        out.put(num, arr)
    elif pa.types.is_boolean(t):
        tf = np.flatnonzero((kind == KIND_TRUE) | (kind == KIND_FALSE))
        out.put(tf, pa.array(kind[tf] == KIND_TRUE, pa.bool_()))
    elif pa.types.is_string(t):
        raw, b = _strings(parts, m, sel[txt])
        arr, b2 = cast_rows(raw, pa.string())
        bad[txt[b | b2]] = True
        out.put(txt, arr)
    elif pa.types.is_binary(t):
        raw, b = _strings(parts, m, sel[txt])
        arr, b2 = b64decode(raw)
        bad[txt[b | b2]] = True
        out.put(txt, arr)
    elif pa.types.is_date32(t):
        raw, b = _strings(parts, m, sel[txt])
        arr, b2 = cast_rows(raw, pa.string())
        arr, b3 = cast_rows(arr, pa.date32())
        bad[txt[b | b2 | b3]] = True
        out.put(txt, arr)
        lo, hi = int_bounds(pa.int32())
        v, b = _ints(parts, m, sel[num], lo, hi)
        bad[num[b]] = True
        out.put(num, fixed_array(v.astype(np.int32), ~b, pa.date32()))
    elif pa.types.is_timestamp(t):
        raw, b = _strings(parts, m, sel[txt])
        arr, b2 = parse_timestamps(raw)
        bad[txt[b | b2]] = True
        out.put(txt, arr)
        unit = None if hints is None or hints.ts_unit is None else hints.ts_unit[num]
        v, b = _ints(parts, m, sel[num], *int_bounds(pa.int64()))
        v, b3 = _to_micros(v, unit)
        bad[num[b | b3]] = True
        out.put(num, fixed_array(v, ~(b | b3), t))
    elif pa.types.is_decimal(t):
        b64 = (np.zeros(len(txt), bool) if hints is None or hints.dec_base64 is None
               else hints.dec_base64[txt])
        raw, b = _strings(parts, m, sel[txt])
        plain = np.flatnonzero(~b64)
        arr, b2 = cast_rows(raw.take(pa.array(plain)), pa.string())
        arr, b3 = cast_rows(arr, t)
        bad[txt[plain[b2 | b3]]] = True
        bad[txt[b]] = True
        out.put(txt[plain], arr)
        packed = np.flatnonzero(b64)
        if len(packed):
            scale = (np.full(len(packed), t.scale) if hints is None or hints.dec_scale is None
                     else hints.dec_scale[txt[packed]])
            arr, b4 = unscaled_decimals(raw.take(pa.array(packed)), scale, t)
            bad[txt[packed[b4]]] = True
            out.put(txt[packed], arr)
        arr, b5 = cast_rows(_tokens(parts, m, sel[num]), t)
        bad[num[b5]] = True
        out.put(num, arr)
    else:  # pragma: no cover - parse_type admits no other type
        raise TypeError(f"unsupported column type {t}")
    values = out.result()
    if pa.types.is_decimal(t):
        bad |= decimal_overflow(values)
    if bad.any():
        values = pc.if_else(pa.array(bad), pa.nulls(n, target), values)
    return values, bad


def _accepted(t: pa.DataType, kind: np.ndarray) -> np.ndarray:
    """Which JSON value kinds a column type accepts (before value checks)."""
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        ok: np.ndarray = kind == KIND_NUMBER
    elif pa.types.is_boolean(t):
        ok = (kind == KIND_TRUE) | (kind == KIND_FALSE)
    elif pa.types.is_string(t) or pa.types.is_binary(t):
        ok = kind == KIND_STRING
    else:  # date32, timestamp, decimal
        ok = (kind == KIND_STRING) | (kind == KIND_NUMBER)
    return ok


def parse_timestamps(raw: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Parses ISO 8601 strings to ``timestamp[us, UTC]``; naive ones are UTC.

    Returns:
        The timestamps (null where bad) and the mask of strings that do not parse.
    """
    strs, bad = cast_rows(raw, pa.string())
    target = pa.timestamp("us", tz="UTC")
    zoned = np.asarray(pc.match_substring_regex(strs, _ZONED).fill_null(False), dtype=bool)
    out = _Out(len(strs), target)
    z = np.flatnonzero(zoned)
    za, zb = cast_rows(strs.take(pa.array(z)), target)
    out.put(z, za)
    nz = np.flatnonzero(~zoned)
    na, nb = cast_rows(strs.take(pa.array(nz)), pa.timestamp("us"))
    out.put(nz, na.cast(target))
    bad[z[zb]] = True
    bad[nz[nb]] = True
    return out.result(), bad


def _to_micros(v: np.ndarray, unit: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Integer timestamps in their unit to microseconds (ns are floored)."""
    bad = np.zeros(len(v), dtype=bool)
    if unit is None:
        return v, bad
    out = v.copy()
    ms = unit == UNIT_MS
    limit = np.iinfo(np.int64).max // 1000
    bad |= ms & (np.abs(v) > limit)
    out[ms] = np.where(bad[ms], 0, v[ms]) * 1000
    ns = unit == UNIT_NS
    out[ns] = np.floor_divide(v[ns], 1000)
    return out, bad


def unscaled_decimals(raw: pa.Array, scale: np.ndarray, target: pa.DataType
                      ) -> tuple[pa.Array, np.ndarray]:
    """Decodes base64 big-endian two's-complement unscaled integers (Kafka Connect's
    ``Decimal``) at ``scale`` each, into ``target``.

    Returns:
        The decimals and the mask of bad values (not base64, empty, wider than 16 bytes,
        more than 38 digits, or not exact in ``target``).
    """
    blob, bad = b64decode(raw)
    p = binary_parts(blob)
    length = p.lengths
    bad |= p.valid & ((length == 0) | (length > 16))
    m = len(length)
    k = np.arange(16)
    last = p.starts + length - 1
    src = np.clip(last[:, None] - k, 0, max(len(p.data) - 1, 0))
    if len(p.data):
        sign = np.where(p.data[np.clip(p.starts, 0, len(p.data) - 1)] >= 128, 255, 0)
        le = np.where(k < length[:, None], p.data[src], sign[:, None]).astype(np.uint8)
    else:
        le = np.zeros((m, 16), dtype=np.uint8)
    bad |= ~decimal_fits(le, 38)
    valid = p.valid & ~bad
    out = _Out(m, target)
    for s in np.unique(scale).tolist():
        at = np.flatnonzero(scale == s)
        if not 0 <= s <= 38:
            bad[at] = True
            continue
        arr = fixed_array(le[at], valid[at], pa.decimal128(38, int(s)))
        arr, b = cast_rows(arr, target)
        bad[at[b]] = True
        out.put(at, arr)
    return out.result(), bad


# ---------------------------------------------------------------------- per-event members
def first_members(m: Members, members: np.ndarray, codes: np.ndarray, names: Sequence[str],
                  n: int, reasons: np.ndarray, what: str = "member") -> np.ndarray:
    """The member of each event for each name: ``out[j, e]`` (-1 when absent).

    ``members`` must be in document order; an event holding a name twice is refused.
    """
    out = np.full((len(names), n), -1, dtype=np.int64)
    for j, name in enumerate(names):
        sel = members[codes == j]
        ev = m.event[sel]
        dup = ev[1:][ev[1:] == ev[:-1]]
        if len(dup):
            mask = np.zeros(n, dtype=bool)
            mask[dup] = True
            refuse(reasons, mask, f"duplicate {what} {name!r}")
        out[j, ev] = sel
    return out


def member_kind(m: Members, idx: np.ndarray) -> np.ndarray:
    """Kind of the member ``idx`` of each event (-1 where ``idx`` is -1)."""
    if len(m) == 0:
        return np.full(len(idx), -1, dtype=np.int64)
    kinds: np.ndarray = np.where(idx >= 0, m.kind[np.maximum(idx, 0)], -1)
    return kinds


def refuse_members(reasons: np.ndarray, parts: Parts, m: Members, sel: np.ndarray,
                   template: str, *, use_name: bool = False) -> None:
    """Refuses the events of members ``sel`` with ``template`` formatted with each
    member's value text (``{raw}``) or decoded name (``{name!r}``) (reject path)."""
    if not len(sel):
        return
    texts = []
    for i in sel.tolist():
        if use_name:
            name = decode_string(parts.data, int(m.name_start[i]), int(m.name_end[i]))
            texts.append(template.format(name=name))
        else:
            texts.append(template.format(
                raw=raw_text(parts.data, int(m.value_start[i]), int(m.value_end[i]))))
    refuse_each(reasons, m.event[sel], texts)


def column_array(parts: Parts, m: Members, sel: np.ndarray, c: Column, target: pa.DataType,
                 n: int, reasons: np.ndarray, hints: Hints | None = None) -> pa.Array:
    """Values of column ``c`` from its members ``sel`` (document order) as an array of
    all ``n`` events; bad values and repeated members refuse their events."""
    rows = m.event[sel]
    dup = rows[1:][rows[1:] == rows[:-1]]
    if len(dup):
        mask = np.zeros(n, dtype=bool)
        mask[dup] = True
        refuse(reasons, mask, f"duplicate column {c.name!r}")
    values, bad = column_values(parts, m, sel, c, target, hints)
    refuse_members(reasons, parts, m, sel[bad],
                   f"column {c.name!r}: {{raw}} is not a valid {type_to_str(c.type)}")
    return scatter(values, rows, n)


def int_member(parts: Parts, m: Members, idx: np.ndarray, reasons: np.ndarray,
               template: str) -> tuple[np.ndarray, np.ndarray]:
    """Integer value of the member ``idx`` of each event (-1: none; ``null`` counts as
    none). Other values refuse the event with ``template`` (``{raw}``).

    Returns:
        The values (0 where missing) and the mask of events that have one.
    """
    n = len(idx)
    kinds = member_kind(m, idx)
    num = np.flatnonzero(kinds == KIND_NUMBER)
    v, bad = _ints(parts, m, idx[num], *int_bounds(pa.int64()))
    out = np.zeros(n, dtype=np.int64)
    given = np.zeros(n, dtype=bool)
    out[num[~bad]] = v[~bad]
    given[num[~bad]] = True
    wrong = np.concatenate([idx[num[bad]],
                            idx[(kinds >= 0) & (kinds != KIND_NUMBER) & (kinds != KIND_NULL)]])
    refuse_members(reasons, parts, m, np.sort(wrong), template)
    return out, given
