"""Typed column values from indexed JSON members, vectorized (private).

Given the members of one column (see :mod:`._jsonscan`), builds an Arrow array of the
column's type. Every kind of JSON value is converted by one Arrow/numpy operation over
all the members of that kind:

=====================  ===============================================================
column type            accepted JSON values
=====================  ===============================================================
int8 .. int64          integer numbers in range
float32, float64       numbers (``NaN``/``Infinity`` included); a finite literal that
                       overflows the type (``1e400``) is refused, never ±inf. With
                       :attr:`Hints.connect`, also the strings ``"NaN"``,
                       ``"Infinity"``, ``"-Infinity"`` (Kafka Connect's JsonConverter)
bool                   ``true``/``false``
string                 strings (unescaped, valid UTF-8)
binary                 base64 strings (standard alphabet, padded); with
                       :attr:`Hints.connect`, Debezium geometries ``{"wkb": base64,
                       "srid": n}`` (their WKB bytes)
date32                 ISO dates ``"YYYY-MM-DD"`` or integers (days since the epoch),
                       within 0001-01-01..9999-12-31
timestamp[us, UTC]     ISO 8601 strings (with ``Z``/offset, or naive = UTC; 7 to 9
                       fraction digits are truncated to microseconds, like nanosecond
                       integers) or integers (microseconds, or the unit of
                       :class:`Hints`), within 0001-01-01..9999-12-31 (UTC)
decimal128(p, s)       decimal strings or numbers exact at scale s with at most p
                       digits, whatever their length or exponent (digits are counted
                       on the text before any cast, :mod:`._decimaltext`), or
                       base64 big-endian unscaled integers (Debezium "precise"); with
                       :attr:`Hints.connect`, also ``{"scale": k, "value": base64}``
                       objects (Debezium ``VariableScaleDecimal``)
=====================  ===============================================================

``null`` is a null value of any column (nullability is checked by
:meth:`~cdc_sink.batch.ChangeBatch.from_arrow`). A refused value is either *invalid*
(not a value of the type) or *out of range* (a value of the type the column cannot
hold); the reject reason says which.
"""

from __future__ import annotations

from collections.abc import Callable
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
    with_nulls,
)
from cdc_sink.formats._decimaltext import decimal_text
from cdc_sink.formats._jsonarrow import string_values
from cdc_sink.formats._jsonnumbers import int_values, number_tokens
from cdc_sink.formats._jsonscan import (
    KIND_FALSE,
    KIND_NULL,
    KIND_NUMBER,
    KIND_OBJECT,
    KIND_STRING,
    KIND_TRUE,
    Members,
)
from cdc_sink.formats._jsonstrings import match_strings
from cdc_sink.formats.value_ranges import (
    MAX_DAY,
    MAX_MICROS,
    MIN_DAY,
    MIN_MICROS,
    UNIT_DAYS,
    UNIT_MS,
    UNIT_NS,
    UNIT_TIME_OF_DAY,
)
from cdc_sink.schema import Column

_ZONED = r"[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:[zZ]|[+-]\d{2}(?::?\d{2})?)$"
_NANO_FRACTION = r"(:\d{2}\.\d{6})\d{1,3}(\D|$)"  # 7..9 fraction digits: keep 6

_FLOAT_WORDS = ("NaN", "Infinity", "-Infinity")
_FLOAT_WORD_VALUES = np.array([np.nan, np.inf, -np.inf])
_STRUCT_NAMES = ("scale", "value")
_GEOMETRY = ("wkb", "srid")


@dataclass
class Hints:
    """Per-member encoding hints (Debezium field schemas); ``None`` = the defaults.

    Attributes:
        ts_unit: ``UNIT_*`` of integer timestamps.
        dec_base64: Whether a decimal string is base64 of the unscaled big-endian
            integer (rather than decimal text).
        dec_scale: Scale of base64 decimals (defaults to the column's scale).
        connect: Also accept Kafka Connect's JSON forms: ``"NaN"``/``"Infinity"``/
            ``"-Infinity"`` strings for floats, ``VariableScaleDecimal`` objects for
            decimals.
    """

    ts_unit: np.ndarray | None = None
    dec_base64: np.ndarray | None = None
    dec_scale: np.ndarray | None = None
    connect: bool = False


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
        merged = self.arrays[0] if len(self.arrays) == 1 else pa.concat_arrays(self.arrays)
        idx = self.index
        if self.size == self.m and (idx == np.arange(self.m)).all():
            return merged
        return merged.take(pa.array(idx, mask=idx < 0))


def _strings(
    parts: Parts, m: Members, sel: np.ndarray, *, views: bool = False
) -> tuple[pa.Array, np.ndarray]:
    """Unescaped contents of string members (``binary``, or ``binary_view`` with
    ``views``) and a mask of bad escapes."""
    return string_values(
        parts, m.value_start[sel] + 1, m.value_end[sel] - 1, m.value_escaped[sel], views=views
    )


def column_values(
    parts: Parts,
    m: Members,
    sel: np.ndarray,
    c: Column,
    target: pa.DataType,
    hints: Hints | None = None,
) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Converts the members ``sel`` (values of column ``c``) to ``target``.

    Args:
        parts: The message values.
        m: The member index.
        sel: Indices of the column's members.
        c: The column (its type decides the accepted JSON values).
        target: Arrow type of the result (``c.type``, or int64 for a sequence column).
        hints: Optional per-member encoding hints (aligned with ``sel``).

    Returns:
        One value per member (null for ``null`` and for bad members), the mask of bad
        members (a JSON value the column type does not accept) and the mask of the bad
        members that are out of range (a value of the type the column cannot hold).
    """
    t = c.type
    cv = _Conversion.start(parts, m, sel, t, target, hints)
    _converter(t)(cv)
    values = cv.out.result()
    bad, oor = cv.bad, cv.oor
    if pa.types.is_decimal(t):
        over = decimal_overflow(values)
        bad |= over
        oor |= over
    if bad.any():
        values = with_nulls(values, bad)
    return values, bad, oor & bad


@dataclass
class _Conversion:
    """One column's members being converted: the members by JSON kind, the typed pieces
    so far, and the masks of bad and out-of-range members (aligned with ``sel``)."""

    parts: Parts
    m: Members
    sel: np.ndarray
    t: pa.DataType
    hints: Hints | None
    connect: bool
    kind: np.ndarray
    num: np.ndarray  # positions (in sel) of number members
    txt: np.ndarray  # positions (in sel) of string members
    out: _Out
    bad: np.ndarray
    oor: np.ndarray

    @classmethod
    def start(
        cls,
        parts: Parts,
        m: Members,
        sel: np.ndarray,
        t: pa.DataType,
        target: pa.DataType,
        hints: Hints | None,
    ) -> _Conversion:
        """A conversion of the members ``sel`` of a column of type ``t`` to ``target``;
        members of a JSON kind the type does not accept are bad from the start."""
        kind = m.kind[sel]
        connect = hints is not None and hints.connect
        return cls(
            parts=parts,
            m=m,
            sel=sel,
            t=t,
            hints=hints,
            connect=connect,
            kind=kind,
            num=np.flatnonzero(kind == KIND_NUMBER),
            txt=np.flatnonzero(kind == KIND_STRING),
            out=_Out(len(sel), target),
            bad=(kind != KIND_NULL) & ~_accepted(t, kind, connect),
            oor=np.zeros(len(sel), dtype=bool),
        )

    def strings(self) -> tuple[pa.Array, np.ndarray]:
        """The unescaped contents of the string members, and the mask of bad escapes."""
        return _strings(self.parts, self.m, self.sel[self.txt])

    def refuse(self, at: np.ndarray, bad: np.ndarray, oor: np.ndarray | None = None) -> None:
        """Marks the members ``at[bad]`` bad, and ``at[oor]`` out of range too."""
        self.bad[at[bad]] = True
        if oor is not None:
            self.bad[at[oor]] = True
            self.oor[at[oor]] = True


def _converter(t: pa.DataType) -> Callable[[_Conversion], None]:
    """The conversion of the members of a column of type ``t``."""
    if pa.types.is_integer(t):
        return _integers
    if pa.types.is_floating(t):
        return _floats
    if pa.types.is_boolean(t):
        return _bools
    if pa.types.is_string(t):
        return _texts
    if pa.types.is_binary(t):
        return _binaries
    if pa.types.is_date32(t):
        return _dates
    if pa.types.is_timestamp(t):
        return _timestamps
    if pa.types.is_decimal(t):
        return _decimals
    raise TypeError(f"unsupported column type {t}")  # pragma: no cover - parse_type admits no other


def _integers(cv: _Conversion) -> None:
    """Integer numbers in the column type's range."""
    num = cv.num
    v, b, r = int_values(cv.parts, cv.m, cv.sel[num], *int_bounds(cv.t))
    cv.refuse(num, b)
    cv.oor[num[r]] = True
    cv.out.put(num, fixed_array(v, ~b, pa.int64()))


def _floats(cv: _Conversion) -> None:
    """Numbers (a finite literal beyond the type is out of range); with ``connect`` also
    the strings ``NaN``/``Infinity``/``-Infinity``."""
    num, data = cv.num, cv.parts.data
    starts = cv.m.value_start[cv.sel[num]]
    arr, b = cast_rows(number_tokens(cv.parts, cv.m, cv.sel[num]), pa.float64())
    f = np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.float64)
    first = data[np.minimum(starts + 1, len(data) - 1)]
    word = (data[starts] == ord("I")) | (first == ord("I"))
    r = np.isinf(f) & ~word  # a finite literal beyond float64 (Arrow reads it as inf)
    if cv.t == pa.float32():
        with np.errstate(over="ignore"):
            r |= np.isfinite(f) & ~np.isfinite(f.astype(np.float32))
    cv.refuse(num, b, r)
    cv.out.put(num, arr)
    txt = cv.txt
    if cv.connect and len(txt):
        raw, b = cv.strings()
        code = match_strings(raw_data(raw), *_bounds(raw), np.zeros(len(txt), bool), _FLOAT_WORDS)
        b |= code < 0
        cv.refuse(txt, b)
        cv.out.put(txt, pa.array(_FLOAT_WORD_VALUES[np.maximum(code, 0)], pa.float64(), mask=b))


def _bools(cv: _Conversion) -> None:
    """``true``/``false``."""
    tf = np.flatnonzero((cv.kind == KIND_TRUE) | (cv.kind == KIND_FALSE))
    cv.out.put(tf, pa.array(cv.kind[tf] == KIND_TRUE, pa.bool_()))


def _texts(cv: _Conversion) -> None:
    """Strings, unescaped, valid UTF-8."""
    raw, b = _strings(cv.parts, cv.m, cv.sel[cv.txt], views=True)  # one gather, in the cast
    arr, b2 = cast_rows(raw, pa.string())
    cv.refuse(cv.txt, b | b2)
    cv.out.put(cv.txt, arr)


def _binaries(cv: _Conversion) -> None:
    """Base64 strings; with :attr:`Hints.connect`, Debezium geometries too (``{"wkb":
    base64, "srid": n}``: the column holds the WKB bytes, as the Avro decoder reads them)."""
    raw, b = cv.strings()
    arr, b2 = b64decode(raw)
    cv.refuse(cv.txt, b | b2)
    cv.out.put(cv.txt, arr)
    obj = np.flatnonzero(cv.kind == KIND_OBJECT)
    if cv.connect and len(obj):
        arr, b3 = _geometry(cv.parts, cv.m, cv.sel[obj])
        cv.bad[obj[b3]] = True
        cv.out.put(obj, arr)


def _dates(cv: _Conversion) -> None:
    """ISO date strings or day numbers, within the date range."""
    txt, num = cv.txt, cv.num
    raw, b = cv.strings()
    arr, b2 = cast_rows(raw, pa.string())
    arr, b3 = cast_rows(arr, pa.date32())
    days = np.asarray(arr.cast(pa.int32()).fill_null(0).to_numpy(zero_copy_only=False))
    r = (days < MIN_DAY) | (days > MAX_DAY)
    invalid = b | b2 | b3
    cv.refuse(txt, invalid | r)
    cv.oor[txt[r & ~invalid]] = True
    cv.out.put(txt, arr)
    v, b, _ = int_values(cv.parts, cv.m, cv.sel[num], *int_bounds(pa.int64()))
    r = ~b & ((v < MIN_DAY) | (v > MAX_DAY))
    cv.refuse(num, b, r)
    ok = ~(b | r)
    cv.out.put(num, fixed_array(np.where(ok, v, 0).astype(np.int32), ok, pa.date32()))


def _timestamps(cv: _Conversion) -> None:
    """ISO 8601 strings or integers (in the unit of the hints), within the range."""
    txt, num = cv.txt, cv.num
    if len(txt):
        raw, b = cv.strings()
        arr, b2 = parse_timestamps(raw)
        micros = np.asarray(arr.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False))
        r = (micros < MIN_MICROS) | (micros > MAX_MICROS)
        cv.refuse(txt, b | b2 | r)
        cv.oor[txt[r & ~(b | b2)]] = True
        cv.out.put(txt, arr)
    if not len(num):
        return
    hints = cv.hints
    unit = None if hints is None or hints.ts_unit is None else hints.ts_unit[num]
    v, b, _ = int_values(cv.parts, cv.m, cv.sel[num], *int_bounds(pa.int64()))
    v, r, tod = _to_micros(v, unit)
    b |= tod
    r = ~b & (r | (v < MIN_MICROS) | (v > MAX_MICROS))
    cv.refuse(num, b, r)
    cv.out.put(num, fixed_array(np.where(b | r, 0, v), ~(b | r), cv.t))


def _decimals(cv: _Conversion) -> None:
    """Decimal text or base64 unscaled strings (per the hints), numbers, and with
    ``connect`` ``VariableScaleDecimal`` objects."""
    t, txt, num, hints = cv.t, cv.txt, cv.num, cv.hints
    b64 = (
        np.zeros(len(txt), bool)
        if hints is None or hints.dec_base64 is None
        else hints.dec_base64[txt]
    )
    raw, b = cv.strings()
    cv.bad[txt[b]] = True
    plain = np.flatnonzero(~b64)
    if len(plain):
        arr, b2 = cast_rows(_some(raw, plain), pa.string())
        arr, b3, r3 = decimal_text(arr, t)
        cv.bad[txt[plain[b2 | b3]]] = True
        cv.oor[txt[plain[r3 & ~b2]]] = True
        cv.out.put(txt[plain], arr)
    packed = np.flatnonzero(b64)
    if len(packed):
        scale = (
            np.full(len(packed), t.scale)
            if hints is None or hints.dec_scale is None
            else hints.dec_scale[txt[packed]]
        )
        arr, b4, r4 = unscaled_decimals(_some(raw, packed), scale, t)
        cv.bad[txt[packed[b4]]] = True
        cv.oor[txt[packed[r4]]] = True
        cv.out.put(txt[packed], arr)
    if len(num):
        arr, b5, r5 = decimal_text(number_tokens(cv.parts, cv.m, cv.sel[num]), t)
        cv.bad[num[b5]] = True
        cv.oor[num[r5]] = True
        cv.out.put(num, arr)
    obj = np.flatnonzero(cv.kind == KIND_OBJECT)
    if cv.connect and len(obj):
        arr, b6, r6 = _variable_scale(cv.parts, cv.m, cv.sel[obj], t)
        cv.bad[obj[b6]] = True
        cv.oor[obj[r6]] = True
        cv.out.put(obj, arr)


def _some(arr: pa.Array, at: np.ndarray) -> pa.Array:
    """``arr[at]`` (``at`` ascending positions); ``arr`` itself when ``at`` is all of it."""
    return arr if len(at) == len(arr) else arr.take(pa.array(at))


def raw_data(arr: pa.Array) -> np.ndarray:
    """The data buffer of a binary/string array as numpy bytes."""
    return binary_parts(arr).data


def _bounds(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    p = binary_parts(arr)
    return p.starts, p.ends


def _struct_members(
    parts: Parts, m: Members, sel: np.ndarray, names: tuple[str, ...]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The members of the objects ``sel`` (sorted member ids): each member's id, the index
    of its name in ``names`` (-1: another name) and the position of its object in
    ``sel``."""
    child = np.flatnonzero(np.isin(m.parent, sel) & (m.parent >= 0))
    code = match_strings(
        parts.data, m.name_start[child], m.name_end[child], m.name_escaped[child], names
    )
    return child, code, np.searchsorted(sel, m.parent[child])


def _member(
    child: np.ndarray, code: np.ndarray, owner: np.ndarray, j: int, bad: np.ndarray
) -> np.ndarray:
    """Per object, the member id of its member named ``names[j]`` (-1: none); an object
    naming it twice is marked in ``bad``."""
    k = len(bad)
    at = code == j
    o = owner[at]
    bad[o[np.bincount(o, minlength=k)[o] > 1]] = True
    out = np.full(k, -1, dtype=np.int64)
    out[o] = child[at]
    return out


def _variable_scale(
    parts: Parts, m: Members, sel: np.ndarray, t: pa.DataType
) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Debezium ``VariableScaleDecimal`` objects ``{"scale": k, "value": base64}``."""
    k = len(sel)
    child, code, owner = _struct_members(parts, m, sel, _STRUCT_NAMES)
    bad = np.zeros(k, dtype=bool)
    scale_m = _member(child, code, owner, 0, bad)
    value_m = _member(child, code, owner, 1, bad)
    bad |= (scale_m < 0) | (value_m < 0)
    bad |= np.where(scale_m >= 0, m.kind[np.maximum(scale_m, 0)] != KIND_NUMBER, True)
    bad |= np.where(value_m >= 0, m.kind[np.maximum(value_m, 0)] != KIND_STRING, True)
    use = np.flatnonzero(~bad)
    scale, sb, _ = int_values(parts, m, scale_m[use], -(2**31), 2**31 - 1)
    sb |= (scale < 0) | (scale > 38)
    bad[use[sb]] = True
    use = use[~sb]
    scale = scale[~sb]
    raw, b = _strings(parts, m, value_m[use])
    arr, b2, r = unscaled_decimals(raw, scale, t)
    bad[use[b | b2]] = True
    out = _Out(k, t)
    out.put(use, arr)
    oor = np.zeros(k, dtype=bool)
    oor[use[r]] = True
    return out.result(), bad, oor


def _geometry(parts: Parts, m: Members, sel: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """Debezium ``Geometry``/``Geography`` objects: their ``wkb`` (base64) as bytes; an
    object with another member, or without a string ``wkb``, is bad."""
    k = len(sel)
    child, code, owner = _struct_members(parts, m, sel, _GEOMETRY)
    bad = np.zeros(k, dtype=bool)
    bad[owner[code < 0]] = True  # a member other than wkb and srid
    wkb_m = _member(child, code, owner, 0, bad)
    bad |= np.where(wkb_m >= 0, m.kind[np.maximum(wkb_m, 0)] != KIND_STRING, True)
    use = np.flatnonzero(~bad)
    raw, b = _strings(parts, m, wkb_m[use])
    arr, b2 = b64decode(raw)
    bad[use[b | b2]] = True
    out = _Out(k, pa.binary())
    out.put(use, arr)
    return out.result(), bad


def _accepted(t: pa.DataType, kind: np.ndarray, connect: bool) -> np.ndarray:
    """Which JSON value kinds a column type accepts (before value checks)."""
    if pa.types.is_integer(t):
        ok: np.ndarray = kind == KIND_NUMBER
    elif pa.types.is_floating(t):
        ok = (kind == KIND_NUMBER) | (connect & (kind == KIND_STRING))
    elif pa.types.is_decimal(t):
        ok = (kind == KIND_STRING) | (kind == KIND_NUMBER) | (connect & (kind == KIND_OBJECT))
    elif pa.types.is_boolean(t):
        ok = (kind == KIND_TRUE) | (kind == KIND_FALSE)
    elif pa.types.is_binary(t):
        ok = (kind == KIND_STRING) | (connect & (kind == KIND_OBJECT))
    elif pa.types.is_string(t):
        ok = kind == KIND_STRING
    else:  # date32, timestamp
        ok = (kind == KIND_STRING) | (kind == KIND_NUMBER)
    return ok


def parse_timestamps(raw: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Parses ISO 8601 strings to ``timestamp[us, UTC]``; naive ones are UTC.

    7 to 9 fraction digits (nanoseconds, as SQL Server and Oracle connectors write) are
    truncated to 6, i.e. floored to the microsecond like nanosecond integers.

    Returns:
        The timestamps (null where bad) and the mask of strings that do not parse.
    """
    strs, bad = cast_rows(raw, pa.string())
    strs = pc.replace_substring_regex(strs, _NANO_FRACTION, r"\1\2")
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


def _to_micros(v: np.ndarray, unit: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Integer timestamps in their unit to microseconds (ns are floored).

    Returns:
        The microseconds, the mask of values whose microseconds overflow int64 (out of
        range) and the mask of times of day (not timestamps).
    """
    bad = np.zeros(len(v), dtype=bool)
    if unit is None:
        return v, bad, bad.copy()
    out = v.copy()
    for u, factor in ((UNIT_MS, 1000), (UNIT_DAYS, 86_400_000_000)):
        sel = unit == u
        if sel.any():
            limit = np.iinfo(np.int64).max // factor  # (not np.abs: abs(-2**63) < 0)
            over = sel & ((v > limit) | (v < -limit))
            bad |= over
            out[sel] = np.where(over[sel], 0, v[sel]) * factor
    ns = unit == UNIT_NS
    out[ns] = np.floor_divide(v[ns], 1000)
    return out, bad, unit == UNIT_TIME_OF_DAY


def sign_extended(p: Parts) -> np.ndarray:
    """Which values longer than 16 bytes are a 16-byte two's-complement integer after
    redundant sign bytes (``0x00``/``0xFF`` repeating the sign of the 16 last bytes)."""
    long_ = np.flatnonzero(p.valid & (p.lengths > 16))
    out = np.zeros(p.n, dtype=bool)
    if not len(long_):
        return out
    start, cut = p.starts[long_], p.ends[long_] - 16
    fill = np.where(p.data[cut] >= 128, 255, 0)
    for byte in (0, 255):  # prefix counts of each sign byte over the data
        cs = np.zeros(len(p.data) + 1, dtype=np.int64)
        np.cumsum(p.data == byte, out=cs[1:])
        out[long_] |= (fill == byte) & (cs[cut] - cs[start] == cut - start)
    return out


def unscaled_decimals(
    raw: pa.Array, scale: np.ndarray, target: pa.DataType
) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Decodes base64 big-endian two's-complement unscaled integers (Kafka Connect's
    ``Decimal``) at ``scale`` each, into ``target``.

    Returns:
        The decimals, the mask of bad values (not base64, empty, an invalid scale, or out
        of range) and the mask of those out of range (wider than 16 bytes once redundant
        sign bytes are dropped, more than 38 digits, or more digits than ``target``
        holds).
    """
    blob, bad = b64decode(raw)
    p = binary_parts(blob)
    length = p.lengths
    bad |= p.valid & (length == 0)
    oor = p.valid & ~bad & (length > 16) & ~sign_extended(p)
    m = len(length)
    k = np.arange(16)
    last = p.starts + length - 1
    src = np.clip(last[:, None] - k, 0, max(len(p.data) - 1, 0))
    if len(p.data):
        sign = np.where(p.data[np.clip(p.starts, 0, len(p.data) - 1)] >= 128, 255, 0)
        le = np.where(k < length[:, None], p.data[src], sign[:, None]).astype(np.uint8)
    else:
        le = np.zeros((m, 16), dtype=np.uint8)
    oor |= ~bad & ~decimal_fits(le, 38)
    bad |= oor
    valid = p.valid & ~bad
    out = _Out(m, target)
    if len(scale) and scale[0] == target.scale and (scale == scale[0]).all():
        # every value at the target's scale: its bytes are the target's, no cast
        over = valid & ~decimal_fits(le, target.precision)
        oor |= over
        bad |= over
        return fixed_array(le, valid & ~over, target), bad, oor & bad
    for s in np.unique(scale).tolist():
        at = np.flatnonzero(scale == s)
        if not 0 <= s <= 38:
            bad[at] = True
            continue
        arr = fixed_array(le, valid, pa.decimal128(38, int(s))) if len(at) == m else None
        arr = fixed_array(le[at], valid[at], pa.decimal128(38, int(s))) if arr is None else arr
        arr, b = cast_rows(arr, target)
        if s <= target.scale:  # no digit is dropped: the cast fails on range only
            oor[at[b & valid[at]]] = True
        bad[at[b]] = True
        out.put(at, arr)
    return out.result(), bad, oor & bad
