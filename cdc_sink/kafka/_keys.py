"""Kafka message keys of change events (private; public names in
:mod:`cdc_sink.kafka.producer`).

The key of an event is canonical JSON of its primary-key values in key order (``[42]``,
``["eu", 7]``): equal keys give equal bytes, so the partitioner sends every event of a
key to one partition and Kafka keeps their order.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from cdc_sink.batch import ChangeBatch
from cdc_sink.schema import TableSchema

__all__ = ["EVENT_FIELDS", "encode_key", "event_keys", "keyed_events"]

EVENT_FIELDS = frozenset({"op", "key", "set", "seq", "ts_ms"})
"""The fields of a native event."""


def _json_scalar(v: Any) -> Any:
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, dt.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return v.isoformat()
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, bytes):
        return base64.b64encode(v).decode("ascii")
    return v


def encode_key(values: Sequence[Any]) -> bytes:
    """The Kafka key of an event: canonical JSON of its key values in key order.

    Pass values as Arrow gives them back for the key columns' types (so ``Decimal("1.5")``
    of a ``decimal128(12, 2)`` key is ``Decimal("1.50")``): equal keys, equal bytes.
    Decimals are strings, dates and timestamps ISO strings (timestamps in UTC, no
    offset), binaries base64.

    Args:
        values: Key values in primary-key order.

    Returns:
        UTF-8 JSON, e.g. ``b'[42]'`` or ``b'["eu",7]'``.
    """
    return json.dumps(
        [_json_scalar(v) for v in values], separators=(",", ":"), ensure_ascii=False
    ).encode("utf-8")


def event_keys(
    events: Sequence[Mapping[str, Any]], schema: TableSchema, *, validate: bool = True
) -> list[bytes]:
    """Kafka keys of ``events``: :func:`encode_key` of their key values cast to the key
    columns' types, after validating the events against ``schema`` (in one vectorized
    pass, :meth:`cdc_sink.ChangeBatch.from_events`).

    Args:
        events: Native events ``{"op", "key", "set"?, "seq"?, "ts_ms"?}``.
        schema: The table schema.
        validate: Check the events (off: only the keys are read, as given).

    Returns:
        One key per event.

    Raises:
        ValueError: An event does not fit the schema (names its index and why).
    """
    return keyed_events(events, schema, validate=validate)[0]


def keyed_events(
    events: Sequence[Mapping[str, Any]], schema: TableSchema, *, validate: bool = True
) -> tuple[list[bytes], list[pa.Array] | None]:
    """:func:`event_keys` of ``events`` and their key columns as Arrow arrays (``None``
    when unvalidated keys do not cast to the key columns' types)."""
    for i, e in enumerate(events):
        if not isinstance(e, Mapping):
            raise ValueError(f"event #{i} is not a mapping: {type(e).__name__}")
        extra = sorted(set(e) - EVENT_FIELDS)
        if extra and validate:
            raise ValueError(
                f"event #{i}: unknown field(s) {extra}; an event has {sorted(EVENT_FIELDS)}"
            )
    if validate:
        batch, rejects = ChangeBatch.from_events(events, schema)
        if len(rejects):
            pos, reason = int(rejects.positions[0]), rejects.reasons[0]
            e = events[pos]
            raise ValueError(
                f"invalid {e.get('op')!r} event #{pos} (key {e.get('key')!r}): {reason}"
            )
        arrays: list[pa.Array] | None = list(batch.keys)
        columns = [k.to_pylist() for k in batch.keys]
    else:
        columns = [_loose_key_column(events, name, schema) for name in schema.primary_key]
        try:
            arrays = [
                pa.array(c, type=schema.column(n).type)
                for c, n in zip(columns, schema.primary_key, strict=True)
            ]
        except (pa.ArrowException, TypeError, ValueError, decimal.InvalidOperation):
            arrays = None
    return [encode_key(vals) for vals in zip(*columns, strict=True)], arrays


def _loose_key_column(
    events: Sequence[Mapping[str, Any]], name: str, schema: TableSchema
) -> list[Any]:
    """Key values of unvalidated events (cast through Arrow when possible)."""
    one = len(schema.primary_key) == 1
    raw = []
    for e in events:
        k = e.get("key")
        raw.append(k.get(name) if isinstance(k, Mapping) else (k if one else None))
    try:
        return list(pa.array(raw, type=schema.column(name).type).to_pylist())
    except (pa.ArrowException, TypeError, ValueError, decimal.InvalidOperation):
        return raw
