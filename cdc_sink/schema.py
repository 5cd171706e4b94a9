"""Table schemas: columns with stable ids, a primary key, an optional sequence column.

A :class:`TableSchema` is immutable. Schema changes (:meth:`TableSchema.add_column`,
:meth:`TableSchema.drop_column`, :meth:`TableSchema.rename_column`,
:meth:`TableSchema.widen_column`) return a new schema with ``schema_id + 1``; column ids
are never reused (``next_column_id`` only grows), so data written under an old schema
stays addressable by column id.

The dictionary form (``from_dict``/``to_dict``) of a schema (docs/architecture.md §3)::

    {"columns": [{"name": "order_id", "type": "int64", "nullable": false}, ...],
     "primary_key": ["order_id"], "num_buckets": 4, "sequence_column": "seq"}
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import itertools
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_sink.errors import SchemaError
from cdc_sink.utils.arrays import one_array
from cdc_sink.utils.values import CONVERSION_ERRORS, coerce, coercer, parse_date, parse_timestamp

__all__ = [
    "TEMPORAL_RANGE",
    "Column",
    "TableSchema",
    "bounds_reason",
    "coerce",
    "coercer",
    "has_bounds",
    "is_widening",
    "may_exceed_bounds",
    "out_of_bounds",
    "parse_date",
    "parse_timestamp",
    "parse_type",
    "type_to_str",
    "value_bounds",
]

_SIMPLE_TYPES: dict[str, pa.DataType] = {
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float32": pa.float32(),
    "float": pa.float32(),
    "float64": pa.float64(),
    "double": pa.float64(),
    "bool": pa.bool_(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "utf8": pa.string(),
    "binary": pa.binary(),
    "date32": pa.date32(),
    "date": pa.date32(),
}
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_TS_RE = re.compile(r"^timestamp\[\s*us\s*,\s*(tz=)?utc\s*\]$", re.IGNORECASE)
_DEC_RE = re.compile(r"^decimal(?:128)?\(\s*(\d+)\s*,\s*(\d+)\s*\)$", re.IGNORECASE)

_INTEGER_TYPES = (pa.int8(), pa.int16(), pa.int32(), pa.int64())


def parse_type(text: str) -> pa.DataType:
    """Parses a type name of the schema dictionary into an Arrow type.

    Args:
        text: ``int8``..``int64``, ``float32``, ``float64``, ``bool``, ``string``,
            ``binary``, ``date32``, ``timestamp[us, UTC]`` or ``decimal128(p, s)``.

    Returns:
        The Arrow type.

    Raises:
        SchemaError: The name is not a supported type.
    """
    if not isinstance(text, str):
        raise SchemaError(f"column type must be a string, got {text!r}")
    t = text.strip().lower()
    if t in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[t]
    if _TS_RE.match(t) or t == "timestamp":
        return _TIMESTAMP
    m = _DEC_RE.match(t)
    if m:
        precision, scale = int(m.group(1)), int(m.group(2))
        if not 1 <= precision <= 38 or scale > precision:
            raise SchemaError(f"decimal128({precision}, {scale}): need 1 <= p <= 38 and s <= p")
        return pa.decimal128(precision, scale)
    raise SchemaError(
        f"unsupported column type {text!r}; supported: int8, int16, int32, int64, float32, "
        "float64, bool, string, binary, date32, timestamp[us, UTC], decimal128(p, s)"
    )


def is_widening(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether every value of type ``old`` is a value of type ``new`` that a cast of the
    stored ``old`` arrays gives exactly: ``int8`` to ``int16``, ``int32`` or ``int64`` (and
    so on up the integers), ``float32`` to ``float64``, ``decimal128(p, s)`` to
    ``decimal128(p2, s)`` with ``p2 > p`` (the same scale). A type is not a widening of
    itself."""
    if old in _INTEGER_TYPES and new in _INTEGER_TYPES:
        return bool(new.bit_width > old.bit_width)
    if old == pa.float32():
        return bool(new == pa.float64())
    if pa.types.is_decimal128(old) and pa.types.is_decimal128(new):
        return bool(new.scale == old.scale and new.precision > old.precision)
    return False


def type_to_str(t: pa.DataType) -> str:
    """Returns the schema-dictionary name of a supported Arrow type (inverse of parse_type)."""
    if pa.types.is_timestamp(t):
        return "timestamp[us, UTC]"
    if pa.types.is_decimal(t):
        return f"decimal128({t.precision}, {t.scale})"
    if t == pa.bool_():
        return "bool"
    if pa.types.is_date32(t):
        return "date32"
    if t == pa.float32():
        return "float32"
    if t == pa.float64():
        return "float64"
    return str(t)


# ---------------------------------------------------------------------- value ranges
#: The dates and timestamps a table holds: Python's ``datetime`` range, which is also
#: Spark's. A value outside it could not be read back by either, so it is rejected.
TEMPORAL_RANGE = "0001-01-01..9999-12-31"
_DAY_MIN = (dt.date(1, 1, 1) - dt.date(1970, 1, 1)).days
_DAY_MAX = (dt.date(9999, 12, 31) - dt.date(1970, 1, 1)).days
_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}
_MASK64 = (1 << 64) - 1


def value_bounds(t: pa.DataType) -> tuple[int, int] | None:
    """Inclusive bounds of the *physical* values a column of type ``t`` can hold.

    The physical value is what Arrow stores: days since the epoch for ``date32``, ticks
    since the epoch for timestamps, the unscaled integer for ``decimal128(p, s)``, the
    integer itself for integer types. Dates and timestamps are bounded by
    :data:`TEMPORAL_RANGE` (``9999-12-31 23:59:59.999999`` for microseconds), decimals by
    their precision (``|unscaled| <= 10**p - 1``).

    Returns:
        ``(low, high)``, or None for types every value of which is valid (floats, bool,
        string, binary).
    """
    if pa.types.is_date32(t):
        return _DAY_MIN, _DAY_MAX
    if pa.types.is_timestamp(t):
        per = _PER_SECOND[t.unit]
        return _DAY_MIN * 86400 * per, (_DAY_MAX + 1) * 86400 * per - 1
    if pa.types.is_decimal(t):
        top = 10**t.precision - 1
        return -top, top
    if pa.types.is_integer(t):
        info = np.iinfo(t.to_pandas_dtype())
        return int(info.min), int(info.max)
    return None


def has_bounds(t: pa.DataType) -> bool:
    """Whether a value of type ``t`` can lie outside :func:`value_bounds` (what
    :func:`out_of_bounds` checks: dates, timestamps, decimals)."""
    return value_bounds(t) is not None and not pa.types.is_integer(t)


def may_exceed_bounds(arr: pa.Array | pa.ChunkedArray) -> bool:
    """Whether :func:`out_of_bounds` of ``arr`` may hold a True: False for types without
    bounds, and for dates and timestamps whose minimum and maximum are within them (one
    pass, no allocation: most batches take no mask at all)."""
    t = arr.type
    if not has_bounds(t) or len(arr) == 0:
        return False
    if pa.types.is_decimal(t):
        return True
    lo, hi = value_bounds(t) or (0, 0)
    width = pa.int32() if pa.types.is_date32(t) else pa.int64()
    for chunk in arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]:
        mm = pc.min_max(chunk.view(width)).as_py()
        if mm["min"] is not None and (mm["min"] < lo or mm["max"] > hi):
            return True
    return False


def out_of_bounds(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Boolean mask of the non-null values of ``arr`` outside :func:`value_bounds` of its
    type (vectorized; all False for types without bounds).

    Arrow may hold such values when an array was built or cast unsafely: timestamps past
    year 9999 (Debezium's Postgres ``infinity``), decimals beyond their precision.
    """
    arr = one_array(arr)
    n = len(arr)
    t = arr.type
    bounds = value_bounds(t)
    if bounds is None or not has_bounds(t) or n == 0:
        return np.zeros(n, dtype=bool)
    lo, hi = bounds
    valid = (
        np.ones(n, dtype=bool)
        if arr.null_count == 0
        else np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    )
    if pa.types.is_decimal(t):
        words = np.frombuffer(arr.buffers()[1], dtype=np.int64)
        words = words[2 * arr.offset : 2 * (arr.offset + n)].reshape(n, 2)
        x_lo = words[:, 0].view(np.uint64)
        x_hi = words[:, 1]

        def split(v: int) -> tuple[np.int64, np.uint64]:
            u = v & ((1 << 128) - 1)
            h = u >> 64
            return np.int64(h - (1 << 64) if h >= 1 << 63 else h), np.uint64(u & _MASK64)

        hi_h, hi_l = split(hi)
        lo_h, lo_l = split(lo)
        above = (x_hi > hi_h) | ((x_hi == hi_h) & (x_lo > hi_l))
        below = (x_hi < lo_h) | ((x_hi == lo_h) & (x_lo < lo_l))
        return np.asarray(valid & (above | below), dtype=bool)
    width = pa.int32() if pa.types.is_date32(t) else pa.int64()
    phys = np.asarray(arr.view(width).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    return np.asarray(valid & ((phys < lo) | (phys > hi)), dtype=bool)


def bounds_reason(t: pa.DataType) -> str:
    """Why a value outside :func:`value_bounds` of ``t`` is rejected (for a reject)."""
    if pa.types.is_decimal(t):
        return f"exceeds the precision of {type_to_str(t)} (at most {t.precision} digits)"
    if pa.types.is_date32(t) or pa.types.is_timestamp(t):
        return f"out of range {TEMPORAL_RANGE}"
    return f"out of range of {type_to_str(t)}"


def _default_to_arrow(value: Any, t: pa.DataType, column: str) -> pa.Scalar:
    """Converts a JSON-friendly default value into an Arrow scalar of type ``t``."""
    try:
        if not (pa.types.is_floating(t) or pa.types.is_string(t)):
            # Floats and strings: pyarrow's own conversion (a default of true for a float
            # column has always been 1.0).
            value = coerce(value, t)
        return pa.scalar(value, type=t)
    except CONVERSION_ERRORS as exc:
        raise SchemaError(
            f"default {value!r} of column {column!r} is not a valid {type_to_str(t)}: {exc}"
        ) from exc


def _column_from_dict(i: int, rc: Any, key_set: set[str], auto_ids: Iterator[int]) -> Column:
    """Column ``#i`` of a schema dictionary (``auto_ids``: the ids of columns without
    one, in order)."""
    if not isinstance(rc, Mapping):
        raise SchemaError(f"column #{i} must be an object, got {rc!r}")
    bad = set(rc) - {"id", "name", "type", "nullable", "default"}
    if bad:
        raise SchemaError(f"column #{i}: unknown field(s) {sorted(bad)}")
    name = rc.get("name")
    if not isinstance(name, str):
        raise SchemaError(f"column #{i}: 'name' must be a string")
    if "type" not in rc:
        raise SchemaError(f"column {name!r}: 'type' is missing")
    t = parse_type(rc["type"])
    if "id" in rc:
        cid = rc["id"]
        if isinstance(cid, bool) or not isinstance(cid, int):
            raise SchemaError(f"column {name!r}: id must be an integer")
    else:
        cid = next(auto_ids)
    nullable = rc.get("nullable", name not in key_set)
    if not isinstance(nullable, bool):
        raise SchemaError(f"column {name!r}: 'nullable' must be true or false")
    default = _default_to_arrow(rc.get("default"), t, name)
    if not nullable and "default" in rc and rc["default"] is None:
        raise SchemaError(f"column {name!r}: a non-nullable column cannot default to null")
    return Column(id=cid, name=name, type=t, nullable=nullable, default=default)


def _default_to_json(s: pa.Scalar) -> Any:
    v = s.as_py()
    if v is None:
        return None
    if isinstance(v, dt.datetime):
        return v.isoformat()
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, bytes):
        return base64.b64encode(v).decode("ascii")
    return v


@dataclass(frozen=True)
class Column:
    """One column of a table.

    Attributes:
        id: Stable id, never reused within a table.
        name: Current name.
        type: Arrow type (one of the supported types).
        nullable: Whether null is a legal value.
        default: Value a new row takes when an event does not set the column (an Arrow
            scalar; a null scalar when the column has no default).
    """

    id: int
    name: str
    type: pa.DataType
    nullable: bool = True
    default: pa.Scalar = field(default=None)

    def __post_init__(self) -> None:
        if self.default is None:
            object.__setattr__(self, "default", pa.scalar(None, type=self.type))

    @property
    def has_default(self) -> bool:
        """Whether a non-null default is declared."""
        return bool(self.default.is_valid)

    def to_dict(self) -> dict[str, Any]:
        """Returns the JSON-friendly form used by :meth:`TableSchema.to_dict`."""
        d: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "type": type_to_str(self.type),
            "nullable": self.nullable,
        }
        if self.has_default:
            d["default"] = _default_to_json(self.default)
        return d


@dataclass(frozen=True)
class TableSchema:
    """The schema of a cdc_sink table (see docs/architecture.md §3).

    Attributes:
        columns: Columns in table order.
        primary_key: Names of the key columns, in key order.
        num_buckets: Number of bucket tablets, fixed at creation.
        sequence_column: Optional integer column ordering events per key.
        schema_id: Incremented by every schema change.
        next_column_id: The id the next added column gets.
    """

    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    num_buckets: int = 1
    sequence_column: str | None = None
    schema_id: int = 0
    next_column_id: int = -1

    def __post_init__(self) -> None:
        if self.next_column_id < 0:
            nxt = max((c.id for c in self.columns), default=-1) + 1
            object.__setattr__(self, "next_column_id", nxt)
        self._validate()
        object.__setattr__(self, "_by_name", {c.name: c for c in self.columns})
        object.__setattr__(self, "_by_id", {c.id: c for c in self.columns})

    # ------------------------------------------------------------------ validation
    def _validate(self) -> None:
        names = self._validate_columns()
        self._validate_key(names)
        if (
            isinstance(self.num_buckets, bool)
            or not isinstance(self.num_buckets, int)
            or not 1 <= self.num_buckets <= 65536
        ):
            raise SchemaError(
                f"num_buckets must be an integer in [1, 65536], got {self.num_buckets!r}"
            )
        self._validate_sequence(names)

    def _validate_columns(self) -> set[str]:
        """Checks column names and ids; returns the names."""
        if not self.columns:
            raise SchemaError("a schema needs at least one column")
        names: set[str] = set()
        ids: set[int] = set()
        for c in self.columns:
            if not isinstance(c.name, str) or not c.name:
                raise SchemaError(f"column name must be a non-empty string, got {c.name!r}")
            if c.name.startswith("__"):
                raise SchemaError(f"column name {c.name!r}: names starting with '__' are reserved")
            if c.name in names:
                raise SchemaError(f"duplicate column name {c.name!r}")
            if c.id in ids or c.id < 0:
                raise SchemaError(f"column {c.name!r}: id {c.id} is negative or used twice")
            if c.id >= self.next_column_id:
                raise SchemaError(f"column {c.name!r}: id {c.id} >= next_column_id")
            names.add(c.name)
            ids.add(c.id)
        return names

    def _validate_key(self, names: set[str]) -> None:
        if not self.primary_key:
            raise SchemaError("primary_key must name at least one column")
        if len(set(self.primary_key)) != len(self.primary_key):
            raise SchemaError(f"primary_key {list(self.primary_key)} names a column twice")
        for k in self.primary_key:
            if k not in names:
                raise SchemaError(f"primary key column {k!r} is not a column")
            col = next(c for c in self.columns if c.name == k)
            if col.nullable:
                raise SchemaError(f"primary key column {k!r} must not be nullable")
            if pa.types.is_floating(col.type):
                raise SchemaError(f"primary key column {k!r}: floating-point keys are not allowed")

    def _validate_sequence(self, names: set[str]) -> None:
        if self.sequence_column is None:
            return
        if self.sequence_column not in names:
            raise SchemaError(f"sequence_column {self.sequence_column!r} is not a column")
        if self.sequence_column in self.primary_key:
            raise SchemaError("sequence_column cannot be a primary key column")
        scol = next(c for c in self.columns if c.name == self.sequence_column)
        if scol.type not in _INTEGER_TYPES:
            raise SchemaError(
                f"sequence_column {self.sequence_column!r} must be an integer column, "
                f"not {type_to_str(scol.type)}"
            )

    # ------------------------------------------------------------------ accessors
    def column(self, name: str) -> Column:
        """Returns the column called ``name``.

        Raises:
            KeyError: No such column.
        """
        by_name: dict[str, Column] = self._by_name  # type: ignore[attr-defined]
        try:
            return by_name[name]
        except KeyError:
            raise KeyError(f"no column {name!r} in schema (columns: {self.names})") from None

    def column_by_id(self, column_id: int) -> Column:
        """Returns the column with id ``column_id``."""
        by_id: dict[int, Column] = self._by_id  # type: ignore[attr-defined]
        return by_id[column_id]

    def has_column(self, name: str) -> bool:
        """Whether a column is called ``name``."""
        return name in self._by_name  # type: ignore[attr-defined]

    @property
    def names(self) -> list[str]:
        """Column names in table order."""
        return [c.name for c in self.columns]

    @property
    def key_columns(self) -> list[Column]:
        """Key columns in key order."""
        return [self.column(k) for k in self.primary_key]

    @property
    def value_columns(self) -> list[Column]:
        """Non-key columns in table order."""
        keys = set(self.primary_key)
        return [c for c in self.columns if c.name not in keys]

    @property
    def required_columns(self) -> list[Column]:
        """Non-key, non-sequence columns that are not nullable and have no default.

        A new row must get these from its event (the sequence column is written from
        the event's ``seq``).
        """
        return [
            c
            for c in self.value_columns
            if not c.nullable and not c.has_default and c.name != self.sequence_column
        ]

    def arrow_schema(self, columns: Sequence[str] | None = None) -> pa.Schema:
        """The Arrow schema of a read (table order, or the order of ``columns``)."""
        cols = self.columns if columns is None else [self.column(n) for n in columns]
        return pa.schema([pa.field(c.name, c.type, nullable=c.nullable) for c in cols])

    # ------------------------------------------------------------------ dict form
    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TableSchema:
        """Builds a schema from its dictionary form (docs/architecture.md §3).

        Raises:
            SchemaError: The dictionary does not describe a valid schema.
        """
        if not isinstance(d, Mapping):
            raise SchemaError(f"schema must be a mapping, got {type(d).__name__}")
        unknown = set(d) - {
            "columns",
            "primary_key",
            "num_buckets",
            "sequence_column",
            "schema_id",
            "next_column_id",
        }
        if unknown:
            raise SchemaError(f"unknown schema field(s): {sorted(unknown)}")
        raw_cols = d.get("columns")
        if not isinstance(raw_cols, Sequence) or isinstance(raw_cols, (str, bytes)):
            raise SchemaError("schema 'columns' must be a list of column objects")
        pk = d.get("primary_key")
        if isinstance(pk, str):
            pk = [pk]
        if not isinstance(pk, Sequence) or not all(isinstance(k, str) for k in pk):
            raise SchemaError("schema 'primary_key' must be a list of column names")
        key_set = set(pk)
        used_ids = {c["id"] for c in raw_cols if isinstance(c, Mapping) and "id" in c}
        auto_ids = (i for i in itertools.count() if i not in used_ids)
        cols = [_column_from_dict(i, rc, key_set, auto_ids) for i, rc in enumerate(raw_cols)]
        nb = d.get("num_buckets", 1)
        return cls(
            columns=tuple(cols),
            primary_key=tuple(pk),
            num_buckets=nb,
            sequence_column=d.get("sequence_column"),
            schema_id=int(d.get("schema_id", 0)),
            next_column_id=int(d.get("next_column_id", -1)),
        )

    def to_dict(self) -> dict[str, Any]:
        """Returns the dictionary form; ``from_dict(s.to_dict()) == s``."""
        d: dict[str, Any] = {
            "columns": [c.to_dict() for c in self.columns],
            "primary_key": list(self.primary_key),
            "num_buckets": self.num_buckets,
            "schema_id": self.schema_id,
            "next_column_id": self.next_column_id,
        }
        if self.sequence_column is not None:
            d["sequence_column"] = self.sequence_column
        return d

    # ------------------------------------------------------------------ evolution
    def add_column(
        self, name: str, type: str | pa.DataType, *, nullable: bool = True, default: Any = None
    ) -> TableSchema:
        """Returns a new schema with a column appended (existing rows read ``default``).

        Raises:
            SchemaError: The name exists or the type/default is invalid.
        """
        t = parse_type(type) if isinstance(type, str) else type
        if parse_type(type_to_str(t)) != t:
            raise SchemaError(f"unsupported column type {t} for {name!r}")
        if not nullable and default is None:
            raise SchemaError(f"added column {name!r} is not nullable and needs a default")
        col = Column(
            id=self.next_column_id,
            name=name,
            type=t,
            nullable=nullable,
            default=_default_to_arrow(default, t, name),
        )
        return replace(
            self,
            columns=(*self.columns, col),
            schema_id=self.schema_id + 1,
            next_column_id=self.next_column_id + 1,
        )

    def drop_column(self, name: str) -> TableSchema:
        """Returns a new schema without column ``name`` (key/sequence columns cannot go).

        Raises:
            SchemaError: The column is missing, a key column or the sequence column.
        """
        if not self.has_column(name):
            raise SchemaError(f"cannot drop {name!r}: no such column")
        if name in self.primary_key or name == self.sequence_column:
            raise SchemaError(f"cannot drop {name!r}: it is a key or the sequence column")
        cols = tuple(c for c in self.columns if c.name != name)
        return replace(self, columns=cols, schema_id=self.schema_id + 1)

    def rename_column(self, old: str, new: str) -> TableSchema:
        """Returns a new schema with column ``old`` called ``new`` (same id).

        Raises:
            SchemaError: ``old`` is missing or ``new`` is taken.
        """
        if not self.has_column(old):
            raise SchemaError(f"cannot rename {old!r}: no such column")
        if self.has_column(new):
            raise SchemaError(f"cannot rename {old!r} to {new!r}: name taken")
        cols = tuple(replace(c, name=new) if c.name == old else c for c in self.columns)
        pk = tuple(new if k == old else k for k in self.primary_key)
        seq = new if self.sequence_column == old else self.sequence_column
        return replace(
            self, columns=cols, primary_key=pk, sequence_column=seq, schema_id=self.schema_id + 1
        )

    def widen_column(self, name: str, type: str | pa.DataType) -> TableSchema:
        """Returns a new schema in which column ``name`` has the wider type ``type`` (same
        id; rows written before read their values cast to it, see :func:`is_widening`).

        A key column is never widened: its values are hashed (to route rows to buckets,
        and in the key index) by their stored width, so an ``int32`` key and the same
        ``int64`` key hash differently.

        Raises:
            SchemaError: The column is missing, a key column, or ``type`` is not a
                widening of its type (the message names the column and both types).
        """
        if not self.has_column(name):
            raise SchemaError(f"cannot widen {name!r}: no such column")
        col = self.column(name)
        try:
            t = parse_type(type) if isinstance(type, str) else type
            supported = parse_type(type_to_str(t)) == t
        except SchemaError as exc:
            raise SchemaError(
                f"cannot widen column {name!r} from {type_to_str(col.type)} to {type!s}: {exc}"
            ) from None
        change = f"column {name!r} from {type_to_str(col.type)} to {type_to_str(t)}"
        if not supported or not is_widening(col.type, t):
            raise SchemaError(
                f"cannot widen {change}: not a lossless widening (int8 -> int16 -> int32 "
                "-> int64, float32 -> float64, decimal128(p, s) -> decimal128(p2, s) with "
                "p2 > p)"
            )
        if name in self.primary_key:
            raise SchemaError(
                f"cannot widen key {change}: keys are hashed (bucket routing and the key "
                "index) by their stored width, so existing rows would hash differently"
            )
        wide = replace(col, type=t, default=col.default.cast(t))
        cols = tuple(wide if c.id == col.id else c for c in self.columns)
        return replace(self, columns=cols, schema_id=self.schema_id + 1)
