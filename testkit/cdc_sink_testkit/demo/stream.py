"""Putting the demo's orders stream on Kafka: valid events through :class:`CdcProducer`,
malformed ones as the broken bytes a faulty upstream would send.

Malformed records are encoded with the same encoders as valid ones, so they differ from
a valid record of the format only in what makes them malformed:

- ``bad_json``: the encoding of a plausible event, cut in half (rowv2: its codec byte
  is not 128, so it cannot be a row);
- ``unknown_column``: encoded with the table schema plus a ``coupon_code`` column (for
  rowv2: a column id the table never had);
- ``wrong_type``: encoded with ``items`` declared as a string (rowv2: five bytes of text
  where an int32 belongs);
- ``missing_key``: a valid event (only the table can tell the key is missing).

Formats whose encoder registers its schema (``debezium-avro``) register each malformed
kind's schema under a subject of its own (``<subject>-<kind>``): a registry that checks
compatibility would refuse the changed types under the stream's subject, while a
writer schema is all the decoder reads by a message's schema id.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from cdc_sink.formats import FormatName, get_format
from cdc_sink.kafka.producer import CdcProducer, encode_key
from cdc_sink.schema import TableSchema
from cdc_sink_testkit.demo.orders import OrderRecord

__all__ = ["malformed_value", "produce_records"]


def _encode(
    fmt: FormatName,
    event: Mapping[str, Any],
    schema: TableSchema,
    options: Mapping[str, Any],
) -> bytes:
    """``event`` encoded by the format's encoder in the registry with ``options``."""
    return get_format(fmt).new_encoder(schema, **options)(event)


def _with_column_type(schema: TableSchema, name: str, t: pa.DataType) -> TableSchema:
    cols = tuple(
        dataclasses.replace(c, type=t, default=pa.scalar(None, t)) if c.name == name else c
        for c in schema.columns
    )
    return dataclasses.replace(schema, columns=cols)


def malformed_value(
    record: OrderRecord,
    fmt: FormatName,
    schema: TableSchema,
    *,
    ts_ms: int | None = None,
    encoder_options: Mapping[str, Any] | None = None,
) -> bytes:
    """The value bytes of a malformed record (see the module docstring).

    Args:
        record: The record (its ``kind`` says how it is malformed).
        fmt: The wire format.
        schema: The table schema.
        ts_ms: The event time to stamp, if any.
        encoder_options: Options of the format's encoder (``debezium-avro``: the
            ``registry_url`` and the stream's ``subject``).

    Raises:
        InvalidOption: ``fmt`` is not a known format.
    """
    event = dict(record.event)
    if ts_ms is not None:
        event["ts_ms"] = ts_ms
    options = dict(encoder_options or {})
    if "subject" in options:
        options["subject"] = f"{options['subject']}-{record.kind}"
    if record.kind == "unknown_column":
        wider = schema.add_column("coupon_code", "string")
        return _encode(fmt, event, wider, options)
    if record.kind == "wrong_type":
        return _encode(fmt, event, _with_column_type(schema, "items", pa.string()), options)
    if record.kind == "bad_json":
        good = _encode(fmt, event, schema, options)
        if fmt == "rowv2":
            return good[:1] + b"\x7f" + good[2:]  # codec byte 127: not a row v2
        return good[: len(good) // 2]
    return _encode(fmt, event, schema, options)


def produce_records(
    producer: CdcProducer,
    records: Sequence[OrderRecord],
    *,
    chunk: int = 500,
    on_progress: Callable[[int], None] | None = None,
) -> None:
    """Produces ``records`` in order (valid ones validated and encoded by ``producer``).

    Args:
        producer: The producer (its format and schema decide the encoding).
        records: Records of :func:`~cdc_sink_testkit.demo.orders.generate_orders`.
        chunk: Events validated and sent together.
        on_progress: Called with the number of records just sent.
    """
    pending: list[dict[str, Any]] = []

    def send_pending() -> None:
        if pending:
            producer.send_many(pending)
            if on_progress is not None:
                on_progress(len(pending))
            pending.clear()

    for rec in records:
        if rec.kind in ("unknown_column", "wrong_type", "bad_json"):
            send_pending()
            key = encode_key([rec.event["key"][k] for k in producer.schema.primary_key])
            producer.send_raw(
                key,
                malformed_value(
                    rec,
                    producer.format,
                    producer.schema,
                    encoder_options=producer.encoder_options,
                ),
            )
            if on_progress is not None:
                on_progress(1)
            continue
        pending.append(rec.event)
        if len(pending) >= chunk:
            send_pending()
    send_pending()
