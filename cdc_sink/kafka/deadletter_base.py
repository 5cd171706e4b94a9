"""The dead-letter record and the contract of a dead-letter sink.

Every sink receives the rejects of a micro-batch as one Arrow table of
:data:`DEAD_LETTER_SCHEMA` (see :mod:`cdc_sink.kafka.deadletter` for the sinks and the
exactly-once forwarding).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_sink.storage.rejects import REJECTS_SCHEMA

__all__ = [
    "DEAD_LETTER_SCHEMA",
    "HEADER_NAMES",
    "DeadLetterSink",
    "app_tag",
    "conform",
    "dedupe",
    "records_from_rows",
]

DEAD_LETTER_SCHEMA = pa.schema(
    [REJECTS_SCHEMA.field(n) for n in ("topic", "partition", "offset", "key", "value")]
    + [pa.field("reason", pa.string()), pa.field("batch_id", pa.int64())]
    + [pa.field("app_id", pa.string())]
)
"""The columns of the records handed to ``write`` (and read back by ``read``): the Kafka
coordinates and raw bytes of a rejected event, as the table's rejects file stores them
(:data:`~cdc_sink.storage.rejects.REJECTS_SCHEMA`), its reason, and the micro-batch and
application that rejected it."""

HEADER_NAMES = ("topic", "partition", "offset", "reason", "batch_id", "app_id")
"""The headers :class:`KafkaDeadLetter` puts on each record (its source and the reason)."""

_SOURCE = ["topic", "partition", "offset"]


def conform(records: pa.Table | pa.RecordBatch) -> pa.Table:
    """``records`` with exactly the dead-letter columns and types.

    Raises:
        ValueError: A column is missing or cannot be cast.
    """
    if isinstance(records, pa.RecordBatch):
        records = pa.Table.from_batches([records])
    missing = [f.name for f in DEAD_LETTER_SCHEMA if f.name not in records.column_names]
    if missing:
        raise ValueError(f"dead-letter records lack column(s) {missing}")
    try:
        return pa.table(
            [records.column(f.name).cast(f.type) for f in DEAD_LETTER_SCHEMA],
            schema=DEAD_LETTER_SCHEMA,
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(f"dead-letter records do not fit DEAD_LETTER_SCHEMA: {exc}") from exc


def dedupe(records: pa.Table) -> pa.Table:
    """Keeps the first record of each ``(topic, partition, offset)`` (replays write twice).

    Rows keep their order; records without a source position are all kept.
    """
    if records.num_rows == 0:
        return records
    idx = pa.array(np.arange(records.num_rows, dtype=np.int64))
    keyed = pa.table({**{c: records.column(c) for c in _SOURCE}, "__i": idx})
    firsts = keyed.group_by(_SOURCE, use_threads=False).aggregate([("__i", "min")])
    keep = pc.sort_indices(firsts.column("__i_min"))
    return records.take(pc.take(firsts.column("__i_min"), keep))


class DeadLetterSink:
    """Where rejected records go: anything with ``write(records: pa.Table) -> None``.

    Attributes:
        exactly_once: ``write_version`` and ``forwarded_version`` are idempotent and
            durable together (else :func:`forward` keeps a cursor file, at least once).
    """

    exactly_once: bool = False

    def write(self, records: pa.Table) -> None:
        """Stores ``records`` (columns of :data:`DEAD_LETTER_SCHEMA`) durably."""
        raise NotImplementedError

    def write_version(self, records: pa.Table, *, app_id: str, version: int) -> None:
        """Stores the dead letters of one table version of ``app_id`` (all at once)."""
        self.write(records)

    def forwarded_version(self, app_id: str) -> int | None:
        """The newest table version of ``app_id`` this sink holds (None: unknown/none)."""
        return None

    def close(self) -> None:
        """Releases clients (a later write opens new ones)."""

    def read(self, *, deduplicate: bool = True) -> pa.Table:
        """Every record stored so far (one per source position with ``deduplicate``)."""
        raise NotImplementedError


def app_tag(app_id: str) -> str:
    """A short, file- and topic-name-safe tag of an app id."""
    return hashlib.sha256(app_id.encode()).hexdigest()[:16]


def records_from_rows(rows: list[Mapping[str, Any]]) -> pa.Table:
    """A dead-letter table from row dicts (missing fields are null); for tests and tools."""
    return pa.Table.from_pylist([dict(r) for r in rows], schema=DEAD_LETTER_SCHEMA)
