"""The sink's executors apply mode (``apply_mode="executors"``; internal).

Each bucket is prepared in a Spark task, in the Python worker that runs it:

1. *decode* in Spark: Python decoders in ``mapInArrow`` tasks (:func:`_decode_partition`),
   or Spark's ``from_json`` for native JSON with ``json_decoder="jvm"``;
2. *pack*: in the same Python worker, each event gets its bucket, ``pmod(xxhash64(key),
   N)`` (a truncate, which names no key, goes to every bucket), and each decoded batch
   leaves as one Arrow IPC piece per bucket (:mod:`cdc_sink.spark._pieces`), so Spark
   shuffles a few binary values instead of converting every event into a Spark row;
3. *prepare*: repartitioned by bucket, each task prepares the buckets it holds in its
   worker's table (:func:`_prepare_partition`; a per-attempt WAL segment, tablets cached
   per worker in a :class:`~cdc_sink.spark._tables.TableCache` and checked against the
   log) and sends back one message row per bucket: the files written, counts, rejects,
   offsets and figures;
4. *collect* on the driver: the messages become the prepared buckets the sink commits,
   and the rejects get their raw Kafka bytes.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from cdc_sink import commit
from cdc_sink.changes import ChangeBatch, Rejects
from cdc_sink.commit import PreparedBucket
from cdc_sink.formats import FormatName
from cdc_sink.schema import TableSchema
from cdc_sink.spark._batch import (
    TS_SAMPLE,
    Offsets,
    PreparedBatch,
    end_offsets,
    max_ts,
    merge_offsets,
    op_counts,
    to_change_batch,
    ts_sample,
    with_raw_bytes,
)
from cdc_sink.spark._pieces import (
    PIECES_DDL,
    decoded_parts,
    gather,
    in_kafka_order,
    pack_batches,
    pack_decoded,
    unpack,
    wire_parts,
)
from cdc_sink.spark._tables import TableCache
from cdc_sink.spark.decode import decode_native_json, jvm_allow_truncate
from cdc_sink.stats import BucketFigures
from cdc_sink.table import Table, TableOptions

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from cdc_sink.spark.writer import SinkFunction

__all__ = ["packed_in_spark", "prepare_in_executors", "rejected_records"]

_log = logging.getLogger(__name__)

_TABLES = TableCache()
"""This worker's tables prepared into (tablets cached across batches; rebuilt after fork)."""

_MESSAGE = pa.schema(
    [
        ("bucket", pa.int32()),
        ("segment", pa.string()),
        ("snapshot", pa.string()),
        ("counts", pa.string()),
        ("files", pa.string()),
        ("rejects", pa.string()),
        ("events", pa.int64()),
        ("max_ts_ms", pa.int64()),
        ("ts_sample", pa.string()),
        ("ops", pa.string()),
        ("offsets", pa.string()),
        ("figures", pa.string()),
    ]
)
"""What a task sends back per bucket it prepared (JSON text for the nested parts)."""
_MESSAGE_DDL = (
    "bucket int, segment string, snapshot string, counts string, files string, "
    "rejects string, events bigint, max_ts_ms bigint, ts_sample string, "
    "ops string, offsets string, figures string"
)


# ---------------------------------------------------------------------- driver side
def prepare_in_executors(fn: SinkFunction, df: DataFrame, schema: TableSchema) -> PreparedBatch:
    """Prepares every bucket of the micro-batch in Spark tasks: where the records are read
    when the topic is bucket-partitioned (``fn.bucket_partitioned``) and the batch turns
    out aligned, else one task per bucket after a shuffle.

    Also records the figures the tasks report in ``fn.bucket_figures``.
    """
    t0 = time.perf_counter()
    table = fn.table
    version = table.version + 1
    got = _prepared_aligned(fn, df, schema, version) if _try_aligned(fn) else None
    if got is None:
        got = _prepared_shuffled(fn, df, schema, version)
    fn.bucket_figures.update(got.figures)
    try:
        records = rejected_records(got.rejected, df)
    except BaseException:
        commit.abort_prepared(table, version, got.prepared)
        raise
    t2 = time.perf_counter()
    sample = np.concatenate(got.samples) if got.samples else np.empty(0, np.int64)
    return PreparedBatch(
        version,
        got.prepared,
        records,
        events=got.events,
        log_events=got.events,
        offsets=got.offsets,
        ops=dict(got.ops),
        phases={"read": 0.0, "decode": 0.0, "apply": t2 - t0},
        max_ts_ms=got.max_ts,
        ts_sample=sample,
    )


MISALIGNED_LIMIT = 3
"""After this many misaligned batches in a row, a bucket-partitioned sink stops trying to
prepare where it reads and always shuffles (a topic that is not bucket-partitioned)."""


def _try_aligned(fn: SinkFunction) -> bool:
    return fn.bucket_partitioned and fn.misaligned_in_a_row < MISALIGNED_LIMIT


def _prepare_args(fn: SinkFunction, schema: TableSchema, version: int) -> dict[str, Any]:
    """The keyword arguments of a task that prepares buckets of ``version``."""
    return {
        "path": fn.path,
        "version": version,
        "schema_dict": schema.to_dict(),
        "options": fn.table_options,
    }


def _prepared_shuffled(
    fn: SinkFunction, df: DataFrame, schema: TableSchema, version: int
) -> _Collected:
    """Decoded and packed in Spark tasks, shuffled by bucket, one task per bucket."""
    task = partial(_prepare_partition, **_prepare_args(fn, schema, version))
    msgs = (
        packed_in_spark(fn, df, schema)
        .repartition(schema.num_buckets, "bucket")
        .mapInArrow(task, _MESSAGE_DDL)
        .toArrow()
    )
    return _collect(msgs, version)


def _prepared_aligned(
    fn: SinkFunction, df: DataFrame, schema: TableSchema, version: int
) -> _Collected | None:
    """Decoded and prepared in the tasks that read the records, with no shuffle: right
    when each bucket's events all come to one task (a bucket-partitioned topic, one Spark
    partition per Kafka partition). When a bucket was prepared in two tasks, what they
    prepared is rolled back and None returned: the caller shuffles instead."""
    jvm = fn.format == "json" and fn.json_decoder == "jvm"
    task = partial(
        _decode_prepare_partition,
        fmt=fn.format,
        jvm=jvm,
        decoder_options=fn.decoder_options,
        **_prepare_args(fn, schema, version),
    )
    src = (
        decode_native_json(df, schema, allow_truncate=jvm_allow_truncate(fn.decoder_options))
        if jvm
        else _task_input(fn, df)
    )
    got = _collect(src.mapInArrow(task, _MESSAGE_DDL).toArrow(), version)
    seen = Counter(p.bucket for p in got.prepared)
    split = sorted(b for b, n in seen.items() if n > 1)
    if not split:
        fn.misaligned_in_a_row = 0
        return got
    commit.abort_prepared(fn.table, version, got.prepared)
    fn.misaligned_batches += 1
    fn.misaligned_in_a_row += 1
    _log.warning(
        "bucket_partitioned: buckets %s of version %d came from more than one Spark task "
        "(the topic is not partitioned by bucket, a truncate, or the Kafka source split a "
        "partition); this batch is shuffled instead%s",
        split[:8],
        version,
        ""
        if fn.misaligned_in_a_row < MISALIGNED_LIMIT
        else f", and so are the next ones ({MISALIGNED_LIMIT} misaligned batches in a row)",
    )
    return None


def packed_in_spark(fn: SinkFunction, df: DataFrame, schema: TableSchema) -> DataFrame:
    """The batch decoded in Spark tasks (or by ``from_json``), packed per bucket."""
    if fn.format == "json" and fn.json_decoder == "jvm":
        allow_truncate = jvm_allow_truncate(fn.decoder_options)
        wire = decode_native_json(df, schema, allow_truncate=allow_truncate)
        return wire.mapInArrow(partial(_pack_partition, schema_dict=schema.to_dict()), PIECES_DDL)
    task = partial(
        _decode_partition, fmt=fn.format, schema_dict=schema.to_dict(), options=fn.decoder_options
    )
    return _task_input(fn, df).mapInArrow(task, PIECES_DDL)


def _task_input(fn: SinkFunction, df: DataFrame) -> DataFrame:
    """The Kafka columns a decode task reads (the key only when the decoder reads it)."""
    from pyspark.sql import functions as F

    from cdc_sink.formats import get_format

    keys = ["key"] if get_format(fn.format).decoder.reads_keys else []  # else not moved
    return df.select(
        *keys, "value", "topic", "partition", "offset", F.unix_millis("timestamp").alias("ts_ms")
    )


@dataclass
class _Collected:
    """The tasks' messages of one batch, gathered on the driver."""

    prepared: list[PreparedBucket] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    events: int = 0
    max_ts: int | None = None
    samples: list[np.ndarray] = field(default_factory=list)
    ops: Counter[str] = field(default_factory=Counter)
    offsets: Offsets = field(default_factory=dict)
    figures: dict[int, BucketFigures] = field(default_factory=dict)


def _collect(msgs: pa.Table, version: int) -> _Collected:
    """Gathers the message rows (one per task and bucket) of prepared ``version``."""
    got = _Collected()
    for row in msgs.to_pylist():
        got.events += row["events"]
        got.samples.append(np.asarray(json.loads(row["ts_sample"]), dtype=np.int64))
        if row["max_ts_ms"] is not None:
            got.max_ts = max(got.max_ts or 0, row["max_ts_ms"])
        got.rejected.extend(json.loads(row["rejects"]))
        got.ops.update(json.loads(row["ops"]))
        merge_offsets(got.offsets, json.loads(row["offsets"]))
        figures = json.loads(row["figures"])
        if figures is not None:
            got.figures[row["bucket"]] = BucketFigures(**figures)
        if row["segment"] is not None or row["snapshot"] is not None:  # bulk: no segment
            got.prepared.append(
                PreparedBucket(
                    bucket=row["bucket"],
                    version=version,
                    segment=row["segment"],
                    snapshot=row["snapshot"],
                    counts=json.loads(row["counts"]),
                    reject_positions=np.empty(0, np.int64),
                    reject_reasons=[],
                    files=json.loads(row["files"]),
                )
            )
    return got


def rejected_records(rejected: list[dict[str, Any]], df: DataFrame) -> pa.Table:
    """The tasks' rejects (Kafka coordinates and reason) as reject records in Kafka
    order, with their raw key and value bytes."""
    coords = pa.Table.from_pylist(
        rejected,
        schema=pa.schema(
            [
                ("topic", pa.string()),
                ("partition", pa.int32()),
                ("offset", pa.int64()),
                ("reason", pa.string()),
            ]
        ),
    )
    coords = coords.sort_by(
        [("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")]
    )
    return with_raw_bytes(
        pa.table(
            {
                "position": pa.nulls(coords.num_rows, pa.int64()),
                **{c: coords.column(c) for c in coords.column_names},
            }
        ),
        df,
    )


# ---------------------------------------------------------------------- task side
def _pack_partition(
    batches: Iterator[pa.RecordBatch], *, schema_dict: dict[str, Any]
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: wire rows decoded in the JVM, packed per bucket."""
    return pack_batches(batches, TableSchema.from_dict(schema_dict))


def _decode_partition(
    batches: Iterator[pa.RecordBatch],
    *,
    fmt: FormatName,
    schema_dict: dict[str, Any],
    options: dict[str, Any] | None = None,
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: Python decoding, each batch's events packed per bucket in their
    wire form (:func:`~cdc_sink.spark._pieces.pack_decoded`)."""
    for decoded in _decoded(batches, fmt, TableSchema.from_dict(schema_dict), options):
        yield from pack_decoded(*decoded)


def _decoded(
    batches: Iterator[pa.RecordBatch],
    fmt: FormatName,
    schema: TableSchema,
    options: dict[str, Any] | None,
) -> Iterator[tuple[ChangeBatch, Rejects, pa.Table]]:
    """Each Kafka batch decoded: its accepted events, its rejects and the Kafka meta rows
    (``__topic``, ``__partition``, ``__offset``, ``__ts_ms``) the positions index. Rows a
    decoder skipped on purpose (tombstones) get neither an op nor a reason."""
    from cdc_sink.formats import TS_MISSING, get_decoder

    decoder = get_decoder(fmt, **(options or {}))
    for rb in batches:
        n = rb.num_rows
        keys = rb.column("key") if "key" in rb.schema.names else None
        dec = decoder.decode_with_meta(
            rb.column("value"), schema, position=np.arange(n, dtype=np.int64), keys=keys
        )
        ts = np.full(n, TS_MISSING, dtype=np.int64)  # the Kafka record's, or the event's own
        if "ts_ms" in rb.schema.names:
            kafka_ms = rb.column("ts_ms").cast(pa.int64())
            ts = np.array(kafka_ms.fill_null(TS_MISSING).to_numpy(), dtype=np.int64)
        if dec.ts_ms is not None:
            own = dec.ts_ms != TS_MISSING
            ts[dec.batch.positions[own]] = dec.ts_ms[own]
        meta = pa.table(
            {
                "__topic": rb.column("topic"),
                "__partition": rb.column("partition"),
                "__offset": rb.column("offset"),
                "__ts_ms": pa.array(ts, pa.int64(), mask=ts == TS_MISSING),
            }
        )
        yield dec.batch, dec.rejects, meta


def _decode_prepare_partition(
    batches: Iterator[pa.RecordBatch],
    *,
    fmt: FormatName,
    jvm: bool,
    schema_dict: dict[str, Any],
    decoder_options: dict[str, Any] | None,
    path: str,
    version: int,
    options: TableOptions | None,
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body of a bucket-partitioned batch: decode (or take the wire rows of
    ``from_json`` when ``jvm``) and prepare every bucket present, in this task."""
    schema = TableSchema.from_dict(schema_dict)
    if jvm:
        parts = gather(p for rb in batches for p in wire_parts(rb, schema))
    else:
        decoded = _decoded(batches, fmt, schema, decoder_options)
        parts = gather(p for d in decoded for p in decoded_parts(*d))
    return _prepared_messages(parts, path, version, schema, options)


def _figures(table: Table, bucket: int) -> dict[str, int]:
    """A worker's figures of the bucket it just prepared (see :class:`BucketFigures`):
    live rows as of the last committed version (the pending one is not readable yet)."""
    t = commit.bucket_tablet(table, bucket)  # the worker's own copy, pending at the new version
    if t is None:
        return {"live_rows": 0, "memory_bytes": 0, "delta_versions": 0}
    return {
        "live_rows": int(t.num_rows()),
        "memory_bytes": int(t.memory_bytes()),
        "delta_versions": int(t.delta_versions()),
    }


def _prepare_partition(
    batches: Iterator[pa.RecordBatch],
    *,
    path: str,
    version: int,
    schema_dict: dict[str, Any],
    options: TableOptions | None,
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body of executors mode: prepare every bucket present in this task."""
    schema = TableSchema.from_dict(schema_dict)
    return _prepared_messages(unpack(batches), path, version, schema, options)


def _prepared_messages(
    buckets: dict[int, pa.Table],
    path: str,
    version: int,
    schema: TableSchema,
    options: TableOptions | None,
) -> Iterator[pa.RecordBatch]:
    """Prepares each bucket's wire rows in this worker's table: one message row each."""
    if not buckets:
        return
    table = _TABLES.get(path, options=options)
    for b in sorted(buckets):
        part = in_kafka_order(buckets[b], schema)
        yield pa.RecordBatch.from_pylist(
            [_prepare_bucket(table, int(b), version, part, schema)], schema=_MESSAGE
        )


def _prepare_bucket(
    table: Table, bucket: int, version: int, part: pa.Table, schema: TableSchema
) -> dict[str, Any]:
    """Prepares one bucket's events (a wire table) and returns its message row; rows
    that are all rejects prepare nothing (and report no figures: this worker may not
    hold the bucket)."""
    batch, rejects, meta = to_change_batch(part, schema)
    ops = op_counts(batch)
    copies = ops.pop("truncate", 0) if bucket != 0 else 0  # counted once, in bucket 0
    prepared = commit.prepare_bucket(table, bucket, version, batch) if len(batch) else None
    if prepared is not None:
        rejects.extend(Rejects(prepared.reject_positions, prepared.reject_reasons))
    idx = pa.array(rejects.positions)
    rej = [
        {"topic": t, "partition": p, "offset": o, "reason": r}
        for t, p, o, r in zip(
            meta.column("__topic").take(idx).to_pylist(),
            meta.column("__partition").take(idx).to_pylist(),
            meta.column("__offset").take(idx).to_pylist(),
            rejects.reasons,
            strict=True,
        )
    ]
    return {
        "bucket": bucket,
        "segment": None if prepared is None else prepared.segment,
        "snapshot": None if prepared is None else prepared.snapshot,
        "counts": json.dumps({} if prepared is None else prepared.counts),
        "files": json.dumps([] if prepared is None else prepared.files),
        "rejects": json.dumps(rej),
        "events": part.num_rows - copies,
        "max_ts_ms": max_ts(meta),
        "ts_sample": json.dumps(ts_sample(meta, TS_SAMPLE // 8).tolist()),
        "ops": json.dumps(ops),
        "figures": json.dumps(None if prepared is None else _figures(table, bucket)),
        "offsets": json.dumps(
            end_offsets(meta.column("__topic"), meta.column("__partition"), meta.column("__offset"))
        ),
    }
