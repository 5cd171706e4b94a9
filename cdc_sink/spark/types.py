"""Arrow <-> Spark types of cdc_sink columns, and exact filter values.

Every column type of a cdc_sink schema has one Spark type::

    int8 -> ByteType        float32 -> FloatType     string -> StringType
    int16 -> ShortType      float64 -> DoubleType    binary -> BinaryType
    int32 -> IntegerType    bool -> BooleanType      date32 -> DateType
    int64 -> LongType       decimal128(p, s) -> DecimalType(p, s)
    timestamp[us, UTC] -> TimestampType (an instant; shown in the session time zone)

The Arrow batches a Python data source yields must carry the Arrow schema Spark derives
from the declared Spark schema, field for field (:func:`arrow_schema`); for these types
it is the column's own Arrow type, so :func:`conform_batch` only relabels nullability.

:func:`column_value` converts a literal Spark passes with a pushed filter into a value
of the column's type, or refuses when the conversion would not be exact (the filter then
stays with Spark).
"""

from __future__ import annotations

import datetime as dt
import decimal
import inspect
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from cdc_sink.errors import SchemaError
from cdc_sink.schema import TableSchema, type_to_str
from cdc_sink.utils.values import type_kind

__all__ = ["arrow_schema", "column_value", "conform_batch", "spark_schema", "spark_type"]

_SIMPLE: dict[pa.DataType, DataType] = {
    pa.int8(): ByteType(),
    pa.int16(): ShortType(),
    pa.int32(): IntegerType(),
    pa.int64(): LongType(),
    pa.float32(): FloatType(),
    pa.float64(): DoubleType(),
    pa.bool_(): BooleanType(),
    pa.string(): StringType(),
    pa.binary(): BinaryType(),
    pa.date32(): DateType(),
}

_DECIMAL_CONTEXT = decimal.Context(prec=100)


def spark_type(t: pa.DataType) -> DataType:
    """The Spark type of a cdc_sink column type.

    Raises:
        SchemaError: ``t`` is not a cdc_sink column type.
    """
    simple = _SIMPLE.get(t)
    if simple is not None:
        return simple
    if pa.types.is_timestamp(t) and t.unit == "us" and t.tz in ("UTC", "utc", "+00:00"):
        return TimestampType()
    if pa.types.is_decimal128(t):
        return DecimalType(t.precision, t.scale)
    raise SchemaError(f"Arrow type {t} has no Spark type in cdc_sink")


def spark_schema(schema: TableSchema, columns: Sequence[str] | None = None) -> StructType:
    """The Spark schema of a read: names, types and nullability of the columns.

    Args:
        schema: The table schema of the version read.
        columns: Columns to include, in this order (default all, table order).
    """
    cols = schema.columns if columns is None else [schema.column(n) for n in columns]
    return StructType([StructField(c.name, spark_type(c.type), nullable=c.nullable) for c in cols])


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects of the batches of a source declaring ``schema``
    (timestamps with time zone UTC)."""
    if _TO_ARROW_TAKES_TIMEZONE:
        return to_arrow_schema(schema, timezone="UTC")
    return to_arrow_schema(schema)  # pyspark 4.1: timestamp_utc=True, the same schema


# pyspark 4.2 replaced to_arrow_schema's timestamp_utc=True by timezone="UTC".
_TO_ARROW_TAKES_TIMEZONE = "timezone" in inspect.signature(to_arrow_schema).parameters


def conform_batch(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """``batch`` relabelled (and, where a type differs, cast) to exactly ``target``.

    Columns are matched by position; the names must agree.

    Raises:
        SchemaError: The column names differ.
    """
    if batch.schema.equals(target):
        return batch
    if batch.schema.names != target.names:
        raise SchemaError(f"batch columns {batch.schema.names} are not {target.names}")
    arrays = [
        col if col.type == f.type else col.cast(f.type)
        for col, f in zip(batch.columns, target, strict=True)
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def column_value(value: Any, t: pa.DataType) -> Any:
    """``value`` as a Python value of column type ``t``, exactly.

    Args:
        value: A literal of a pushed Spark filter (int, float, bool, str, bytes, date,
            tz-aware datetime, Decimal).
        t: The column's Arrow type.

    Returns:
        The same value, of the Python type the column holds: an int in range, a float
        (float32: one that float32 represents), a UTC datetime, a Decimal at the
        column's scale, ...

    Raises:
        ValueError: ``value`` is null, NaN, of another kind, out of range, or not
            representable in ``t`` without rounding.
    """
    if value is None:
        raise ValueError("null literal")
    kind = type_kind(t)
    if kind is None:
        raise ValueError(f"no filter values for type {type_to_str(t)}")
    return getattr(_Literal, kind)(value, t)


class _Literal:
    """The exact conversion of a literal, one per type kind
    (:func:`cdc_sink.utils.values.type_kind`; a method named after it)."""

    @staticmethod
    def integer(value: Any, t: pa.DataType) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"{value!r} is not an integer")
        bits = t.bit_width - 1
        v = int(value)
        if not -(1 << bits) <= v < (1 << bits):
            raise ValueError(f"{v} is out of range of {t}")
        return v

    @staticmethod
    def floating(value: Any, t: pa.DataType) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ValueError(f"{value!r} is not a number")
        f = float(value)
        if math.isnan(f):
            raise ValueError("NaN: Spark orders NaN above every number, Arrow does not")
        if f != value or (t == pa.float32() and float(np.float32(f)) != f):
            raise ValueError(f"{value!r} is not exactly a {t}")
        return f

    @staticmethod
    def boolean(value: Any, t: pa.DataType) -> bool:
        if not isinstance(value, (bool, np.bool_)):
            raise ValueError(f"{value!r} is not a bool")
        return bool(value)

    @staticmethod
    def string(value: Any, t: pa.DataType) -> str:
        if not isinstance(value, str):
            raise ValueError(f"{value!r} is not a string")
        return value

    @staticmethod
    def binary(value: Any, t: pa.DataType) -> bytes:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise ValueError(f"{value!r} is not binary")
        return bytes(value)

    @staticmethod
    def date(value: Any, t: pa.DataType) -> dt.date:
        if isinstance(value, dt.datetime) or not isinstance(value, dt.date):
            raise ValueError(f"{value!r} is not a date")
        return value

    @staticmethod
    def timestamp(value: Any, t: pa.DataType) -> dt.datetime:
        if not isinstance(value, dt.datetime) or value.utcoffset() is None:
            raise ValueError(f"{value!r} is not a time-zone-aware datetime")
        return value.astimezone(dt.timezone.utc)

    @staticmethod
    def decimal(value: Any, t: pa.DataType) -> decimal.Decimal:
        if isinstance(value, bool) or not isinstance(value, (decimal.Decimal, int)):
            raise ValueError(f"{value!r} is not a decimal")
        d = decimal.Decimal(value)
        if not d.is_finite():
            raise ValueError(f"{value!r} is not finite")
        q = d.quantize(decimal.Decimal(1).scaleb(-t.scale), context=_DECIMAL_CONTEXT)
        if q != d:
            raise ValueError(f"{value!r} has more than {t.scale} decimal places")
        unscaled = int(q.scaleb(t.scale, context=_DECIMAL_CONTEXT))
        if abs(unscaled) >= 10**t.precision:
            raise ValueError(f"{value!r} does not fit {type_to_str(t)}")
        return q
