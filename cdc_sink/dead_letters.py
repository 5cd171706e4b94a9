"""Dead letters: the record, the contract of a sink, and forwarding them exactly once.

A micro-batch's rejects are stored in the table, atomically with the version that
rejected them (:mod:`cdc_sink.storage.rejects`). :func:`forward` -- step 5 of the commit
protocol, reached through :meth:`Transaction.forward_dead_letters
<cdc_sink.transaction.Transaction.forward_dead_letters>` -- copies each committed
version's rejects of one writer to a :class:`DeadLetterSink`, in version order, resuming
after the last version the sink already holds (:meth:`DeadLetterSink.forwarded_version`).
A sink that makes ``write_version`` and ``forwarded_version`` durable together
(``exactly_once``) gets every dead letter exactly once; a sink with only ``write`` gets a
cursor in the table's store (``_dead_letters/<tag>.cursor``, replaced with ``put``) and at
least once.

Every sink receives one version's rejects as one Arrow table of
:data:`DEAD_LETTER_SCHEMA`. The sinks themselves (Kafka, Parquet) are in
:mod:`cdc_sink.kafka.deadletter`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_sink.engine import TableCore, core_of
from cdc_sink.storage.layout import dead_letter_cursor_key
from cdc_sink.storage.objectstore import ObjectNotFound
from cdc_sink.storage.rejects import REJECTS_SCHEMA

if TYPE_CHECKING:
    from cdc_sink.engine import HasCore

__all__ = [
    "DEAD_LETTER_SCHEMA",
    "HEADER_NAMES",
    "DeadLetterSink",
    "app_tag",
    "conform",
    "dedupe",
    "forward",
    "forward_from",
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


def _cursor_key(sink: Any, app_id: str) -> str:
    return dead_letter_cursor_key(app_tag(f"{app_id}|{sink!r}"))


def forward(table: HasCore, sink: Any, app_id: str, *, checked: int | None = None) -> int:
    """Copies the rejects of every version ``app_id`` committed to ``sink``, exactly once.

    Versions are forwarded in order, starting after the sink's cursor
    (:meth:`DeadLetterSink.forwarded_version`, or a cursor file in the table directory for
    sinks that keep none). Versions that refused nothing are passed over; versions no
    longer retained by the table (GC) cannot be forwarded and are logged.

    Args:
        table: The table whose versions hold the rejects (a
            :class:`~cdc_sink.table.Table`).
        sink: Where the dead letters go: a :class:`DeadLetterSink`, or any object with
            ``write(records)`` (forwarded at least once, with a cursor file).
        app_id: The writer whose versions are forwarded.
        checked: A version up to which this process already forwarded everything (the
            scan starts after it even when the sink's cursor is older, e.g. because
            versions since then refused nothing).

    Returns:
        The number of dead letters written.
    """
    return forward_from(core_of(table), sink, app_id, checked=checked)


def forward_from(core: TableCore, sink: Any, app_id: str, *, checked: int | None = None) -> int:
    """:func:`forward` from the table's engine (:func:`cdc_sink.engine.core_of`; what a
    :class:`~cdc_sink.transaction.Transaction` holds)."""
    exactly_once = bool(getattr(sink, "exactly_once", False))
    cursor = None if exactly_once else _cursor_key(sink, app_id)
    if cursor is not None:
        try:
            done: int | None = int(json.loads(core.store.get(cursor))["version"])
        except ObjectNotFound:
            done = None
    else:
        done = sink.forwarded_version(app_id)
    written = 0
    start = max(core.oldest_version(), (done or 0) + 1, (checked or 0) + 1)
    for entry in core.log.entries(from_version=start):
        if entry.app_id != app_id or entry.rejects is None:
            continue
        rej = core.rejects(entry.version)
        records = pa.table({f.name: rej.column(f.name) for f in DEAD_LETTER_SCHEMA})
        write_version = getattr(sink, "write_version", None)
        if write_version is not None:
            write_version(records, app_id=app_id, version=entry.version)
        else:
            sink.write(records)
        written += records.num_rows
        if cursor is not None:  # derived data: replaced in place
            core.store.put(cursor, json.dumps({"version": entry.version}).encode())
    return written
