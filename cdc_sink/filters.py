"""Simple read predicates: evaluation on Arrow data and page skipping by min/max.

A filter is a conjunction of predicates ``(column, op, value)`` with op one of
``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``in``, ``not in``, ``is null``,
``is not null`` (the same shape as pyarrow's/Parquet's ``filters``). Reads evaluate it
vectorized per page, and skip a page when its statistics prove no row can match.

Page statistics hold *physical* values (:func:`physical_value`): days since the epoch for
dates, microseconds for timestamps, the unscaled integer for decimals, the value itself
for the other types. They are computed by Arrow and never go through Python's
``datetime``/``Decimal``, so any value Arrow holds has statistics; a predicate is turned
into the same form (:func:`physical_predicate`) before it is compared with them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "STATS_PREFIX_BYTES",
    "PageStats",
    "Predicate",
    "evaluate",
    "may_match",
    "page_stats",
    "parse_filter",
    "physical_predicate",
    "physical_value",
]

_OPS = {"=", "==", "!=", "<", "<=", ">", ">=", "in", "not in", "is null", "is not null"}
#: Longest string/binary kept as a page's min or max. A longer min is cut to this prefix
#: (still a lower bound); a longer max is dropped (no upper bound).
STATS_PREFIX_BYTES = 64


@dataclass(frozen=True)
class Predicate:
    """One predicate of a conjunctive filter."""

    column: str
    op: str
    value: Any = None


@dataclass(frozen=True)
class PageStats:
    """Statistics of one page of one column: min/max over its non-null values, in the
    physical form of :func:`physical_value` (None: no bound known)."""

    min: Any
    max: Any
    null_count: int
    num_rows: int


def parse_filter(filter: Any, names: Sequence[str]) -> list[Predicate]:
    """Normalizes a filter argument into predicates.

    Args:
        filter: None, one ``(column, op, value)`` tuple, or a list of them (ANDed).
            ``is null``/``is not null`` take no value: ``(column, "is null")``.
        names: Columns the filter may name.

    Raises:
        ValueError: Malformed predicate, unknown op or column.
    """
    if filter is None:
        return []
    if isinstance(filter, (tuple, Predicate)):
        filter = [filter]
    out: list[Predicate] = []
    for item in filter:
        if isinstance(item, Predicate):
            p = item
        elif isinstance(item, (tuple, list)) and len(item) in (2, 3):
            p = Predicate(item[0], str(item[1]), item[2] if len(item) == 3 else None)
        else:
            raise ValueError(f"filter predicate must be (column, op, value), got {item!r}")
        op = p.op.lower().strip()
        p = Predicate(p.column, "=" if op == "==" else op, p.value)
        if p.op in ("is null", "is not null"):
            if p.value is not None:
                raise ValueError(f"filter op {p.op!r} takes no value")
        elif p.value is None and not (isinstance(item, (tuple, list)) and len(item) == 3):
            raise ValueError(f"filter op {p.op!r} on {p.column!r} needs a value")
        if p.op in ("in", "not in") and (
            isinstance(p.value, (str, bytes)) or not isinstance(p.value, Iterable)
        ):
            raise ValueError(f"filter op {p.op!r} needs a list of values, got {p.value!r}")
        if p.op not in _OPS:
            raise ValueError(f"filter op {p.op!r} is not one of {sorted(_OPS)}")
        if p.column not in names:
            raise ValueError(f"filter names unknown column {p.column!r}")
        out.append(p)
    return out


def evaluate(batch: pa.RecordBatch | pa.Table, preds: Sequence[Predicate]) -> np.ndarray:
    """Boolean mask of the rows of ``batch`` that satisfy every predicate (null: no)."""
    mask = np.ones(batch.num_rows, dtype=bool)
    for p in preds:
        col = batch.column(p.column)
        if p.op == "is null":
            r = pc.is_null(col)
        elif p.op == "is not null":
            r = pc.is_valid(col)
        elif p.op in ("in", "not in"):
            vs = pa.array(list(p.value), type=col.type)
            if pa.types.is_floating(col.type):
                # is_in hashes -0.0 and 0.0 apart; "=" (IEEE) does not: x + 0.0 turns
                # -0.0 into 0.0 and leaves every other value as it is.
                zero = pa.scalar(0.0, col.type)
                col, vs = pc.add(col, zero), pc.add(vs, zero)
            r = pc.is_in(col, value_set=vs, skip_nulls=True)
            if p.op == "not in":
                r = pc.and_(pc.invert(r), pc.is_valid(col))
        else:
            scalar = pa.scalar(p.value, type=col.type)
            fn = {
                "=": pc.equal,
                "!=": pc.not_equal,
                "<": pc.less,
                "<=": pc.less_equal,
                ">": pc.greater,
                ">=": pc.greater_equal,
            }[p.op]
            r = fn(col, scalar)
        mask &= np.asarray(r.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)
    return mask


def _physical_array(arr: pa.Array) -> pa.Array:
    """``arr`` with dates and timestamps as their int32/int64 storage (zero-copy)."""
    if pa.types.is_date32(arr.type):
        return arr.view(pa.int32())
    if pa.types.is_timestamp(arr.type):
        return arr.view(pa.int64())
    return arr


def _unscaled(s: pa.Scalar) -> int | None:
    """The unscaled integer of a decimal128 scalar, exactly, from its 16 bytes."""
    if not s.is_valid:
        return None
    raw = pa.array([s], type=s.type).buffers()[1]
    assert raw is not None
    return int.from_bytes(raw.to_pybytes()[:16], "little", signed=True)


def _scalar_physical(s: pa.Scalar) -> Any:
    if pa.types.is_decimal(s.type):
        return _unscaled(s)
    if pa.types.is_date32(s.type):
        return s.cast(pa.int32()).as_py()
    if pa.types.is_timestamp(s.type):
        return s.cast(pa.int64()).as_py()
    return s.as_py()


def physical_value(value: Any, type: pa.DataType) -> Any:
    """The physical form of a Python value of a column of type ``type`` (the form of page
    statistics: date32 -> days, timestamp -> ticks, decimal -> unscaled int; others
    unchanged).

    Raises:
        TypeError, ValueError, pyarrow.ArrowException: ``value`` is not a valid value of
            ``type`` (as for ``pyarrow.scalar``).
    """
    if value is None:
        return None
    if isinstance(value, pa.Scalar):
        return _scalar_physical(value.cast(type))
    if (
        pa.types.is_date32(type)
        or pa.types.is_timestamp(type)
        or pa.types.is_decimal(type)
        or pa.types.is_binary(type)
    ):
        return _scalar_physical(pa.scalar(value, type=type))
    return value


def physical_predicate(p: Predicate, type: pa.DataType) -> Predicate | None:
    """``p`` with its value(s) in physical form for a column of ``type``, or None when a
    value does not convert (the predicate then cannot skip pages; evaluation decides)."""
    if p.op in ("is null", "is not null") or p.value is None:
        return p
    try:
        if p.op in ("in", "not in"):
            return Predicate(p.column, p.op, [physical_value(v, type) for v in p.value])
        return Predicate(p.column, p.op, physical_value(p.value, type))
    except (TypeError, ValueError, OverflowError, ArithmeticError, pa.ArrowException):
        return None


def page_stats(arr: pa.Array) -> PageStats:
    """Computes a page's statistics with Arrow, in physical form (see the module
    docstring). Min/max are None when the page holds a NaN, which min/max cannot bound;
    long strings/binaries are bounded by :data:`STATS_PREFIX_BYTES`."""
    t = arr.type
    mm = pc.min_max(_physical_array(arr))
    if pa.types.is_decimal(t):
        lo, hi = _unscaled(mm["min"]), _unscaled(mm["max"])
    else:
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
    if pa.types.is_floating(t) and pc.any(pc.is_nan(arr)).as_py():
        lo = hi = None
    if isinstance(lo, (str, bytes)):
        lo, hi = _bounded(lo, hi)
    return PageStats(min=lo, max=hi, null_count=arr.null_count, num_rows=len(arr))


def _bounded(lo: Any, hi: Any) -> tuple[Any, Any]:
    """Cuts a long min to a prefix (still a lower bound) and drops a long max."""

    def size(v: Any) -> int:
        return len(v.encode()) if isinstance(v, str) else len(v)

    if size(lo) > STATS_PREFIX_BYTES:
        if isinstance(lo, str):
            lo = lo.encode()[:STATS_PREFIX_BYTES].decode(errors="ignore")
        else:
            lo = lo[:STATS_PREFIX_BYTES]
    if hi is not None and size(hi) > STATS_PREFIX_BYTES:
        hi = None
    return lo, hi


def may_match(stats: PageStats, p: Predicate) -> bool:
    """False only when the statistics prove no row of the page satisfies ``p``."""
    non_null = stats.num_rows - stats.null_count
    if p.op == "is null":
        return stats.null_count > 0
    if p.op == "is not null":
        return non_null > 0
    if non_null == 0:
        return False
    if stats.min is None and stats.max is None:
        return True
    try:
        return _range_may_match(stats.min, stats.max, p.op, p.value)
    except TypeError:
        return True


def _above_lo(lo: Any, v: Any, strict: bool = False) -> bool:
    """Some value of a page with minimum ``lo`` may be (<) <= v."""
    return lo is None or (lo < v if strict else lo <= v)


def _below_hi(hi: Any, v: Any, strict: bool = False) -> bool:
    """Some value of a page with maximum ``hi`` may be (>) >= v."""
    return hi is None or (hi > v if strict else hi >= v)


def _range_may_match(lo: Any, hi: Any, op: str, value: Any) -> bool:
    """Whether a non-null value in ``[lo, hi]`` (None: unbounded) may satisfy ``op value``
    (a comparison of values of different kinds raises TypeError)."""
    if op == "=":
        return value is None or (_above_lo(lo, value) and _below_hi(hi, value))
    if op == "<":
        return _above_lo(lo, value, strict=True)
    if op == "<=":
        return _above_lo(lo, value)
    if op == ">":
        return _below_hi(hi, value, strict=True)
    if op == ">=":
        return _below_hi(hi, value)
    if op == "in":
        return any(v is not None and _above_lo(lo, v) and _below_hi(hi, v) for v in value)
    if op == "!=":
        return not (lo is not None and lo == hi == value)
    return True
