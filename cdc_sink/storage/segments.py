"""WAL segments of change batches: one segment per bucket per commit attempt.

On disk, under the table root::

    _wal/<bucket>/<version:020d>-<attempt>.wal      framed records (wal.py):
        record 0: JSON header {"version", "bucket", "schema_id", "rows", "format", "bytes"}
        record 1: the bucket's ChangeBatch, encoded as "format" says (change_codec.py):
                  2 = compact (only the cells events set, LZ4-compressed Arrow IPC),
                  1 = the uncompressed wire form (segments written before format 2;
                      their header has no "format")
        "bytes": what record 1 holds once decompressed (bounded_ipc.py; segments
                 written before it have none, and are held to its expansion limit)

A segment is encoded in memory and written with one ``put_new`` of its unique key in the
table's store (:mod:`~cdc_sink.storage.objectstore`: a local store creates, writes and
fsyncs the file and its directory; an object store ``PUT`` s it) *before* the log entry
that names it is created; a segment no entry names is an orphan of a failed attempt.
Committed segments are read with one ``get`` each (a cold load's, on an object store,
concurrently with the bucket's snapshot: :class:`SegmentPrefetch`), without repair:
damage there is data loss
and raises WalCorruption. So does a header that is not what a writer writes (every field
an int in range: no ``Infinity``), and a body that would decompress to more than its
header declares (checked before anything is decompressed: :mod:`.bounded_ipc`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from cdc_sink.batch import ChangeBatch
from cdc_sink.errors import WalCorruption
from cdc_sink.schema import TableSchema
from cdc_sink.storage.bounded_ipc import check_expansion, decompressed_size, expansion_limit
from cdc_sink.storage.change_codec import (
    DEFAULT_COMPRESSION,
    FORMAT_COMPACT,
    FORMAT_WIRE,
    WalCompression,
    decode_compact,
    decode_wire,
    encode_compact,
    encode_wire,
)
from cdc_sink.storage.faults import fault_point
from cdc_sink.storage.framing import RECORD_HEADER_SIZE, read_json_header
from cdc_sink.storage.layout import (
    LOG_DIR,
    PathKind,
    attempt_stem,
    checked,
    file_version,
    segment_file,
)
from cdc_sink.storage.objectstore import RANGE_READ_THREADS, ObjectNotFound, StoreLike, as_store
from cdc_sink.storage.wal import WAL_MAGIC, decode_segment, encode_segment

__all__ = [
    "SegmentHeader",
    "SegmentPrefetch",
    "body_limit",
    "file_version",
    "read_change_segment",
    "read_committed_object",
    "read_committed_records",
    "write_change_segment",
]


@dataclass(frozen=True)
class SegmentHeader:
    """The first record of a change segment.

    Attributes:
        version: The version the segment belongs to.
        bucket: Its bucket.
        schema_id: The schema its batch was written with.
        rows: Events in the batch.
        format: How record 1 encodes the batch (:data:`~.change_codec.FORMAT_COMPACT`, or
            :data:`~.change_codec.FORMAT_WIRE` for segments written before it).
        bytes: What record 1 holds once decompressed (None: a segment written before
            headers declared it).
    """

    version: int
    bucket: int
    schema_id: int
    rows: int
    format: int = FORMAT_WIRE
    bytes: int | None = None


_HEADER_FIELDS = {
    "version": True,
    "bucket": True,
    "schema_id": True,
    "rows": True,
    "format": False,
    "bytes": False,
}


def write_change_segment(
    where: StoreLike,
    bucket: int,
    version: int,
    schema_id: int,
    batch: ChangeBatch,
    *,
    body_format: int = FORMAT_COMPACT,
    compression: WalCompression = DEFAULT_COMPRESSION,
) -> tuple[str, int]:
    """Writes the segment of one bucket's batch durably; returns its key and the bytes
    its batch holds decompressed (what a replay of it decodes).

    Args:
        where: The table's store (a path: a local store on that directory, whose files
            get its default mode).
        bucket: The batch's bucket.
        version: The version being prepared.
        schema_id: The schema the batch is of.
        batch: The bucket's events.
        body_format: Body encoding; :data:`~.change_codec.FORMAT_WIRE` only to write segments
            as older versions did (tests of reading them).
        compression: The codec of a format 2 body (``"lz4"``, ``"zstd"`` or None).

    Returns:
        The segment's key (its path relative to the table root), and its batch's bytes.
    """
    if body_format not in (FORMAT_WIRE, FORMAT_COMPACT):
        raise ValueError(f"unknown change segment format {body_format}")
    rel = segment_file(bucket, attempt_stem(version))
    header: dict[str, int] = {
        "version": version,
        "bucket": bucket,
        "schema_id": schema_id,
        "rows": len(batch),
    }
    if body_format == FORMAT_COMPACT:
        header["format"] = FORMAT_COMPACT
        body = encode_compact(batch, compression=compression)
    else:
        body = encode_wire(batch)
    header["bytes"] = decompressed_size(body)
    data = encode_segment([json.dumps(header).encode(), body])
    fault_point("wal.written")
    as_store(where).put_new(rel, data)
    fault_point("wal.fsynced")
    return rel, header["bytes"]


def read_committed_object(
    where: StoreLike, kind: PathKind, rel: str, what: str
) -> tuple[str, bytes]:
    """The bytes of an object a committed log entry names (one ``get``), and where it is
    (for errors): ``rel`` is checked again as a path of ``kind``
    (:func:`~.layout.checked`), so no path outside the table is ever opened. Every
    reader of a committed segment, pre-images object, rejects file or snapshot
    manifest starts here.

    Raises:
        WalCorruption: ``rel`` is no ``kind`` path of the table, or the object is
            missing (``what`` names it in the message: it is named by the log, so
            missing is data loss, or a GC that overtook the read).
    """
    store = as_store(where)
    checked(kind, rel, source=store.location(LOG_DIR))
    path = store.location(rel)
    try:
        return path, store.get(rel)
    except ObjectNotFound:
        raise WalCorruption(f"{what} is missing", path=path, offset=0) from None


def read_committed_records(
    where: StoreLike, kind: PathKind, rel: str, what: str
) -> tuple[str, list[bytes]]:
    """The framed records of an object a committed log entry names, and where it is
    (:func:`read_committed_object`, then the WAL framing).

    Raises:
        WalCorruption: ``rel`` is no ``kind`` path of the table, or the object is
            missing (``what`` names it in the message) or its framing is damaged.
    """
    path, data = read_committed_object(where, kind, rel, what)
    return path, decode_segment(data, path=path)


_SEGMENT = "a committed WAL segment"


class SegmentPrefetch:
    """Committed segments read in the background, concurrently (at most
    :data:`~cdc_sink.storage.objectstore.RANGE_READ_THREADS` at once), while the caller
    does something else (loads the bucket's snapshot); :meth:`read` then decodes one
    from the bytes fetched. A context manager: on exit, reads not started are cancelled.
    Where the store has files (a local store), nothing is fetched ahead: each
    :meth:`read` reads its file then.

    Args:
        where: The table's store (a path: a local store on that directory).
        rels: The segments' keys, from the log.
    """

    def __init__(self, where: StoreLike, rels: Sequence[str]) -> None:
        self.store = as_store(where)
        self._pool: ThreadPoolExecutor | None = None
        self._ahead: dict[str, Future[tuple[str, bytes]]] = {}
        if rels and self.store.local_path(rels[0]) is None:
            self._pool = ThreadPoolExecutor(
                min(len(rels), RANGE_READ_THREADS), thread_name_prefix="cdc_sink-wal"
            )
            for rel in dict.fromkeys(rels):
                self._ahead[rel] = self._pool.submit(
                    read_committed_object, self.store, "segment", rel, _SEGMENT
                )

    def read(self, rel: str, schema: TableSchema) -> tuple[SegmentHeader, ChangeBatch]:
        """:func:`read_change_segment` of ``rel``, from the bytes fetched ahead (each
        segment's once) if they were.

        Raises:
            WalCorruption: As :func:`read_change_segment`.
        """
        ahead = self._ahead.pop(rel, None)
        return read_change_segment(
            self.store, rel, schema, fetched=None if ahead is None else ahead.result()
        )

    def close(self) -> None:
        """Cancels the reads not started and waits for the others."""
        for fut in self._ahead.values():
            fut.cancel()
        self._ahead.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def __enter__(self) -> SegmentPrefetch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_change_segment(
    where: StoreLike,
    rel: str,
    schema: TableSchema,
    *,
    fetched: tuple[str, bytes] | None = None,
) -> tuple[SegmentHeader, ChangeBatch]:
    """Reads a committed segment back into a batch of ``schema``.

    ``rel`` comes from the table's log, which checked it when it read the entry; it is
    checked again here (:func:`~.layout.checked`), so no path outside the table is ever
    opened as a segment.

    Args:
        where: The table's store (a path: a local store on that directory).
        rel: The segment's key.
        schema: The schema of its batch.
        fetched: Where the segment is and its bytes, read already by
            :func:`read_committed_object` (:class:`SegmentPrefetch`); else it is read now.

    Raises:
        WalCorruption: The segment is damaged or incomplete, or ``rel`` is no segment
            path of the table.
    """
    if fetched is None:
        path, records = read_committed_records(where, "segment", rel, _SEGMENT)
    else:
        path = fetched[0]
        records = decode_segment(fetched[1], path=path)
    if len(records) != 2:
        raise WalCorruption(
            f"change segment has {len(records)} records, expected 2", path=path, offset=0
        )
    header = _header(records[0], path)
    body_at = len(WAL_MAGIC) + RECORD_HEADER_SIZE + len(records[0])  # record 1's start
    limit = body_limit(header.bytes, len(records[1]), what="change segment", path=path)
    check_expansion(records[1], limit=limit, what="change segment body", path=path, offset=body_at)
    if header.format == FORMAT_COMPACT:
        batch = decode_compact(records[1], schema, rows=header.rows, path=path)
    elif header.format == FORMAT_WIRE:
        batch = decode_wire(records[1], schema, rows=header.rows, path=path)
    else:
        raise WalCorruption(
            f"change segment has unknown format {header.format}", path=path, offset=0
        )
    return header, batch


def _header(record: bytes, path: str) -> SegmentHeader:
    """A change segment's header record, every field checked (an int in range)."""
    h = read_json_header(
        record, _HEADER_FIELDS, what="change segment", path=path, offset=len(WAL_MAGIC)
    )
    return SegmentHeader(
        h["version"],
        h["bucket"],
        h["schema_id"],
        h["rows"],
        h.get("format", FORMAT_WIRE),
        h.get("bytes"),
    )


def body_limit(declared: int | None, stored: int, *, what: str, path: str) -> int:
    """The most bytes a body of ``stored`` bytes may decompress to: what its header
    declares (``declared``), which must itself be within the body's
    :func:`~.bounded_ipc.expansion_limit`; that limit when the header declares nothing.

    Raises:
        WalCorruption: The header declares more than the limit.
    """
    limit = expansion_limit(stored)
    if declared is None:
        return limit
    if declared > limit:
        raise WalCorruption(
            f"{what} header declares {declared} decompressed bytes, more than the "
            f"{limit} its {stored} stored bytes may hold",
            path=path,
            offset=len(WAL_MAGIC),
        )
    return declared


def new_attempt_id() -> str:
    """A random id distinguishing commit attempts of the same version."""
    return uuid.uuid4().hex[:12]
