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
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from cdc_sink import commit
from cdc_sink.changes import ChangeBatch, Rejects
from cdc_sink.commit import PreparedBucket
from cdc_sink.errors import InvalidOption
from cdc_sink.schema import TableSchema
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
from cdc_sink.spark.decode import decode_native_json
from cdc_sink.table import Table, reject_records

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from cdc_sink.spark.writer import SinkFunction

__all__ = ["prepare_buckets", "prepare_in_driver", "prepare_jvm_in_driver"]


def prepare_buckets(table: Table, batch: ChangeBatch) -> tuple[int, list[PreparedBucket], Rejects]:
    """Prepares every bucket of ``batch`` in ``table`` as its next version (all rolled
    back if one fails); (version, prepared buckets, events the tablets refused)."""
    version = table.version + 1
    prepared: list[PreparedBucket] = []
    refused = Rejects()
    try:
        for b, part in sorted(batch.split_by_bucket().items()):
            p = commit.prepare_bucket(table, b, version, part)
            prepared.append(p)
            refused.extend(
                Rejects(np.asarray(p.reject_positions, dtype=np.int64), list(p.reject_reasons))
            )
    except BaseException:
        commit.abort_prepared(table, version, prepared)
        raise
    return version, prepared, refused


def prepare_in_driver(fn: SinkFunction, df: DataFrame, schema: TableSchema) -> PreparedBatch:
    """Raw Kafka records to the driver (``toArrow``), decoded there by the vectorized
    decoder of the format, and prepared."""
    from pyspark.sql import functions as F

    from cdc_sink.formats import TS_MISSING, get_decoder

    t0 = time.perf_counter()
    raw = df.select(
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        F.unix_millis("timestamp").alias("__kafka_ms"),
    ).toArrow()
    t1 = time.perf_counter()
    n = raw.num_rows
    dec = get_decoder(fn.format, **fn.decoder_options).decode_with_meta(
        raw.column("value"), schema, position=np.arange(n, dtype=np.int64), keys=raw.column("key")
    )
    batch = dec.batch
    # Each event's producer time: its own ts_ms, else its Kafka record's timestamp.
    kafka_ms = np.asarray(raw.column("__kafka_ms").to_numpy(zero_copy_only=False), dtype=np.int64)
    ts = kafka_ms[batch.positions]
    if dec.ts_ms is not None:
        ts = np.where(dec.ts_ms != TS_MISSING, dec.ts_ms, ts)
    t2 = time.perf_counter()
    version, prepared, refused = prepare_buckets(fn.table, batch)
    refused.extend(dec.rejects)
    records = reject_records(sorted_rejects(refused), raw)
    t3 = time.perf_counter()
    step = max(1, len(ts) // TS_SAMPLE)
    return PreparedBatch(
        version,
        prepared,
        records,
        events=n,
        log_events=len(batch),
        offsets=end_offsets(raw.column("topic"), raw.column("partition"), raw.column("offset")),
        ops=op_counts(batch),
        phases={"read": t1 - t0, "decode": t2 - t1, "apply": t3 - t2},
        max_ts_ms=int(ts.max()) if len(ts) else None,
        ts_sample=ts[::step],
    )


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
