"""Avro messages in Confluent's wire format, written by Confluent's own serializer
(``confluent_kafka.schema_registry.avro.AvroSerializer``) through a real registry: the
decoder under test is checked against an encoder it shares no code with."""

from __future__ import annotations

import json
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext


class AvroWriter:
    """Serializes datums of one Avro schema for a topic's values or keys.

    Args:
        url: The registry's Confluent API.
        topic: The topic (the subject is ``<topic>-value`` or ``<topic>-key``).
        schema: The Avro schema (a JSON-able object); registered on first use.
        key: Keys rather than values.
    """

    def __init__(self, url: str, topic: str, schema: Any, *, key: bool = False) -> None:
        self.client = SchemaRegistryClient({"url": url, "timeout": 10})
        self.serializer = AvroSerializer(
            self.client,
            json.dumps(schema),
            lambda obj, ctx: obj,
            conf={"auto.register.schemas": True},
        )
        self.ctx = SerializationContext(topic, MessageField.KEY if key else MessageField.VALUE)

    def __call__(self, datum: Any) -> bytes:
        """The message of ``datum`` (None: a tombstone, no bytes)."""
        out = self.serializer(datum, self.ctx)
        assert out is not None
        return out

    def schema_id(self, message: bytes) -> int:
        """The schema id a message names."""
        return int.from_bytes(message[1:5], "big")
