"""Encoding of the ``debezium-avro`` format: native events as Debezium Avro (private).

A producer and test tool, per event (the decoder is :mod:`cdc_sink.formats.debezium_avro`):
:func:`debezium_avro_encoder` registers the envelope schema of a table under a subject of
the schema registry (the schema Kafka Connect's Avro converter derives for a Debezium
connector's table: ``before``/``after`` rows, ``source``, ``op``, ``ts_ms``; dates as
``io.debezium.time.Date``, timestamps as ``MicroTimestamp``, decimals as Connect's
``Decimal``), then writes each native event in Confluent's wire format with fastavro
(the ``avro`` extra).

Avro rows carry every field: a column an upsert does not set is written as Debezium's
unavailable-value placeholder where the column is a string or binary (decoded as
*absent*, as for an unchanged TOASTed value), and refused (``ValueError``) otherwise:
send full rows, as connectors do.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from cdc_sink.formats._base import EventEncoder
from cdc_sink.formats.avro_wire import RegistrySettings, SchemaRegistryUnavailable
from cdc_sink.schema import Column, TableSchema, coerce, type_to_str

__all__ = ["debezium_avro_encoder", "envelope_schema"]

_PLACEHOLDER = "__debezium_unavailable_value"
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_SIMPLE = {
    "int32": "int",
    "int64": "long",
    "float32": "float",
    "float64": "double",
    "bool": "boolean",
    "string": "string",
    "binary": "bytes",
}


def _field_type(c: Column) -> Any:
    t = c.type
    name = type_to_str(t)
    if name in ("int8", "int16"):
        return {"type": "int", "connect.type": name}
    if pa.types.is_date32(t):
        return {"type": "int", "connect.version": 1, "connect.name": "io.debezium.time.Date"}
    if pa.types.is_timestamp(t):
        return {
            "type": "long",
            "connect.version": 1,
            "connect.name": "io.debezium.time.MicroTimestamp",
        }
    if pa.types.is_decimal(t):
        return {
            "type": "bytes",
            "scale": t.scale,
            "precision": t.precision,
            "connect.version": 1,
            "connect.parameters": {
                "scale": str(t.scale),
                "connect.decimal.precision": str(t.precision),
            },
            "connect.name": "org.apache.kafka.connect.data.Decimal",
            "logicalType": "decimal",
        }
    return _SIMPLE[name]


def envelope_schema(schema: TableSchema, name: str = "cdc_sink.table") -> dict[str, Any]:
    """The Avro schema of a Debezium envelope of ``schema``'s rows (nullable columns
    optional), as Kafka Connect's Avro converter writes it."""
    fields = []
    for c in schema.columns:
        t = _field_type(c)
        fields.append(
            {"name": c.name, "type": ["null", t], "default": None}
            if c.nullable
            else {"name": c.name, "type": t}
        )
    ns = name
    value = {
        "type": "record",
        "name": "Value",
        "namespace": ns,
        "fields": fields,
        "connect.name": f"{ns}.Value",
    }
    source = {
        "type": "record",
        "name": "Source",
        "namespace": "io.debezium.connector.cdc_sink",
        "fields": [
            {"name": "version", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
        ],
        "connect.name": "io.debezium.connector.cdc_sink.Source",
    }
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": ns,
        "fields": [
            {"name": "before", "type": ["null", value], "default": None},
            {"name": "after", "type": ["null", f"{ns}.Value"], "default": None},
            {"name": "source", "type": source},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
        ],
        "connect.version": 1,
        "connect.name": f"{ns}.Envelope",
    }


def _datum(v: Any, c: Column) -> Any:
    t = c.type
    if v is None:
        return None
    if pa.types.is_date32(t):
        v = coerce(v, t)
        return (v - dt.date(1970, 1, 1)).days if isinstance(v, dt.date) else v
    if pa.types.is_timestamp(t):
        v = coerce(v, t)
        if isinstance(v, dt.datetime):
            v = v if v.tzinfo else v.replace(tzinfo=dt.timezone.utc)
            return (v - _EPOCH) // dt.timedelta(microseconds=1)
        return v
    if pa.types.is_decimal(t):
        return decimal.Decimal(str(v)).quantize(decimal.Decimal(1).scaleb(-t.scale))
    if pa.types.is_binary(t):
        return bytes(v)
    return v


def _zero(c: Column) -> Any:
    """A value for a required column a delete's ``before`` does not carry (unread)."""
    t = c.type
    if pa.types.is_string(t):
        return ""
    if pa.types.is_binary(t):
        return b""
    if pa.types.is_boolean(t):
        return False
    if pa.types.is_decimal(t):
        return decimal.Decimal(0)
    return 0.0 if pa.types.is_floating(t) else 0


def _register(settings: RegistrySettings, subject: str, schema: dict[str, Any]) -> int:
    """Registers ``schema`` under ``subject`` (with the settings' auth and TLS); its id."""
    try:
        got = settings.post(f"/subjects/{subject}/versions", {"schema": json.dumps(schema)})
        return int(got["id"])  # type: ignore[index]
    except (SchemaRegistryUnavailable, TypeError, ValueError, KeyError) as exc:
        raise SchemaRegistryUnavailable(
            f"schema registry {settings.url}: registering {subject!r} failed: {exc}"
        ) from exc


def debezium_avro_encoder(
    schema: TableSchema,
    *,
    registry_url: str,
    subject: str,
    registry_timeout: float = 10.0,
    registry_auth: str | None = None,
    registry_ssl: Mapping[str, str] | None = None,
) -> EventEncoder:
    """The ``debezium-avro`` encoder of native events (registers the schema first).

    ``insert`` becomes op ``c`` and ``upsert``/``update`` op ``u`` with ``after`` = key +
    ``set`` (+ the sequence column = ``seq``); ``delete`` becomes op ``d`` with ``before``
    = key (+ sequence column); ``ts_ms`` goes in the envelope.

    Args:
        schema: The table schema.
        registry_url: The registry's Confluent API.
        subject: The subject to register the schema under (``<topic>-value``).
        registry_timeout: Seconds each registry call may take.
        registry_auth: ``"user:password"`` for HTTP basic auth.
        registry_ssl: TLS files: ``ca_location``, ``certificate_location``,
            ``key_location``.

    Raises:
        InvalidOption: A registry option is invalid.
        SchemaRegistryUnavailable: The schema could not be registered.
        MissingExtra: fastavro is not installed (the ``avro`` extra).
    """
    from cdc_sink.utils.extras import require

    require("fastavro", feature="the 'debezium-avro' encoder")
    import fastavro

    settings = RegistrySettings.from_options(
        registry_url, registry_timeout, registry_auth, registry_ssl
    )
    avro = envelope_schema(schema)
    parsed = fastavro.parse_schema(avro)
    header = b"\x00" + _register(settings, subject, avro).to_bytes(4, "big")
    seq_col = schema.sequence_column

    def encode(e: Mapping[str, Any]) -> bytes:
        key = e.get("key")
        if not isinstance(key, Mapping):
            key = {schema.primary_key[0]: key}
        given = dict(key) if e["op"] == "delete" else {**key, **(e.get("set") or {})}
        if seq_col is not None and e.get("seq") is not None:
            given[seq_col] = e["seq"]
        row = {}
        for c in schema.columns:
            if c.name in given:
                row[c.name] = _datum(given[c.name], c)
            elif e["op"] == "delete":
                row[c.name] = None if c.nullable else _zero(c)
            elif pa.types.is_string(c.type) or pa.types.is_binary(c.type):
                p = _PLACEHOLDER
                row[c.name] = p.encode() if pa.types.is_binary(c.type) else p
            else:
                raise ValueError(
                    f"debezium-avro carries full rows: column {c.name!r} is not set "
                    f"(op {e['op']!r} of key {dict(key)!r})"
                )
        delete = e["op"] == "delete"
        datum = {
            "before": row if delete else None,
            "after": None if delete else row,
            "source": {"version": "cdc_sink", "ts_ms": None},
            "op": "d" if delete else ("c" if e["op"] == "insert" else "u"),
            "ts_ms": e.get("ts_ms"),
        }
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, datum)
        return header + buf.getvalue()

    return encode
