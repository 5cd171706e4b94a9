"""The Structured Streaming sink: a ``foreachBatch`` function that commits each micro-batch
of Kafka CDC events as one table version, exactly once, dead letters included.

    query = (spark.readStream.format("kafka").option("subscribe", topic)...load()
             .writeStream.foreachBatch(cdc_sink.spark.sink(path, schema=schema))
             .option("checkpointLocation", ckpt).start())

Per micro-batch ``(df, batch_id)``:

1. *Decide*: if the table already holds ``(app_id, batch_id)`` (a replay after a
   restart), nothing is applied; only dead letters not yet forwarded are (step 5).
2. *Decode*: by the vectorized decoders of :mod:`cdc_sink.formats` (in the driver, or in
   ``mapInArrow`` tasks in executors mode) with the sink's ``decoder_options`` and the
   Kafka message keys; native JSON can instead be decoded in the JVM with
   ``json_decoder="jvm"`` (:mod:`cdc_sink.spark.decode`). Malformed events get a reason.
3. *Prepare*: ``apply_mode="driver"`` (default) brings the batch to the driver
   (``toArrow``) and prepares every touched bucket in the driver's
   :class:`~cdc_sink.table.Table`, whose tablets stay in memory across batches.
   ``apply_mode="executors"`` repartitions by bucket (``pmod(xxhash64(key), N)``, as
   Python computes it) and prepares each bucket in a Spark task (per-attempt WAL segment,
   per-worker tablet cache checked against the log).
4. *Commit*: the driver writes the batch's rejects (every refused event with its Kafka
   topic/partition/offset, raw key and value and the reason) into the table, then the
   log entry naming the segments, the rejects and the Kafka end offsets (of every
   partition the writer has read: those without records in the batch carried forward). The
   rejects are thus durable exactly when the version is (:meth:`Table.rejects`).
5. *Dead letters*: :func:`cdc_sink.kafka.deadletter.forward` copies the rejects of every
   committed version of this writer that the dead-letter sink does not hold yet, exactly
   once (idempotent per version; see that module). A failure here is logged and retried
   after the next batch; it never loses the rejects, which stay in the table.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np
import pyarrow as pa

from cdc_sink import commit
from cdc_sink.changes import OP_NAMES, ChangeBatch, Rejects
from cdc_sink.commit import CommitResult, PreparedBucket
from cdc_sink.errors import InvalidOption
from cdc_sink.schema import TableSchema
from cdc_sink.spark.decode import META_COLUMNS, decode_native_json, wire_schema
from cdc_sink.stats import BucketFigures
from cdc_sink.storage.rejects import REJECTS_SCHEMA, conform_rejects
from cdc_sink.table import Table, TableOptions, create_table, open_table, reject_records

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["DEAD_LETTER_SCHEMA", "BatchStats", "DeadLetterSink", "SinkFunction", "sink"]

logger = logging.getLogger(__name__)

ApplyMode = Literal["driver", "executors"]
Format = Literal["json", "debezium", "rowv2"]
BatchResult = Literal["committed", "skipped", "failed"]

DEAD_LETTER_SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
    ("key", pa.binary()), ("value", pa.binary()), ("reason", pa.string()),
    ("batch_id", pa.int64()), ("app_id", pa.string()),
])


class DeadLetterSink(Protocol):
    """Where rejected events go (``cdc_sink.kafka.deadletter`` has Kafka and Parquet)."""

    def write(self, records: pa.Table) -> None:
        """Writes records of :data:`DEAD_LETTER_SCHEMA`."""


@dataclass
class BatchStats:
    """What one micro-batch did (the last ones are kept in ``SinkFunction.stats``).

    Attributes:
        batch_id: Spark's micro-batch id.
        version: The version committed (None when skipped or failed).
        skipped: The batch was committed before (a replay).
        events: Kafka records in the batch.
        rejected: Records refused (decoder, schema or tablet), all recorded durably.
        counts: Outcome counts: inserted, updated, deleted, ignored, stale, rejected, ...
        result: ``committed``, ``skipped`` or ``failed``.
        phases: Seconds per phase: read, decode, apply, commit, dead_letters.
        ops: Accepted events per op (insert, upsert, update, delete, truncate).
        rejects_by_reason: Reject reason text -> count.
        dead_letters_forwarded: Dead letters written to the sink after this batch.
        error: One-line reason of a failed batch.
    """

    batch_id: int
    version: int | None
    skipped: bool
    events: int
    rejected: int
    counts: dict[str, int] = field(default_factory=dict)
    decode_s: float = 0.0
    apply_s: float = 0.0
    total_s: float = 0.0
    max_ts_ms: int | None = None
    committed_ms: int = 0
    ts_sample: np.ndarray | None = field(default=None, repr=False)
    result: BatchResult = "committed"
    phases: dict[str, float] = field(default_factory=dict)
    ops: dict[str, int] = field(default_factory=dict)
    rejects_by_reason: dict[str, int] = field(default_factory=dict)
    dead_letters_forwarded: int = 0
    error: str | None = None

    def freshness_ms(self) -> np.ndarray:
        """Produce-to-visible latency (ms) of a sample of the batch's events: commit time
        minus the event's ``ts_ms`` (or its Kafka record timestamp)."""
        if self.ts_sample is None:
            return np.empty(0, np.int64)
        return self.committed_ms - self.ts_sample


@dataclass
class _Outcome:
    """What the mode-specific part of a batch hands back to :meth:`SinkFunction.__call__`."""

    result: CommitResult
    events: int
    rejects: pa.Table
    ops: dict[str, int]
    phases: dict[str, float]
    max_ts_ms: int | None
    ts_sample: np.ndarray


class SinkFunction:
    """The ``foreachBatch`` callable returned by :func:`sink`."""

    def __init__(self, path: str, *, schema: TableSchema | None, fmt: Format,
                 app_id: str, apply_mode: ApplyMode, dead_letter: DeadLetterSink | None,
                 table_options: TableOptions | None,
                 json_decoder: Literal["python", "jvm"] = "python",
                 decoder_options: Mapping[str, Any] | None = None,
                 stats_limit: int = 256) -> None:
        self.path = path
        self.format: Format = fmt
        self.json_decoder = json_decoder
        self.decoder_options: dict[str, Any] = dict(decoder_options or {})
        self.app_id = app_id
        self.apply_mode: ApplyMode = apply_mode
        self.dead_letter = dead_letter
        self.table_options = table_options
        if os.path.exists(os.path.join(path, "_table.json")):
            self.table = open_table(path, options=table_options)
        elif schema is not None:
            self.table = create_table(path, schema, options=table_options)
        else:
            raise ValueError(f"no table at {path} and no schema to create it with")
        self.stats: deque[BatchStats] = deque(maxlen=stats_limit)
        self.dead_letters = 0
        """Rejects recorded by this function's commits (each is one dead letter)."""
        self.dead_letters_forwarded = 0
        self.on_batch: Callable[[BatchStats], None] | None = None
        self._forwarded: int | None = None  # every version <= this is forwarded
        self._offsets: dict[str, dict[str, int]] | None = None  # the last commit's
        self.bucket_figures: dict[int, BucketFigures] = {}
        """Executors mode: memory figures of the buckets held by executors, per bucket,
        as their tasks last reported them (for ``table.stats()`` and the metrics)."""

    # ------------------------------------------------------------------ entry point
    def __call__(self, df: DataFrame, batch_id: int) -> None:
        t0 = time.perf_counter()
        table = self.table
        if table.is_committed(self.app_id, batch_id):
            st = BatchStats(batch_id, None, True, 0, 0, result="skipped")
            st.dead_letters_forwarded, st.phases["dead_letters"] = self._forward()
            self._finish(st, t0)
            return
        schema = table.schema
        try:
            if self.apply_mode == "executors":
                out = self._run_in_executors(df, schema, batch_id)
            elif self.format == "json" and self.json_decoder == "jvm":
                out = self._run_jvm_in_driver(df, schema, batch_id)
            else:
                out = self._run_in_driver(df, schema, batch_id)
        except BaseException as exc:
            st = BatchStats(batch_id, None, False, 0, 0, result="failed",
                            error=f"{type(exc).__name__}: {exc}".splitlines()[0][:500])
            self._finish(st, t0)
            raise
        res = out.result
        counts = dict(res.counts)
        counts["rejected"] = out.rejects.num_rows
        self.dead_letters += out.rejects.num_rows
        reasons = out.rejects.column("reason").to_numpy(zero_copy_only=False)
        by_reason = dict(Counter(reasons.tolist())) if len(reasons) else {}
        st = BatchStats(batch_id, res.version, False, out.events, out.rejects.num_rows, counts,
                        out.phases.get("decode", 0.0), out.phases.get("apply", 0.0),
                        max_ts_ms=out.max_ts_ms, ts_sample=out.ts_sample,
                        phases=dict(out.phases), ops=out.ops, rejects_by_reason=by_reason)
        st.committed_ms = int(time.time() * 1000)
        st.dead_letters_forwarded, st.phases["dead_letters"] = self._forward()
        self._finish(st, t0)

    def _finish(self, st: BatchStats, t0: float) -> None:
        st.total_s = time.perf_counter() - t0
        if not st.committed_ms:
            st.committed_ms = int(time.time() * 1000)
        self.stats.append(st)
        if self.on_batch is not None:
            try:
                self.on_batch(st)
            except Exception:  # an observer never fails the stream
                logger.exception("on_batch callback failed for batch %d", st.batch_id)

    def _forward(self) -> tuple[int, float]:
        """Forwards committed rejects to the dead-letter sink; (records, seconds)."""
        if self.dead_letter is None:
            return 0, 0.0
        from cdc_sink.kafka.deadletter import forward

        t0 = time.perf_counter()
        upto = self.table.version
        try:
            n = forward(self.table, self.dead_letter, self.app_id, checked=self._forwarded)
            self._forwarded = upto
        except Exception as exc:
            logger.warning("dead letters not forwarded yet (kept in the table, retried after "
                           "the next batch): %s: %s", type(exc).__name__, exc)
            n = 0
        self.dead_letters_forwarded += n
        return n, time.perf_counter() - t0

    def gc_floor(self) -> int | None:
        """The oldest version GC must keep so that no reject is lost before it is
        forwarded (``Table.gc(keep_from=...)``): the version after the newest one this
        process knows forwarded, the table's oldest while it knows none; None without a
        dead-letter sink."""
        if self.dead_letter is None:
            return None
        if self._forwarded is None:
            return self.table.oldest_version
        return self._forwarded + 1

    def close(self) -> None:
        """Forwards what is left and closes the dead-letter sink's clients."""
        self._forward()
        close = getattr(self.dead_letter, "close", None)
        if close is not None:
            close()

    # ------------------------------------------------------------------ commit
    def _commit(self, version: int, prepared: list[PreparedBucket], rejects: pa.Table,
                batch_id: int, events: int, offsets: dict[str, dict[str, int]]
                ) -> CommitResult:
        offsets = self._all_offsets(offsets)
        try:
            res = commit.commit_prepared(self.table, version, prepared, app_id=self.app_id,
                                         batch_id=batch_id, events=events, rejects=rejects,
                                         source_offsets=offsets)
        except BaseException:
            commit.abort_prepared(self.table, version, prepared)
            raise
        self._offsets = offsets
        return res

    def _all_offsets(self, batch: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
        """The batch's end offsets with every partition this writer read before carried
        forward (a batch has records of only some partitions), so that each version's
        log entry says where the stream stood on every partition."""
        if self._offsets is None:
            self._offsets = {}
            for v in range(self.table.version, self.table.oldest_version - 1, -1):
                try:
                    entry = self.table.log.read(v)
                except Exception:  # GC took it since, or not readable: start afresh
                    break
                if entry.kind == "data" and entry.app_id == self.app_id:
                    self._offsets = entry.source_offsets
                    break
        out = {t: dict(parts) for t, parts in self._offsets.items()}
        for t, parts in batch.items():
            mine = out.setdefault(t, {})
            for p, o in parts.items():
                mine[p] = max(o, mine.get(p, o))
        return out

    def _prepare_here(self, batch: ChangeBatch) -> tuple[int, list[PreparedBucket], Rejects]:
        """Prepares every bucket of ``batch`` in the driver's table."""
        version = self.table.version + 1
        prepared: list[PreparedBucket] = []
        refused = Rejects()
        try:
            for b, part in sorted(batch.split_by_bucket().items()):
                p = commit.prepare_bucket(self.table, b, version, part)
                prepared.append(p)
                refused.extend(Rejects(np.asarray(p.reject_positions, dtype=np.int64),
                                       list(p.reject_reasons)))
        except BaseException:
            commit.abort_prepared(self.table, version, prepared)
            raise
        return version, prepared, refused

    # ------------------------------------------------------------------ driver mode
    def _run_in_driver(self, df: DataFrame, schema: TableSchema, batch_id: int) -> _Outcome:
        """Raw Kafka records to the driver (``toArrow``), decoded there by the vectorized
        decoder of the format, prepared and committed."""
        from pyspark.sql import functions as F

        from cdc_sink.formats import TS_MISSING, get_decoder

        t0 = time.perf_counter()
        raw = df.select("key", "value", "topic", "partition", "offset",
                        F.unix_millis("timestamp").alias("__kafka_ms")).toArrow()
        t1 = time.perf_counter()
        n = raw.num_rows
        dec = get_decoder(self.format, **self.decoder_options).decode_with_meta(
            raw.column("value"), schema, position=np.arange(n, dtype=np.int64),
            keys=raw.column("key"))
        batch = dec.batch
        kafka_ms = np.asarray(raw.column("__kafka_ms").to_numpy(zero_copy_only=False),
                              dtype=np.int64)
        ts = kafka_ms[batch.positions]
        if dec.ts_ms is not None:
            ts = np.where(dec.ts_ms != TS_MISSING, dec.ts_ms, ts)
        t2 = time.perf_counter()
        version, prepared, refused = self._prepare_here(batch)
        refused.extend(dec.rejects)
        records = reject_records(_sorted(refused), raw)
        t3 = time.perf_counter()
        res = self._commit(version, prepared, records, batch_id, len(batch),
                           _end_offsets(raw.column("topic"), raw.column("partition"),
                                        raw.column("offset")))
        t4 = time.perf_counter()
        step = max(1, len(ts) // _TS_SAMPLE)
        return _Outcome(res, n, records, _op_counts(batch), {
            "read": t1 - t0, "decode": t2 - t1, "apply": t3 - t2, "commit": t4 - t3},
            int(ts.max()) if len(ts) else None, ts[::step])

    def _run_jvm_in_driver(self, df: DataFrame, schema: TableSchema, batch_id: int
                           ) -> _Outcome:
        """Native JSON decoded by Spark (``from_json``), prepared in the driver."""
        if self.decoder_options:
            raise InvalidOption("decoder options apply to the Python decoders, not to "
                                "json_decoder='jvm'", option="decoder_options")
        t0 = time.perf_counter()
        arrow = decode_native_json(df, schema).toArrow()
        t1 = time.perf_counter()
        batch, refused, meta = _to_change_batch(arrow, schema)
        t2 = time.perf_counter()
        version, prepared, more = self._prepare_here(batch)
        refused.extend(more)
        refused = _sorted(refused)
        source = pa.table({"topic": meta.column("__topic"),
                           "partition": meta.column("__partition"),
                           "offset": meta.column("__offset")})
        records = _with_raw_bytes(reject_records(refused, source), df)
        t3 = time.perf_counter()
        res = self._commit(version, prepared, records, batch_id, arrow.num_rows,
                           _end_offsets(meta.column("__topic"), meta.column("__partition"),
                                        meta.column("__offset")))
        t4 = time.perf_counter()
        return _Outcome(res, arrow.num_rows, records, _op_counts(batch), {  # read: from_json
            "read": t1 - t0, "decode": t2 - t1, "apply": t3 - t2, "commit": t4 - t3},
            _max_ts(meta), _ts_sample(meta))

    # ------------------------------------------------------------------ executors mode
    def _decode_in_spark(self, df: DataFrame, schema: TableSchema) -> DataFrame:
        if self.format == "json" and self.json_decoder == "jvm":
            if self.decoder_options:
                raise InvalidOption("decoder options apply to the Python decoders, not to "
                                    "json_decoder='jvm'", option="decoder_options")
            return decode_native_json(df, schema)
        from functools import partial

        from pyspark.sql import functions as F

        fn = partial(_decode_partition, fmt=self.format, schema_dict=schema.to_dict(),
                     options=self.decoder_options)
        return df.select("key", "value", "topic", "partition", "offset",
                         F.unix_millis("timestamp").alias("ts_ms")).mapInArrow(
            fn, wire_schema(schema))

    def _run_in_executors(self, df: DataFrame, schema: TableSchema, batch_id: int
                          ) -> _Outcome:
        from functools import partial

        from pyspark.sql import functions as F

        t0 = time.perf_counter()
        table = self.table
        version = table.version + 1
        wire = self._decode_in_spark(df, schema)
        keys = [F.col(f"`{k}`") for k in schema.primary_key]
        nb = schema.num_buckets
        bucket = F.pmod(F.xxhash64(*keys), F.lit(nb)).cast("int")
        # A truncate names no key and clears every bucket: each bucket gets a copy.
        bucketed = wire.withColumn("__bucket", F.explode(
            F.when(F.col("__op") == F.lit("truncate"), F.sequence(F.lit(0), F.lit(nb - 1)))
            .otherwise(F.array(bucket))))
        fn = partial(_prepare_partition, path=self.path, version=version,
                     schema_dict=schema.to_dict(), options=self.table_options)
        msgs = (bucketed.repartition(schema.num_buckets, "__bucket")
                .mapInArrow(fn, _MESSAGE_SCHEMA).toArrow())
        prepared: list[PreparedBucket] = []
        rejected: list[dict[str, Any]] = []
        events = 0
        max_ts = None
        samples = []
        ops: Counter[str] = Counter()
        offsets: dict[str, dict[str, int]] = {}
        for row in msgs.to_pylist():  # one row per task and bucket
            events += row["events"]
            samples.append(np.asarray(json.loads(row["ts_sample"]), dtype=np.int64))
            if row["max_ts_ms"] is not None:
                max_ts = max(max_ts or 0, row["max_ts_ms"])
            rejected.extend(json.loads(row["rejects"]))
            ops.update(json.loads(row["ops"]))
            for t, parts in json.loads(row["offsets"]).items():
                mine = offsets.setdefault(t, {})
                for p, o in parts.items():
                    mine[p] = max(mine.get(p, 0), int(o))
            self.bucket_figures[row["bucket"]] = BucketFigures(**json.loads(row["figures"]))
            if row["segment"] is not None or row["snapshot"] is not None:  # bulk: no segment
                prepared.append(PreparedBucket(
                    bucket=row["bucket"], version=version, segment=row["segment"],
                    snapshot=row["snapshot"], counts=json.loads(row["counts"]),
                    reject_positions=np.empty(0, np.int64), reject_reasons=[],
                    files=json.loads(row["files"])))
        try:
            coords = pa.Table.from_pylist(rejected, schema=pa.schema([
                ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                ("reason", pa.string())]))
            coords = coords.sort_by([("topic", "ascending"), ("partition", "ascending"),
                                     ("offset", "ascending")])
            records = _with_raw_bytes(pa.table({
                "position": pa.nulls(coords.num_rows, pa.int64()),
                **{c: coords.column(c) for c in coords.column_names}}), df)
        except BaseException:
            commit.abort_prepared(table, version, prepared)
            raise
        t2 = time.perf_counter()
        res = self._commit(version, prepared, records, batch_id, events, offsets)
        t3 = time.perf_counter()
        sample = np.concatenate(samples) if samples else np.empty(0, np.int64)
        return _Outcome(res, events, records, dict(ops),
                        {"read": 0.0, "decode": 0.0, "apply": t2 - t0, "commit": t3 - t2},
                        max_ts, sample)


def _sorted(rejects: Rejects) -> Rejects:
    order = np.argsort(rejects.positions, kind="stable")
    return Rejects(rejects.positions[order], [rejects.reasons[i] for i in order.tolist()])


def _op_counts(batch: ChangeBatch) -> dict[str, int]:
    """Accepted events per op name."""
    counts = np.bincount(np.asarray(batch.op, dtype=np.int64), minlength=len(OP_NAMES))
    return {OP_NAMES[i]: int(c) for i, c in enumerate(counts.tolist()) if c}


def _end_offsets(topic: pa.ChunkedArray | pa.Array, partition: pa.ChunkedArray | pa.Array,
                 offset: pa.ChunkedArray | pa.Array) -> dict[str, dict[str, int]]:
    """Per topic and partition, the offset after the last record (vectorized group-by)."""
    if len(offset) == 0:
        return {}
    t = pa.table({"t": topic, "p": partition, "o": offset})
    g = t.group_by(["t", "p"], use_threads=False).aggregate([("o", "max")])
    out: dict[str, dict[str, int]] = {}
    for tp, p, o in zip(g.column("t").to_pylist(), g.column("p").to_pylist(),
                        g.column("o_max").to_pylist(), strict=True):
        if tp is not None and p is not None and o is not None:
            out.setdefault(tp, {})[str(p)] = int(o) + 1
    return out


def _with_raw_bytes(records: pa.Table, raw: DataFrame) -> pa.Table:
    """``records`` (rejects with Kafka coordinates) with the raw key and value bytes of
    their Kafka records, looked up in the batch's DataFrame (one small join)."""
    records = conform_rejects(records)
    if records.num_rows == 0:
        return records
    spark = raw.sparkSession
    coords = records.select(["topic", "partition", "offset"]).append_column(
        "__i", pa.array(np.arange(records.num_rows, dtype=np.int64)))
    cdf = spark.createDataFrame(coords.to_pandas()).withColumnRenamed(
        "topic", "__t").withColumnRenamed("partition", "__p").withColumnRenamed("offset", "__o")
    joined = raw.join(cdf, (raw["topic"] == cdf["__t"]) & (raw["partition"] == cdf["__p"])
                      & (raw["offset"] == cdf["__o"])).select("__i", "key", "value").toArrow()
    idx = np.full(records.num_rows, -1, dtype=np.int64)
    idx[np.asarray(joined.column("__i").to_numpy(), dtype=np.int64)] = np.arange(
        joined.num_rows)
    take = pa.array(idx, mask=idx < 0)
    key = joined.column("key").combine_chunks().take(take)
    value = joined.column("value").combine_chunks().take(take)
    cols = {f.name: records.column(f.name) for f in REJECTS_SCHEMA}
    cols["key"], cols["value"] = key, value
    return pa.table([cols[f.name] for f in REJECTS_SCHEMA], schema=REJECTS_SCHEMA)


_MESSAGE_SCHEMA = ("bucket int, segment string, snapshot string, counts string, files string, "
                   "rejects string, events bigint, max_ts_ms bigint, ts_sample string, "
                   "ops string, offsets string, figures string")
_TS_SAMPLE = 4_096


def _ts_sample(meta: pa.Table, limit: int = _TS_SAMPLE) -> np.ndarray:
    """Producer timestamps of up to ``limit`` evenly spaced events (nulls dropped)."""
    if "__ts_ms" not in meta.column_names:
        return np.empty(0, np.int64)
    col = meta.column("__ts_ms").combine_chunks().drop_null()
    ts = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.int64)
    step = max(1, len(ts) // limit)
    return ts[::step]


def _to_change_batch(arrow: pa.Table, schema: TableSchema
                     ) -> tuple[ChangeBatch, Rejects, pa.Table]:
    """Splits a decoded wire table into a validated batch, the rejects (positions are
    row indexes of ``arrow``), and the bookkeeping columns.

    A row with neither an op nor a reason was skipped on purpose by its decoder (a
    Debezium tombstone or logical-decoding message): it is neither applied nor rejected.
    """
    meta = arrow.select([c for c in META_COLUMNS if c in arrow.column_names])
    wire = arrow.drop_columns([c for c in arrow.column_names
                               if c in META_COLUMNS or c == "__bucket"])
    reason = meta.column("__reason").combine_chunks()
    bad = np.asarray(reason.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    skipped = ~bad & np.asarray(arrow.column("__op").is_null().to_numpy(zero_copy_only=False),
                                dtype=bool)
    positions = np.arange(arrow.num_rows, dtype=np.int64)
    good = np.flatnonzero(~bad & ~skipped)
    rejects = Rejects(positions[bad], [str(r) for r in reason.filter(pa.array(bad)).to_pylist()])
    batch, more = ChangeBatch.from_arrow(wire.take(pa.array(good)), schema,
                                         position=positions[good])
    rejects.extend(more)
    return batch, rejects, meta


def _max_ts(meta: pa.Table) -> int | None:
    if "__ts_ms" not in meta.column_names:
        return None
    import pyarrow.compute as pc

    v = pc.max(meta.column("__ts_ms")).as_py()
    return None if v is None else int(v)


def _decode_partition(batches: Iterator[pa.RecordBatch], *, fmt: Format,
                      schema_dict: dict[str, Any], options: dict[str, Any] | None = None
                      ) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: Python decoding into the wire form. Rows a decoder skipped on
    purpose (tombstones) get neither an op nor a reason."""
    from cdc_sink.formats import get_decoder
    from cdc_sink.spark.decode import wire_arrow_schema

    schema = TableSchema.from_dict(schema_dict)
    decoder = get_decoder(fmt, **(options or {}))
    out_schema = wire_arrow_schema(schema)
    for rb in batches:
        values = rb.column("value")
        n = rb.num_rows
        keys = rb.column("key") if "key" in rb.schema.names else None
        batch, rejects = decoder.decode(values, schema, position=np.arange(n, dtype=np.int64),
                                        keys=keys)
        wire = batch.to_arrow()
        reasons = np.full(n, None, dtype=object)
        reasons[rejects.positions] = rejects.reasons
        # Valid events keep their wire columns; rejected rows carry only a reason.
        cols: dict[str, pa.Array] = {}
        pos = pa.array(batch.positions)
        for name in out_schema.names:
            if name in wire.column_names:
                full = pa.nulls(n, wire.column(name).type)
                cols[name] = _scatter(full, pos, wire.column(name).combine_chunks())
        cols["__reason"] = pa.array(reasons.tolist(), pa.string())
        cols["__topic"] = rb.column("topic")
        cols["__partition"] = rb.column("partition")
        cols["__offset"] = rb.column("offset")
        cols["__ts_ms"] = (rb.column("ts_ms").cast(pa.int64()) if "ts_ms" in rb.schema.names
                           else pa.nulls(n, pa.int64()))
        ops = cols.get("__op")
        if ops is not None:  # int8 codes -> names (a dictionary take, no loop)
            from cdc_sink.changes import OP_NAMES

            cols["__op"] = pa.array(OP_NAMES, pa.string()).take(ops.cast(pa.int32()))
        # Every batch has the same schema, whichever columns its events happened to set.
        yield pa.RecordBatch.from_arrays(
            [cols[f.name].cast(f.type) if f.name in cols else pa.nulls(n, f.type)
             for f in out_schema], schema=out_schema)


def _scatter(target: pa.Array, positions: pa.Array, values: pa.Array) -> pa.Array:
    """``target`` with ``values`` placed at ``positions`` (others keep target's value)."""
    n = len(target)
    idx = np.full(n, len(values), dtype=np.int64)
    idx[np.asarray(positions)] = np.arange(len(values))
    return pa.concat_arrays([values.cast(target.type), target.slice(0, 1)]).take(pa.array(idx))


_WORKER_TABLES: dict[str, tuple[int, Table]] = {}


def _figures(table: Table, bucket: int) -> dict[str, int]:
    """A worker's figures of the bucket it just prepared (see :class:`BucketFigures`):
    live rows as of the last committed version (the pending one is not readable yet)."""
    t = table._tablets.get(bucket)  # the worker's own copy, pending at the new version
    if t is None:
        return {"live_rows": 0, "memory_bytes": 0, "delta_versions": 0}
    return {"live_rows": int(t.num_rows()), "memory_bytes": int(t.memory_bytes()),
            "delta_versions": int(t.delta_versions())}


def _worker_table(path: str, options: TableOptions | None) -> Table:
    """This Python worker's table (tablets cached across batches; rebuilt after fork)."""
    entry = _WORKER_TABLES.get(path)
    if entry is None or entry[0] != os.getpid():
        entry = (os.getpid(), open_table(path, options=options))
        _WORKER_TABLES[path] = entry
    return entry[1]


def _prepare_partition(batches: Iterator[pa.RecordBatch], *, path: str, version: int,
                       schema_dict: dict[str, Any], options: TableOptions | None
                       ) -> Iterator[pa.RecordBatch]:
    """mapInArrow body of executors mode: prepare every bucket present in this task."""
    schema = TableSchema.from_dict(schema_dict)
    rbs = list(batches)
    if not rbs:
        return
    # Shuffle blocks arrive in any order: apply in Kafka order, as the driver mode does.
    arrow = pa.Table.from_batches(rbs).sort_by([
        ("__topic", "ascending"), ("__partition", "ascending"), ("__offset", "ascending")])
    buckets = np.asarray(arrow.column("__bucket").to_numpy(), dtype=np.int64)
    table = _worker_table(path, options)
    for b in np.unique(buckets).tolist():
        sel = np.flatnonzero(buckets == b)
        part = arrow.take(pa.array(sel))
        batch, rejects, meta = _to_change_batch(part, schema)
        ops = _op_counts(batch)
        copies = ops.pop("truncate", 0) if b != 0 else 0  # counted once, in bucket 0
        prepared = commit.prepare_bucket(table, int(b), version, batch)
        rejects.extend(Rejects(prepared.reject_positions, prepared.reject_reasons))
        idx = pa.array(rejects.positions)
        rej = [{"topic": t, "partition": p, "offset": o, "reason": r} for t, p, o, r in zip(
            meta.column("__topic").take(idx).to_pylist(),
            meta.column("__partition").take(idx).to_pylist(),
            meta.column("__offset").take(idx).to_pylist(), rejects.reasons, strict=True)]
        yield pa.RecordBatch.from_pylist([{
            "bucket": int(b), "segment": prepared.segment, "snapshot": prepared.snapshot,
            "counts": json.dumps(prepared.counts), "files": json.dumps(prepared.files),
            "rejects": json.dumps(rej), "events": part.num_rows - copies,
            "max_ts_ms": _max_ts(meta),
            "ts_sample": json.dumps(_ts_sample(meta, _TS_SAMPLE // 8).tolist()),
            "ops": json.dumps(ops),
            "figures": json.dumps(_figures(table, int(b))),
            "offsets": json.dumps(_end_offsets(meta.column("__topic"),
                                               meta.column("__partition"),
                                               meta.column("__offset")))}],
            schema=pa.schema([
                ("bucket", pa.int32()), ("segment", pa.string()), ("snapshot", pa.string()),
                ("counts", pa.string()), ("files", pa.string()), ("rejects", pa.string()),
                ("events", pa.int64()), ("max_ts_ms", pa.int64()), ("ts_sample", pa.string()),
                ("ops", pa.string()), ("offsets", pa.string()), ("figures", pa.string())]))


def sink(path: str | os.PathLike[str], *, schema: TableSchema | dict[str, Any] | None = None,
         format: Format = "json", app_id: str | None = None,
         apply_mode: ApplyMode = "driver", dead_letter: DeadLetterSink | None = None,
         table_options: TableOptions | None = None,
         json_decoder: Literal["python", "jvm"] = "python",
         decoder_options: Mapping[str, Any] | None = None) -> SinkFunction:
    """Returns the ``foreachBatch`` function that commits Kafka CDC micro-batches.

    Args:
        path: The table (created from ``schema`` when missing).
        schema: Table schema (object or dict) used to create the table.
        format: Encoding of the Kafka values: ``json``, ``debezium`` or ``rowv2``.
        app_id: Writer id for exactly-once commits (default: derived from ``path``);
            use one per streaming query (checkpoint).
        apply_mode: ``driver`` (tablets in the driver) or ``executors`` (one task per
            bucket).
        dead_letter: Where rejected events go (None: counted only).
        table_options: In-memory, snapshot and retention options.
        json_decoder: Where native JSON is decoded: ``python`` (the vectorized decoder of
            :mod:`cdc_sink.formats`, the default: measured ~3-9x faster here) or ``jvm``
            (Spark's ``from_json``, :mod:`cdc_sink.spark.decode`).
        decoder_options: Keyword options of the format's decoder (e.g.
            ``{"decimal_handling": "string"}`` for Debezium); see
            :func:`cdc_sink.formats.get_decoder`. Checked here, before the stream starts.

    Returns:
        A :class:`SinkFunction` (callable ``(df, batch_id)``, with ``.table`` and
        ``.stats``).

    Raises:
        InvalidOption: A decoder option is unknown or has a bad value.
    """
    if format not in ("json", "debezium", "rowv2"):
        raise ValueError(f"format must be json, debezium or rowv2, not {format!r}")
    if apply_mode not in ("driver", "executors"):
        raise ValueError(f"apply_mode must be 'driver' or 'executors', not {apply_mode!r}")
    if isinstance(schema, dict):
        schema = TableSchema.from_dict(schema)
    options = dict(decoder_options or {})
    if options:
        if format == "json" and json_decoder == "jvm":
            raise InvalidOption("decoder options apply to the Python decoders, not to "
                                "json_decoder='jvm'", option="decoder_options")
        from cdc_sink.formats import get_decoder

        get_decoder(format, **options)  # raises InvalidOption naming a bad option
    return SinkFunction(os.fspath(path), schema=schema, fmt=format,
                        app_id=app_id or f"cdc_sink:{os.path.abspath(path)}",
                        apply_mode=apply_mode, dead_letter=dead_letter,
                        table_options=table_options, json_decoder=json_decoder,
                        decoder_options=options)
