"""Value ranges, timestamp units and the out-of-range reason shared by the decoders.

Every decoder refuses a value a column cannot hold with the same words, whatever the
format it came in (JSON, Debezium JSON or Avro) and whatever reads it (the formats'
vectorized decoders, the Spark path's JVM expressions):

- dates and timestamps hold 0001-01-01..9999-12-31 (:data:`MIN_DAY`..:data:`MAX_DAY`,
  :data:`MIN_MICROS`..:data:`MAX_MICROS`; :data:`TEMPORAL_RANGE` as a reason says it);
- PostgreSQL's ``infinity`` and ``-infinity``, as Debezium writes them, are named in the
  reason (:data:`PG_INFINITY`);
- integer timestamps are in the unit their Kafka Connect schema name gives
  (:data:`TS_UNIT_BY_NAME`), one of the ``UNIT_*`` codes.

:func:`out_of_range_reason` is the one text of such a reject.
"""

from __future__ import annotations

import pyarrow as pa

from cdc_sink.schema import Column, type_to_str

__all__ = [
    "MAX_DAY",
    "MAX_MICROS",
    "MIN_DAY",
    "MIN_MICROS",
    "PG_INFINITY",
    "TEMPORAL_RANGE",
    "TS_UNIT_BY_NAME",
    "UNIT_DAYS",
    "UNIT_MS",
    "UNIT_NS",
    "UNIT_TIME_OF_DAY",
    "UNIT_US",
    "out_of_range_reason",
]

UNIT_US, UNIT_MS, UNIT_NS, UNIT_DAYS, UNIT_TIME_OF_DAY = 0, 1, 2, 3, 4
"""Units of integer timestamps; a time of day (Debezium ``Time``, ``MicroTime``,
``NanoTime``) is no timestamp and is refused."""

MIN_DAY = -719162
"""0001-01-01 in days since the epoch: the first date a column holds."""
MAX_DAY = 2932896
"""9999-12-31 in days since the epoch: the last date a column holds."""
MIN_MICROS = MIN_DAY * 86_400_000_000
"""0001-01-01T00:00:00Z in microseconds since the epoch: the first timestamp."""
MAX_MICROS = (MAX_DAY + 1) * 86_400_000_000 - 1
"""9999-12-31T23:59:59.999999Z in microseconds since the epoch: the last timestamp."""
TEMPORAL_RANGE = "0001-01-01..9999-12-31"
"""The range of dates and timestamps, as a reason names it."""

PG_INFINITY = {
    "9223372036825200000": "PostgreSQL 'infinity'",
    "-9223372036832400000": "PostgreSQL '-infinity'",
    "9223372036854775807": "PostgreSQL 'infinity'",
    "-9223372036854775808": "PostgreSQL '-infinity'",
}
"""PostgreSQL's infinite dates and timestamps as Debezium writes them (their text), and
what a reason calls them."""

TS_UNIT_BY_NAME = {
    "io.debezium.time.Timestamp": UNIT_MS,
    "org.apache.kafka.connect.data.Timestamp": UNIT_MS,
    "io.debezium.time.MicroTimestamp": UNIT_US,
    "io.debezium.time.NanoTimestamp": UNIT_NS,
    "io.debezium.time.Date": UNIT_DAYS,  # a date in a timestamp column: its midnight UTC
    "org.apache.kafka.connect.data.Date": UNIT_DAYS,
    "io.debezium.time.Time": UNIT_TIME_OF_DAY,
    "io.debezium.time.MicroTime": UNIT_TIME_OF_DAY,
    "io.debezium.time.NanoTime": UNIT_TIME_OF_DAY,
    "org.apache.kafka.connect.data.Time": UNIT_TIME_OF_DAY,
}
"""Unit of an integer timestamp by its Kafka Connect schema name."""


def out_of_range_reason(c: Column, raw: str) -> str:
    """The reason of a value ``raw`` (its text) of the right kind that column ``c``
    cannot hold: the column, its type, the range where the type has one, the value, and
    what it means where it is PostgreSQL's infinity."""
    t = c.type
    if pa.types.is_timestamp(t) or pa.types.is_date32(t):
        detail = f" ({TEMPORAL_RANGE})"
    elif pa.types.is_decimal(t):
        detail = f" (at most {t.precision} digits, {t.scale} after the point)"
    else:
        detail = ""
    note = PG_INFINITY.get(raw)
    tail = f" ({note})" if note else ""
    return f"column {c.name!r}: value out of range of {type_to_str(t)}{detail}: {raw}{tail}"
