"""The schema a source table's messages carry, as a table schema (internal).

A whole-database sink (:mod:`cdc_sink.spark.database`) creates the table of a source
table from the schema its first message carries and compares each later schema with the
table's (:func:`~cdc_sink.formats.source_schema.schema_change`). Where that schema is:

- Debezium JSON with schemas (Kafka Connect's ``JsonConverter``, ``schemas.enable=true``):
  the envelope's ``schema`` (the value's) and the message key's ``schema`` (the primary
  key's fields);
- Debezium Avro: the writer schemas of the value and of the key, by the ids of their
  Confluent wire-format headers, from the schema registry of the decoder options;
- schemaless JSON (``schemas.enable=false``): no schema travels; the user's schema file
  ``<table name>.json`` of the schema directory (the schema dictionary of
  :meth:`~cdc_sink.schema.TableSchema.from_dict`).

Each distinct schema is derived once per process (keyed by its canonical JSON, or by the
registry ids); this runs once per table and distinct schema of a batch, never per event.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cdc_sink.errors import InvalidOption, SchemaError
from cdc_sink.formats.avro_wire import RegistrySettings, SchemaRegistryUnavailable
from cdc_sink.formats.source_schema import schema_from_avro, schema_from_connect
from cdc_sink.schema import TableSchema
from cdc_sink.utils.redact import mask_url

__all__ = ["SourceSchemas"]

_Key = tuple[str, bytes, int]
_JSON_FORMATS = ("debezium",)
_AVRO_FORMATS = ("debezium-avro",)


class SourceSchemas:
    """The table schemas of source tables' messages, for one sink's format.

    Args:
        format: The sink's wire format (``debezium`` or ``debezium-avro``).
        decoder_options: The sink's decoder options (the registry's, for Avro).
        schema_dir: The directory of schema files for schemaless JSON (None: none).
        key_columns: Key columns the user names per table name (they override the
            message key's fields; the only key of a table whose messages have none).

    Raises:
        InvalidOption: Another format, or Avro without a registry.
    """

    def __init__(
        self,
        format: str,
        decoder_options: Mapping[str, Any],
        *,
        schema_dir: str | None = None,
        key_columns: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        if format not in _JSON_FORMATS + _AVRO_FORMATS:
            raise InvalidOption(
                f"a whole-database sink reads Debezium messages (format 'debezium' or "
                f"'debezium-avro'), not {format!r}",
                option="format",
            )
        self.format = format
        self.schema_dir = schema_dir
        self.key_columns = {k: tuple(v) for k, v in (key_columns or {}).items()}
        self._registry = _registry(decoder_options) if format in _AVRO_FORMATS else None
        self._lock = threading.Lock()
        self._cache: dict[_Key, TableSchema] = {}

    def schema_of(
        self,
        name: str,
        value: bytes | None,
        key: bytes | None,
        *,
        num_buckets: int,
        value_schema: bytes | None = None,
    ) -> TableSchema:
        """The schema the message (``value``, ``key``) of table ``name`` carries.

        ``value_schema``: JSON only, the bytes of the value's envelope ``schema`` when
        the caller has them (the router's routing reads them): the value is then not
        parsed, only its key.

        Raises:
            cdc_sink.errors.NoPrimaryKey: The message names no key and the user named no
                key columns for ``name``.
            SchemaError: The schema cannot be a table's (a type no column holds...), or
                schemaless JSON without a schema file for ``name``.
            SchemaRegistryUnavailable: The registry could not be reached.
        """
        if self._registry is not None:
            ids = (value or b"")[:5] + b"|" + (key or b"")[:5]
            return self._cached(
                (name, ids, num_buckets), lambda: self._avro(name, value, key, num_buckets)
            )
        if value_schema is not None:
            kschema = _key_schema(key, name)
            ktext = json.dumps(kschema, sort_keys=True).encode()
            digest = hashlib.blake2b(b"text\0" + value_schema + b"\0" + ktext, digest_size=16)
            return self._cached(
                (name, digest.digest(), num_buckets),
                lambda: self._connect(
                    name,
                    _json_object(value_schema, f"the schema of table {name}"),
                    kschema,
                    num_buckets,
                ),
            )
        doc = _json_object(value, f"a message of table {name}")
        if "schema" not in doc or "payload" not in doc:
            return self._cached(
                (name, b"", num_buckets), lambda: self._schema_file(name, num_buckets)
            )
        kschema = _key_schema(key, name)
        text = json.dumps([doc["schema"], kschema], sort_keys=True).encode()
        return self._cached(
            (name, hashlib.blake2b(text, digest_size=16).digest(), num_buckets),
            lambda: self._connect(name, doc["schema"], kschema, num_buckets),
        )

    def _connect(self, name: str, schema: Any, kschema: Any, num_buckets: int) -> TableSchema:
        """The table schema of a Connect value schema and key schema."""
        return self._derived(schema_from_connect, name, schema, kschema, num_buckets)

    def _derived(
        self,
        derive: Callable[..., TableSchema],
        name: str,
        value_schema: Any,
        key_schema: Any,
        num_buckets: int,
    ) -> TableSchema:
        """``derive`` (:func:`schema_from_connect` or :func:`schema_from_avro`) of table
        ``name``'s value and key schemas, with the key columns the user named for it."""
        return derive(
            value_schema,
            key_schema,
            num_buckets=num_buckets,
            key_columns=self.key_columns.get(name),
            source=name,
        )

    def _cached(self, key: _Key, make: Callable[[], TableSchema]) -> TableSchema:
        """The schema cached under ``key``, made by ``make`` the first time."""
        with self._lock:
            hit = self._cache.get(key)
        if hit is None:
            hit = make()
            with self._lock:
                self._cache[key] = hit
        return hit

    def _avro(
        self, name: str, value: bytes | None, key: bytes | None, num_buckets: int
    ) -> TableSchema:
        """The schema of an Avro message: its writer schemas, from the registry."""
        vtext = self._registry_schema(value, f"value of table {name}")
        ktext = self._registry_schema(key, f"key of table {name}") if key else None
        return self._derived(schema_from_avro, name, vtext, ktext, num_buckets)

    def _registry_schema(self, message: bytes | None, what: str) -> str:
        """The writer schema (JSON text) the wire-format header of ``message`` names."""
        if message is None or len(message) < 5 or message[0] != 0:
            raise SchemaError(f"the {what} is not in Confluent's wire format (magic byte 0)")
        (sid,) = struct.unpack(">i", message[1:5])
        assert self._registry is not None
        got = self._registry.get(f"/schemas/ids/{sid}")
        if not isinstance(got, Mapping) or not isinstance(got.get("schema"), str):
            raise SchemaRegistryUnavailable(
                f"schema registry {mask_url(self._registry.url)} has no schema {sid} (the {what})"
            )
        return str(got["schema"])

    def _schema_file(self, name: str, num_buckets: int) -> TableSchema:
        """Schemaless JSON: the user's schema file of table ``name``."""
        if self.schema_dir is None:
            raise SchemaError(
                f"table {name}: its messages carry no schema (schemaless JSON, "
                "schemas.enable=false) and the sink has no schema directory "
                "(--schema-dir, DatabaseOptions.schema_dir)"
            )
        path = os.path.join(self.schema_dir, f"{name}.json")
        try:
            with open(path, encoding="utf-8") as f:
                d = json.load(f)
        except FileNotFoundError:
            raise SchemaError(
                f"table {name}: its messages carry no schema and the schema directory "
                f"has no {name}.json"
            ) from None
        except (OSError, ValueError) as exc:
            raise SchemaError(f"table {name}: schema file {path} unreadable: {exc}") from None
        if not isinstance(d, dict):
            raise SchemaError(f"table {name}: schema file {path} is not a JSON object")
        d.setdefault("num_buckets", num_buckets)
        keys = self.key_columns.get(name)
        if keys:
            d["primary_key"] = list(keys)
        return TableSchema.from_dict(d)


def _registry(options: Mapping[str, Any]) -> RegistrySettings:
    """The schema registry of the decoder options."""
    url = options.get("registry_url")
    if url is None:
        raise InvalidOption(
            "the 'debezium-avro' decoder needs the decoder option 'registry_url'",
            option="registry_url",
        )
    return RegistrySettings.from_options(
        url,
        options.get("registry_timeout", 10.0),
        options.get("registry_auth"),
        options.get("registry_ssl"),
    )


def _key_schema(key: bytes | None, name: str) -> Any:
    """The Connect schema of a JSON message key (None: the key has none)."""
    kdoc = _json_object(key, f"the key of table {name}") if key else {}
    return kdoc.get("schema") if isinstance(kdoc.get("schema"), Mapping) else None


def _json_object(raw: bytes | None, what: str) -> dict[str, Any]:
    """``raw`` parsed as one JSON object."""
    if raw is None:
        raise SchemaError(f"{what} is empty")
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise SchemaError(f"{what} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise SchemaError(f"{what} is not a JSON object")
    return doc
