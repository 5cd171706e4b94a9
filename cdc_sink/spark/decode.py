"""Decoding Kafka records into the change-batch wire form inside Spark (the JVM).

Native JSON is parsed by Spark's ``from_json`` with ``key`` and ``set`` read as
``map<string,string>``: a map keeps every key the event wrote, with JSON ``null`` as a
null value, so *absent vs null* survives; each value is then ``try_cast`` to its column
type. The result has the wire-form columns of :mod:`cdc_sink.changes` plus bookkeeping
columns, and a ``__reason`` column naming why an event is malformed (first reason wins)::

    __op, __seq, <key columns>, <col>, __set__<col>, ...,
    __reason, __topic, __partition, __offset, __ts_ms

``__ts_ms`` is the producer's time of the event: its ``ts_ms`` field, else the Kafka
record timestamp.

``try_cast`` refuses what does not convert (Spark's decimals never wrap: a value with
more digits than the type is null), and what it converts only by changing the value is
refused too, as the Python decoders do: a finite number that overflows a float column
to infinity, a decimal with a non-zero digit beyond the column's scale (Spark would
round it). One thing the JVM path cannot see: Jackson reads a JSON number with a point
or an exponent as a double before Spark has its text, so ``1e400`` arrives as
``Infinity`` and ``1E-500`` as ``0.0`` (integers keep every digit; decimal *strings*
keep their text). Producers that need exact wide decimals write them as strings, or
use the Python decoders (docs/design-notes.md, "Wide values").

A ``truncate`` event is rejected (the reason of the Python decoder,
:data:`cdc_sink.formats.native_json.TRUNCATE_REFUSED`) unless ``allow_truncate``.

Formats that Spark cannot parse (rowv2, Debezium) are decoded in Python by
:mod:`cdc_sink.formats`; :func:`wire_schema` gives the Spark schema of their output so
they can run inside ``mapInArrow`` too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from cdc_sink.changes import SET_PREFIX
from cdc_sink.errors import InvalidOption
from cdc_sink.formats.native_json import TRUNCATE_REFUSED
from cdc_sink.schema import Column, TableSchema, type_to_str

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import DataFrame

__all__ = [
    "META_COLUMNS",
    "decode_native_json",
    "jvm_allow_truncate",
    "spark_type_name",
    "wire_arrow_schema",
    "wire_schema",
]

META_COLUMNS = ("__reason", "__topic", "__partition", "__offset", "__ts_ms")


def spark_type_name(t: pa.DataType) -> str:
    """The Spark SQL type name of a supported Arrow type (``bigint``, ``decimal(12,2)``...)."""
    from cdc_sink.spark.types import spark_type

    return str(spark_type(t).simpleString())


def wire_arrow_schema(schema: TableSchema) -> pa.Schema:
    """The Arrow schema of :func:`wire_schema` (what ``mapInArrow`` bodies must yield)."""
    fields = [pa.field("__op", pa.string()), pa.field("__seq", pa.int64())]
    fields += [pa.field(c.name, c.type) for c in schema.key_columns]
    for c in schema.value_columns:
        fields += [pa.field(c.name, c.type), pa.field(SET_PREFIX + c.name, pa.bool_())]
    fields += [
        pa.field("__reason", pa.string()),
        pa.field("__topic", pa.string()),
        pa.field("__partition", pa.int32()),
        pa.field("__offset", pa.int64()),
        pa.field("__ts_ms", pa.int64()),
    ]
    return pa.schema(fields)


def wire_schema(schema: TableSchema) -> str:
    """DDL of the wire form + bookkeeping columns (for ``mapInArrow`` outputs)."""
    cols = ["`__op` string", "`__seq` bigint"]
    cols += [f"`{c.name}` {spark_type_name(c.type)}" for c in schema.key_columns]
    for c in schema.value_columns:
        cols += [f"`{c.name}` {spark_type_name(c.type)}", f"`{SET_PREFIX}{c.name}` boolean"]
    cols += [
        "`__reason` string",
        "`__topic` string",
        "`__partition` int",
        "`__offset` bigint",
        "`__ts_ms` bigint",
    ]
    return ", ".join(cols)


def _cast(raw: SparkColumn, c: Column) -> SparkColumn:
    from pyspark.sql import functions as F

    t = c.type
    if pa.types.is_string(t):
        return raw
    if pa.types.is_binary(t):
        return F.try_to_binary(raw, F.lit("base64"))
    return raw.try_cast(spark_type_name(t))


_DECIMAL_TEXT = r"^\s*[+-]?([0-9]*)(?:\.([0-9]*))?(?:[eE]([+-]?[0-9]+))?\s*$"
_FINITE_TEXT = r"^\s*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\s*$"


def _beyond(raw: SparkColumn, typed: SparkColumn, c: Column) -> SparkColumn | None:
    """Where ``try_cast`` gave a value only by changing it, which the Python decoders
    refuse (None: no such case for the type of ``c``): a finite number that overflowed
    a float column to infinity, a decimal rounded to the column's scale (its text has a
    non-zero digit beyond it). Decimals with more digits before the point than the type
    holds are null already (Spark's decimals never wrap)."""
    from pyspark.sql import functions as F

    t = c.type
    if pa.types.is_floating(t):
        return (F.abs(typed) == F.lit(float("inf"))) & raw.rlike(_FINITE_TEXT)
    if not pa.types.is_decimal(t):
        return None
    whole, frac, exp_text = (F.regexp_extract(raw, _DECIMAL_TEXT, i) for i in (1, 2, 3))
    digits = F.concat(whole, frac)
    kept = F.regexp_replace(digits, "0+$", "")
    exp = F.coalesce(exp_text.try_cast("int"), F.lit(0))
    # digits after the point, trailing zeros dropped (a huge exponent fails the cast)
    scale = F.length(frac) - exp - (F.length(digits) - F.length(kept))
    return typed.isNotNull() & kept.rlike("[1-9]") & (scale > F.lit(t.scale))


def _typed(
    reason: SparkColumn, raw: SparkColumn, c: Column, where: SparkColumn, who: str, bad: str
) -> tuple[SparkColumn, SparkColumn]:
    """``raw`` cast to the type of ``c``, and ``reason`` refusing (where ``where``) a value
    the cast does not take (``who: bad``) or takes only by changing it (:func:`_beyond`)."""
    from pyspark.sql import functions as F

    typed = _cast(raw, c)
    reason = reason.when(where & raw.isNotNull() & typed.isNull(), F.lit(f"{who}: {bad}"))
    beyond = _beyond(raw, typed, c)
    if beyond is not None:
        what = type_to_str(c.type)
        text = (
            F.concat(F.lit(f"{who}: value out of range of {what}: "), raw)
            if pa.types.is_floating(c.type)
            else F.concat(F.lit(f"{who}: "), raw, F.lit(f" is not a valid {what}"))
        )
        reason = reason.when(where & beyond, text)
    return typed, reason


def jvm_allow_truncate(decoder_options: Mapping[str, Any] | None) -> bool:
    """The ``allow_truncate`` of a sink's decoder options, the one option the JVM decoder
    takes.

    Raises:
        InvalidOption: Another option is given (they apply to the Python decoders).
    """
    options = dict(decoder_options or {})
    allow = options.pop("allow_truncate", False)
    if options:
        raise InvalidOption(
            "decoder options apply to the Python decoders, not to json_decoder='jvm' "
            f"(except allow_truncate): {sorted(options)}",
            option="decoder_options",
        )
    if not isinstance(allow, bool):
        raise InvalidOption(
            f"decoder option 'allow_truncate' must be a bool, got {allow!r}",
            option="allow_truncate",
        )
    return allow


def decode_native_json(
    df: DataFrame, schema: TableSchema, *, allow_truncate: bool = False
) -> DataFrame:
    """Decodes a Kafka DataFrame of native JSON events into the wire form.

    Args:
        df: Kafka source rows (``value``, ``topic``, ``partition``, ``offset``, ...).
        schema: The table schema.
        allow_truncate: Pass ``truncate`` events on (else each is rejected), as the
            Python decoder's option of that name.

    Returns:
        One row per Kafka record: wire-form columns plus ``__reason`` (null when the event
        decoded) and its Kafka coordinates.
    """
    from pyspark.sql import functions as F

    ev = F.from_json(
        F.col("value").cast("string"),
        "struct<op:string,key:map<string,string>,set:map<string,string>,seq:bigint,ts_ms:bigint>",
        {"mode": "PERMISSIVE"},
    )
    base = df.select(
        ev.alias("e"),
        "topic",
        "partition",
        "offset",
        F.unix_millis("timestamp").alias("__kafka_ms"),
    )
    e = F.col("e")
    sets = F.coalesce(e["set"], F.create_map().cast("map<string,string>"))
    keys = F.coalesce(e["key"], F.create_map().cast("map<string,string>"))
    out: list[SparkColumn] = [e["op"].alias("__op")]
    seq = e["seq"]
    if schema.sequence_column is not None:
        seq = F.coalesce(seq, sets[schema.sequence_column].try_cast("bigint"))
    out.append(seq.alias("__seq"))
    reason = F.when(
        e.isNull() | e["op"].isNull(), F.lit("malformed event: not a JSON object with an 'op'")
    )
    if not allow_truncate:
        reason = reason.when(e["op"] == F.lit("truncate"), F.lit(TRUNCATE_REFUSED))
    for k in schema.key_columns:
        bad = f"not a valid {type_to_str(k.type)}"
        typed, reason = _typed(reason, keys[k.name], k, F.lit(True), f"key column {k.name!r}", bad)
        out.append(typed.alias(k.name))
    is_delete = e["op"] == F.lit("delete")
    for c in schema.value_columns:
        present = F.map_contains_key(sets, F.lit(c.name)) & ~F.coalesce(is_delete, F.lit(False))
        bad = f"value is not a valid {type_to_str(c.type)}"
        typed, reason = _typed(reason, sets[c.name], c, present, f"column {c.name!r}", bad)
        out += [typed.alias(c.name), present.alias(SET_PREFIX + c.name)]
    known = (
        F.array(*[F.lit(c.name) for c in schema.value_columns])
        if schema.value_columns
        else F.array().cast("array<string>")
    )
    unknown = F.array_except(F.map_keys(sets), known)
    reason = reason.when(
        ~F.coalesce(is_delete, F.lit(False)) & (F.size(unknown) > 0),
        F.concat(F.lit("unknown column(s) in 'set': "), F.array_join(unknown, ", ")),
    )
    key_names = F.array(*[F.lit(k.name) for k in schema.key_columns])
    extra_keys = F.array_except(F.map_keys(keys), key_names)
    reason = reason.when(
        F.size(extra_keys) > 0,
        F.concat(F.lit("unknown key column(s): "), F.array_join(extra_keys, ", ")),
    )
    out += [
        reason.alias("__reason"),
        F.col("topic").alias("__topic"),
        F.col("partition").alias("__partition"),
        F.col("offset").alias("__offset"),
        F.coalesce(e["ts_ms"], F.col("__kafka_ms")).alias("__ts_ms"),
    ]
    return base.select(*out)
