"""WAL segments of change batches: one segment per bucket per commit attempt.

On disk, under the table root::

    _wal/<bucket>/<version:020d>-<attempt>.wal      framed records (wal.py):
        record 0: JSON header {"version", "bucket", "schema_id", "rows"}
        record 1: Arrow IPC stream of the bucket's ChangeBatch in wire form

A segment is written and fsynced (file and directory) *before* the log entry that names
it is created; a segment no entry names is an orphan of a failed attempt. Committed
segments are read without repair: damage there is data loss and raises WalCorruption.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass

import pyarrow as pa

from cdc_sink.changes import ChangeBatch
from cdc_sink.errors import WalCorruption
from cdc_sink.schema import TableSchema
from cdc_sink.storage.fsutil import makedirs
from cdc_sink.storage.wal import SegmentWriter, read_segment

__all__ = ["SegmentHeader", "file_version", "read_change_segment", "write_change_segment"]

_NAME = re.compile(r"^(\d{20})-[0-9a-f]+\.(wal|manifest|pages|arrow)$")


@dataclass(frozen=True)
class SegmentHeader:
    """The first record of a change segment."""

    version: int
    bucket: int
    schema_id: int
    rows: int


def file_version(name: str) -> int | None:
    """The version encoded in a segment/snapshot/page file name (None: not ours)."""
    m = _NAME.match(os.path.basename(name))
    return int(m.group(1)) if m else None


def write_change_segment(root: str, bucket: int, version: int, schema_id: int,
                         batch: ChangeBatch) -> str:
    """Writes and fsyncs the segment of one bucket's batch; returns its relative path."""
    rel = f"_wal/{bucket}/{version:020d}-{uuid.uuid4().hex[:12]}.wal"
    path = os.path.join(root, rel)
    makedirs(os.path.dirname(path))
    header = {"version": version, "bucket": bucket, "schema_id": schema_id, "rows": len(batch)}
    table = batch.to_arrow()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    with SegmentWriter(path) as seg:
        seg.append(json.dumps(header).encode())
        seg.append(sink.getvalue().to_pybytes())
        seg.finish()
    return rel


def read_change_segment(root: str, rel: str, schema: TableSchema) -> tuple[SegmentHeader,
                                                                          ChangeBatch]:
    """Reads a committed segment back into a batch of ``schema``.

    Raises:
        WalCorruption: The segment is damaged or incomplete.
    """
    path = os.path.join(root, rel)
    try:
        records = read_segment(path, repair=False)
    except FileNotFoundError:
        raise WalCorruption("a committed WAL segment is missing", path=path,
                            offset=0) from None
    if len(records) != 2:
        raise WalCorruption(f"change segment has {len(records)} records, expected 2",
                            path=path, offset=0)
    h = json.loads(records[0])
    header = SegmentHeader(int(h["version"]), int(h["bucket"]), int(h["schema_id"]),
                           int(h["rows"]))
    table = pa.ipc.open_stream(pa.py_buffer(records[1])).read_all()
    if table.num_rows != header.rows:
        raise WalCorruption("change segment row count differs from its header", path=path,
                            offset=0)
    batch, rejects = ChangeBatch.from_arrow(table, schema)
    if len(rejects):
        raise WalCorruption(f"committed segment holds invalid events: {rejects.reasons[:3]}",
                            path=path, offset=0)
    return header, batch


def new_attempt_id() -> str:
    """A random id distinguishing commit attempts of the same version."""
    return uuid.uuid4().hex[:12]
