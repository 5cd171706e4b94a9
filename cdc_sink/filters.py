"""Simple read predicates: evaluation on Arrow data and page skipping by min/max.

A filter is a conjunction of predicates ``(column, op, value)`` with op one of
``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``in``, ``not in``, ``is null``,
``is not null`` (the same shape as pyarrow's/Parquet's ``filters``). Reads evaluate it
vectorized per page, and skip a page when its statistics prove no row can match.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["PageStats", "Predicate", "evaluate", "may_match", "page_stats", "parse_filter"]

_OPS = {"=", "==", "!=", "<", "<=", ">", ">=", "in", "not in", "is null", "is not null"}


@dataclass(frozen=True)
class Predicate:
    """One predicate of a conjunctive filter."""

    column: str
    op: str
    value: Any = None


@dataclass(frozen=True)
class PageStats:
    """Statistics of one page of one column (min/max over non-null values)."""

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
        if p.op in ("in", "not in") and (isinstance(p.value, (str, bytes))
                                          or not isinstance(p.value, Iterable)):
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
            r = pc.is_in(col, value_set=vs, skip_nulls=True)
            if p.op == "not in":
                r = pc.and_(pc.invert(r), pc.is_valid(col))
        else:
            scalar = pa.scalar(p.value, type=col.type)
            fn = {"=": pc.equal, "!=": pc.not_equal, "<": pc.less, "<=": pc.less_equal,
                  ">": pc.greater, ">=": pc.greater_equal}[p.op]
            r = fn(col, scalar)
        mask &= np.asarray(r.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)
    return mask


def page_stats(arr: pa.Array) -> PageStats:
    """Computes a page's statistics (min/max are None when the page holds a NaN, which
    min/max cannot bound)."""
    mm = pc.min_max(arr)
    lo, hi = mm["min"].as_py(), mm["max"].as_py()
    if pa.types.is_floating(arr.type) and pc.any(pc.is_nan(arr)).as_py():
        lo = hi = None
    return PageStats(min=lo, max=hi, null_count=arr.null_count, num_rows=len(arr))


def may_match(stats: PageStats, p: Predicate) -> bool:
    """False only when the statistics prove no row of the page satisfies ``p``."""
    non_null = stats.num_rows - stats.null_count
    if p.op == "is null":
        return stats.null_count > 0
    if p.op == "is not null":
        return non_null > 0
    if non_null == 0:
        return False
    lo, hi = stats.min, stats.max
    if lo is None or hi is None:
        return True
    try:
        if p.op == "=":
            return bool(lo <= p.value <= hi)
        if p.op == "<":
            return bool(lo < p.value)
        if p.op == "<=":
            return bool(lo <= p.value)
        if p.op == ">":
            return bool(hi > p.value)
        if p.op == ">=":
            return bool(hi >= p.value)
        if p.op == "in":
            return any(v is not None and lo <= v <= hi for v in p.value)
        if p.op == "!=":
            return not (lo == hi == p.value)
    except TypeError:
        return True
    return True
