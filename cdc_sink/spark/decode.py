"""Decoding Kafka records into the change-batch wire form inside Spark (the JVM).

Native JSON is parsed by Spark's ``from_json`` with ``key`` and ``set`` read as
``map<string,string>``: a map keeps every key the event wrote, with JSON ``null`` as a
null value, so *absent vs null* survives. Each value is then judged as the Python
decoders judge it, with Spark SQL expressions only (:mod:`._jvm_values`): a number with
a point or an exponent, which Jackson reads as a double before Spark has its text, is
judged on its own token, read from the message (:mod:`._json_tokens`), so a decimal is
stored exactly or rejected, never rounded or wrapped, and a finite float beyond its type
is rejected, not stored as an infinity. The result has the wire-form columns of
:mod:`cdc_sink.batch` plus bookkeeping columns, and a ``__reason`` column naming why an
event is malformed (first reason wins)::

    __op, __seq, <key columns>, <col>, __set__<col>, ...,
    __reason, __topic, __partition, __offset, __ts_ms

``__ts_ms`` is the producer's time of the event: its ``ts_ms`` field, else the Kafka
record timestamp.

Rejects carry the Python decoders' reasons (``column 'c': value out of range of <type>
...: <text>``, ``column 'c': <text> is not a valid <type>``, the member's JSON text cut
at 60 characters). A value whose text decides but whose member cannot be found in the
message (its name written with escapes, or repeated) is rejected, never guessed
(:data:`NOT_READ`). ``from_json`` runs with single-quoted strings refused, as JSON and
the Python decoders refuse them.

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

from cdc_sink.batch import SET_PREFIX
from cdc_sink.errors import InvalidOption
from cdc_sink.formats.native_json import TRUNCATE_REFUSED
from cdc_sink.formats.value_ranges import PG_INFINITY as _PG_INFINITY
from cdc_sink.formats.value_ranges import TEMPORAL_RANGE
from cdc_sink.schema import TableSchema, type_to_str
from cdc_sink.spark._json_tokens import member_anywhere
from cdc_sink.spark._jvm_values import (
    Member,
    judge,
    schema_members,
    with_steps,
    with_tokens,
    with_values,
)

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import DataFrame

__all__ = [
    "META_COLUMNS",
    "NOT_READ",
    "decode_native_json",
    "jvm_allow_truncate",
    "spark_type_name",
    "wire_arrow_schema",
    "wire_schema",
]

META_COLUMNS = ("__reason", "__topic", "__partition", "__offset", "__ts_ms")
NOT_READ = "value not read exactly: json_decoder='jvm' finds no single plain member"
"""The reason (after ``column 'c': ``) of a value whose JSON text decides but whose member
the JVM decoder cannot find in the event's text (followed by the member's name and
object): its name written with escapes, or repeated."""
_EVENT = "struct<op:string,key:map<string,string>,set:map<string,string>,seq:bigint,ts_ms:bigint>"
_REASON_TEXT = 60
"""Characters of a member's text quoted in a reason (the Python decoders' limit)."""


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


def _parsed(df: DataFrame, members: list[Member]) -> DataFrame:
    """The Kafka rows with the message text ``__v``, the parsed event ``e`` and each
    member's value text and whether the event sets it."""
    from pyspark.sql import functions as F

    text = df.select(
        F.col("value").cast("string").alias("__v"),
        "topic",
        "partition",
        "offset",
        F.unix_millis("timestamp").alias("__kafka_ms"),
    )
    options = {"mode": "PERMISSIVE", "allowSingleQuotes": "false"}
    base = text.select("*", F.from_json(F.col("__v"), _EVENT, options).alias("e"))
    return with_values(base, members)


# ---------------------------------------------------------------------- reasons
def _noted(raw: SparkColumn) -> SparkColumn:
    """``raw`` with the note of a PostgreSQL infinity, as the Python decoders add it."""
    from pyspark.sql import functions as F

    for note in sorted(set(_PG_INFINITY.values())):
        texts = "|".join(k for k, v in _PG_INFINITY.items() if v == note)
        raw = F.regexp_replace(raw, f"^({texts})\\z", f"$1 ({note})")
    return raw


_UNREAD, _BEYOND, _INVALID = 0, 1, 2
"""Kinds of refused value: its member not found (:data:`NOT_READ`), out of range, invalid."""


def _wording(m: Member) -> tuple[str, str, str, str]:
    """The Python decoders' words for a refused value of ``m``: the reason where it was
    not read, the head of an out-of-range reason, the head and tail of an invalid one."""
    t, name = m.column.type, m.column.name
    what, label = type_to_str(t), f"column {name!r}"
    if pa.types.is_decimal(t):
        detail = f" (at most {t.precision} digits, {t.scale} after the point)"
    elif pa.types.is_date32(t) or pa.types.is_timestamp(t):
        detail = f" ({TEMPORAL_RANGE})"
    else:
        detail = ""
    return (
        f"{label}: {NOT_READ} {name!r} of {m.where!r}",
        f"{label}: value out of range of {what}{detail}: ",
        f"{label}: ",
        f" is not a valid {what}",
    )


def _with_refused(df: DataFrame, members: list[Member]) -> DataFrame:
    """``df`` with what the reason of a refused value is made of, each once per event:
    ``__bad`` the first member whose value the event has and is refused (its typed value
    is null; null: none), then for that member the kind of refusal ``__kind`` and its
    JSON text ``__raw`` (its token, else the first member of its name in the event, else
    Jackson's text; cut at 60 characters as the Python decoders cut it)."""
    from pyspark.sql import functions as F

    bad = F.lit(None).cast("int")
    for i, m in enumerate(members):
        bad = F.when(m.judged & m.val.isNotNull() & m.part("v").isNull(), F.lit(i)).otherwise(bad)
    df = df.select("*", bad.alias("__bad"))

    def pick(values: list[SparkColumn]) -> SparkColumn:  # values[__bad]
        out = F.lit(None)
        for i, v in reversed(list(enumerate(values))):
            out = F.when(F.col("__bad") == F.lit(i), v).otherwise(out)
        return out

    kinds = []
    for m in members:
        j = judge(m)  # (its flags only)
        kinds.append(F.when(j.unread, _UNREAD).when(j.out_of_range, _BEYOND).otherwise(_INVALID))
    patterns = [member_anywhere(m.column.name) for m in members]
    anywhere = F.call_function("regexp_extract", F.col("__v"), _picked(patterns), F.lit(1))
    empty = F.lit("")
    raw = F.coalesce(
        F.nullif(pick([m.token() for m in members]), empty),
        F.nullif(anywhere, empty),
        pick([m.val for m in members]),
    )
    cut = F.regexp_replace(raw, f"(?s)^(.{{{_REASON_TEXT}}}).+", "$1...")
    bad_one = F.col("__bad").isNotNull()
    return df.select(
        "*", F.when(bad_one, pick(kinds)).alias("__kind"), F.when(bad_one, cut).alias("__raw")
    )


def _picked(texts: list[str]) -> SparkColumn:
    """``texts[__bad]``."""
    from pyspark.sql import functions as F

    return F.element_at(F.array(*[F.lit(t) for t in texts]), F.col("__bad") + 1)


def _member_reason(members: list[Member]) -> SparkColumn:
    """The reason of the refused value of member ``__bad`` (:func:`_with_refused`), in the
    words of the Python decoders."""
    from pyspark.sql import functions as F

    words = [_wording(m) for m in members]
    unread, beyond, head, tail = (_picked([w[i] for w in words]) for i in range(4))
    kind, raw = F.col("__kind"), F.col("__raw")
    return (
        F.when(kind == _UNREAD, unread)
        .when(kind == _BEYOND, F.concat(beyond, _noted(raw)))
        .otherwise(F.concat(head, raw, tail))
    )


def _event_reason(e: SparkColumn, allow_truncate: bool) -> SparkColumn:
    """The reason of an event that is no JSON object with an op, or a refused truncate."""
    from pyspark.sql import functions as F

    reason = F.when(
        e.isNull() | e["op"].isNull(), F.lit("malformed event: not a JSON object with an 'op'")
    )
    if not allow_truncate:
        reason = reason.when(e["op"] == F.lit("truncate"), F.lit(TRUNCATE_REFUSED))
    return reason


def _unknown_members(reason: SparkColumn, e: SparkColumn, schema: TableSchema) -> SparkColumn:
    """``reason`` refusing events that set unknown columns (but deletes) or name unknown
    key columns."""
    from pyspark.sql import functions as F

    empty = F.create_map().cast("map<string,string>")
    sets, keys = F.coalesce(e["set"], empty), F.coalesce(e["key"], empty)
    is_delete = F.coalesce(e["op"] == F.lit("delete"), F.lit(False))
    known = (
        F.array(*[F.lit(c.name) for c in schema.value_columns])
        if schema.value_columns
        else F.array().cast("array<string>")
    )
    unknown = F.array_except(F.map_keys(sets), known)
    reason = reason.when(
        ~is_delete & (F.size(unknown) > 0),
        F.concat(F.lit("unknown column(s) in 'set': "), F.array_join(unknown, ", ")),
    )
    key_names = F.array(*[F.lit(k.name) for k in schema.key_columns])
    extra_keys = F.array_except(F.map_keys(keys), key_names)
    return reason.when(
        F.size(extra_keys) > 0,
        F.concat(F.lit("unknown key column(s): "), F.array_join(extra_keys, ", ")),
    )


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

    members = schema_members(schema)
    staged = with_steps(with_tokens(_parsed(df, members), members), members)
    # the typed values in a projection of their own: the reasons only refer to them
    staged = staged.select("*", *[judge(m).typed.alias(m.tag + "v") for m in members])
    staged = _with_refused(staged, members)
    e = F.col("e")
    seq = e["seq"]
    if schema.sequence_column is not None:
        seq = F.coalesce(seq, e["set"][schema.sequence_column].try_cast("bigint"))
    out: list[SparkColumn] = [e["op"].alias("__op"), seq.alias("__seq")]
    reason = _event_reason(e, allow_truncate)
    if members:
        reason = reason.when(F.col("__bad").isNotNull(), _member_reason(members))
    for m in members:
        out.append(m.part("v").alias(m.column.name))
        if m.where == "set":
            out.append(m.judged.alias(SET_PREFIX + m.column.name))
    out += [
        _unknown_members(reason, e, schema).alias("__reason"),
        F.col("topic").alias("__topic"),
        F.col("partition").alias("__partition"),
        F.col("offset").alias("__offset"),
        F.coalesce(e["ts_ms"], F.col("__kafka_ms")).alias("__ts_ms"),
    ]
    return staged.select(*out)
