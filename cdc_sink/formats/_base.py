"""The decoder contract every event format implements (private; see :mod:`cdc_sink.formats`).

Kept apart from the registry in :mod:`cdc_sink.formats` so that the format modules,
which subclass :class:`Decoder`, can be imported by the registry without a cycle.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, get_args

import numpy as np
import pyarrow as pa

from cdc_sink.batch import ChangeBatch, Rejects
from cdc_sink.schema import TableSchema

__all__ = [
    "FORMATS",
    "TS_MISSING",
    "Decoded",
    "Decoder",
    "EventEncoder",
    "FormatName",
    "SchemaEvolution",
]

FormatName = Literal["json", "debezium", "rowv2", "debezium-avro"]
"""The name of an event format."""

FORMATS: tuple[FormatName, ...] = get_args(FormatName)
"""Names of every supported event format, in registry order."""

EventEncoder = Callable[[Mapping[str, Any]], bytes]
"""Encodes one native event ``{"op", "key", "set"?, "seq"?, "ts_ms"?}`` as a message value
(a per-event producer/test tool; it raises ``ValueError``/``TypeError`` for an event the
format cannot carry)."""

TS_MISSING: int = int(np.iinfo(np.int64).min)
"""The value of :attr:`Decoded.ts_ms` for an event that carries no producer timestamp."""


@dataclass
class Decoded:
    """The result of decoding one array of message values, with format metadata.

    Attributes:
        batch: The valid events (``batch.position`` holds each event's source position).
        rejects: The refused events, with positions and reasons.
        ts_ms: Producer timestamp (milliseconds since the epoch) of each event of
            ``batch``, aligned with ``batch.op``; :data:`TS_MISSING` for an event without
            one. ``None`` when the format has no timestamps or no event carried one.
        skipped: Messages skipped on purpose and neither decoded nor rejected (Debezium
            tombstones and logical decoding messages).
        messages: How many of ``skipped`` are Debezium logical decoding messages
            (``op: "m"``).
    """

    batch: ChangeBatch
    rejects: Rejects
    ts_ms: np.ndarray | None = None
    skipped: int = 0
    messages: int = 0


class SchemaEvolution(abc.ABC):
    """How a decoder evolves the table's schema from the writer schemas a batch's messages
    name (a decoder that evolves none has no such object: :meth:`Decoder.evolution`).

    The sink calls it for every batch, before the batch is decided, with the distinct
    prefixes of its message values (``prefix_bytes`` long, computed where the batch is:
    one small distinct query in Spark), and adds the columns it returns to the table,
    each in a version of its own. The sink knows nothing more of the format.
    """

    prefix_bytes: ClassVar[int]
    """Length of the message-value prefix that names a value's writer schema (e.g. the
    magic byte and the schema id of Confluent's wire format); shorter values are left
    out."""

    @abc.abstractmethod
    def columns_to_add(
        self, prefixes: pa.BinaryArray | pa.LargeBinaryArray, schema: TableSchema
    ) -> list[tuple[str, str]]:
        """The columns ``(name, type)`` (the type as :func:`~cdc_sink.schema.parse_type`
        spells it) the table must gain to take the messages whose values start with
        ``prefixes`` (distinct, each ``prefix_bytes`` long; a prefix naming no writer
        schema is ignored: its events are refused when decoded).

        Raises:
            Exception: A change the table cannot take (the batch fails; nothing of it is
                rejected), or the schemas cannot be read (e.g. a registry unreachable).
        """


class Decoder(abc.ABC):
    """Decodes Kafka message values of one format into change events.

    Subclasses implement :meth:`decode_with_meta`; :meth:`decode` returns its batch and
    rejects. Decoders are stateless apart from their options, cheap to build and safe to
    pickle (they are shipped to Spark executors).
    """

    name: ClassVar[FormatName]
    reads_keys: ClassVar[bool] = False
    """Whether :meth:`decode_with_meta` reads the Kafka message keys (Spark tasks that
    decode skip moving them into Python otherwise)."""

    def evolution(self) -> SchemaEvolution | None:
        """How this decoder, with its options, evolves the table's schema; None (the
        default): it does not (the table's schema changes only by ``Table.add_column``)."""
        return None

    @abc.abstractmethod
    def decode_with_meta(
        self,
        values: pa.BinaryArray | pa.LargeBinaryArray,
        schema: TableSchema,
        *,
        position: np.ndarray | None = None,
        keys: pa.BinaryArray | pa.LargeBinaryArray | None = None,
    ) -> Decoded:
        """Decodes message values, keeping format metadata (timestamps, skip counts).

        Args:
            values: One message value per element; a null element is a message without a
                value. ``string`` arrays and chunked arrays are accepted too.
            schema: The table schema the events are validated against.
            position: Optional source position per element (e.g. the Kafka offset); the
                element index when omitted.
            keys: Optional Kafka message key per element, aligned with ``values`` (same
                array types). Formats whose values always carry the key ignore it; the
                Debezium decoder reads the key of an event whose row lacks it (a delete
                without a ``before`` image) from it.

        Returns:
            The valid events, the rejects and the metadata.

        Raises:
            TypeError: ``values`` (or ``keys``) is not a binary or string array.
            ValueError: ``position`` (or ``keys``) does not have one entry per value.
        """

    def decode(
        self,
        values: pa.BinaryArray | pa.LargeBinaryArray,
        schema: TableSchema,
        *,
        position: np.ndarray | None = None,
        keys: pa.BinaryArray | pa.LargeBinaryArray | None = None,
    ) -> tuple[ChangeBatch, Rejects]:
        """Decodes message values into a validated batch and its rejects.

        Never raises for a bad event: an undecodable or invalid event becomes a reject
        with its position and a reason.

        Args:
            values: One message value per element (see :meth:`decode_with_meta`).
            schema: The table schema.
            position: Optional source position per element.
            keys: Optional Kafka message key per element (see :meth:`decode_with_meta`).

        Returns:
            The valid events and the rejects.
        """
        out = self.decode_with_meta(values, schema, position=position, keys=keys)
        return out.batch, out.rejects
