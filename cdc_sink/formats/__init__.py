"""Event formats on Kafka: one registry of decoders and encoders, by format name.

Every format turns one Arrow array of Kafka message values (``binary``) into the canonical
:class:`~cdc_sink.batch.ChangeBatch` plus :class:`~cdc_sink.batch.Rejects`. A decoder
never raises for a bad event: anything that cannot be decoded, or that violates the
schema, is returned as a reject with its position and a reason, and the rest of the batch
decodes normally (docs/architecture.md §3, "Formats on Kafka"). Its encoder writes native
events ``{"op", "key", "set"?, "seq"?, "ts_ms"?}`` as message values of the format (the
producer's side, per event).

==============  ===================================================  ======================
name            value                                                module
==============  ===================================================  ======================
``json``        ``{"op", "key": {...}, "set": {...}, "seq"?,         :mod:`.native_json`
                "ts_ms"?}``
``debezium``    Debezium JSON, with or without the schema/payload    :mod:`.debezium`
                envelope
``rowv2``       one op byte + a TiDB row format v2 row               :mod:`.rowv2`
``debezium-     Debezium in Avro: Confluent's wire format, schemas   :mod:`.debezium_avro`
avro``          from a schema registry (decoder option
                ``registry_url``)
==============  ===================================================  ======================

:data:`REGISTRY` holds one :class:`Format` per name (its decoder class and encoder);
:func:`get_format` looks one up, :func:`get_decoder` builds a decoder. The sink, the
producer SDK, the CLI and the streaming job all take their formats from here, and know
nothing of one format: what a format does beyond decoding is behind the decoder's
interface, e.g. schema evolution (:meth:`Decoder.evolution` returns a
:class:`SchemaEvolution`, or None for a decoder that evolves no schema; the sink calls
it for every format).

Decoding is vectorized over the whole array (numpy/pyarrow); the only per-event Python
loops are in the encoders, which are producer/test tools, and in formatting the reason
strings of rejected events.

Layering: this package imports only :mod:`cdc_sink.schema`, :mod:`cdc_sink.batch` and
:mod:`cdc_sink.errors` (never Spark, Kafka or the tablet).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from cdc_sink.errors import InvalidOption
from cdc_sink.formats._base import (
    FORMATS,
    TS_MISSING,
    Decoded,
    Decoder,
    EventEncoder,
    FormatName,
    SchemaEvolution,
)
from cdc_sink.formats.debezium import DebeziumDecoder, debezium_encoder
from cdc_sink.formats.debezium_avro import DebeziumAvroDecoder, debezium_avro_encoder
from cdc_sink.formats.native_json import JsonDecoder, json_encoder
from cdc_sink.formats.rowv2 import Rowv2Decoder, rowv2_encoder
from cdc_sink.formats.source_tables import Routed, SourceTable, route
from cdc_sink.schema import TableSchema

__all__ = [
    "FORMATS",
    "REGISTRY",
    "TS_MISSING",
    "Decoded",
    "Decoder",
    "EventEncoder",
    "Format",
    "FormatName",
    "Routed",
    "SchemaEvolution",
    "SourceTable",
    "decoder_options",
    "get_decoder",
    "get_format",
    "route",
]


@dataclass(frozen=True)
class Format:
    """One event format: its name, decoder class and encoder.

    Attributes:
        name: The format's name (one of :data:`FORMATS`).
        decoder: The decoder class; its keyword-only ``__init__`` arguments are the
            decoder options.
        encoder: ``encoder(schema, **options)`` returns the per-event encoder of native
            events for a table schema; its keyword-only arguments are the encoder
            options (e.g. ``envelope`` of ``debezium``).
    """

    name: FormatName
    decoder: type[Decoder]
    encoder: Callable[..., EventEncoder]

    @property
    def decoder_options(self) -> frozenset[str]:
        """Names of the decoder's keyword options."""
        return decoder_options(self.decoder)

    @property
    def encoder_options(self) -> frozenset[str]:
        """Names of the encoder's keyword options."""
        return _keyword_options(self.encoder)

    def new_decoder(self, **options: Any) -> Decoder:
        """A new decoder of the format.

        Raises:
            InvalidOption: An option is not one of the decoder's, or its value is invalid.
        """
        _check_options(options, self.decoder_options, f"the {self.name!r} decoder")
        return self.decoder(**options)

    def new_encoder(self, schema: TableSchema, **options: Any) -> EventEncoder:
        """The per-event encoder of native events of ``schema`` in the format.

        Raises:
            InvalidOption: An option is not one of the encoder's.
        """
        _check_options(options, self.encoder_options, f"the {self.name!r} encoder")
        return self.encoder(schema, **options)

    def encode(
        self, events: Iterable[Mapping[str, Any]], schema: TableSchema, **options: Any
    ) -> list[bytes]:
        """Encodes native events as message values of the format (per event).

        Raises:
            InvalidOption: An option is not one of the encoder's.
            ValueError: An event the format cannot carry.
        """
        encode = self.new_encoder(schema, **options)
        return [encode(e) for e in events]


REGISTRY: Mapping[str, Format] = MappingProxyType(
    {
        "json": Format("json", JsonDecoder, json_encoder),
        "debezium": Format("debezium", DebeziumDecoder, debezium_encoder),
        "rowv2": Format("rowv2", Rowv2Decoder, rowv2_encoder),
        "debezium-avro": Format("debezium-avro", DebeziumAvroDecoder, debezium_avro_encoder),
    }
)
"""Every format by name, in the order of :data:`FORMATS`."""


def get_format(name: str) -> Format:
    """The format called ``name``.

    Raises:
        InvalidOption: ``name`` is not a known format (the error names the valid ones; it
            is a ``ValueError``).
    """
    fmt = REGISTRY.get(name) if isinstance(name, str) else None
    if fmt is None:
        raise InvalidOption(
            f"unknown event format {name!r}; format must be one of {list(FORMATS)}", option="format"
        )
    return fmt


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
    return get_format(name).new_decoder(**options)


def decoder_options(cls: type[Decoder]) -> frozenset[str]:
    """Names of the keyword options of a decoder class (its ``__init__`` keywords)."""
    return _keyword_options(cls.__init__)


@functools.lru_cache(maxsize=256)
def _keyword_options(fn: Callable[..., Any]) -> frozenset[str]:
    """Names of the keyword-only parameters of ``fn`` (read once per function: every
    decoder a router makes checks its options against them)."""
    params = inspect.signature(fn).parameters.values()
    return frozenset(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY)


def _check_options(options: Mapping[str, Any], known: frozenset[str], what: str) -> None:
    for opt in options:
        if opt not in known:
            raise InvalidOption(
                f"unknown option {opt!r} of {what}; its options: {sorted(known)}", option=opt
            )
