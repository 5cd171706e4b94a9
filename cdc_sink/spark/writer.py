"""The Structured Streaming sink: a ``foreachBatch`` function that commits each micro-batch
of Kafka CDC events as one table version, exactly once.

    query = (spark.readStream.format("kafka").option("subscribe", topic)...load()
             .writeStream.foreachBatch(cdc_sink.spark.sink(path, schema=schema))
             .option("checkpointLocation", ckpt).start())

Per micro-batch ``(df, batch_id)``:

1. *Decide*: if the table already holds ``(app_id, batch_id)`` (a replay after a
   restart), nothing is done.
2. *Decode*: by the vectorized decoders of :mod:`cdc_sink.formats` (in the driver, or in
   ``mapInArrow`` tasks in executors mode); native JSON can instead be decoded in the JVM
   with ``json_decoder="jvm"`` (:mod:`cdc_sink.spark.decode`). Malformed events get a
   reason.
3. *Apply*: ``apply_mode="driver"`` (default) brings the wire form to the driver
   (``toArrow``) and commits through the driver's :class:`~cdc_sink.table.Table`, whose
   tablets stay in the driver's memory across batches. ``apply_mode="executors"``
   repartitions by bucket (``pmod(xxhash64(key), N)``, as Python computes it) and
   prepares each bucket in a Spark task (per-attempt WAL segment, per-worker tablet
   cache checked against the log); the driver then commits the log entry.
4. *Dead letters*: every rejected event (malformed, invalid for the schema, or refused by
   a tablet such as an update of a missing key) goes to the dead-letter sink with its
   Kafka topic/partition/offset, raw key and value, and the reason. The job goes on.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np
import pyarrow as pa

from cdc_sink.changes import ChangeBatch, Rejects
from cdc_sink.schema import TableSchema
from cdc_sink.spark.decode import META_COLUMNS, decode_native_json, wire_schema
from cdc_sink.table import PreparedBucket, Table, TableOptions, create_table, open_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["DEAD_LETTER_SCHEMA", "DeadLetterSink", "SinkFunction", "sink"]

ApplyMode = Literal["driver", "executors"]
Format = Literal["json", "debezium", "rowv2"]

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
    """What one micro-batch did (kept in ``SinkFunction.stats``)."""

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

    def freshness_ms(self) -> np.ndarray:
        """Produce-to-visible latency (ms) of a sample of the batch's events that carried
        a producer timestamp (``ts_ms``): commit time minus produce time."""
        if self.ts_sample is None:
            return np.empty(0, np.int64)
        return self.committed_ms - self.ts_sample


class SinkFunction:
    """The ``foreachBatch`` callable returned by :func:`sink`."""

    def __init__(self, path: str, *, schema: TableSchema | None, fmt: Format,
                 app_id: str, apply_mode: ApplyMode, dead_letter: DeadLetterSink | None,
                 table_options: TableOptions | None,
                 json_decoder: Literal["python", "jvm"] = "python") -> None:
        self.path = path
        self.format: Format = fmt
        self.json_decoder = json_decoder
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
        self.stats: list[BatchStats] = []
        self.dead_letters = 0
        self.on_batch: Callable[[BatchStats], None] | None = None

    # ------------------------------------------------------------------ entry point
    def __call__(self, df: DataFrame, batch_id: int) -> None:
        t0 = time.perf_counter()
        table = self.table
        if table.is_committed(self.app_id, batch_id):
            self.stats.append(BatchStats(batch_id, None, True, 0, 0))
            return
        schema = table.schema
        if self.apply_mode == "driver" and not (self.format == "json"
                                                and self.json_decoder == "jvm"):
            st = self._decode_and_apply_in_driver(df, schema, batch_id)
        elif self.apply_mode == "driver":
            st = self._apply_in_driver(self._decode(df, schema), schema, batch_id, df)
        else:
            wire = self._decode(df, schema)
            st = self._apply_in_executors(wire, schema, batch_id, df)
        st.total_s = time.perf_counter() - t0
        st.committed_ms = int(time.time() * 1000)
        self.stats.append(st)
        if self.on_batch is not None:
            self.on_batch(st)

    # ------------------------------------------------------------------ decoding
    def _decode(self, df: DataFrame, schema: TableSchema) -> DataFrame:
        if self.format == "json" and self.json_decoder == "jvm":
            return decode_native_json(df, schema)
        from functools import partial

        fn = partial(_decode_partition, fmt=self.format, schema_dict=schema.to_dict())
        from pyspark.sql import functions as F

        return df.select("value", "topic", "partition", "offset",
                         F.unix_millis("timestamp").alias("ts_ms")).mapInArrow(
            fn, wire_schema(schema))

    # ------------------------------------------------------------------ driver mode
    def _decode_and_apply_in_driver(self, df: DataFrame, schema: TableSchema,
                                    batch_id: int) -> BatchStats:
        """Raw Kafka values to the driver (``toArrow``), decoded there by the vectorized
        Python decoder of the format, then committed."""
        from pyspark.sql import functions as F

        from cdc_sink.formats import TS_MISSING, get_decoder

        t0 = time.perf_counter()
        raw = df.select("value", F.col("topic").alias("__topic"),
                        F.col("partition").alias("__partition"),
                        F.col("offset").alias("__offset"),
                        F.unix_millis("timestamp").alias("__kafka_ms")).toArrow()
        n = raw.num_rows
        dec = get_decoder(self.format).decode_with_meta(
            raw.column("value"), schema, position=np.arange(n, dtype=np.int64))
        decode_s = time.perf_counter() - t0
        batch, rejects = dec.batch, dec.rejects
        kafka_ms = np.asarray(raw.column("__kafka_ms").to_numpy(zero_copy_only=False),
                              dtype=np.int64)
        ts = kafka_ms[batch.positions]
        if dec.ts_ms is not None:
            ts = np.where(dec.ts_ms != TS_MISSING, dec.ts_ms, ts)
        meta = raw.select(["__topic", "__partition", "__offset"])
        t1 = time.perf_counter()
        res = self.table.apply(batch, app_id=self.app_id, batch_id=batch_id)
        apply_s = time.perf_counter() - t1
        rejects.extend(res.rejects)
        self._dead_letter(rejects, meta, df, batch_id)
        step = max(1, len(ts) // _TS_SAMPLE)
        return BatchStats(batch_id, res.version, res.skipped, n, len(rejects), res.counts,
                          decode_s, apply_s, max_ts_ms=int(ts.max()) if len(ts) else None,
                          ts_sample=ts[::step])

    def _apply_in_driver(self, wire: DataFrame, schema: TableSchema, batch_id: int,
                         raw: DataFrame) -> BatchStats:
        t0 = time.perf_counter()
        arrow = wire.toArrow()
        decode_s = time.perf_counter() - t0
        batch, rejects, meta = _to_change_batch(arrow, schema)
        t1 = time.perf_counter()
        res = self.table.apply(batch, app_id=self.app_id, batch_id=batch_id)
        apply_s = time.perf_counter() - t1
        rejects.extend(res.rejects)
        self._dead_letter(rejects, meta, raw, batch_id)
        return BatchStats(batch_id, res.version, res.skipped, arrow.num_rows, len(rejects),
                          res.counts, decode_s, apply_s, max_ts_ms=_max_ts(meta),
                          ts_sample=_ts_sample(meta))

    # ------------------------------------------------------------------ executors mode
    def _apply_in_executors(self, wire: DataFrame, schema: TableSchema, batch_id: int,
                            raw: DataFrame) -> BatchStats:
        from functools import partial

        from pyspark.sql import functions as F

        t0 = time.perf_counter()
        table = self.table
        version = table.version + 1
        keys = [F.col(f"`{k}`") for k in schema.primary_key]
        bucketed = wire.withColumn(
            "__bucket", F.pmod(F.xxhash64(*keys), F.lit(schema.num_buckets)).cast("int"))
        fn = partial(_prepare_partition, path=self.path, version=version,
                     schema_dict=schema.to_dict(), options=self.table_options)
        msgs = (bucketed.repartition(schema.num_buckets, "__bucket")
                .mapInArrow(fn, _MESSAGE_SCHEMA).toArrow())
        decode_s = time.perf_counter() - t0
        prepared: list[PreparedBucket] = []
        rejected: list[dict[str, Any]] = []
        events = 0
        max_ts = None
        samples = []
        for row in msgs.to_pylist():
            events += row["events"]
            samples.append(np.asarray(json.loads(row["ts_sample"]), dtype=np.int64))
            if row["max_ts_ms"] is not None:
                max_ts = max(max_ts or 0, row["max_ts_ms"])
            rejected.extend(json.loads(row["rejects"]))
            if row["segment"] is not None:
                prepared.append(PreparedBucket(
                    bucket=row["bucket"], version=version, segment=row["segment"],
                    snapshot=row["snapshot"], counts=json.loads(row["counts"]),
                    reject_positions=np.empty(0, np.int64), reject_reasons=[],
                    files=json.loads(row["files"])))
        t1 = time.perf_counter()
        try:
            res = table.commit_prepared(version, prepared, app_id=self.app_id,
                                        batch_id=batch_id, events=events)
        except BaseException:
            table.abort_prepared(version, prepared)
            raise
        apply_s = time.perf_counter() - t1
        if rejected:
            coords = pa.Table.from_pylist(rejected, schema=pa.schema([
                ("__topic", pa.string()), ("__partition", pa.int32()),
                ("__offset", pa.int64()), ("reason", pa.string())]))
            self._write_dead_letters(coords, raw, batch_id)
        counts = res.counts
        counts["rejected"] = len(rejected)
        sample = np.concatenate(samples) if samples else np.empty(0, np.int64)
        return BatchStats(batch_id, version, False, events, len(rejected), counts, decode_s,
                          apply_s, max_ts_ms=max_ts, ts_sample=sample)

    # ------------------------------------------------------------------ dead letters
    def _dead_letter(self, rejects: Rejects, meta: pa.Table, raw: DataFrame,
                     batch_id: int) -> None:
        if not len(rejects):
            return
        idx = pa.array(rejects.positions)
        coords = pa.table({
            "__topic": meta.column("__topic").take(idx),
            "__partition": meta.column("__partition").take(idx).cast(pa.int32()),
            "__offset": meta.column("__offset").take(idx).cast(pa.int64()),
            "reason": pa.array(rejects.reasons, pa.string()),
        })
        self._write_dead_letters(coords, raw, batch_id)

    def _write_dead_letters(self, coords: pa.Table, raw: DataFrame, batch_id: int) -> None:
        """Joins rejected coordinates with their raw Kafka records and writes them."""
        self.dead_letters += coords.num_rows
        if self.dead_letter is None:
            return
        spark = raw.sparkSession
        cdf = spark.createDataFrame(coords.to_pandas())
        joined = raw.join(cdf, (raw["topic"] == cdf["__topic"])
                          & (raw["partition"] == cdf["__partition"])
                          & (raw["offset"] == cdf["__offset"]))
        recs = joined.select("topic", "partition", "offset", "key", "value", "reason").toArrow()
        n = recs.num_rows
        recs = recs.append_column("batch_id", pa.array(np.full(n, batch_id, np.int64)))
        recs = recs.append_column("app_id", pa.array([self.app_id] * n, pa.string()))
        self.dead_letter.write(recs.cast(DEAD_LETTER_SCHEMA))


_MESSAGE_SCHEMA = ("bucket int, segment string, snapshot string, counts string, files string, "
                   "rejects string, events bigint, max_ts_ms bigint, ts_sample string")
_TS_SAMPLE = 20_000


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
    row indexes of ``arrow``), and the bookkeeping columns."""
    meta = arrow.select([c for c in META_COLUMNS if c in arrow.column_names])
    wire = arrow.drop_columns([c for c in arrow.column_names
                               if c in META_COLUMNS or c == "__bucket"])
    reason = meta.column("__reason").combine_chunks()
    bad = np.asarray(reason.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    positions = np.arange(arrow.num_rows, dtype=np.int64)
    good = np.flatnonzero(~bad)
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
                      schema_dict: dict[str, Any]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: Python decoding (rowv2, Debezium) into the wire form."""
    from cdc_sink.formats import get_decoder
    from cdc_sink.spark.decode import wire_arrow_schema

    schema = TableSchema.from_dict(schema_dict)
    decoder = get_decoder(fmt)
    out_schema = wire_arrow_schema(schema)
    for rb in batches:
        values = rb.column("value")
        n = rb.num_rows
        batch, rejects = decoder.decode(values, schema, position=np.arange(n, dtype=np.int64))
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
    arrow = pa.Table.from_batches(rbs)
    buckets = np.asarray(arrow.column("__bucket").to_numpy(), dtype=np.int64)
    table = _worker_table(path, options)
    for b in np.unique(buckets).tolist():
        sel = np.flatnonzero(buckets == b)
        part = arrow.take(pa.array(sel))
        batch, rejects, meta = _to_change_batch(part, schema)
        prepared = table.prepare_bucket(int(b), version, batch)
        rejects.extend(Rejects(prepared.reject_positions, prepared.reject_reasons))
        idx = pa.array(rejects.positions)
        rej = [{"__topic": t, "__partition": p, "__offset": o, "reason": r} for t, p, o, r in zip(
            meta.column("__topic").take(idx).to_pylist(),
            meta.column("__partition").take(idx).to_pylist(),
            meta.column("__offset").take(idx).to_pylist(), rejects.reasons, strict=True)]
        yield pa.RecordBatch.from_pylist([{
            "bucket": int(b), "segment": prepared.segment, "snapshot": prepared.snapshot,
            "counts": json.dumps(prepared.counts), "files": json.dumps(prepared.files),
            "rejects": json.dumps(rej), "events": part.num_rows,
            "max_ts_ms": _max_ts(meta),
            "ts_sample": json.dumps(_ts_sample(meta, _TS_SAMPLE // 8).tolist())}],
            schema=pa.schema([
                ("bucket", pa.int32()), ("segment", pa.string()), ("snapshot", pa.string()),
                ("counts", pa.string()), ("files", pa.string()), ("rejects", pa.string()),
                ("events", pa.int64()), ("max_ts_ms", pa.int64()), ("ts_sample", pa.string())]))


def sink(path: str, *, schema: TableSchema | dict[str, Any] | None = None,
         format: Format = "json", app_id: str | None = None,
         apply_mode: ApplyMode = "driver", dead_letter: DeadLetterSink | None = None,
         table_options: TableOptions | None = None,
         json_decoder: Literal["python", "jvm"] = "python"
         ) -> Callable[[DataFrame, int], None]:
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

    Returns:
        A :class:`SinkFunction` (callable ``(df, batch_id)``, with ``.table`` and
        ``.stats``).
    """
    if format not in ("json", "debezium", "rowv2"):
        raise ValueError(f"format must be json, debezium or rowv2, not {format!r}")
    if apply_mode not in ("driver", "executors"):
        raise ValueError(f"apply_mode must be 'driver' or 'executors', not {apply_mode!r}")
    if isinstance(schema, dict):
        schema = TableSchema.from_dict(schema)
    return SinkFunction(os.fspath(path), schema=schema, fmt=format,
                        app_id=app_id or f"cdc_sink:{os.path.abspath(path)}",
                        apply_mode=apply_mode, dead_letter=dead_letter,
                        table_options=table_options, json_decoder=json_decoder)
