"""Wire rows packed per bucket, for the shuffle of executors mode (internal).

A decode task does not hand Spark its decoded rows one by one: converting ~50 columns
per event into Spark rows, shuffling them and converting them back into Arrow for the
task that prepares the bucket cost more than the decode itself. Instead each decoded
Arrow batch leaves the Python worker as one row per bucket it holds, ``(bucket, piece)``,
where ``piece`` is that bucket's rows as an Arrow IPC stream. Spark then shuffles a few
large binary values per batch (a byte copy), and the preparing task reads the pieces
back without conversion.

A piece holds wire rows (the wire form of :mod:`cdc_sink.batch`, plus the
bookkeeping columns ``__reason``, ``__topic``, ``__partition``, ``__offset`` and
``__ts_ms``); the pieces of one bucket may have different columns (a batch's wire form
carries only the value columns its events set), and :func:`unpack` joins them with the
missing columns as nulls. Rows a decoder rejected or skipped travel, with their reason
and coordinates only, in a piece of bucket 0.

The bucket of a row is Spark's ``pmod(xxhash64(key columns), num_buckets)``, computed as
driver mode computes it (:func:`cdc_sink.bucketing.bucket_ids`, nulls skipped as Spark
skips them); a truncate names no key and clears every bucket, so every bucket gets it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_sink.batch import ChangeBatch, Rejects
from cdc_sink.bucketing import bucket_ids
from cdc_sink.schema import TableSchema

__all__ = [
    "PIECES_DDL",
    "decoded_parts",
    "gather",
    "in_kafka_order",
    "pack",
    "pack_batches",
    "pack_decoded",
    "unpack",
    "wire_parts",
]

PIECES_DDL = "bucket int, piece binary"
"""Spark DDL of the packed rows."""

PIECES = pa.schema([("bucket", pa.int32()), ("piece", pa.binary())])
"""Arrow schema of the packed rows."""

_PIECE_BYTES = 256 << 20
"""Wire bytes per piece at most (so that a batch's binary offsets stay in int32)."""


def _row_buckets(rb: pa.RecordBatch, schema: TableSchema) -> dict[int, np.ndarray]:
    """Row indexes of ``rb`` per bucket, in row order (a truncate in every bucket)."""
    nb = schema.num_buckets
    n = rb.num_rows
    if nb == 1:
        return {0: np.arange(n, dtype=np.int64)} if n else {}
    buckets = bucket_ids([rb.column(k) for k in schema.primary_key], nb).astype(np.int64)
    truncate = pc.fill_null(pc.equal(rb.column("__op"), "truncate"), False)
    is_truncate = np.asarray(truncate.to_numpy(zero_copy_only=False), dtype=bool)
    if is_truncate.any():
        buckets[is_truncate] = -1
    order = np.argsort(buckets, kind="stable")
    bounds = np.flatnonzero(np.diff(buckets[order])) + 1
    rows = {int(buckets[c[0]]): c for c in np.split(order, bounds) if len(c)}
    truncates = rows.pop(-1, None)
    if truncates is None:
        return rows
    empty = np.empty(0, np.int64)
    return {b: np.sort(np.concatenate([rows.get(b, empty), truncates])) for b in range(nb)}


def _chunks(part: pa.Table | pa.RecordBatch) -> Iterator[pa.Table | pa.RecordBatch]:
    """``part`` in slices of at most about :data:`_PIECE_BYTES` wire bytes."""
    size = part.get_total_buffer_size()
    slices = max(1, -(-size // _PIECE_BYTES))
    step = max(1, -(-part.num_rows // slices))
    for lo in range(0, part.num_rows, step):
        yield part.slice(lo, step)


def pack(rb: pa.RecordBatch, schema: TableSchema) -> Iterator[pa.RecordBatch]:
    """The wire rows of ``rb`` as packed rows, one per bucket (more for huge pieces)."""
    return _serialized(wire_parts(rb, schema))


def wire_parts(rb: pa.RecordBatch, schema: TableSchema) -> list[tuple[int, pa.RecordBatch]]:
    """The wire rows of ``rb`` per bucket, ``(bucket, rows)``, in row order."""
    return [(b, rb.take(pa.array(rows))) for b, rows in _row_buckets(rb, schema).items()]


def pack_decoded(batch: ChangeBatch, rejects: Rejects, meta: pa.Table) -> Iterator[pa.RecordBatch]:
    """A decoded batch as packed rows (:func:`decoded_parts`, serialized)."""
    return _serialized(decoded_parts(batch, rejects, meta))


def decoded_parts(
    batch: ChangeBatch, rejects: Rejects, meta: pa.Table
) -> list[tuple[int, pa.Table]]:
    """A decoded batch per bucket, ``(bucket, wire rows)``: each bucket's events in their
    wire form, then the rows the decoder did not accept (rejected, with a reason, or
    skipped) in bucket 0.

    Args:
        batch: The accepted events; their positions are row indexes of ``meta``.
        rejects: The rejected events (positions are row indexes of ``meta``).
        meta: One row per decoded record: ``__topic``, ``__partition``, ``__offset`` and
            ``__ts_ms``.
    """
    parts = _bucket_parts(batch, meta)
    n = meta.num_rows
    rest = np.ones(n, dtype=bool)
    rest[batch.positions] = False
    if rest.any():
        reasons = np.full(n, None, dtype=object)
        reasons[rejects.positions] = rejects.reasons
        idx = np.flatnonzero(rest)
        others = meta.take(pa.array(idx)).append_column(
            "__reason", pa.array(reasons[idx].tolist(), pa.string())
        )
        parts.append((0, others))
    return parts


def _bucket_parts(batch: ChangeBatch, meta: pa.Table) -> list[tuple[int, pa.Table]]:
    """Each bucket's events of ``batch`` in their wire form with their ``meta`` rows, in
    event order: one ``take`` of the whole batch in bucket order, then a zero-copy slice
    per bucket (a bucket's slice may carry a column none of its events sets, all
    ``__set__`` false, which reads back as absent). A batch with truncates, which go to
    every bucket, is split event by event instead."""
    if batch.has_truncate:
        return [(b, _with_meta(part, meta)) for b, part in batch.split_by_bucket().items()]
    if not len(batch):
        return []
    wire = _with_meta(batch, meta)
    nb = batch.schema.num_buckets
    if nb == 1:
        return [(0, wire)]
    buckets = batch.bucket_ids()
    order = np.argsort(buckets, kind="stable")
    counts = np.bincount(buckets, minlength=nb)
    starts = np.concatenate([[0], np.cumsum(counts)])
    grouped = wire.take(pa.array(order))
    return [(b, grouped.slice(int(starts[b]), int(counts[b]))) for b in range(nb) if counts[b]]


def _with_meta(batch: ChangeBatch, meta: pa.Table) -> pa.Table:
    """The wire form of ``batch`` with the ``meta`` rows of its events appended."""
    wire = batch.to_arrow()
    pos = batch.positions
    in_order = len(pos) == meta.num_rows and bool((pos == np.arange(len(pos))).all())
    taken = meta if in_order else meta.take(pa.array(pos))
    for name in meta.column_names:
        wire = wire.append_column(name, taken.column(name))
    return wire


def _serialized(parts: Iterable[tuple[int, pa.Table | pa.RecordBatch]]) -> Iterator[pa.RecordBatch]:
    """Each ``(bucket, rows)`` of ``parts`` as one IPC piece (more for huge rows), packed."""
    stream = pa.BufferOutputStream()
    buckets: list[int] = []
    offsets = [0]
    for b, rows in parts:
        for piece in _chunks(rows):
            with pa.ipc.new_stream(stream, piece.schema) as writer:
                writer.write(piece)
            buckets.append(b)
            offsets.append(stream.tell())
            if stream.tell() > _PIECE_BYTES:  # flush before the offsets could overflow
                yield _packed(buckets, offsets, stream.getvalue())
                stream, buckets, offsets = pa.BufferOutputStream(), [], [0]
    if buckets:
        yield _packed(buckets, offsets, stream.getvalue())


def _packed(buckets: list[int], offsets: list[int], data: pa.Buffer) -> pa.RecordBatch:
    piece = pa.BinaryArray.from_buffers(
        pa.binary(), len(buckets), [None, pa.array(offsets, pa.int32()).buffers()[1], data]
    )
    return pa.RecordBatch.from_arrays([pa.array(buckets, pa.int32()), piece], schema=PIECES)


def pack_batches(
    batches: Iterable[pa.RecordBatch], schema: TableSchema
) -> Iterator[pa.RecordBatch]:
    """:func:`pack` of every batch (a ``mapInArrow`` body for wire rows decoded in the JVM)."""
    for rb in batches:
        yield from pack(rb, schema)


def unpack(batches: Iterable[pa.RecordBatch]) -> dict[int, pa.Table]:
    """The wire rows of every bucket in packed ``batches``, in the order they came.

    Zero-copy: the tables' buffers are slices of the packed batches'.
    """
    return gather(_unpacked(batches))


def _unpacked(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[int, pa.Table]]:
    for rb in batches:
        if rb.num_rows == 0:
            continue
        pieces = rb.column("piece")
        offsets = np.frombuffer(pieces.buffers()[1], np.int32)[
            pieces.offset : pieces.offset + len(pieces) + 1
        ]
        data = pieces.buffers()[2]
        for i, b in enumerate(rb.column("bucket").to_pylist()):
            buf = data.slice(int(offsets[i]), int(offsets[i + 1] - offsets[i]))
            yield int(b), pa.ipc.open_stream(buf).read_all()


def gather(parts: Iterable[tuple[int, pa.Table | pa.RecordBatch]]) -> dict[int, pa.Table]:
    """The wire rows of ``parts`` joined per bucket, in the order they came (columns a
    part lacks are nulls)."""
    got: dict[int, list[pa.Table]] = defaultdict(list)
    for b, rows in parts:
        got[b].append(rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows]))
    return {b: pa.concat_tables(ts, promote_options="default") for b, ts in got.items()}


def in_kafka_order(rows: pa.Table, schema: TableSchema) -> pa.Table:
    """One bucket's unpacked rows as :func:`~cdc_sink.spark._batch.to_change_batch` takes
    them: in Kafka order (shuffle blocks arrive in any order), with the ``__op``, key and
    ``__reason`` columns even when every piece lacked them (a bucket that got only
    rejects, or no reject)."""
    needed = [("__op", pa.int8()), ("__reason", pa.string())]
    needed += [(k.name, k.type) for k in schema.key_columns]
    for name, type_ in needed:
        if name not in rows.column_names:
            rows = rows.append_column(name, pa.nulls(rows.num_rows, type_))
    order = _kafka_order(rows)
    return rows if order is None else rows.take(order)


def _kafka_order(rows: pa.Table) -> pa.Array | np.ndarray | None:
    """The row order that sorts ``rows`` by topic, partition and offset (None: they are
    in that order already, as they mostly come)."""
    keys = ("__topic", "__partition", "__offset")
    if rows.num_rows < 2:
        return None
    topic, partition, offset = (rows.column(c) for c in keys)
    if (
        any(c.null_count for c in (topic, partition, offset))
        or pc.count_distinct(topic).as_py() > 1
    ):
        return pc.sort_indices(rows, [(c, "ascending") for c in keys])
    p = np.asarray(partition.to_numpy(), dtype=np.int64)
    o = np.asarray(offset.to_numpy(), dtype=np.int64)
    dp = np.diff(p)
    if ((dp > 0) | ((dp == 0) & (np.diff(o) >= 0))).all():
        return None
    return np.lexsort((o, p))
