"""Encoding of the ``rowv2`` format: values, rows and native events (private).

Producer and test tools, per row (the layout and the value encodings are described in
:mod:`cdc_sink.formats.rowv2`, whose decoder reads them back).
"""

from __future__ import annotations

import datetime as dt
import decimal
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from cdc_sink.batch import OP_CODES, OP_DELETE, OP_NAMES
from cdc_sink.formats._arrays import int_bounds
from cdc_sink.formats._base import EventEncoder
from cdc_sink.schema import Column, TableSchema, coerce, type_to_str

__all__ = [
    "CODEC_VERSION",
    "FLAG_BIG",
    "encode_event",
    "encode_rows",
    "encode_value",
    "pack_row",
    "rowv2_encoder",
]

CODEC_VERSION = 128
"""The codec version byte of row format v2."""

FLAG_BIG = 1
"""Flag bit: column ids and offsets take 4 bytes."""

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_EPOCH_DAY = dt.date(1970, 1, 1)


def _int_bytes(v: int) -> bytes:
    for width in (1, 2, 4, 8):
        bound = 1 << (8 * width - 1)
        if -bound <= v < bound:
            return v.to_bytes(width, "little", signed=True)
    raise ValueError(f"{v} does not fit in 64 bits")


def _check_int(v: Any, c: Column) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"column {c.name!r}: {v!r} is not an integer")
    lo, hi = int_bounds(c.type)
    if not lo <= v <= hi:
        raise ValueError(f"column {c.name!r}: {v} is out of range of {type_to_str(c.type)}")
    return v


def encode_value(value: Any, column: Column) -> bytes:
    """Encodes one non-null value of ``column`` (see the module docstring).

    Dates may be ``datetime.date``, ISO strings or day numbers; timestamps aware or naive
    (UTC) ``datetime``, ISO strings or microsecond numbers; decimals ``Decimal``, strings
    or numbers.

    Raises:
        ValueError: The value does not fit the column type.
    """
    encode = _value_encoder(column.type)
    if encode is None:
        raise ValueError(f"column {column.name!r}: unsupported type {column.type}")
    return encode(value, column)


def _value_encoder(t: pa.DataType) -> Callable[[Any, Column], bytes] | None:
    """The encoder of one non-null value of a column of type ``t`` (``None``: no type of
    a schema)."""
    if pa.types.is_boolean(t):
        return _bool_bytes
    if pa.types.is_integer(t):
        return _integer_bytes
    if pa.types.is_floating(t):
        return _float_bytes
    if pa.types.is_string(t):
        return _string_bytes
    if pa.types.is_binary(t):
        return _binary_bytes
    if pa.types.is_date32(t):
        return _date_bytes
    if pa.types.is_timestamp(t):
        return _timestamp_bytes
    if pa.types.is_decimal(t):
        return _decimal_bytes
    return None


def _bool_bytes(value: Any, column: Column) -> bytes:
    if not isinstance(value, bool):
        raise ValueError(f"column {column.name!r}: {value!r} is not a bool")
    return b"\x01" if value else b"\x00"


def _integer_bytes(value: Any, column: Column) -> bytes:
    return _int_bytes(_check_int(value, column))


def _float_bytes(value: Any, column: Column) -> bytes:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"column {column.name!r}: {value!r} is not a number")
    return struct.pack("<d", float(value))


def _string_bytes(value: Any, column: Column) -> bytes:
    if not isinstance(value, str):
        raise ValueError(f"column {column.name!r}: {value!r} is not a string")
    return value.encode("utf-8")


def _binary_bytes(value: Any, column: Column) -> bytes:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise ValueError(f"column {column.name!r}: {value!r} is not bytes")
    return bytes(value)


def _date_bytes(value: Any, column: Column) -> bytes:
    """A ``date``, ISO string or day number, as days since 1970-01-01."""
    value = coerce(value, column.type)  # ISO text -> date (schema's one coercion per type)
    if isinstance(value, dt.datetime):
        raise ValueError(f"column {column.name!r}: {value!r} is a datetime, not a date")
    if isinstance(value, dt.date):
        value = (value - _EPOCH_DAY).days
    return _int_bytes(_check_int(value, column))


def _timestamp_bytes(value: Any, column: Column) -> bytes:
    """A ``datetime`` (naive = UTC), ISO string or microsecond number, as microseconds."""
    value = coerce(value, column.type)  # ISO text -> aware datetime (naive text is UTC)
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        value = (value - _EPOCH) // dt.timedelta(microseconds=1)
    return _int_bytes(_check_int(value, column))


def _decimal_bytes(value: Any, column: Column) -> bytes:
    """A ``Decimal``, string or number, exact at the column's scale, as 16 bytes."""
    t, name = column.type, column.name
    if isinstance(value, bool) or not isinstance(value, (decimal.Decimal, str, int, float)):
        raise ValueError(f"column {name!r}: {value!r} is not a decimal")
    with decimal.localcontext(decimal.Context(prec=120)):
        d = decimal.Decimal(str(value))
        if not d.is_finite():
            raise ValueError(f"column {name!r}: {value} is not a finite decimal")
        unscaled = d.scaleb(t.scale)
        if unscaled != unscaled.to_integral_value():
            raise ValueError(f"column {name!r}: {value} has more than {t.scale} decimals")
        iv = int(unscaled)
    if abs(iv) >= 10**t.precision:
        raise ValueError(f"column {name!r}: {value} does not fit {type_to_str(t)}")
    return iv.to_bytes(16, "little", signed=True)


def pack_row(
    op: int, not_null: Mapping[int, bytes], nulls: Iterable[int] = (), *, big: bool | None = None
) -> bytes:
    """Packs one row from already encoded values (the low-level writer).

    Args:
        op: Op code 0..3.
        not_null: Column id → encoded value bytes.
        nulls: Ids of the columns set to null.
        big: Force the big (or small) layout; by default big exactly when an id is above
            255 or the values exceed 65535 bytes.

    Returns:
        The message value: op byte + row.

    Raises:
        ValueError: A bad op, a negative or too large id, an id in both sets, or a small
            layout that cannot hold the row.
    """
    if not 0 <= op <= 255:
        raise ValueError(f"op {op} does not fit in a byte")
    ids = sorted(not_null)
    null_ids = sorted(set(nulls))
    if set(ids) & set(null_ids):
        raise ValueError(f"column ids {sorted(set(ids) & set(null_ids))} are both null and set")
    all_ids = ids + null_ids
    if any(i < 0 or i > 0xFFFFFFFF for i in all_ids):
        raise ValueError("column ids must be in [0, 2**32)")
    vals = [not_null[i] for i in ids]
    total = sum(len(v) for v in vals)
    needs_big = max(all_ids, default=0) > 255 or total > 0xFFFF
    if big is None:
        big = needs_big
    elif not big and needs_big:
        raise ValueError("a small row cannot hold ids > 255 or more than 65535 value bytes")
    if len(ids) > 0xFFFF or len(null_ids) > 0xFFFF:
        raise ValueError("a row holds at most 65535 not-null and 65535 null columns")
    id_fmt, off_fmt = ("<I", "<I") if big else ("<B", "<H")
    out = bytearray([op, CODEC_VERSION, FLAG_BIG if big else 0])
    out += struct.pack("<HH", len(ids), len(null_ids))
    for i in all_ids:
        out += struct.pack(id_fmt, i)
    end = 0
    for v in vals:
        end += len(v)
        out += struct.pack(off_fmt, end)
    for v in vals:
        out += v
    return bytes(out)


def _op_code(op: Any) -> int:
    if isinstance(op, str):
        if op not in OP_CODES:
            raise ValueError(f"unknown op {op!r}; ops are {list(OP_NAMES)}")
        return OP_CODES[op]
    if isinstance(op, bool) or not isinstance(op, int) or not 0 <= op <= OP_DELETE:
        raise ValueError(f"unknown op {op!r}")
    return op


def encode_rows(
    ops: Sequence[str | int],
    keys: Sequence[Mapping[str, Any]],
    sets: Sequence[Mapping[str, Any] | None],
    schema: TableSchema,
    *,
    seqs: Sequence[int | None] | None = None,
) -> list[bytes]:
    """Encodes events as ``rowv2`` message values (a per-row loop: a producer tool).

    Args:
        ops: Op name or code of each event.
        keys: Key column name → value of each event (every key column).
        sets: Column name → value of each event (``None`` sets null; a column not in
            the mapping is absent). Ignored for deletes.
        schema: The table schema.
        seqs: Optional sequence number of each event, written as the value of the
            schema's ``sequence_column``.

    Returns:
        One message value per event.

    Raises:
        ValueError: An unknown op or column, a missing key column, a value that does not
            fit its column, or a ``seq`` without a sequence column.
    """
    if not len(ops) == len(keys) == len(sets) or (seqs is not None and len(seqs) != len(ops)):
        raise ValueError("ops, keys, sets (and seqs) must have the same length")
    out = []
    for i, (op, key, sets_i) in enumerate(zip(ops, keys, sets, strict=True)):
        code = _op_code(op)
        not_null = _key_values(i, key, schema)
        nulls: list[int] = []
        if code != OP_DELETE:
            _set_values(i, sets_i or {}, schema, not_null, nulls)
        seq = None if seqs is None else seqs[i]
        if seq is not None:
            _seq_value(i, seq, schema, not_null, nulls)
        out.append(pack_row(code, not_null, nulls))
    return out


def _key_values(i: int, key: Mapping[str, Any], schema: TableSchema) -> dict[int, bytes]:
    """The encoded key columns of event ``i`` by column id (every one is required)."""
    not_null: dict[int, bytes] = {}
    for kc in schema.key_columns:
        if kc.name not in key or key[kc.name] is None:
            raise ValueError(f"event {i}: key column {kc.name!r} is missing")
        not_null[kc.id] = encode_value(key[kc.name], kc)
    extra = set(key) - set(schema.primary_key)
    if extra:
        raise ValueError(f"event {i}: unknown key column(s) {sorted(extra)}")
    return not_null


def _set_values(
    i: int,
    sets: Mapping[str, Any],
    schema: TableSchema,
    not_null: dict[int, bytes],
    nulls: list[int],
) -> None:
    """Adds the columns event ``i`` sets: encoded values to ``not_null``, the ids of
    columns set to null to ``nulls``."""
    for name, v in sets.items():
        if name in schema.primary_key:
            raise ValueError(f"event {i}: key column {name!r} inside 'set'")
        if not schema.has_column(name):
            raise ValueError(f"event {i}: unknown column {name!r}")
        c = schema.column(name)
        if v is None:
            nulls.append(c.id)
        else:
            not_null[c.id] = encode_value(v, c)


def _seq_value(
    i: int, seq: int, schema: TableSchema, not_null: dict[int, bytes], nulls: list[int]
) -> None:
    """Writes event ``i``'s ``seq`` as its sequence column (which ``set`` may hold too,
    with the same value)."""
    if schema.sequence_column is None:
        raise ValueError("seq given but the schema has no sequence_column")
    scol = schema.column(schema.sequence_column)
    enc = encode_value(seq, scol)
    if not_null.get(scol.id, enc) != enc or scol.id in nulls:
        raise ValueError(f"event {i}: seq {seq} differs from {scol.name!r} in 'set'")
    not_null[scol.id] = enc


def rowv2_encoder(schema: TableSchema) -> EventEncoder:
    """The ``rowv2`` encoder of native events (the registry's): :func:`encode_event`
    with ``schema`` (``seq`` as the sequence column's value; no ``ts_ms``: the Kafka
    record timestamp carries it)."""

    def encode(event: Mapping[str, Any]) -> bytes:
        return encode_event(event, schema)

    return encode


def encode_event(event: Mapping[str, Any], schema: TableSchema) -> bytes:
    """Encodes one native event ``{"op", "key", "set"?, "seq"?}`` as a ``rowv2`` value.

    ``key`` may be a scalar for a one-column key.

    Raises:
        ValueError: As :func:`encode_rows`.
    """
    key = event.get("key")
    if not isinstance(key, Mapping):
        if len(schema.primary_key) != 1 or key is None:
            raise ValueError("event has no 'key' object")
        key = {schema.primary_key[0]: key}
    return encode_rows([event["op"]], [key], [event.get("set")], schema, seqs=[event.get("seq")])[0]
