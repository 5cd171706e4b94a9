"""Encoding of the ``debezium`` format: native events and rows as Debezium JSON (private).

Producer and test tools, per event (the decoder is :mod:`cdc_sink.formats.debezium`):
:func:`encode_debezium` writes one Debezium change event from its ``before``/``after``
rows, and :func:`debezium_encoder` maps native events onto it the way a Debezium
connector would write them (the registry's encoder of the format).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from collections.abc import Mapping
from typing import Any, Literal

import pyarrow as pa

from cdc_sink.formats._base import EventEncoder
from cdc_sink.schema import Column, TableSchema, coerce, type_to_str

__all__ = ["debezium_encoder", "encode_debezium"]

_DECIMAL = "org.apache.kafka.connect.data.Decimal"
_CONNECT_TYPES = {
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "float32": "float",
    "float64": "double",
    "bool": "boolean",
    "string": "string",
    "binary": "bytes",
}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _field_schema(c: Column, decimal_handling: str) -> dict[str, Any]:
    t = c.type
    f: dict[str, Any] = {"field": c.name, "optional": c.nullable}
    if pa.types.is_date32(t):
        f.update(type="int32", name="io.debezium.time.Date", version=1)
    elif pa.types.is_timestamp(t):
        f.update(type="int64", name="io.debezium.time.MicroTimestamp", version=1)
    elif pa.types.is_decimal(t):
        if decimal_handling == "string":
            f.update(type="string")
        else:
            f.update(
                type="bytes",
                name=_DECIMAL,
                version=1,
                parameters={"scale": str(t.scale), "connect.decimal.precision": str(t.precision)},
            )
    else:
        f.update(type=_CONNECT_TYPES[type_to_str(t)])
    return f


def _debezium_value(v: Any, c: Column, decimal_handling: str) -> Any:
    t = c.type
    if v is None:
        return None
    if pa.types.is_date32(t):
        v = coerce(v, t)  # ISO text -> date (schema's one coercion per type)
        return (v - dt.date(1970, 1, 1)).days if isinstance(v, dt.date) else v
    if pa.types.is_timestamp(t):
        v = coerce(v, t)  # ISO text -> aware datetime (naive text is UTC)
        if isinstance(v, dt.datetime):
            v = v if v.tzinfo else v.replace(tzinfo=dt.timezone.utc)
            return (v - _EPOCH) // dt.timedelta(microseconds=1)
        return v
    if pa.types.is_decimal(t):
        d = decimal.Decimal(str(v))
        if decimal_handling == "string":
            return str(d)
        with decimal.localcontext(decimal.Context(prec=120)):
            unscaled = int(d.scaleb(t.scale).to_integral_value())
        size = max(1, (unscaled.bit_length() + 8) // 8)
        return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode("ascii")
    if pa.types.is_binary(t):
        return base64.b64encode(bytes(v)).decode("ascii")
    return v


def encode_debezium(
    op: str,
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    schema: TableSchema,
    *,
    envelope: bool,
    ts_ms: int | None = None,
    source_ts_ms: int | None = None,
    decimal_handling: Literal["precise", "string"] = "precise",
) -> bytes:
    """Encodes one Debezium change event as JSON (tests and demos; per event).

    Dates are written as days (``io.debezium.time.Date``), timestamps as microseconds
    (``MicroTimestamp``), decimals as base64 unscaled bytes (``precise``) or strings,
    binaries as base64.

    Args:
        op: Debezium op: ``c``, ``r``, ``u``, ``d`` (or ``t``/``m``).
        before: Row before the change (column name → value), or ``None``.
        after: Row after the change, or ``None``.
        schema: The table schema (columns of ``before``/``after`` must be in it).
        envelope: Wrap in ``{"schema", "payload"}`` with Kafka Connect field schemas.
        ts_ms: Payload ``ts_ms``.
        source_ts_ms: ``source.ts_ms``.
        decimal_handling: Debezium ``decimal.handling.mode`` to imitate.

    Returns:
        The message value.
    """

    def row(r: Mapping[str, Any] | None) -> dict[str, Any] | None:
        if r is None:
            return None
        return {k: _debezium_value(v, schema.column(k), decimal_handling) for k, v in r.items()}

    source: dict[str, Any] = {
        "version": "2.7.0.Final",
        "connector": "cdc_sink",
        "name": "cdc_sink",
        "db": "demo",
        "table": "demo",
    }
    if source_ts_ms is not None:
        source["ts_ms"] = source_ts_ms
    payload: dict[str, Any] = {
        "before": row(before),
        "after": row(after),
        "source": source,
        "op": op,
    }
    if ts_ms is not None:
        payload["ts_ms"] = ts_ms
    if not envelope:
        return json.dumps(payload, separators=(",", ":")).encode("utf-8")
    env_schema = _envelope_schema(schema, decimal_handling)
    return json.dumps({"schema": env_schema, "payload": payload}, separators=(",", ":")).encode(
        "utf-8"
    )


def _envelope_schema(
    schema: TableSchema, decimal_handling: Literal["precise", "string"]
) -> dict[str, Any]:
    """The Kafka Connect schema of an enveloped event of ``schema`` (``{"schema", ...}``)."""
    row_schema = {
        "type": "struct",
        "optional": True,
        "name": "demo.Value",
        "fields": [_field_schema(c, decimal_handling) for c in schema.columns],
    }
    env_schema = {
        "type": "struct",
        "optional": False,
        "name": "demo.Envelope",
        "version": 1,
        "fields": [
            dict(row_schema, field="before"),
            dict(row_schema, field="after"),
            {
                "type": "struct",
                "optional": False,
                "field": "source",
                "name": "io.debezium.connector.demo.Source",
                "fields": [
                    {"type": "string", "optional": False, "field": "version"},
                    {"type": "int64", "optional": True, "field": "ts_ms"},
                ],
            },
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
    }
    return env_schema


def debezium_encoder(schema: TableSchema, *, envelope: bool = True) -> EventEncoder:
    """The ``debezium`` encoder of native events: what a Debezium connector would write.

    ``insert`` becomes op ``c`` and ``upsert``/``update`` op ``u``, with ``after`` = key +
    ``set`` (+ the sequence column = ``seq``); ``delete`` becomes op ``d`` with
    ``before`` = key (+ sequence column); ``ts_ms`` goes in the payload. A Debezium
    ``c``/``u`` is applied as an upsert of ``after``, so send full row images (as
    connectors do) when insert or update semantics matter.

    Args:
        schema: The table schema.
        envelope: Wrap events in the Kafka Connect ``schema``/``payload`` envelope
            (``value.converter.schemas.enable=true``, Debezium's default).

    Returns:
        A function from one native event ``{"op", "key", "set"?, "seq"?, "ts_ms"?}`` to
        its message value.
    """
    seq_col = schema.sequence_column
    order = {c.name: i for i, c in enumerate(schema.columns)}

    def encode(e: Mapping[str, Any]) -> bytes:
        key = e.get("key")
        if not isinstance(key, Mapping):
            key = {schema.primary_key[0]: key}
        row = dict(key) if e["op"] == "delete" else {**key, **(e.get("set") or {})}
        if seq_col is not None and e.get("seq") is not None:
            row[seq_col] = e["seq"]
        row = dict(sorted(row.items(), key=lambda kv: order.get(kv[0], len(order))))
        ts = e.get("ts_ms")
        if e["op"] == "delete":
            return encode_debezium("d", row, None, schema, envelope=envelope, ts_ms=ts)
        op = "c" if e["op"] == "insert" else "u"
        return encode_debezium(op, None, row, schema, envelope=envelope, ts_ms=ts)

    return encode
