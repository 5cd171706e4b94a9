"""Driver mode with the decode in Spark tasks (``decode_in="executors"``; internal).

Driver mode's own decode runs in the driver: the raw Kafka records come over and one
Python thread (or the sink's decode processes) decodes them, so the driver's cores bound
the stream however many executors read Kafka. Here the executors decode instead, in
parallel, exactly as executors mode does (:func:`~cdc_sink.spark._tasks.packed_in_spark`:
each task decodes its records and splits the events by bucket), and each task's events
come to the driver packed per bucket in their compact wire form
(:mod:`cdc_sink.spark._pieces`): no raw bytes and no shuffle. The driver only joins each
bucket's pieces in Kafka order and prepares the buckets in its own tablets, which stay in
its memory across batches as in plain driver mode.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from cdc_sink.batch import ChangeBatch
from cdc_sink.schema import TableSchema
from cdc_sink.spark._batch import (
    PreparedBatch,
    end_offsets,
    max_ts,
    op_counts,
    to_change_batch,
    ts_sample,
)
from cdc_sink.spark._mode import ApplyStrategy
from cdc_sink.spark._pieces import in_kafka_order, unpack
from cdc_sink.spark._tasks import packed_in_spark, rejected_records
from cdc_sink.table import Table
from cdc_sink.transaction import Transaction

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["TaskDecodeApply"]


class TaskDecodeApply(ApplyStrategy):
    """Decodes the micro-batch in Spark tasks and prepares its buckets in the driver."""

    def prepare(self, table: Table, txn: Transaction, df: DataFrame) -> PreparedBatch:
        """Decodes ``df`` in tasks, then prepares every bucket into ``txn`` here."""
        schema = txn.schema
        t0 = time.perf_counter()
        packed = packed_in_spark(self.options, df, schema).toArrow()
        t1 = time.perf_counter()
        buckets = _Buckets.of(unpack(packed.to_batches()), schema)
        t2 = time.perf_counter()
        prepared = txn.prepare(buckets.parts)
        rejected = list(buckets.rejected)
        for p in prepared:  # events the tablets refused, by their bucket's coordinates
            rejected.extend(buckets.coordinates(p.bucket, p.reject_positions, p.reject_reasons))
        records = rejected_records(rejected, df)  # a Spark join: a failure aborts txn
        t3 = time.perf_counter()
        meta = buckets.meta
        return PreparedBatch(
            records,
            events=buckets.records,
            log_events=sum(len(b) for _, b in buckets.parts),
            offsets=end_offsets(
                meta.column("__topic"), meta.column("__partition"), meta.column("__offset")
            ),
            ops=dict(buckets.ops),
            phases={"read": t1 - t0, "decode": t2 - t1, "apply": t3 - t2},  # read: Spark's
            max_ts_ms=max_ts(meta),
            ts_sample=ts_sample(meta),
        )


class _Buckets:
    """The unpacked buckets of a micro-batch, as the driver prepares them.

    Attributes:
        parts: Per bucket with accepted events (ascending), its events in Kafka order.
        rejected: The records the decoders refused, with coordinates and reason.
        records: Kafka records in the batch (a truncate counted once).
        ops: Accepted events per op name (a truncate counted once).
        meta: Every record's bookkeeping columns (a truncate's once per bucket).
    """

    def __init__(self) -> None:
        self.parts: list[tuple[int, ChangeBatch]] = []
        self.rejected: list[dict[str, Any]] = []
        self.records = 0
        self.ops: Counter[str] = Counter()
        self._metas: dict[int, pa.Table] = {}

    @classmethod
    def of(cls, rows: dict[int, pa.Table], schema: TableSchema) -> _Buckets:
        """Each bucket's unpacked ``rows`` (:func:`~cdc_sink.spark._pieces.unpack`)."""
        got = cls()
        for b in sorted(rows):
            batch, rejects, meta = to_change_batch(in_kafka_order(rows[b], schema), schema)
            got._metas[b] = meta
            ops = op_counts(batch)
            copies = ops.pop("truncate", 0) if b != 0 else 0  # counted once, in bucket 0
            got.records += meta.num_rows - copies
            got.ops.update(ops)
            got.rejected.extend(got.coordinates(b, rejects.positions, rejects.reasons))
            if len(batch):
                got.parts.append((b, batch))
        return got

    def coordinates(
        self, bucket: int, positions: np.ndarray, reasons: list[str]
    ) -> list[dict[str, Any]]:
        """The Kafka coordinates of rows ``positions`` of ``bucket``, with their reasons."""
        meta = self._metas[bucket].select(["__topic", "__partition", "__offset"])
        taken = meta.take(pa.array(positions, pa.int64())).to_pydict()
        return [
            {"topic": t, "partition": p, "offset": o, "reason": r}
            for t, p, o, r in zip(
                taken["__topic"], taken["__partition"], taken["__offset"], reasons, strict=True
            )
        ]

    @property
    def meta(self) -> pa.Table:
        """The bookkeeping columns of every bucket's records."""
        if not self._metas:
            return pa.table(
                {
                    "__topic": pa.array([], pa.string()),
                    "__partition": pa.array([], pa.int32()),
                    "__offset": pa.array([], pa.int64()),
                }
            )
        return pa.concat_tables(self._metas.values(), promote_options="default")
