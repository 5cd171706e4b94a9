"""Rejected events, stored durably with the version that rejected them.

A micro-batch's rejects (malformed messages, events invalid for the schema, events a
tablet refused) are part of its commit: they are written to one immutable file per
commit attempt *before* the log entry, and the log entry names the file. So a version's
rejects exist exactly when the version does, and a replayed batch (already committed)
finds them on disk instead of losing them. Dead-letter sinks are fed from this record,
idempotently (``cdc_sink.spark.deadletters``), and users read it back with
:meth:`cdc_sink.table.Table.rejects`::

    <table>/_rejects/<version:020d>-<attempt>.arrow     Arrow IPC file (zstd), columns:

        position: int64     the event's index in the batch (Kafka offsets: see below)
        topic: string       Kafka coordinates (null for Table.apply without a source)
        partition: int32
        offset: int64
        key: binary         the raw Kafka key and value (null when unknown)
        value: binary
        reason: string      why the event was refused

Write order of a commit with rejects (docs/architecture.md §4, the commit protocol): WAL segments
-> rejects file -> log entry (the commit point), each durable before the next: the
rejects file is one ``put_new`` of its unique key in the table's store (a local store
fsyncs the file and ``_rejects/``), read back with one ``get``.
A rejects file that no log entry names is an orphan of a failed attempt; GC deletes it
like an orphan segment. GC deletes a version's rejects file with its log entry.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from cdc_sink.batch import Rejects
from cdc_sink.errors import WalCorruption
from cdc_sink.storage.bounded_ipc import check_expansion, expansion_limit
from cdc_sink.storage.layout import REJECTS_DIR, attempt_stem, rejects_file
from cdc_sink.storage.log_entry import LogEntry
from cdc_sink.storage.objectstore import StoreLike, as_store
from cdc_sink.storage.segments import read_committed_object

__all__ = [
    "REJECTS_DIR",
    "REJECTS_SCHEMA",
    "batch_reject_records",
    "conform_rejects",
    "read_rejects",
    "reject_records",
    "sorted_rejects",
    "version_rejects",
    "write_rejects",
]

REJECTS_SCHEMA = pa.schema(
    [
        pa.field("position", pa.int64()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("reason", pa.string(), nullable=False),
    ]
)
"""The columns of a rejects file (and of :meth:`Table.rejects` before its extra columns)."""


def conform_rejects(records: pa.Table) -> pa.Table:
    """``records`` with exactly the columns of :data:`REJECTS_SCHEMA` (missing ones null).

    Raises:
        ValueError: ``records`` lacks ``reason`` or a column cannot be cast.
    """
    if "reason" not in records.column_names:
        raise ValueError("rejects need a 'reason' column")
    n = records.num_rows
    cols = []
    for f in REJECTS_SCHEMA:
        if f.name in records.column_names:
            col = records.column(f.name)
            try:
                cols.append(col.cast(f.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise ValueError(f"rejects column {f.name!r} is not {f.type}: {exc}") from exc
        else:
            cols.append(pa.nulls(n, f.type))
    reason = cols[-1].fill_null("unknown reason")
    cols[-1] = reason
    return pa.table(cols, schema=REJECTS_SCHEMA)


def write_rejects(where: StoreLike, version: int, records: pa.Table) -> str:
    """Writes one commit attempt's rejects durably; returns the file's key (its path
    relative to the table root).

    The file is written once (``put_new``) under a name unique to this attempt. It holds
    raw message keys and values: a local store creates it with the table's ``file_mode``
    (default ``0o640``), keeping it from other users.

    Args:
        where: The table's store (a path: a local store on that directory).
        version: The version being committed.
        records: The rejects (:func:`conform_rejects` makes them the file's columns).
    """
    table = conform_rejects(records)
    sink = pa.BufferOutputStream()
    opts = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_file(sink, REJECTS_SCHEMA, options=opts) as w:
        w.write_table(table)
    rel = rejects_file(attempt_stem(version))
    as_store(where).put_new(rel, memoryview(sink.getvalue()))
    return rel


def read_rejects(where: StoreLike, rel: str) -> pa.Table:
    """Reads a rejects file written by :func:`write_rejects` (one ``get``).

    ``rel`` comes from a log entry, checked when the log read it; it is checked again
    here (:func:`~cdc_sink.storage.layout.checked`), so nothing outside the table is
    opened.

    Raises:
        WalCorruption: The file is missing or unreadable although a log entry names it,
            or ``rel`` is no rejects path of the table.
    """
    path, data = read_committed_object(where, "rejects", rel, "a rejects file named by the log")
    if data[:6] != b"ARROW1":
        raise WalCorruption("rejects file is not an Arrow IPC file", path=path, offset=0)
    # An IPC file is its stream after 8 bytes of magic and padding: its decompressed size
    # is checked from the metadata before Arrow allocates it (a zstd bomb is refused).
    check_expansion(
        memoryview(data)[8:],
        limit=expansion_limit(len(data)),
        what="rejects file",
        path=path,
        offset=8,
    )
    try:
        table = pa.ipc.open_file(pa.py_buffer(data)).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        # The reader's message may quote bytes of the file: only its kind is shown.
        raise WalCorruption(
            f"rejects file is unreadable ({type(exc).__name__})", path=path, offset=0
        ) from exc
    if not table.schema.equals(REJECTS_SCHEMA):
        raise WalCorruption(
            f"rejects file has {table.num_columns} columns that are not the rejects schema",
            path=path,
            offset=0,
        )
    return table


def sorted_rejects(rejects: Rejects) -> Rejects:
    """``rejects`` ordered by input position (stable)."""
    order = np.argsort(rejects.positions, kind="stable")
    return Rejects(rejects.positions[order], [rejects.reasons[i] for i in order.tolist()])


_NO_RECORDS = REJECTS_SCHEMA.empty_table()


def reject_records(rejects: Rejects, source: pa.Table | None = None) -> pa.Table:
    """The rejects-file records of ``rejects``, with their source columns when given.

    Args:
        rejects: Positions and reasons.
        source: One row per event position (any of ``topic``, ``partition``, ``offset``,
            ``key``, ``value``); row ``i`` describes position ``i``.

    Returns:
        A table of :data:`REJECTS_SCHEMA`.
    """
    pos = np.asarray(rejects.positions, dtype=np.int64)
    n = len(pos)
    if n == 0:
        return _NO_RECORDS  # most batches': Arrow tables are immutable, one serves all
    cols: dict[str, pa.Array | pa.ChunkedArray] = {"position": pa.array(pos, pa.int64())}
    if source is not None and n:
        idx = pa.array(pos)
        for f in REJECTS_SCHEMA:
            if f.name in source.column_names and f.name not in ("position", "reason"):
                cols[f.name] = source.column(f.name).take(idx).cast(f.type)
    cols["reason"] = pa.array(list(rejects.reasons), pa.string())
    return pa.table(
        [cols[f.name] if f.name in cols else pa.nulls(n, f.type) for f in REJECTS_SCHEMA],
        schema=REJECTS_SCHEMA,
    )


def batch_reject_records(
    *groups: Rejects, source: pa.Table | None = None
) -> tuple[pa.Table, Rejects]:
    """What a batch commits as its rejects: ``groups`` (e.g. the decoder's and the
    tablets', positions of one input) merged in position order, as rejects-file records.

    Args:
        *groups: The rejects of each stage of the batch (none is changed).
        source: One row per event position, as :func:`reject_records` takes it.

    Returns:
        The records (:data:`REJECTS_SCHEMA`) and the merged rejects, sorted by position
        (stable: within a position, the order of ``groups``).
    """
    if not any(len(g) for g in groups):
        return _NO_RECORDS, Rejects()
    merged = Rejects()
    for group in groups:
        merged.extend(group)
    merged = sorted_rejects(merged)
    return reject_records(merged, source), merged


def version_rejects(where: StoreLike, entry: LogEntry) -> pa.Table:
    """The rejects of the version of ``entry``, with ``version``, ``app_id`` and
    ``batch_id`` columns appended (empty when the version refused nothing)."""
    table = (
        read_rejects(where, entry.rejects)
        if entry.rejects is not None
        else REJECTS_SCHEMA.empty_table()
    )
    n = table.num_rows
    return (
        table.append_column("version", pa.array([entry.version] * n, pa.int64()))
        .append_column("app_id", pa.array([entry.app_id] * n, pa.string()))
        .append_column("batch_id", pa.array([entry.batch_id] * n, pa.int64()))
    )
