"""Event formats on Kafka: decoders from raw message values to a :class:`ChangeBatch`.

Every format turns one Arrow array of Kafka message values (``binary``) into the canonical
:class:`~cdc_sink.changes.ChangeBatch` plus :class:`~cdc_sink.changes.Rejects`. A decoder
never raises for a bad event: anything that cannot be decoded, or that violates the
schema, is returned as a reject with its position and a reason, and the rest of the batch
decodes normally (DESIGN.md §3 "Formats on Kafka").

==============  ===================================================  ======================
name            value                                                module
==============  ===================================================  ======================
``json``        ``{"op", "key": {...}, "set": {...}, "seq"?,         :mod:`.native_json`
                "ts_ms"?}``
``debezium``    Debezium JSON, with or without the schema/payload    :mod:`.debezium`
                envelope
``rowv2``       one op byte + a TiDB row format v2 row               :mod:`.rowv2`
==============  ===================================================  ======================

Decoding is vectorized over the whole array (numpy/pyarrow); the only per-event Python
loops are in the encoders, which are producer/test tools, and in formatting the reason
strings of rejected events.

Layering: this package imports only :mod:`cdc_sink.schema`, :mod:`cdc_sink.changes` and
:mod:`cdc_sink.errors` (never Spark, Kafka or the tablet).
"""

from __future__ import annotations

import abc
import inspect
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, get_args

import numpy as np
import pyarrow as pa

from cdc_sink.changes import ChangeBatch, Rejects
from cdc_sink.errors import InvalidOption
from cdc_sink.schema import TableSchema

__all__ = [
    "FORMATS",
    "TS_MISSING",
    "Decoded",
    "Decoder",
    "FormatName",
    "decoder_options",
    "get_decoder",
]

FormatName = Literal["json", "debezium", "rowv2"]
"""The name of an event format."""

FORMATS: tuple[FormatName, ...] = get_args(FormatName)
"""Names of every supported event format, as accepted by :func:`get_decoder`."""

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


class Decoder(abc.ABC):
    """Decodes Kafka message values of one format into change events.

    Subclasses implement :meth:`decode_with_meta`; :meth:`decode` returns its batch and
    rejects. Decoders are stateless apart from their options, cheap to build and safe to
    pickle (they are shipped to Spark executors).
    """

    name: ClassVar[FormatName]

    @abc.abstractmethod
    def decode_with_meta(self, values: pa.BinaryArray | pa.LargeBinaryArray,
                         schema: TableSchema, *,
                         position: np.ndarray | None = None,
                         keys: pa.BinaryArray | pa.LargeBinaryArray | None = None) -> Decoded:
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

    def decode(self, values: pa.BinaryArray | pa.LargeBinaryArray, schema: TableSchema, *,
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


def get_decoder(name: FormatName, **options: Any) -> Decoder:
    """Returns a decoder of the format called ``name``.

    Args:
        name: One of :data:`FORMATS`.
        **options: Keyword options of the decoder class (e.g. ``timestamp_unit`` of
            :class:`~cdc_sink.formats.debezium.DebeziumDecoder`).

    Returns:
        A new decoder.

    Raises:
        InvalidOption: ``name`` is not a known format, an option is not one of the
            decoder's, or an option's value is invalid (the error names the option; it is
            a ``ValueError``).
    """
    cls: type[Decoder]
    if name == "json":
        from cdc_sink.formats.native_json import JsonDecoder

        cls = JsonDecoder
    elif name == "debezium":
        from cdc_sink.formats.debezium import DebeziumDecoder

        cls = DebeziumDecoder
    elif name == "rowv2":
        from cdc_sink.formats.rowv2 import Rowv2Decoder

        cls = Rowv2Decoder
    else:
        raise InvalidOption(f"unknown event format {name!r}; known formats: {list(FORMATS)}",
                            option="format")
    known = decoder_options(cls)
    for opt in options:
        if opt not in known:
            raise InvalidOption(f"unknown option {opt!r} of the {name!r} decoder; its options: "
                                f"{sorted(known)}", option=opt)
    return cls(**options)


def decoder_options(cls: type[Decoder]) -> frozenset[str]:
    """Names of the keyword options of a decoder class (its ``__init__`` keywords)."""
    params = inspect.signature(cls.__init__).parameters.values()
    return frozenset(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY)
