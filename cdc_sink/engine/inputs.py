"""The forms the :class:`~cdc_sink.table.Table` API accepts, turned into what it uses:
event batches, point-lookup keys and read timestamps."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from cdc_sink.batch import ChangeBatch, Rejects
from cdc_sink.errors import InvalidArgument, SchemaError
from cdc_sink.schema import TableSchema
from cdc_sink.utils.values import parse_timestamp

__all__ = ["keys_table", "timestamp_ms", "to_batch"]


def to_batch(events: Any, schema: TableSchema) -> tuple[ChangeBatch, Rejects]:
    """The events of :meth:`Table.apply <cdc_sink.table.Table.apply>` as a batch, with the
    events refused as invalid for ``schema``."""
    if isinstance(events, ChangeBatch):
        return events, Rejects()
    if isinstance(events, (pa.Table, pa.RecordBatch)):
        return ChangeBatch.from_arrow(events, schema)
    if isinstance(events, (list, tuple)):
        return ChangeBatch.from_events(events, schema)
    raise InvalidArgument(
        "events must be a list of dicts, a pyarrow.Table or a ChangeBatch, "
        f"not {type(events).__name__}"
    )


def keys_table(keys: Any, schema: TableSchema) -> pa.Table:
    """The keys of :meth:`Table.get <cdc_sink.table.Table.get>` as a table of the key
    columns."""
    names = list(schema.primary_key)
    arrow = schema.arrow_schema(names)
    if isinstance(keys, pa.Table):
        missing = [n for n in names if n not in keys.column_names]
        if missing:
            raise SchemaError(f"key table lacks key column(s) {missing}")
        return keys.select(names).cast(arrow)
    if len(names) > 1 and any(not isinstance(k, Mapping) for k in keys):
        raise InvalidArgument("composite keys must be given as dicts")
    rows = [k if isinstance(k, Mapping) else {names[0]: k} for k in keys]
    return pa.Table.from_pylist(rows, schema=arrow)


def timestamp_ms(ts: Any) -> int:
    """A read's ``timestamp`` (datetime, ISO 8601 string or epoch milliseconds) in epoch
    milliseconds; a naive datetime is UTC."""
    if isinstance(ts, dt.datetime):
        if ts.tzinfo is None:
            ts = ts.replace(tzinfo=dt.timezone.utc)
        return int(ts.timestamp() * 1000)
    if isinstance(ts, (int, float)):
        return int(ts)
    if isinstance(ts, str):
        return timestamp_ms(parse_timestamp(ts))
    raise InvalidArgument(f"timestamp must be a datetime, ISO string or epoch ms, not {ts!r}")
