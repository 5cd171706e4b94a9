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
   :class:`~cdc_sink.table.Table`, whose tablets stay in memory across batches
   (:mod:`cdc_sink.spark._driver`).
   ``apply_mode="executors"`` repartitions by bucket (``pmod(xxhash64(key), N)``, as
   Python computes it) and prepares each bucket in a Spark task (per-attempt WAL segment,
   per-worker tablet cache checked against the log; :mod:`cdc_sink.spark._executors`).
4. *Commit*: the driver writes the batch's rejects (every refused event with its Kafka
   topic/partition/offset, raw key and value and the reason) into the table, then the
   log entry naming the segments, the rejects and the Kafka end offsets (of every
   partition the writer has read: those without records in the batch carried forward). The
   rejects are thus durable exactly when the version is (:meth:`Table.rejects`).
5. *Dead letters*: :func:`cdc_sink.kafka.deadletter.forward` copies the rejects of every
   committed version of this writer that the dead-letter sink does not hold yet, exactly
   once (idempotent per version; see that module). A failure here is logged and retried
   after the next batch; it never loses the rejects, which stay in the table.

The commit protocol behind steps 3-4 is described in docs/architecture.md §4.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args

import numpy as np
import pyarrow as pa

from cdc_sink import commit
from cdc_sink.commit import CommitResult
from cdc_sink.errors import InvalidArgument, InvalidOption
from cdc_sink.formats import FORMATS, FormatName
from cdc_sink.schema import TableSchema
from cdc_sink.spark._batch import Offsets, PreparedBatch, merge_offsets
from cdc_sink.spark._decode_pool import DecodePool
from cdc_sink.spark._driver import prepare_in_driver, prepare_jvm_in_driver
from cdc_sink.spark._executors import prepare_in_executors
from cdc_sink.spark._task_decode import prepare_decoded_in_tasks
from cdc_sink.spark.decode import jvm_allow_truncate
from cdc_sink.stats import BucketFigures
from cdc_sink.storage.layout import is_table
from cdc_sink.table import Table, TableOptions, create_table, open_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "DEAD_LETTER_SCHEMA",
    "ApplyMode",
    "BatchStats",
    "DeadLetterSink",
    "DecodeIn",
    "JsonDecoder",
    "SinkFunction",
    "sink",
]

logger = logging.getLogger(__name__)

ApplyMode = Literal["driver", "executors"]
"""Where the buckets of a micro-batch are prepared: in the driver or in Spark tasks."""
DecodeIn = Literal["driver", "executors"]
"""Where driver mode decodes the Kafka values: in the driver or in Spark tasks."""
JsonDecoder = Literal["python", "jvm"]
"""Where native JSON is decoded: by :mod:`cdc_sink.formats` or by Spark's ``from_json``."""
BatchResult = Literal["committed", "skipped", "failed"]
_APPLY_MODES: tuple[ApplyMode, ...] = get_args(ApplyMode)
_DECODE_IN: tuple[DecodeIn, ...] = get_args(DecodeIn)

DEAD_LETTER_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("reason", pa.string()),
        ("batch_id", pa.int64()),
        ("app_id", pa.string()),
    ]
)


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
        decode_s: Seconds spent decoding (``phases["decode"]``).
        apply_s: Seconds spent preparing the buckets (``phases["apply"]``).
        total_s: Seconds of the whole batch, dead letters included.
        max_ts_ms: The newest producer timestamp (ms) of the batch's events.
        committed_ms: When the version became visible (ms since the epoch).
        ts_sample: Producer timestamps (ms) of a sample of the events (see
            :meth:`freshness_ms`).
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


class SinkFunction:
    """The ``foreachBatch`` callable returned by :func:`sink`: ``fn(df, batch_id)`` commits
    one micro-batch of Kafka records as one table version.

    Args:
        path: The table directory.
        schema: The schema to create the table with when ``path`` holds none.
        fmt: Encoding of the Kafka values.
        app_id: Writer id for exactly-once commits.
        apply_mode: Where the buckets are prepared.
        dead_letter: Where rejected events are forwarded (None: kept in the table only).
        table_options: In-memory, snapshot and retention options.
        json_decoder: Where native JSON is decoded.
        decoder_options: Keyword options of the format's decoder.
        stats_limit: How many :class:`BatchStats` of the last batches :attr:`stats` keeps.
        decode_processes: Driver mode: worker processes that decode the Kafka values (0:
            the driver's own thread).
        decode_in: Where the Kafka values are decoded (executors mode: always in tasks).
        bucket_partitioned: Executors mode: prepare each batch in the tasks that read it
            when its buckets are not split across tasks (see :func:`sink`).

    Raises:
        InvalidOption: ``path`` holds no table and no ``schema`` was given.

    Attributes:
        table: The table, open in the driver.
        stats: The :class:`BatchStats` of the last batches.
        on_batch: Called with each batch's :class:`BatchStats` (exceptions logged).
        dead_letters: Rejects recorded by this function's commits.
        dead_letters_forwarded: Dead letters this function forwarded.
        bucket_figures: Executors mode: memory figures of the buckets held by executors,
            per bucket, as their tasks last reported them (for ``table.stats()`` and the
            metrics).
        decode_pool: The decode worker processes (None: decoding in the driver's thread).
        misaligned_batches: Bucket-partitioned batches found split across tasks (each was
            shuffled instead).
        misaligned_in_a_row: Of those, how many in a row up to the last batch.
    """

    def __init__(
        self,
        path: str,
        *,
        schema: TableSchema | None,
        fmt: FormatName,
        app_id: str,
        apply_mode: ApplyMode,
        dead_letter: DeadLetterSink | None,
        table_options: TableOptions | None,
        json_decoder: JsonDecoder = "python",
        decoder_options: Mapping[str, Any] | None = None,
        stats_limit: int = 256,
        decode_processes: int = 0,
        decode_in: DecodeIn = "driver",
        bucket_partitioned: bool = False,
    ) -> None:
        self.path = path
        self.bucket_partitioned = bucket_partitioned
        self.misaligned_batches = 0
        self.misaligned_in_a_row = 0
        self.format: FormatName = fmt
        self.json_decoder: JsonDecoder = json_decoder
        self.decoder_options: dict[str, Any] = dict(decoder_options or {})
        self.app_id = app_id
        self.apply_mode: ApplyMode = apply_mode
        self.decode_in: DecodeIn = "executors" if apply_mode == "executors" else decode_in
        self.dead_letter = dead_letter
        self.table_options = table_options
        self.table: Table
        if is_table(path):
            self.table = open_table(path, options=table_options)
        elif schema is not None:
            self.table = create_table(path, schema, options=table_options)
        else:
            raise InvalidOption(
                f"no table at {path} and no schema to create it with", option="schema"
            )
        self.stats: deque[BatchStats] = deque(maxlen=stats_limit)
        self.dead_letters = 0
        self.dead_letters_forwarded = 0
        self.on_batch: Callable[[BatchStats], None] | None = None
        self._forwarded: int | None = None  # every version <= this is forwarded
        self._offsets: Offsets | None = None  # the last commit's
        self.bucket_figures: dict[int, BucketFigures] = {}
        self.decode_pool = (
            DecodePool(decode_processes, fmt, self.decoder_options) if decode_processes else None
        )

    # ------------------------------------------------------------------ entry point
    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """Commits micro-batch ``batch_id`` (Kafka source rows ``df``) exactly once.

        Raises:
            Exception: Whatever failed; nothing of the batch is visible then, and Spark
                retries it.
        """
        t0 = time.perf_counter()
        if self.table.is_committed(self.app_id, batch_id):  # a replay after a restart
            st = BatchStats(batch_id, None, True, 0, 0, result="skipped")
            st.dead_letters_forwarded, st.phases["dead_letters"] = self._forward()
            self._finish(st, t0)
            return
        try:
            prepared = self._prepare(df)
            t1 = time.perf_counter()
            res = self._commit(prepared, batch_id)
            prepared.phases["commit"] = time.perf_counter() - t1
        except BaseException as exc:
            st = BatchStats(
                batch_id,
                None,
                False,
                0,
                0,
                result="failed",
                error=f"{type(exc).__name__}: {exc}".splitlines()[0][:500],
            )
            self._finish(st, t0)
            raise
        st = self._committed_stats(batch_id, prepared, res)
        st.dead_letters_forwarded, st.phases["dead_letters"] = self._forward()
        self._finish(st, t0)

    def _prepare(self, df: DataFrame) -> PreparedBatch:
        """Decodes the batch and prepares every bucket it touches, as the mode says."""
        schema = self.table.schema
        if self.apply_mode == "executors":
            return prepare_in_executors(self, df, schema)
        if self.decode_in == "executors":
            return prepare_decoded_in_tasks(self, df, schema)
        if self.format == "json" and self.json_decoder == "jvm":
            return prepare_jvm_in_driver(self, df, schema)
        return prepare_in_driver(self, df, schema)

    def _committed_stats(
        self, batch_id: int, prepared: PreparedBatch, res: CommitResult
    ) -> BatchStats:
        """The :class:`BatchStats` of a committed batch."""
        rejects = prepared.rejects
        counts = dict(res.counts)
        counts["rejected"] = rejects.num_rows
        self.dead_letters += rejects.num_rows
        reasons = rejects.column("reason").to_numpy(zero_copy_only=False)
        by_reason = dict(Counter(reasons.tolist())) if len(reasons) else {}
        phases = prepared.phases
        st = BatchStats(
            batch_id,
            res.version,
            False,
            prepared.events,
            rejects.num_rows,
            counts,
            phases.get("decode", 0.0),
            phases.get("apply", 0.0),
            max_ts_ms=prepared.max_ts_ms,
            ts_sample=prepared.ts_sample,
            phases=dict(phases),
            ops=prepared.ops,
            rejects_by_reason=by_reason,
        )
        st.committed_ms = int(time.time() * 1000)
        return st

    def _finish(self, st: BatchStats, t0: float) -> None:
        """Records a batch's stats and tells the observer."""
        st.total_s = time.perf_counter() - t0
        if not st.committed_ms:
            st.committed_ms = int(time.time() * 1000)
        self.stats.append(st)
        if self.on_batch is not None:
            try:
                self.on_batch(st)
            except Exception:  # an observer never fails the stream
                logger.exception("on_batch callback failed for batch %d", st.batch_id)

    # ------------------------------------------------------------------ dead letters
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
            logger.warning(
                "dead letters not forwarded yet (kept in the table, retried after "
                "the next batch): %s: %s",
                type(exc).__name__,
                exc,
            )
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
        """Forwards what is left, closes the dead-letter sink's clients and stops the
        decode worker processes."""
        if self.decode_pool is not None:
            self.decode_pool.close()
        self._forward()
        close = getattr(self.dead_letter, "close", None)
        if close is not None:
            close()

    # ------------------------------------------------------------------ commit
    def _commit(self, prepared: PreparedBatch, batch_id: int) -> CommitResult:
        """Commits a prepared batch (its rejects, then its log entry), or rolls it back."""
        version, buckets = prepared.version, prepared.buckets
        try:
            offsets = self._all_offsets(prepared.offsets)
            res = commit.commit_prepared(
                self.table,
                version,
                buckets,
                app_id=self.app_id,
                batch_id=batch_id,
                events=prepared.log_events,
                rejects=prepared.rejects,
                source_offsets=offsets,
            )
        except BaseException:
            commit.abort_prepared(self.table, version, buckets)
            raise
        self._offsets = offsets
        return res

    def _all_offsets(self, batch: Offsets) -> Offsets:
        """The batch's end offsets with every partition this writer read before carried
        forward (a batch has records of only some partitions), so that each version's
        log entry says where the stream stood on every partition."""
        if self._offsets is None:
            self._offsets = self._last_offsets()
        out = {t: dict(parts) for t, parts in self._offsets.items()}
        return merge_offsets(out, batch)

    def _last_offsets(self) -> Offsets:
        """The end offsets of this writer's newest retained data version ({} if none)."""
        for v in range(self.table.version, self.table.oldest_version - 1, -1):
            try:
                entry = self.table.log.read(v)
            except Exception:  # GC took it since, or not readable: start afresh
                break
            if entry.kind == "data" and entry.app_id == self.app_id:
                return entry.source_offsets
        return {}


def sink(
    path: str | os.PathLike[str],
    *,
    schema: TableSchema | Mapping[str, Any] | None = None,
    format: FormatName = "json",
    app_id: str | None = None,
    apply_mode: ApplyMode = "driver",
    dead_letter: DeadLetterSink | None = None,
    table_options: TableOptions | None = None,
    json_decoder: JsonDecoder = "python",
    decoder_options: Mapping[str, Any] | None = None,
    decode_processes: int = 0,
    decode_in: DecodeIn | None = None,
    bucket_partitioned: bool = False,
) -> SinkFunction:
    """Returns the ``foreachBatch`` function that commits Kafka CDC micro-batches.

    Args:
        path: The table (created from ``schema`` when missing).
        schema: Table schema (object or dict) used to create the table.
        format: Encoding of the Kafka values, one of :data:`cdc_sink.formats.FORMATS`
            (``json``, ``debezium``, ``rowv2``).
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
        decode_processes: Driver mode with a Python decoder: how many worker processes
            decode the Kafka values, each Arrow batch as Spark streams it (0, the
            default: the driver's own thread). The driver's one thread is the bound of
            driver mode on a driver with cores to spare (docs/benchmarks.md); the workers
            are spawned on the first batch and stopped by :meth:`SinkFunction.close`.
        decode_in: Driver mode: ``driver`` (the default: the raw records come to the
            driver, which decodes them) or ``executors`` (Spark tasks decode them in
            parallel and send the driver each bucket's events in their compact wire
            form, with no shuffle; the driver only prepares the buckets). Executors mode
            always decodes in its tasks (None or ``executors``).
        bucket_partitioned: Executors mode on a topic partitioned by bucket (producer
            SDK ``partitioner="bucket"``): each batch is decoded and prepared where it is
            read, no shuffle; a batch found split is rolled back and shuffled.

    Returns:
        A :class:`SinkFunction` (callable ``(df, batch_id)``, with ``.table`` and
        ``.stats``).

    Raises:
        InvalidOption: An unknown format or apply mode, a decoder option that is unknown
            or has a bad value, no table at ``path`` and no ``schema``, or
            ``decode_processes`` negative or set outside driver mode's Python decoders
            in the driver, or ``decode_in`` unknown or ``driver`` in executors mode, or
            ``bucket_partitioned`` outside executors mode.
        InvalidArgument: ``decode_processes`` is not an int.
    """
    where = _checked_modes(
        format, apply_mode, decode_in, decode_processes, json_decoder, bucket_partitioned
    )
    if schema is not None and not isinstance(schema, TableSchema):
        schema = TableSchema.from_dict(schema)
    options = _checked_decoder_options(format, json_decoder, decoder_options)
    return SinkFunction(
        os.fspath(path),
        schema=schema,
        fmt=format,
        app_id=app_id or f"cdc_sink:{os.path.abspath(path)}",
        apply_mode=apply_mode,
        dead_letter=dead_letter,
        table_options=table_options,
        json_decoder=json_decoder,
        decoder_options=options,
        decode_processes=decode_processes,
        decode_in=where,
        bucket_partitioned=bool(bucket_partitioned),
    )


def _checked_modes(
    fmt: object,
    apply_mode: object,
    decode_in: object,
    processes: object,
    json_decoder: str,
    bucket_partitioned: object = False,
) -> DecodeIn:
    """Raises the typed error of a bad format, apply mode, ``decode_in``,
    ``decode_processes`` or ``bucket_partitioned`` (see :func:`sink`); returns where the
    sink decodes."""
    if bucket_partitioned and apply_mode != "executors":
        raise InvalidOption(
            "bucket_partitioned applies to apply_mode='executors' (driver mode has no shuffle)",
            option="bucket_partitioned",
        )
    if fmt not in FORMATS:
        raise InvalidOption(f"format must be {', '.join(FORMATS)}, not {fmt!r}", option="format")
    if apply_mode not in _APPLY_MODES:
        raise InvalidOption(
            f"apply_mode must be 'driver' or 'executors', not {apply_mode!r}", option="apply_mode"
        )
    where = _decode_in(decode_in, apply_mode)
    _check_decode_processes(processes, str(apply_mode), str(fmt), json_decoder)
    if processes and where == "executors":
        raise InvalidOption(
            "decode_processes decodes in the driver; decode_in='executors' in Spark tasks",
            option="decode_processes",
        )
    return where


def _checked_decoder_options(
    fmt: FormatName, json_decoder: str, decoder_options: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The sink's decoder options, checked against its decoder (see :func:`sink`)."""
    options = dict(decoder_options or {})
    if options:
        if fmt == "json" and json_decoder == "jvm":
            jvm_allow_truncate(options)  # the one option it takes
        from cdc_sink.formats import get_decoder

        get_decoder(fmt, **options)  # raises InvalidOption naming a bad option
    return options


def _decode_in(value: object, apply_mode: ApplyMode) -> DecodeIn:
    """``decode_in`` of :func:`sink`, checked (None: where ``apply_mode`` decodes)."""
    if value is None:
        return "executors" if apply_mode == "executors" else "driver"
    if value not in _DECODE_IN:
        raise InvalidOption(
            f"decode_in must be 'driver' or 'executors', not {value!r}", option="decode_in"
        )
    if apply_mode == "executors" and value != "executors":
        raise InvalidOption(
            "apply_mode='executors' decodes in its Spark tasks: decode_in='driver' does not "
            "apply to it",
            option="decode_in",
        )
    return "executors" if value == "executors" else "driver"


def _check_decode_processes(
    processes: object, apply_mode: str, fmt: str, json_decoder: str
) -> None:
    """Raises the typed error of a bad ``decode_processes`` (see :func:`sink`)."""
    if not isinstance(processes, int) or isinstance(processes, bool):
        raise InvalidArgument(f"decode_processes must be an int, got {processes!r}")
    if processes < 0:
        raise InvalidOption(
            f"decode_processes must be >= 0, got {processes}", option="decode_processes"
        )
    if processes and (apply_mode != "driver" or (fmt == "json" and json_decoder == "jvm")):
        raise InvalidOption(
            "decode_processes applies to apply_mode='driver' with a Python decoder "
            "(executors mode decodes in Spark tasks; json_decoder='jvm' in the JVM)",
            option="decode_processes",
        )
