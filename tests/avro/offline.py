"""A schema registry in the test's own process, for tests of what the Avro decoder does
with a schema rather than of how it fetches one (tests).

:class:`OfflineRegistry` assigns ids to schemas and stands in for
:func:`cdc_sink.formats.avro_wire.fetch_schemas` where the ``debezium-avro`` decoder
calls it (:meth:`OfflineRegistry.install`): each id's text is parsed as the registry
client parses it, a schema the decoder cannot read giving the lookup's error. Messages
are written by fastavro in Confluent's wire format (:meth:`OfflineRegistry.message`).
The tests of the registry client itself run against the real registry
(:mod:`tests.avro.registry`).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from typing import Any

import fastavro

from cdc_sink.formats import debezium_avro
from cdc_sink.formats._avro_schema import BadAvroSchema, parse_schema
from cdc_sink.formats.avro_wire import SchemaLookup

URL = "http://offline-registry.invalid"
"""The ``registry_url`` a decoder using an :class:`OfflineRegistry` is given."""


class OfflineRegistry:
    """Schemas by id, served to the ``debezium-avro`` decoder without a registry."""

    def __init__(self) -> None:
        self.texts: dict[int, str] = {}
        self.parsed: dict[int, Any] = {}
        self.loads = 0  # how many times a schema text was parsed

    def register(self, schema: Any, *, writable: bool = True) -> int:
        """Gives ``schema`` (a JSON value or text) the next id. ``writable=False`` for a
        schema fastavro cannot write with (only hand-made messages use it)."""
        sid = len(self.texts) + 1
        text = schema if isinstance(schema, str) else json.dumps(schema)
        self.texts[sid] = text
        if writable:
            self.parsed[sid] = fastavro.parse_schema(json.loads(text))
        return sid

    def message(self, sid: int, datum: Any) -> bytes:
        """``datum`` written with schema ``sid`` in Confluent's wire format."""
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, self.parsed[sid], datum)
        return header(sid) + buf.getvalue()

    def lookups(
        self, settings: Any, ids: Iterable[int], *, max_new_ids: int = 0
    ) -> dict[int, SchemaLookup]:
        """What :func:`~cdc_sink.formats.avro_wire.fetch_schemas` gives for ``ids``."""
        out: dict[int, SchemaLookup] = {}
        for sid in sorted(set(int(i) for i in ids)):
            text = self.texts.get(sid)
            if text is None:
                out[sid] = SchemaLookup(None, f"unknown schema id {sid} (the registry has none)")
                continue
            self.loads += 1
            try:
                out[sid] = SchemaLookup(parse_schema(text))
            except BadAvroSchema as exc:
                out[sid] = SchemaLookup(
                    None, f"schema id {sid} is not a readable Avro schema: {exc}"
                )
        return out

    def install(self, monkeypatch: Any = None) -> None:
        """Serves the decoder's lookups (through ``monkeypatch`` in a test, for good in a
        child process of its own)."""
        if monkeypatch is None:
            debezium_avro.fetch_schemas = self.lookups  # type: ignore[assignment]
        else:
            monkeypatch.setattr(debezium_avro, "fetch_schemas", self.lookups)


def header(sid: int) -> bytes:
    """Confluent's wire format header: magic byte 0 and the 4-byte schema id."""
    return b"\x00" + sid.to_bytes(4, "big")


def zigzag(n: int) -> bytes:
    """An Avro ``long``: zigzag, then a base-128 varint."""
    u = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = u & 0x7F
        u >>= 7
        if u:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)
