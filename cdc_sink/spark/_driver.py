"""The sink's driver apply mode (``apply_mode="driver"``, the default; internal).

The micro-batch comes to the driver and every touched bucket is prepared in the driver's
:class:`~cdc_sink.table.Table`, whose tablets stay in memory across batches:

- :class:`DriverApply`: the raw Kafka records come over (``toArrow``) and the
  vectorized decoder of the format decodes them (in the driver's thread, or in the
  mode's decode worker processes: :mod:`~cdc_sink.spark._decode_pool`);
- :class:`JvmDriverApply`: native JSON is decoded by Spark (``from_json``,
  :mod:`cdc_sink.spark.decode`) and the wire table comes over.

Both prepare the buckets into the sink's transaction and hand a
:class:`~cdc_sink.spark._batch.PreparedBatch` back for the sink to commit.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from cdc_sink.batch import ChangeBatch, Rejects
from cdc_sink.runtime import numpy_pool
from cdc_sink.spark._arrow_stream import Collected, collect_arrow
from cdc_sink.spark._batch import (
    TS_SAMPLE,
    PreparedBatch,
    end_offsets,
    max_ts,
    meta_end_offsets,
    op_counts,
    to_change_batch,
    ts_sample,
    with_raw_bytes,
)
from cdc_sink.spark._decode_pool import DecodePool, PendingDecode
from cdc_sink.spark._mode import ApplyStrategy
from cdc_sink.spark.decode import decode_native_json
from cdc_sink.spark.options import SinkOptions
from cdc_sink.storage.rejects import batch_reject_records
from cdc_sink.table import Table
from cdc_sink.transaction import Transaction
from cdc_sink.utils.cpu_gate import blocking

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from cdc_sink.formats import Decoded

__all__ = ["DriverApply", "JvmDriverApply", "raw_columns"]


def raw_columns(df: DataFrame, *extra: str) -> DataFrame:
    """The Kafka source columns driver mode reads: key, value, topic, partition, offset,
    and the record timestamp in milliseconds as ``__kafka_ms`` (then ``extra``)."""
    from pyspark.sql import functions as F

    return df.select(
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        F.unix_millis("timestamp").alias("__kafka_ms"),
        *extra,
    )


class DriverApply(ApplyStrategy):
    """Raw Kafka records to the driver, decoded there by the vectorized decoder of the
    format (each Arrow batch as it arrives, while Spark still reads the others:
    :func:`~cdc_sink.spark._arrow_stream.collect_arrow`; in decode worker processes when
    ``decode.processes`` asks for them: :mod:`~cdc_sink.spark._decode_pool`), and
    prepared in the driver's tablets.

    Attributes:
        decode_pool: The decode worker processes (None: decoding in the driver's thread).
    """

    def __init__(self, path: str, options: SinkOptions) -> None:
        super().__init__(path, options)
        n = options.decode.processes
        self.decode_pool = (
            DecodePool(n, options.format, dict(options.decode.options)) if n else None
        )

    def close(self) -> None:
        """Stops the decode worker processes."""
        if self.decode_pool is not None:
            self.decode_pool.close()

    def prepare(self, table: Table, txn: Transaction, df: DataFrame) -> PreparedBatch:
        """Decodes the batch in the driver and prepares its buckets into ``txn``."""
        from cdc_sink.formats import get_decoder

        schema = txn.schema
        t0 = time.perf_counter()
        raw_df = raw_columns(df)
        decoder = get_decoder(self.options.format, **self.options.decode.options)
        pool = self.decode_pool
        decoding = [0.0]

        def decode(rb: pa.RecordBatch | pa.Table) -> _Piece:
            d0 = time.perf_counter()
            n = rb.num_rows
            dec = decoder.decode_with_meta(
                rb.column("value"),
                schema,
                position=np.arange(n, dtype=np.int64),
                keys=rb.column("key"),
            )
            piece = _Piece.of(dec)  # split now, while Spark still reads other partitions
            decoding[0] += time.perf_counter() - d0
            return piece

        def hand_over(rb: pa.RecordBatch) -> _Piece | PendingDecode:
            if pool is None:
                return decode(rb)
            return pool.submit(schema, rb.column("value"), rb.column("key"))

        with numpy_pool.reusing():  # the decode's working arrays, batch after batch
            slices = 1 if pool is None else pool.processes
            raw, pieces = _collect_and_decode(raw_df, hand_over, decode, decoding, slices)
            t1 = time.perf_counter()
            joined = _Joined.of(pieces, raw)
        return _prepared(txn, raw, joined, t0, t1, decoding[0])

    def prepare_rows(
        self,
        txn: Transaction,
        raw: pa.Table,
        pool: DecodePool | None = None,
        decoded: tuple[Decoded, float] | None = None,
    ) -> PreparedBatch:
        """Decodes ``raw`` (a micro-batch's records already in the driver, the columns of
        :func:`raw_columns`) and prepares its buckets into ``txn``: decoded in the calling
        thread, or by a worker of ``pool`` (a router's, shared by its tables; the thread
        gives its CPU-gate slot up while it waits, :func:`~cdc_sink.utils.cpu_gate.
        blocking`). ``decoded``: ``raw`` already decoded (a router's decode shared by
        tables of one schema: :mod:`~cdc_sink.spark._shared_decode`) and the seconds it
        took, used when decoded against the transaction's schema."""
        from cdc_sink.formats import get_decoder

        t0 = time.perf_counter()
        if decoded is not None and decoded[0].batch.schema == txn.schema:
            joined = _Joined.of([(0, _Piece.of(decoded[0]))], raw)
            t1 = time.perf_counter()
            shared = decoded[1]  # its share of the shared decode, before t0
            return _prepared(txn, raw, joined, t0 - shared, t1, t1 - t0 + shared)
        if pool is not None:
            pending = pool.submit(txn.schema, raw.column("value"), raw.column("key"))
            with blocking():
                dec = pending.result()
        else:
            decoder = get_decoder(self.options.format, **self.options.decode.options)
            dec = decoder.decode_with_meta(  # no numpy_pool here: routers call it in threads
                raw.column("value"),
                txn.schema,
                position=np.arange(raw.num_rows, dtype=np.int64),
                keys=raw.column("key"),
            )
        joined = _Joined.of([(0, _Piece.of(dec))], raw)
        t1 = time.perf_counter()
        return _prepared(txn, raw, joined, t0, t1, t1 - t0)


def _prepared(
    txn: Transaction, raw: pa.Table, joined: _Joined, t0: float, t1: float, decoding: float
) -> PreparedBatch:
    """Prepares the decoded batch ``joined`` (of the records ``raw``) into ``txn``; the
    batch's figures count from ``t0``, the records in the driver at ``t1`` after
    ``decoding`` seconds of decoding."""
    t2 = time.perf_counter()
    txn.prepare(joined.parts)
    records, _ = batch_reject_records(joined.refused, txn.refused(), source=raw)
    t3 = time.perf_counter()
    ts = joined.ts
    step = max(1, len(ts) // TS_SAMPLE)
    return PreparedBatch(
        records,
        events=raw.num_rows,
        log_events=joined.events,
        offsets=end_offsets(raw.column("topic"), raw.column("partition"), raw.column("offset")),
        ops=joined.ops,
        phases={
            "read": t1 - t0 - decoding,
            "decode": t2 - t1 + decoding,
            "apply": t3 - t2,
        },
        max_ts_ms=int(ts.max()) if len(ts) else None,
        ts_sample=ts[::step],
    )


def _collect_and_decode(
    raw_df: DataFrame,
    hand_over: Callable[[pa.RecordBatch], _Piece | PendingDecode],
    decode: Callable[[pa.RecordBatch | pa.Table], _Piece],
    decoding: list[float],
    slices: int,
) -> tuple[pa.Table, list[tuple[int, _Piece]]]:
    """The micro-batch's raw records and its decoded pieces, each with the row it starts
    at (``decoding[0]`` gains the seconds spent waiting for decode workers).

    Without the streaming collect (a Spark Connect DataFrame: no JVM in this process) the
    rows come over with ``toArrow()``, and are then handed over in ``slices`` even slices
    (one per decode worker; one slice: decoded here as a whole)."""
    got = collect_arrow(raw_df, hand_over)
    if got is None:
        table = raw_df.toArrow()
        if slices <= 1 or table.num_rows < 2:
            return table, [(0, decode(table))]
        whole = table.combine_chunks().to_batches()[0]
        step = -(-table.num_rows // slices)
        batches = [whole.slice(i, step) for i in range(0, table.num_rows, step)]
        got = Collected(table.schema, batches, [hand_over(b) for b in batches])
    raw = got.table()
    sizes = np.array([b.num_rows for b in got.batches], dtype=np.int64)
    starts = (np.cumsum(sizes) - sizes).tolist()
    d0 = time.perf_counter()
    results = [_Piece.of(r.result()) if isinstance(r, PendingDecode) else r for r in got.results]
    decoding[0] += time.perf_counter() - d0  # waiting for the workers
    return raw, list(zip(starts, results, strict=True)) or [(0, decode(raw))]


@dataclass
class _Piece:
    """One decoded Arrow batch of the micro-batch, its events already split by bucket
    (the split runs as each batch arrives, not after the last one)."""

    decoded: Decoded
    parts: dict[int, ChangeBatch]

    @classmethod
    def of(cls, decoded: Decoded) -> _Piece:
        """``decoded`` and its events split by bucket."""
        return cls(decoded, decoded.batch.split_by_bucket())


@dataclass
class _Joined:
    """The decoded pieces of a micro-batch joined in row order.

    Attributes:
        parts: Per bucket touched (ascending), its events in row order.
        events: Accepted events.
        ops: Accepted events per op name.
        refused: The events the decoder refused (positions in the micro-batch).
        ts: Each accepted event's producer time: its own ``ts_ms``, else its Kafka
            record's timestamp (in row order).
    """

    parts: list[tuple[int, ChangeBatch]]
    events: int
    ops: dict[str, int]
    refused: Rejects
    ts: np.ndarray

    @classmethod
    def of(cls, pieces: list[tuple[int, _Piece]], raw: pa.Table) -> _Joined:
        """Joins ``pieces`` (each with the row of ``raw`` it starts at)."""
        from cdc_sink.formats import TS_MISSING

        kafka_ms = np.asarray(raw.column("__kafka_ms").to_numpy(zero_copy_only=False), np.int64)
        by_bucket: dict[int, list[ChangeBatch]] = {}
        refused = Rejects()
        stamps: list[np.ndarray] = []
        ops: Counter[str] = Counter()
        for start, piece in pieces:
            dec = piece.decoded
            for b, part in piece.parts.items():
                moved = part if start == 0 else replace(part, position=part.positions + start)
                by_bucket.setdefault(b, []).append(moved)
            refused.extend(Rejects(dec.rejects.positions + start, list(dec.rejects.reasons)))
            ts = kafka_ms[dec.batch.positions + start]
            if dec.ts_ms is not None:
                ts = np.where(dec.ts_ms != TS_MISSING, dec.ts_ms, ts)
            stamps.append(ts)
            ops.update(op_counts(dec.batch))
        return cls(
            parts=[(b, ChangeBatch.concat(by_bucket[b])) for b in sorted(by_bucket)],
            events=sum(len(p.decoded.batch) for _, p in pieces),
            ops=dict(ops),
            refused=refused,
            ts=np.concatenate(stamps) if stamps else np.empty(0, np.int64),
        )


class JvmDriverApply(ApplyStrategy):
    """Native JSON decoded by Spark (``from_json``), prepared in the driver's tablets."""

    def prepare(self, table: Table, txn: Transaction, df: DataFrame) -> PreparedBatch:
        """Decodes the batch with ``from_json`` and prepares its buckets into ``txn``."""
        schema = txn.schema
        t0 = time.perf_counter()
        wire = decode_native_json(df, schema, allow_truncate=self.options.allow_truncate)
        arrow = wire.toArrow()
        t1 = time.perf_counter()
        batch, refused, meta = to_change_batch(arrow, schema)
        t2 = time.perf_counter()
        txn.prepare(sorted(batch.split_by_bucket().items()))
        source = pa.table(
            {
                "topic": meta.column("__topic"),
                "partition": meta.column("__partition"),
                "offset": meta.column("__offset"),
            }
        )
        records, _ = batch_reject_records(refused, txn.refused(), source=source)
        # a Spark join: if it fails, the sink aborts the transaction
        records = with_raw_bytes(records, df)
        t3 = time.perf_counter()
        return PreparedBatch(
            records,
            events=arrow.num_rows,
            log_events=arrow.num_rows,
            offsets=meta_end_offsets(meta),
            ops=op_counts(batch),
            phases={"read": t1 - t0, "decode": t2 - t1, "apply": t3 - t2},  # read: from_json
            max_ts_ms=max_ts(meta),
            ts_sample=ts_sample(meta),
        )
