"""What both apply modes of the sink do with a micro-batch's records (internal).

- :class:`PreparedBatch`: what an apply mode hands to :class:`~cdc_sink.spark.writer.
  SinkFunction` with the transaction it prepared (the rejects, the Kafka end offsets,
  figures for :class:`~cdc_sink.spark.writer.BatchStats`);
- the Kafka *end offsets* of a batch and their merge;
- the *rejects* (merged and sorted by :func:`~cdc_sink.storage.rejects.batch_reject_records`)
  completed with the raw Kafka key and value bytes;
- the *wire table* (the wire form of :mod:`cdc_sink.batch` plus the bookkeeping columns
  of :mod:`cdc_sink.spark.decode`) split into a validated batch, rejects and bookkeeping;
- counts and producer timestamps of the accepted events.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_sink.batch import OP_NAMES, ChangeBatch, Rejects
from cdc_sink.schema import TableSchema
from cdc_sink.spark.decode import META_COLUMNS
from cdc_sink.storage.rejects import REJECTS_SCHEMA, batch_reject_records, conform_rejects

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

Offsets = dict[str, dict[str, int]]
"""Kafka offsets: topic -> partition (as a string) -> the offset after the last record."""

TS_SAMPLE = 4_096
"""How many producer timestamps of a batch are kept for its freshness figures."""


@dataclass
class PreparedBatch:
    """What an apply mode did with a micro-batch whose buckets it prepared into the
    sink's :class:`~cdc_sink.transaction.Transaction` (which holds the prepared buckets).

    Attributes:
        rejects: The batch's rejects (:data:`~cdc_sink.storage.rejects.REJECTS_SCHEMA`).
        events: Kafka records in the batch.
        log_events: Events the version's log entry records.
        offsets: Per topic and partition, the offset after the batch's last record.
        ops: Accepted events per op name.
        phases: Seconds per phase so far (read, decode, apply).
        max_ts_ms: The newest producer timestamp of the batch.
        ts_sample: Producer timestamps of a sample of the batch's events.
    """

    rejects: pa.Table
    events: int
    log_events: int
    offsets: Offsets
    ops: dict[str, int]
    phases: dict[str, float]
    max_ts_ms: int | None
    ts_sample: np.ndarray


# ---------------------------------------------------------------------- offsets
def end_offsets(
    topic: pa.ChunkedArray | pa.Array,
    partition: pa.ChunkedArray | pa.Array,
    offset: pa.ChunkedArray | pa.Array,
) -> Offsets:
    """Per topic and partition, the offset after the last record (vectorized group-by)."""
    if len(offset) == 0:
        return {}
    one = _one_partition(topic, partition, offset)
    if one is not None:
        return one
    t = pa.table({"t": topic, "p": partition, "o": offset})
    g = t.group_by(["t", "p"], use_threads=False).aggregate([("o", "max")])
    out: Offsets = {}
    for tp, p, o in zip(
        g.column("t").to_pylist(),
        g.column("p").to_pylist(),
        g.column("o_max").to_pylist(),
        strict=True,
    ):
        if tp is not None and p is not None and o is not None:
            out.setdefault(tp, {})[str(p)] = int(o) + 1
    return out


def _one_partition(
    topic: pa.ChunkedArray | pa.Array,
    partition: pa.ChunkedArray | pa.Array,
    offset: pa.ChunkedArray | pa.Array,
) -> Offsets | None:
    """:func:`end_offsets` of records of one topic-partition without nulls (most tables'
    share of a batch), in numpy; None for any other records."""
    if topic.null_count or partition.null_count or offset.null_count:
        return None
    p = np.asarray(partition.to_numpy(), dtype=np.int64)
    if not (p == p[0]).all() or len(pc.unique(topic)) != 1:
        return None
    o = np.asarray(offset.to_numpy(), dtype=np.int64)
    return {str(topic[0].as_py()): {str(int(p[0])): int(o.max()) + 1}}


def merge_offsets(into: Offsets, more: Mapping[str, Mapping[str, int]]) -> Offsets:
    """Adds ``more`` to ``into`` (in place), keeping the larger offset of a partition."""
    for t, parts in more.items():
        mine = into.setdefault(t, {})
        for p, o in parts.items():
            mine[p] = max(int(o), mine.get(p, int(o)))
    return into


# ---------------------------------------------------------------------- rejects
def with_raw_bytes(records: pa.Table, raw: DataFrame) -> pa.Table:
    """``records`` (rejects with Kafka coordinates) with the raw key and value bytes of
    their Kafka records, looked up in the batch's DataFrame (one small join)."""
    records = conform_rejects(records)
    if records.num_rows == 0:
        return records
    spark = raw.sparkSession
    coords = records.select(["topic", "partition", "offset"]).append_column(
        "__i", pa.array(np.arange(records.num_rows, dtype=np.int64))
    )
    cdf = (
        spark.createDataFrame(coords.to_pandas())
        .withColumnRenamed("topic", "__t")
        .withColumnRenamed("partition", "__p")
        .withColumnRenamed("offset", "__o")
    )
    joined = (
        raw.join(
            cdf,
            (raw["topic"] == cdf["__t"])
            & (raw["partition"] == cdf["__p"])
            & (raw["offset"] == cdf["__o"]),
        )
        .select("__i", "key", "value")
        .toArrow()
    )
    idx = np.full(records.num_rows, -1, dtype=np.int64)
    idx[np.asarray(joined.column("__i").to_numpy(), dtype=np.int64)] = np.arange(joined.num_rows)
    take = pa.array(idx, mask=idx < 0)
    key = joined.column("key").combine_chunks().take(take)
    value = joined.column("value").combine_chunks().take(take)
    cols = {f.name: records.column(f.name) for f in REJECTS_SCHEMA}
    cols["key"], cols["value"] = key, value
    return pa.table([cols[f.name] for f in REJECTS_SCHEMA], schema=REJECTS_SCHEMA)


# ---------------------------------------------------------------------- wire tables
def to_change_batch(arrow: pa.Table, schema: TableSchema) -> tuple[ChangeBatch, Rejects, pa.Table]:
    """Splits a decoded wire table into a validated batch, the rejects (positions are
    row indexes of ``arrow``), and the bookkeeping columns.

    A row with neither an op nor a reason was skipped on purpose by its decoder (a
    Debezium tombstone or logical-decoding message): it is neither applied nor rejected.
    """
    meta = arrow.select([c for c in META_COLUMNS if c in arrow.column_names])
    wire = arrow.drop_columns(
        [c for c in arrow.column_names if c in META_COLUMNS or c == "__bucket"]
    )
    reason = meta.column("__reason").combine_chunks()
    bad = np.asarray(reason.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    skipped = ~bad & np.asarray(
        arrow.column("__op").is_null().to_numpy(zero_copy_only=False), dtype=bool
    )
    positions = np.arange(arrow.num_rows, dtype=np.int64)
    good = np.flatnonzero(~bad & ~skipped)
    rejects = Rejects(positions[bad], [str(r) for r in reason.filter(pa.array(bad)).to_pylist()])
    accepted = wire if len(good) == arrow.num_rows else wire.take(pa.array(good))
    batch, more = ChangeBatch.from_arrow(accepted, schema, position=positions[good])
    rejects.extend(more)
    return batch, rejects, meta


def meta_end_offsets(meta: pa.Table) -> Offsets:
    """:func:`end_offsets` of a wire table's bookkeeping columns."""
    return end_offsets(meta.column("__topic"), meta.column("__partition"), meta.column("__offset"))


# ---------------------------------------------------------------------- figures
def op_counts(batch: ChangeBatch) -> dict[str, int]:
    """Accepted events per op name."""
    counts = np.bincount(np.asarray(batch.op, dtype=np.int64), minlength=len(OP_NAMES))
    return {OP_NAMES[i]: int(c) for i, c in enumerate(counts.tolist()) if c}


def ts_sample(meta: pa.Table, limit: int = TS_SAMPLE) -> np.ndarray:
    """Producer timestamps of up to ``limit`` evenly spaced events (nulls dropped)."""
    if "__ts_ms" not in meta.column_names:
        return np.empty(0, np.int64)
    col = meta.column("__ts_ms").combine_chunks().drop_null()
    ts = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.int64)
    step = max(1, len(ts) // limit)
    return ts[::step]


def max_ts(meta: pa.Table) -> int | None:
    """The newest producer timestamp of a wire table's events (None without any)."""
    if "__ts_ms" not in meta.column_names:
        return None
    import pyarrow.compute as pc

    v = pc.max(meta.column("__ts_ms")).as_py()
    return None if v is None else int(v)


def rejected_batch(raw: pa.Table, reasons: str | Sequence[str]) -> PreparedBatch:
    """A micro-batch whose every record (``raw``: driver mode's raw columns, with
    ``key``, ``value``, ``topic``, ``partition`` and ``offset``) is refused, for
    ``reasons`` (one for all, or one per record): nothing is prepared, the version stores
    the records as its rejects."""
    n = raw.num_rows
    texts = [reasons] * n if isinstance(reasons, str) else list(reasons)
    refused = Rejects(np.arange(n, dtype=np.int64), texts)
    records, _ = batch_reject_records(refused, source=raw)
    return PreparedBatch(
        records,
        events=n,
        log_events=0,
        offsets=end_offsets(raw.column("topic"), raw.column("partition"), raw.column("offset")),
        ops={},
        phases={},
        max_ts_ms=None,
        ts_sample=np.empty(0, np.int64),
    )


def with_refused(prepared: PreparedBatch, refused: pa.Table, reason: str) -> PreparedBatch:
    """``prepared`` (of the records of a batch that were applied) with the batch's other
    records, ``refused``, refused for ``reason``: their rejects follow the batch's
    (positions after its records), and the batch's end offsets and event count include
    them."""
    more = rejected_batch(refused, reason)
    shifted = more.rejects.set_column(
        0, "position", pc.add(more.rejects.column("position"), prepared.events)
    )
    return PreparedBatch(
        pa.concat_tables([prepared.rejects, shifted]),
        events=prepared.events + more.events,
        log_events=prepared.log_events,
        offsets=merge_offsets({t: dict(p) for t, p in prepared.offsets.items()}, more.offsets),
        ops=prepared.ops,
        phases=prepared.phases,
        max_ts_ms=prepared.max_ts_ms,
        ts_sample=prepared.ts_sample,
    )
