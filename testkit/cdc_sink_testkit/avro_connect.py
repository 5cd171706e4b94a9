"""Kafka Connect schemas and values as Confluent's Avro converter writes them (tests,
the kit's Debezium streams).

Debezium's Avro events are its Kafka Connect records converted by the Avro converter
(Confluent's ``AvroData``, which Apicurio's converter follows in Confluent mode). These
helpers turn the Connect schema and JSON payload of a documented Debezium JSON event into
that converter's Avro schema and datum, following its rules (as Debezium's own test
``ToAvroMongoDataConverterTest`` shows them):

- a struct is a ``record`` named by the last part of its Connect name, the rest being its
  namespace (an unnamed struct: ``ConnectDefault``, ``io.confluent.connect.avro``), with
  ``"connect.name"``;
- an optional field is a union ``["null", T]`` with ``"default": null`` (a field with a
  non-null default puts its type first, the default given);
- an array is an Avro ``array`` of its items' type (optional items: ``["null", T]``);
- ``int8``/``int16`` are Avro ``int`` with ``"connect.type"``; ``float32``: ``float``;
  ``float64``: ``double``;
- a named primitive keeps ``"connect.name"``, ``"connect.version"`` and
  ``"connect.parameters"``; Kafka Connect's ``Decimal`` is ``bytes`` with the ``decimal``
  logical type (precision, scale), ``Date`` the ``date`` one, ``Timestamp``
  ``timestamp-millis``, ``Time`` ``time-millis``.

Values: Connect's JSON forms of bytes (base64) become bytes; the rest is unchanged.
"""

from __future__ import annotations

import base64
import copy
from typing import Any

_PRIMITIVE = {
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "long",
    "float32": "float",
    "float64": "double",
    "float": "float",
    "double": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "bytes",
}
_LOGICAL = {
    "org.apache.kafka.connect.data.Date": "date",
    "org.apache.kafka.connect.data.Timestamp": "timestamp-millis",
    "org.apache.kafka.connect.data.Time": "time-millis",
}


class _Names:
    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.defaults = 0


def avro_schema(connect: dict[str, Any]) -> dict[str, Any]:
    """The Avro schema Confluent's converter derives from a Connect schema."""
    out: dict[str, Any] = _type(copy.deepcopy(connect), _Names())
    return out


def _type(s: dict[str, Any], names: _Names) -> Any:
    t = s["type"]
    name = s.get("name")
    if t == "struct":
        if name:
            ns, _, short = name.rpartition(".")
        else:
            names.defaults += 1
            ns = "io.confluent.connect.avro"
            short = "ConnectDefault" + ("" if names.defaults == 1 else str(names.defaults))
        full = f"{ns}.{short}" if ns else short
        if full in names.seen:  # the same struct again (after = before): a reference
            return full
        names.seen.add(full)
        rec: dict[str, Any] = {"type": "record", "name": short}
        if ns:
            rec["namespace"] = ns
        rec["fields"] = [_field(f, names) for f in s.get("fields", [])]
        _meta(rec, s)
        return rec
    if t == "array":
        items = _type(s["items"], names)
        arr: dict[str, Any] = {
            "type": "array",
            "items": ["null", items] if s["items"].get("optional") else items,
        }
        _meta(arr, s)
        return arr
    out: dict[str, Any] = {"type": _PRIMITIVE[t]}
    if t in ("int8", "int16"):
        out["connect.type"] = t
    if name == "org.apache.kafka.connect.data.Decimal":
        params = s.get("parameters", {})
        out["scale"] = int(params.get("scale", 0))
        out["precision"] = int(params.get("connect.decimal.precision", 64))
        out["logicalType"] = "decimal"
    elif name in _LOGICAL:
        out["logicalType"] = _LOGICAL[name]
    _meta(out, s)
    if len(out) == 1:
        return out["type"]
    return out


def _meta(out: dict[str, Any], s: dict[str, Any]) -> None:
    if s.get("version") is not None:
        out["connect.version"] = s["version"]
    if s.get("parameters"):
        out["connect.parameters"] = dict(s["parameters"])
    if s.get("default") is not None:
        out["connect.default"] = s["default"]
    if s.get("name"):
        out["connect.name"] = s["name"]


def _field(f: dict[str, Any], names: _Names) -> dict[str, Any]:
    t = _type(f, names)
    out: dict[str, Any] = {"name": f["field"]}
    if f.get("optional"):
        default = f.get("default")
        if default is None:
            out["type"] = ["null", t]
            out["default"] = None
        else:
            out["type"] = [t, "null"]
            out["default"] = default
    else:
        out["type"] = t
        if f.get("default") is not None:
            out["default"] = f["default"]
    return out


def avro_datum(connect: dict[str, Any], value: Any) -> Any:
    """A Connect JSON value (JsonConverter's form) as the Avro datum of its schema."""
    if value is None:
        return None
    t = connect["type"]
    if t == "struct":
        return {f["field"]: avro_datum(f, value.get(f["field"])) for f in connect.get("fields", [])}
    if t == "array":
        return [avro_datum(connect["items"], v) for v in value]
    if t == "bytes" and isinstance(value, str):
        return base64.b64decode(value)
    if t in ("float32", "float64", "float", "double") and isinstance(value, str):
        return float({"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}[value])
    return value


def connect_json(connect: dict[str, Any], value: Any) -> Any:
    """A payload as JsonConverter writes it for ``connect``: every field of a struct, in
    schema order, null where the value has none, and only those (as in the Avro datum)."""
    if value is None or connect["type"] != "struct":
        return value
    return {f["field"]: connect_json(f, value.get(f["field"])) for f in connect.get("fields", [])}
