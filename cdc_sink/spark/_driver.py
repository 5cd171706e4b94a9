"""The sink's driver apply mode (``apply_mode="driver"``, the default; internal).

The micro-batch comes to the driver and every touched bucket is prepared in the driver's
:class:`~cdc_sink.table.Table`, whose tablets stay in memory across batches:

- :func:`prepare_in_driver`: the raw Kafka records come over (``toArrow``) and the
  vectorized decoder of the format decodes them;
- :func:`prepare_jvm_in_driver`: native JSON is decoded by Spark (``from_json``,
  :mod:`cdc_sink.spark.decode`) and the wire table comes over.

Both hand a :class:`~cdc_sink.spark._batch.PreparedBatch` back for the sink to commit.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from cdc_sink import commit
from cdc_sink.changes import ChangeBatch, Rejects
from cdc_sink.commit import PreparedBucket
from cdc_sink.errors import InvalidOption
from cdc_sink.schema import TableSchema
from cdc_sink.spark._arrow_stream import collect_arrow
from cdc_sink.spark._batch import (
    TS_SAMPLE,
    PreparedBatch,
    end_offsets,
    max_ts,
    meta_end_offsets,
    op_counts,
    sorted_rejects,
    to_change_batch,
    ts_sample,
    with_raw_bytes,
)
from cdc_sink.spark._decode_pool import PendingDecode
from cdc_sink.spark.decode import decode_native_json
from cdc_sink.table import Table, reject_records

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from cdc_sink.formats import Decoded
    from cdc_sink.spark.writer import SinkFunction

__all__ = ["prepare_buckets", "prepare_in_driver", "prepare_jvm_in_driver", "raw_columns"]


def prepare_buckets(table: Table, batch: ChangeBatch) -> tuple[int, list[PreparedBucket], Rejects]:
    """Prepares every bucket of ``batch`` in ``table`` as its next version (all rolled
    back if one fails); (version, prepared buckets, events the tablets refused)."""
    version = table.version + 1
    prepared = commit.prepare_buckets(table, version, sorted(batch.split_by_bucket().items()))
    refused = Rejects()
    for p in prepared:
        refused.extend(p.rejects())
    return version, prepared, refused


def raw_columns(df: DataFrame) -> DataFrame:
    """The Kafka source columns driver mode reads: key, value, topic, partition, offset,
    and the record timestamp in milliseconds as ``__kafka_ms``."""
    from pyspark.sql import functions as F

    return df.select(
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        F.unix_millis("timestamp").alias("__kafka_ms"),
    )


def prepare_in_driver(fn: SinkFunction, df: DataFrame, schema: TableSchema) -> PreparedBatch:
    """Raw Kafka records to the driver, decoded there by the vectorized decoder of the
    format (each Arrow batch as it arrives, while Spark still reads the others:
    :func:`~cdc_sink.spark._arrow_stream.collect_arrow`; in the sink's decode worker
    processes when it has them: :mod:`~cdc_sink.spark._decode_pool`), and prepared."""
    from cdc_sink.formats import get_decoder

    t0 = time.perf_counter()
    raw_df = raw_columns(df)
    decoder = get_decoder(fn.format, **fn.decoder_options)
    pool = fn.decode_pool
    decoding = [0.0]

    def decode(rb: pa.RecordBatch | pa.Table) -> Decoded:
        d0 = time.perf_counter()
        n = rb.num_rows
        dec = decoder.decode_with_meta(
            rb.column("value"), schema, position=np.arange(n, dtype=np.int64), keys=rb.column("key")
        )
        decoding[0] += time.perf_counter() - d0
        return dec

    def hand_over(rb: pa.RecordBatch) -> Decoded | PendingDecode:
        if pool is None:
            return decode(rb)
        return pool.submit(schema, rb.column("value"), rb.column("key"))

    got = collect_arrow(raw_df, hand_over)
    if got is None:  # no streaming collect here (Spark Connect): all rows, then decode
        table = raw_df.toArrow()
        raw, pieces = table, [(0, decode(table))]
    else:
        raw = got.table()
        sizes = np.array([b.num_rows for b in got.batches], dtype=np.int64)
        starts = (np.cumsum(sizes) - sizes).tolist()
        d0 = time.perf_counter()
        results = [r.result() if isinstance(r, PendingDecode) else r for r in got.results]
        decoding[0] += time.perf_counter() - d0  # waiting for the workers
        pieces = list(zip(starts, results, strict=True)) or [(0, decode(raw))]
    t1 = time.perf_counter()
    batch, refused, ts = _joined(pieces, raw)
    t2 = time.perf_counter()
    version, prepared, more = prepare_buckets(fn.table, batch)
    refused.extend(more)
    records = reject_records(sorted_rejects(refused), raw)
    t3 = time.perf_counter()
    step = max(1, len(ts) // TS_SAMPLE)
    return PreparedBatch(
        version,
        prepared,
        records,
        events=raw.num_rows,
        log_events=len(batch),
        offsets=end_offsets(raw.column("topic"), raw.column("partition"), raw.column("offset")),
        ops=op_counts(batch),
        phases={
            "read": t1 - t0 - decoding[0],
            "decode": t2 - t1 + decoding[0],
            "apply": t3 - t2,
        },
        max_ts_ms=int(ts.max()) if len(ts) else None,
        ts_sample=ts[::step],
    )


def _joined(
    pieces: list[tuple[int, Decoded]], raw: pa.Table
) -> tuple[ChangeBatch, Rejects, np.ndarray]:
    """The decoded pieces of a batch (each with the row of ``raw`` it starts at) as one
    batch in row order, its rejects, and each event's producer time: its own ``ts_ms``,
    else its Kafka record's timestamp."""
    from cdc_sink.formats import TS_MISSING

    batches: list[ChangeBatch] = []
    refused = Rejects()
    stamps: list[np.ndarray] = []
    for start, dec in pieces:
        b = dec.batch
        batches.append(b if start == 0 else replace(b, position=b.positions + start))
        refused.extend(Rejects(dec.rejects.positions + start, list(dec.rejects.reasons)))
        stamps.append(np.full(len(b), TS_MISSING, np.int64) if dec.ts_ms is None else dec.ts_ms)
    batch = ChangeBatch.concat(batches)
    kafka_ms = np.asarray(raw.column("__kafka_ms").to_numpy(zero_copy_only=False), np.int64)
    ts = kafka_ms[batch.positions]
    if stamps:
        own = np.concatenate(stamps)
        ts = np.where(own != TS_MISSING, own, ts)
    return batch, refused, ts


def prepare_jvm_in_driver(fn: SinkFunction, df: DataFrame, schema: TableSchema) -> PreparedBatch:
    """Native JSON decoded by Spark (``from_json``), prepared in the driver.

    Raises:
        InvalidOption: The sink has decoder options (they apply to Python decoders).
    """
    if fn.decoder_options:
        raise InvalidOption(
            "decoder options apply to the Python decoders, not to json_decoder='jvm'",
            option="decoder_options",
        )
    t0 = time.perf_counter()
    arrow = decode_native_json(df, schema).toArrow()
    t1 = time.perf_counter()
    batch, refused, meta = to_change_batch(arrow, schema)
    t2 = time.perf_counter()
    version, prepared, more = prepare_buckets(fn.table, batch)
    refused.extend(more)
    source = pa.table(
        {
            "topic": meta.column("__topic"),
            "partition": meta.column("__partition"),
            "offset": meta.column("__offset"),
        }
    )
    records = with_raw_bytes(reject_records(sorted_rejects(refused), source), df)
    t3 = time.perf_counter()
    return PreparedBatch(
        version,
        prepared,
        records,
        events=arrow.num_rows,
        log_events=arrow.num_rows,
        offsets=meta_end_offsets(meta),
        ops=op_counts(batch),
        phases={"read": t1 - t0, "decode": t2 - t1, "apply": t3 - t2},  # read: from_json
        max_ts_ms=max_ts(meta),
        ts_sample=ts_sample(meta),
    )
