"""Typed column values from decoded Avro fields, with Debezium's logical types (private).

:func:`column_values` turns the values of one Avro field (a :class:`~._avro_read.Val`)
into an Arrow array of a table column's type, one vectorized conversion per field of a
schema. The field's Avro type, its ``logicalType`` and its Kafka Connect name decide the
encoding, as the envelope schema does for Debezium JSON (:mod:`._debezium_schema`):

=====================  ===============================================================
column type            accepted Avro values
=====================  ===============================================================
int8 .. int64          ``int``/``long`` in the column's range
float32, float64       ``float``/``double`` (a finite double beyond float32 is out of
                       range), ``int``/``long``
bool                   ``boolean``
string                 ``string`` (valid UTF-8: ``Json``, ``Uuid``, ``Enum``, ``Xml``,
                       ``ZonedTimestamp``...), ``enum`` (its symbol)
binary                 ``bytes``/``fixed`` (``Bits``...), a geometry record's ``wkb``,
                       a ``string`` of base64 (``binary.handling.mode=base64``)
date32                 ``int``/``long`` days (``io.debezium.time.Date``, ``date``),
                       ISO date strings
timestamp[us, UTC]     ``long``/``int`` in the unit of its name (``Timestamp``/
                       ``timestamp-millis``: ms, ``MicroTimestamp``/``timestamp-micros``:
                       us, ``NanoTimestamp``: ns floored, ``Date``: days at midnight UTC;
                       ``Time``/``MicroTime``/``NanoTime``: refused), else the decoder's
                       ``timestamp_unit``; ISO 8601 strings (``ZonedTimestamp``)
decimal128(p, s)       ``bytes``/``fixed`` decimals (big-endian two's complement at the
                       field's scale), ``VariableScaleDecimal`` records, decimal text
                       (``decimal.handling.mode=string``), ``double``/``float``
                       (``double``: exact at the column's scale), ``int``/``long``
=====================  ===============================================================

Dates and timestamps outside 0001-01-01..9999-12-31 and decimals beyond the column's
precision are out of range; another Avro type is not a valid value of the column.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_sink.formats._arrays import (
    Parts,
    b64decode,
    cast_rows,
    decimal_fits,
    decimal_overflow,
    fixed_array,
    int_bounds,
    spans,
)
from cdc_sink.formats._avro_read import Val
from cdc_sink.formats._avro_schema import Node
from cdc_sink.formats._decimaltext import decimal_text
from cdc_sink.formats._jsonvalues import parse_timestamps, sign_extended
from cdc_sink.formats.value_ranges import (
    MAX_DAY,
    MAX_MICROS,
    MIN_DAY,
    MIN_MICROS,
    TS_UNIT_BY_NAME,
    UNIT_DAYS,
    UNIT_MS,
    UNIT_NS,
    UNIT_TIME_OF_DAY,
    UNIT_US,
)

__all__ = ["Converted", "column_values", "raw_text", "ts_unit"]

_UNIT_BY_LOGICAL = {
    "timestamp-millis": UNIT_MS,
    "timestamp-micros": UNIT_US,
    "timestamp-nanos": UNIT_NS,
    "local-timestamp-millis": UNIT_MS,
    "local-timestamp-micros": UNIT_US,
    "date": UNIT_DAYS,
    "time-millis": UNIT_TIME_OF_DAY,
    "time-micros": UNIT_TIME_OF_DAY,
}
_VARIABLE_SCALE = "io.debezium.data.VariableScaleDecimal"
_GEOMETRY = ("io.debezium.data.geometry.Geometry", "io.debezium.data.geometry.Geography")


@dataclass
class Converted:
    """One field's values as a column (aligned with the field's :attr:`Val.rows`).

    Attributes:
        values: The values (null where bad).
        bad: Values the column does not take.
        oor: The bad values that are of the right kind but out of the column's range.
        wrong_type: Set when the field's Avro type is not one the column takes at all
            (every value is then bad); names the type for the reason.
    """

    values: pa.Array
    bad: np.ndarray
    oor: np.ndarray
    wrong_type: str = ""


def ts_unit(node: Node, default: int) -> int:
    """The unit of an integer timestamp field by its Connect name or logical type."""
    unit = TS_UNIT_BY_NAME.get(node.connect_name)
    if unit is None:
        unit = _UNIT_BY_LOGICAL.get(node.logical, default)
    return unit


def type_name(node: Node) -> str:
    """An Avro type as a reason names it (``long io.debezium.time.MicroTime``)."""
    extra = node.connect_name or node.logical
    return f"{node.kind} {extra}" if extra else node.kind


def column_values(
    val: Val, parts: Parts, target: pa.DataType, default_unit: int = UNIT_US
) -> Converted:
    """Converts the (non-null) values of one field to ``target``.

    Args:
        val: The field's values (not a union: its non-null branch).
        parts: The message buffer the values' byte spans point into.
        target: The column's Arrow type.
        default_unit: The unit of integer timestamps whose field names none.

    Returns:
        The column values and their masks.
    """
    conv = _Conv(val, parts, target, default_unit)
    conv.run()
    values = conv.values if conv.values is not None else pa.nulls(conv.n, target)
    if values.type != target:
        values, b = cast_rows(values, target)
        conv.refuse(b)
    if pa.types.is_decimal(target):
        over = decimal_overflow(values)
        conv.refuse(over, over)
    if conv.bad.any():
        values = pc.if_else(pa.array(conv.bad), pa.nulls(conv.n, target), values)
    return Converted(values, conv.bad, conv.oor & conv.bad, conv.wrong_type)


class _Conv:
    def __init__(self, val: Val, parts: Parts, target: pa.DataType, unit: int) -> None:
        self.val, self.parts, self.t, self.unit = val, parts, target, unit
        self.node = val.node
        self.n = len(val.rows)
        self.bad = np.zeros(self.n, dtype=bool)
        self.oor = np.zeros(self.n, dtype=bool)
        self.values: pa.Array | None = None
        self.wrong_type = ""

    def refuse(self, bad: np.ndarray, oor: np.ndarray | None = None) -> None:
        self.bad |= bad
        if oor is not None:
            self.bad |= oor
            self.oor |= oor

    def wrong(self) -> None:
        self.wrong_type = type_name(self.node)
        self.bad[:] = True

    def blob(self, val: Val | None = None) -> pa.Array:
        """The byte values of a bytes/string/fixed field (``binary``)."""
        v = val or self.val
        assert v.starts is not None and v.ends is not None
        return spans(self.parts, v.starts, v.ends).cast(pa.binary())

    def ints(self) -> np.ndarray:
        assert self.val.ints is not None
        return self.val.ints

    def run(self) -> None:
        t, kind = self.t, self.node.kind
        if pa.types.is_integer(t):
            if kind not in ("int", "long"):
                return self.wrong()
            lo, hi = int_bounds(t)
            v = self.ints()
            self.refuse(np.zeros(self.n, bool), (v < lo) | (v > hi))
            self.values = fixed_array(np.clip(v, lo, hi).astype(t.to_pandas_dtype()), ~self.oor, t)
        elif pa.types.is_floating(t):
            self._floats()
        elif pa.types.is_boolean(t):
            if kind != "boolean":
                return self.wrong()
            assert self.val.bools is not None
            self.values = pa.array(self.val.bools, pa.bool_())
        elif pa.types.is_string(t):
            self._strings()
        elif pa.types.is_binary(t):
            self._binaries()
        elif pa.types.is_date32(t):
            self._dates()
        elif pa.types.is_timestamp(t):
            self._timestamps()
        elif pa.types.is_decimal(t):
            self._decimals()
        else:  # pragma: no cover - parse_type admits no other
            raise TypeError(f"unsupported column type {t}")
        return None

    def _floats(self) -> None:
        kind = self.node.kind
        if kind in ("int", "long"):
            self.values = pa.array(self.ints().astype(np.float64))
        elif kind in ("float", "double"):
            f = self.val.floats
            assert f is not None
            if self.t == pa.float32() and kind == "double":
                with np.errstate(over="ignore"):
                    big = np.isfinite(f) & ~np.isfinite(f.astype(np.float32))
                self.refuse(np.zeros(self.n, bool), big)
            self.values = pa.array(f.astype(np.float64))
        else:
            self.wrong()

    def _strings(self) -> None:
        kind = self.node.kind
        if kind == "enum":
            syms = pa.array(self.node.symbols, pa.string())
            self.values = syms.take(pa.array(np.clip(self.ints(), 0, max(len(syms) - 1, 0))))
        elif kind == "string":
            arr, b = cast_rows(self.blob(), pa.string())
            self.refuse(b)
            self.values = arr
        else:
            self.wrong()

    def _binaries(self) -> None:
        kind = self.node.kind
        if kind in ("bytes", "fixed"):
            self.values = self.blob()
        elif kind == "record" and self.node.connect_name in _GEOMETRY:
            wkb = self.val.children.get("wkb")
            if wkb is None or wkb.node.kind != "bytes":
                return self.wrong()
            self.values = self.blob(wkb)
        elif kind == "string":
            arr, b = b64decode(self.blob())
            self.refuse(b)
            self.values = arr
        else:
            self.wrong()
        return None

    def _dates(self) -> None:
        kind = self.node.kind
        if kind in ("int", "long") and ts_unit(self.node, UNIT_DAYS) == UNIT_DAYS:
            v = self.ints()
            r = (v < MIN_DAY) | (v > MAX_DAY)
            self.refuse(np.zeros(self.n, bool), r)
            self.values = fixed_array(np.where(r, 0, v).astype(np.int32), ~r, pa.date32())
        elif kind == "string":
            arr, b = cast_rows(self.blob(), pa.string())
            arr, b2 = cast_rows(arr, pa.date32())
            days = np.asarray(arr.cast(pa.int32()).fill_null(0).to_numpy(zero_copy_only=False))
            self.refuse(b | b2, (days < MIN_DAY) | (days > MAX_DAY))
            self.values = arr
        else:
            self.wrong()

    def _timestamps(self) -> None:
        kind = self.node.kind
        if kind in ("int", "long"):
            unit = ts_unit(self.node, self.unit)
            if unit == UNIT_TIME_OF_DAY:
                return self.wrong()
            v = self.ints()
            factor = {UNIT_MS: 1000, UNIT_DAYS: 86_400_000_000}.get(unit, 1)
            limit = np.iinfo(np.int64).max // factor
            over = (v > limit) | (v < -limit)
            micros = np.where(over, 0, v) * factor
            if unit == UNIT_NS:
                micros = np.floor_divide(v, 1000)
            r = over | (micros < MIN_MICROS) | (micros > MAX_MICROS)
            self.refuse(np.zeros(self.n, bool), r)
            self.values = fixed_array(np.where(r, 0, micros), ~r, self.t)
        elif kind == "string":
            arr, b = parse_timestamps(self.blob())
            micros = np.asarray(arr.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False))
            self.refuse(b, ~b & ((micros < MIN_MICROS) | (micros > MAX_MICROS)))
            self.values = arr
        else:
            self.wrong()
        return None

    def _decimals(self) -> None:
        node, kind = self.node, self.node.kind
        fixed_scale = node.logical == "decimal" or node.connect_name.endswith("Decimal")
        if kind in ("bytes", "fixed") and fixed_scale:
            arr, b, r = unscaled_decimals(self.blob(), np.full(self.n, node.scale), self.t)
            self.refuse(b, r)
            self.values = arr
        elif kind == "record" and node.connect_name == _VARIABLE_SCALE:
            self._variable_scale()
        elif kind == "string":
            arr, b = cast_rows(self.blob(), pa.string())
            arr, b2, r = decimal_text(arr, self.t)
            self.refuse(b | b2, r & ~b)
            self.values = arr
        elif kind in ("float", "double", "int", "long"):
            nums = self.ints() if kind in ("int", "long") else self.val.floats
            assert nums is not None
            finite = np.isfinite(nums) if kind in ("float", "double") else np.ones(self.n, bool)
            text = pa.array(np.where(finite, nums, 0)).cast(pa.string())
            arr, b, r = decimal_text(text, self.t)
            self.refuse(b | ~finite, r)
            self.values = arr
        else:
            self.wrong()

    def _variable_scale(self) -> None:
        scale_v, value_v = self.val.children.get("scale"), self.val.children.get("value")
        if (
            scale_v is None
            or value_v is None
            or scale_v.node.kind != "int"
            or value_v.node.kind != "bytes"
        ):
            return self.wrong()
        assert scale_v.ints is not None
        scale = scale_v.ints
        badscale = (scale < 0) | (scale > 38)
        arr, b, r = unscaled_decimals(self.blob(value_v), np.where(badscale, 0, scale), self.t)
        self.refuse(b | badscale, r & ~badscale)
        self.values = arr
        return None


def unscaled_decimals(
    blob: pa.Array, scale: np.ndarray, target: pa.DataType
) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Big-endian two's-complement unscaled integers at ``scale`` each, into ``target``.

    Returns:
        The decimals, the mask of bad values (empty, or out of range) and of those out of
        range (wider than 16 significant bytes, more than 38 digits, or more digits than
        ``target`` holds).
    """
    p = _parts(blob)
    length = p.ends - p.starts
    m = len(length)
    bad = length == 0
    k = np.arange(16)
    last = p.starts + length - 1
    data = p.data if len(p.data) else np.zeros(1, np.uint8)
    src = np.clip(last[:, None] - k, 0, len(data) - 1)
    sign = np.where(data[np.clip(p.starts, 0, len(data) - 1)] >= 128, 255, 0)
    le = np.where(k < length[:, None], data[src], sign[:, None]).astype(np.uint8)
    oor = ~bad & (length > 16) & ~sign_extended(p)
    oor |= ~bad & ~decimal_fits(le, 38)
    bad |= oor
    out: list[pa.Array] = []
    index = np.zeros(m, dtype=np.int64)
    done = 0
    for s in np.unique(scale).tolist():
        at = np.flatnonzero(scale == s)
        arr = fixed_array(le[at], ~bad[at], pa.decimal128(38, int(s)))
        arr, b = cast_rows(arr, target)
        if s <= target.scale:
            oor[at[b & ~bad[at]]] = True
        bad[at[b]] = True
        out.append(arr)
        index[at] = done + np.arange(len(at))
        done += len(at)
    if not out:
        return pa.nulls(m, target), bad, oor
    merged = pa.concat_arrays(out).take(pa.array(index))
    return merged, bad, oor & bad


def _parts(arr: pa.Array) -> Parts:
    from cdc_sink.formats._arrays import binary_parts

    return binary_parts(arr)


def raw_text(val: Val, i: int, parts: Parts) -> str:
    """The value ``i`` of a field as a reason shows it (reject path only)."""
    if val.ints is not None:
        return str(int(val.ints[i]))
    if val.floats is not None:
        return repr(float(val.floats[i]))
    if val.bools is not None:
        return "true" if val.bools[i] else "false"
    if val.starts is not None and val.ends is not None:
        b = parts.data[int(val.starts[i]) : min(int(val.ends[i]), int(val.starts[i]) + 60)]
        raw = b.tobytes()
        try:
            return repr(raw.decode("utf-8"))
        except UnicodeDecodeError:
            return "0x" + raw.hex()
    return f"a {val.node.kind}"
