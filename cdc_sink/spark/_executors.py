"""The sink's executors apply mode (``apply_mode="executors"``; internal).

Each bucket is prepared in a Spark task, in the Python worker that runs it:

1. *decode* in Spark: Python decoders in ``mapInArrow`` tasks (:mod:`cdc_sink.spark._tasks`),
   or Spark's ``from_json`` for native JSON with ``json_decoder="jvm"``;
2. *pack*: in the same Python worker, each event gets its bucket, ``pmod(xxhash64(key),
   N)`` (a truncate, which names no key, goes to every bucket), and each decoded batch
   leaves as one Arrow IPC piece per bucket (:mod:`cdc_sink.spark._pieces`), so Spark
   shuffles a few binary values instead of converting every event into a Spark row;
3. *prepare*: repartitioned by bucket, each task prepares the buckets it holds in its
   worker's table (:func:`_prepare_partition`; a per-attempt WAL segment, tablets cached
   per worker in a :class:`~cdc_sink.spark._tables.TableCache` and checked against the
   log; a table on an object store is opened once per worker with the sink's
   ``storage_options``, which travel with the task and show no value in a ``repr``) and
   sends back one message row per bucket: the files written, counts, rejects, offsets
   and figures;
4. *collect* on the driver: the messages become the prepared buckets of the sink's
   transaction (:meth:`~cdc_sink.transaction.Transaction.add_prepared`), and the rejects
   get their raw Kafka bytes.
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

from cdc_sink.batch import Rejects
from cdc_sink.engine import PreparedBucket, TableCore, core_of
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
)
from cdc_sink.spark._mode import ApplyStrategy
from cdc_sink.spark._pieces import decoded_parts, gather, in_kafka_order, unpack, wire_parts
from cdc_sink.spark._tables import TableCache
from cdc_sink.spark._tasks import decoded_batches, packed_in_spark, rejected_records, task_input
from cdc_sink.spark.decode import decode_native_json
from cdc_sink.spark.options import SinkOptions, StorageOptions
from cdc_sink.stats import BucketFigures, tablet_figures
from cdc_sink.table import Table, TableOptions
from cdc_sink.transaction import Transaction

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["MISALIGNED_LIMIT", "ExecutorsApply"]

_log = logging.getLogger(__name__)

_TABLES = TableCache(capacity=64)
"""This worker's tables prepared into (tablets cached across batches; rebuilt after fork):
up to 64, the least recently used dropped first, so that a whole-database job's tables
(:mod:`cdc_sink.spark.database`) are not reloaded by every task."""

_MESSAGE = pa.schema(
    [
        ("bucket", pa.int32()),
        ("segment", pa.string()),
        ("snapshot", pa.string()),
        ("counts", pa.string()),
        ("files", pa.string()),
        ("images", pa.string()),
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
    "images string, rejects string, events bigint, max_ts_ms bigint, ts_sample string, "
    "ops string, offsets string, figures string"
)


# ---------------------------------------------------------------------- driver side
MISALIGNED_LIMIT = 3
"""After this many misaligned batches in a row, a bucket-partitioned sink stops trying to
prepare where it reads and always shuffles (a topic that is not bucket-partitioned)."""


class ExecutorsApply(ApplyStrategy):
    """Prepares every bucket of a micro-batch in Spark tasks: where the records are read
    when the topic is bucket-partitioned (``options.bucket_partitioned``) and the batch
    turns out aligned, else one task per bucket after a shuffle.

    Attributes:
        figures: Memory figures of the buckets held by executors, per bucket, as their
            tasks last reported them (for ``table.stats()`` and the metrics).
        misaligned_batches: Bucket-partitioned batches found split across tasks (each was
            shuffled instead).
        misaligned_in_a_row: Of those, how many in a row up to the last batch.
    """

    def __init__(self, path: str, options: SinkOptions) -> None:
        super().__init__(path, options)
        self.figures: dict[int, BucketFigures] = {}
        self.misaligned_batches = 0
        self.misaligned_in_a_row = 0

    def bucket_figures(self) -> dict[int, BucketFigures]:
        """The figures the tasks last reported, per bucket."""
        return self.figures

    def prepare(self, table: Table, txn: Transaction, df: DataFrame) -> PreparedBatch:
        """Prepares the batch's buckets in tasks and adds them to ``txn``."""
        t0 = time.perf_counter()
        schema = txn.schema
        got = self._aligned(txn, df, schema) if self._try_aligned() else None
        if got is None:
            got = self._shuffled(txn, df, schema)
        self.figures.update(got.figures)
        txn.add_prepared(got.prepared)
        records = rejected_records(got.rejected, df)  # a Spark join: a failure aborts txn
        t2 = time.perf_counter()
        sample = np.concatenate(got.samples) if got.samples else np.empty(0, np.int64)
        return PreparedBatch(
            records,
            events=got.events,
            log_events=got.events,
            offsets=got.offsets,
            ops=dict(got.ops),
            phases={"read": 0.0, "decode": 0.0, "apply": t2 - t0},
            max_ts_ms=got.max_ts,
            ts_sample=sample,
        )

    def _try_aligned(self) -> bool:
        return self.options.bucket_partitioned and self.misaligned_in_a_row < MISALIGNED_LIMIT

    def _prepare_args(self, schema: TableSchema, version: int) -> dict[str, Any]:
        """The keyword arguments of a task that prepares buckets of ``version``."""
        return {
            "path": self.path,
            "version": version,
            "schema_dict": schema.to_dict(),
            "options": self.options.table,
            "storage_options": self.options.storage_options,
        }

    def _shuffled(self, txn: Transaction, df: DataFrame, schema: TableSchema) -> _Collected:
        """Decoded and packed in Spark tasks, shuffled by bucket, one task per bucket."""
        task = partial(_prepare_partition, **self._prepare_args(schema, txn.version))
        msgs = (
            packed_in_spark(self.options, df, schema)
            .repartition(schema.num_buckets, "bucket")
            .mapInArrow(task, _MESSAGE_DDL)
            .toArrow()
        )
        return _collect(msgs, txn.version)

    def _aligned(self, txn: Transaction, df: DataFrame, schema: TableSchema) -> _Collected | None:
        """Decoded and prepared in the tasks that read the records, with no shuffle: right
        when each bucket's events all come to one task (a bucket-partitioned topic, one
        Spark partition per Kafka partition). When a bucket was prepared in two tasks,
        what they prepared is rolled back and None returned: the caller shuffles instead."""
        opts = self.options
        task = partial(
            _decode_prepare_partition,
            fmt=opts.format,
            jvm=opts.jvm_json,
            decoder_options=dict(opts.decode.options),
            **self._prepare_args(schema, txn.version),
        )
        src = (
            decode_native_json(df, schema, allow_truncate=opts.allow_truncate)
            if opts.jvm_json
            else task_input(opts.format, df)
        )
        got = _collect(src.mapInArrow(task, _MESSAGE_DDL).toArrow(), txn.version)
        seen = Counter(p.bucket for p in got.prepared)
        split = sorted(b for b, n in seen.items() if n > 1)
        if not split:
            self.misaligned_in_a_row = 0
            return got
        txn.add_prepared(got.prepared)
        txn.rollback()  # removes what the tasks wrote; the transaction stays open
        self.misaligned_batches += 1
        self.misaligned_in_a_row += 1
        _log.warning(
            "bucket_partitioned: buckets %s of version %d came from more than one Spark "
            "task (the topic is not partitioned by bucket, a truncate, or the Kafka source "
            "split a partition); this batch is shuffled instead%s",
            split[:8],
            txn.version,
            ""
            if self.misaligned_in_a_row < MISALIGNED_LIMIT
            else f", and so are the next ones ({MISALIGNED_LIMIT} misaligned batches in a row)",
        )
        return None


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
                    images=row["images"],
                )
            )
    return got


# ---------------------------------------------------------------------- task side
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
    storage_options: StorageOptions | None = None,
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body of a bucket-partitioned batch: decode (or take the wire rows of
    ``from_json`` when ``jvm``) and prepare every bucket present, in this task."""
    schema = TableSchema.from_dict(schema_dict)
    if jvm:
        parts = gather(p for rb in batches for p in wire_parts(rb, schema))
    else:
        decoded = decoded_batches(batches, fmt, schema, decoder_options)
        parts = gather(p for d in decoded for p in decoded_parts(*d))
    return _prepared_messages(parts, (path, options, storage_options), version, schema)


def _prepare_partition(
    batches: Iterator[pa.RecordBatch],
    *,
    path: str,
    version: int,
    schema_dict: dict[str, Any],
    options: TableOptions | None,
    storage_options: StorageOptions | None = None,
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body of executors mode: prepare every bucket present in this task."""
    schema = TableSchema.from_dict(schema_dict)
    where = (path, options, storage_options)
    return _prepared_messages(unpack(batches), where, version, schema)


def _prepared_messages(
    buckets: dict[int, pa.Table],
    where: tuple[str, TableOptions | None, StorageOptions | None],
    version: int,
    schema: TableSchema,
) -> Iterator[pa.RecordBatch]:
    """Prepares each bucket's wire rows in this worker's table (``where``: its path or
    URL, table options and storage options): one message row each."""
    if not buckets:
        return
    path, options, storage_options = where
    table = _TABLES.get(path, options=options, storage_options=storage_options)
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
    core = core_of(table)
    prepared = core.prepare_bucket(bucket, version, batch) if len(batch) else None
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
        "images": None if prepared is None else prepared.images,
        "rejects": json.dumps(rej),
        "events": part.num_rows - copies,
        "max_ts_ms": max_ts(meta),
        "ts_sample": json.dumps(ts_sample(meta, TS_SAMPLE // 8).tolist()),
        "ops": json.dumps(ops),
        # the worker's own copy, pending at the new version: live rows as of the last
        # committed one (the pending version is not readable yet)
        "figures": json.dumps(None if prepared is None else _figures(core, bucket)),
        "offsets": json.dumps(
            end_offsets(meta.column("__topic"), meta.column("__partition"), meta.column("__offset"))
        ),
    }


def _figures(core: TableCore, bucket: int) -> dict[str, int] | None:
    """This worker's figures of its tablet of ``bucket`` (``None``: it holds none)."""
    t = core.writer_tablet(bucket)
    return None if t is None else tablet_figures(t)
