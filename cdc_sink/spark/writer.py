"""The Structured Streaming sink: a ``foreachBatch`` function that commits each micro-batch
of Kafka CDC events as one table version, exactly once, dead letters included.

    query = (spark.readStream.format("kafka").option("subscribe", topic)...load()
             .writeStream.foreachBatch(cdc_sink.spark.sink(path, schema=schema))
             .option("checkpointLocation", ckpt).start())

The sink is configured by one frozen value, :class:`~cdc_sink.spark.options.SinkOptions`
(``sink(path, schema, dead_letter=..., options=SinkOptions(...))``), and each micro-batch
goes through one :class:`~cdc_sink.transaction.Transaction` of the table. Per micro-batch
``(df, batch_id)``:

1. *Decide*: ``table.transaction(app_id, batch_id)``; if the table already holds
   ``(app_id, batch_id)`` (a replay after a restart), the transaction is skipped and
   nothing is applied; only dead letters not yet forwarded are (step 5).
2. *Decode*: by the vectorized decoders of :mod:`cdc_sink.formats` (in the driver, or in
   ``mapInArrow`` tasks in executors mode) with the sink's decoder options
   (``options.decode.options``) and the Kafka message keys; native JSON can instead be
   decoded in the JVM with ``decode.json_decoder="jvm"`` (:mod:`cdc_sink.spark.decode`).
   Malformed events get a reason. Before that, a decoder that evolves the table's schema
   (:meth:`~cdc_sink.formats.Decoder.evolution`) has the columns the batch's writer
   schemas add added, each in a version of its own.
3. *Prepare*: the sink's apply mode (one small class each, one interface:
   :mod:`cdc_sink.spark._mode`) prepares every touched bucket into the transaction.
   ``apply_mode="driver"`` (default) brings the batch to the driver (``toArrow``) and
   prepares in the driver's :class:`~cdc_sink.table.Table`, whose tablets stay in memory
   across batches (:mod:`cdc_sink.spark._driver`; with ``decode.where="executors"``,
   :mod:`cdc_sink.spark._task_decode`). ``apply_mode="executors"`` repartitions by bucket
   (``pmod(xxhash64(key), N)``, as Python computes it) and prepares each bucket in a Spark
   task (per-attempt WAL segment, per-worker tablet cache checked against the log;
   :mod:`cdc_sink.spark._executors`), whose messages the transaction takes.
4. *Commit*: the driver writes the batch's rejects (every refused event with its Kafka
   topic/partition/offset, raw key and value and the reason) into the table, then the
   log entry naming the segments, the rejects and the Kafka end offsets (of every
   partition the writer has read: those without records in the batch carried forward). The
   rejects are thus durable exactly when the version is (:meth:`Table.rejects`).
5. *Dead letters*: :meth:`Transaction.forward_dead_letters
   <cdc_sink.transaction.Transaction.forward_dead_letters>` copies the rejects of every
   committed version of this writer that the dead-letter sink does not hold yet, exactly
   once (idempotent per version; see that module). A failure here is logged and retried
   after the next batch; it never loses the rejects, which stay in the table.

The commit protocol behind steps 3-4 is described in docs/architecture.md §4.

Two parts: :class:`SinkFunction`, the ``foreachBatch`` function, is the router that hands
each micro-batch to the :class:`TableWriter` of its table, which holds that table's state
(the table handle, the apply mode, the transaction flow above, the dead-letter
forwarding, the batch stats). The sink has one table today, so the router hands every
batch, whole, to its one writer; routing one batch to many tables is the router's to add.

The function pickles (``pickle`` and ``cloudpickle``, which Spark Connect's
``foreachBatch`` uses): what it carries is its configuration (path, options, app id, the
dead-letter sink); what a process holds while it runs batches (the open table, the apply
mode with its decode workers, the stats, the dead-letter bookkeeping, ``on_batch``) is
never pickled and is made on first use in the process that runs the batch. Under Spark
Connect the batch's DataFrame is a Connect DataFrame and is read through Arrow
(``toArrow``, ``mapInArrow``) only: no apply mode touches the JVM (docs/compatibility.md).
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, Never, Protocol

import numpy as np
import pyarrow as pa

from cdc_sink.dead_letters import DEAD_LETTER_SCHEMA, forward
from cdc_sink.engine import CommitResult
from cdc_sink.errors import CommitConflict, InvalidArgument, InvalidOption, TableNotFound
from cdc_sink.formats import Decoded, FormatName, SchemaEvolution, get_decoder
from cdc_sink.schema import TableSchema
from cdc_sink.spark._batch import (
    Offsets,
    PreparedBatch,
    merge_offsets,
    rejected_batch,
    with_refused,
)
from cdc_sink.spark._decode_pool import DecodePool
from cdc_sink.spark._driver import DriverApply, JvmDriverApply
from cdc_sink.spark._executors import ExecutorsApply
from cdc_sink.spark._mode import ApplyStrategy
from cdc_sink.spark._task_decode import TaskDecodeApply
from cdc_sink.spark.options import ApplyMode, DecodeIn, DecodeOptions, JsonDecoder, SinkOptions
from cdc_sink.stats import BucketFigures
from cdc_sink.storage.objectstore.urls import parse_store_url
from cdc_sink.table import Table, create_table, open_table
from cdc_sink.transaction import Transaction
from cdc_sink.utils.process_local import ProcessLocal

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "DEAD_LETTER_SCHEMA",
    "REMOVED_KEYWORDS",
    "ApplyMode",
    "BatchStats",
    "DeadLetterSink",
    "DecodeIn",
    "DecodeOptions",
    "JsonDecoder",
    "SinkFunction",
    "SinkOptions",
    "TableWriter",
    "sink",
]

logger = logging.getLogger(__name__)

BatchResult = Literal["committed", "skipped", "failed"]

COMMIT_ATTEMPTS = 2
"""How many times a micro-batch is decided and committed before a lost race fails it:
the writer commits without reading the log, so another writer's commit (a notebook's
``add_column``, a second job) is learnt from the conditional create it loses; the second
attempt decides from the log it then read (skipped if the winner was this batch)."""


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


class TableWriter(ProcessLocal):
    """One table's writer: its table handle, the transaction of each micro-batch (decide,
    prepare, commit), the dead-letter forwarding and the batch stats. :class:`SinkFunction`
    routes each micro-batch to the writer of its table (one table today).

    Args:
        path: The table: a directory or an object-store URL (``s3://bucket/prefix``...,
            opened with ``options.storage_options``).
        options: The table's sink options, checked (:meth:`SinkOptions.checked`).
        dead_letter: Where rejected events are forwarded (None: kept in the table only).
        table: The table, open in this process (None: opened on first use).

    Attributes:
        options: The checked options.
        app_id: The writer id of the table's commits.
        table: The table, open in this process (opened on first use after unpickling).
        mode: The apply mode (:class:`~cdc_sink.spark._mode.ApplyStrategy`), made on
            first use in this process.
        stats: The :class:`BatchStats` of the last batches run in this process.
        on_batch: Called with each batch's :class:`BatchStats` (exceptions logged); of
            this process only (not pickled).
        dead_letters: Rejects recorded by this process's commits.
        dead_letters_forwarded: Dead letters this process forwarded.
    """

    _PROCESS_LOCAL = (
        "_table",
        "_mode",
        "stats",
        "dead_letters",
        "dead_letters_forwarded",
        "on_batch",
        "_forwarded",
        "_offsets",
    )
    """What a process holds while it runs batches: never pickled (:meth:`__getstate__`)."""
    _table: Table | None
    _mode: ApplyStrategy | None

    def __init__(
        self,
        path: str,
        options: SinkOptions,
        dead_letter: DeadLetterSink | None = None,
        table: Table | None = None,
    ) -> None:
        self.path = path
        self.options = options
        self.app_id = options.app_id or default_app_id(path)
        self.dead_letter = dead_letter
        self._init_process_state()
        self._table = table

    # ------------------------------------------------------------------ pickling
    def _init_process_state(self) -> None:
        """This process's state, empty: the table and the mode are made on first use."""
        self._table = None
        self._mode = None
        self.stats: deque[BatchStats] = deque(maxlen=self.options.stats_limit)
        self.dead_letters = 0
        self.dead_letters_forwarded = 0
        self.on_batch: Callable[[BatchStats], None] | None = None
        self._forwarded: int | None = None  # every version <= this is forwarded
        self._offsets: Offsets | None = None  # the last commit's

    @property
    def table(self) -> Table:
        """The table, open in this process (opened here on first use)."""
        if self._table is None:
            self._table = self._open()
        return self._table

    def _open(self) -> Table:
        """The table at the sink's path, opened in this process."""
        storage = self.options.storage_options or None
        return open_table(self.path, options=self.options.table, storage_options=storage)

    @property
    def mode(self) -> ApplyStrategy:
        """The apply mode, made in this process on first use."""
        if self._mode is None:
            self._mode = _apply_mode(self.path, self.options)
        return self._mode

    # ------------------------------------------------------------------ options, read-only
    @property
    def format(self) -> FormatName:
        """Encoding of the Kafka values."""
        return self.options.format

    @property
    def apply_mode(self) -> ApplyMode:
        """Where the buckets are prepared."""
        return self.options.apply_mode

    @property
    def decode_in(self) -> DecodeIn:
        """Where the Kafka values are decoded."""
        return self.options.decode_in

    @property
    def decode_pool(self) -> DecodePool | None:
        """Driver mode's decode worker processes (None: decoding in the driver's thread)."""
        return self.mode.decode_pool if isinstance(self.mode, DriverApply) else None

    @property
    def bucket_figures(self) -> dict[int, BucketFigures]:
        """Executors mode: memory figures of the buckets held by executors, per bucket, as
        their tasks last reported them (for ``table.stats()`` and the metrics)."""
        return self.mode.bucket_figures()

    @property
    def misaligned_batches(self) -> int:
        """Bucket-partitioned batches found split across tasks (each was shuffled)."""
        return self.mode.misaligned_batches if isinstance(self.mode, ExecutorsApply) else 0

    # ------------------------------------------------------------------ one batch
    def write(self, df: DataFrame, batch_id: int) -> None:
        """Commits micro-batch ``batch_id`` (Kafka source rows ``df``) exactly once.

        Raises:
            Exception: Whatever failed; nothing of the batch is visible then, and Spark
                retries it.
        """
        self._evolve_schema(df)
        self.write_with(lambda txn: self.mode.prepare(self.table, txn, df), batch_id)

    def write_rows(
        self,
        raw: pa.Table,
        batch_id: int,
        *,
        refused: np.ndarray | None = None,
        reason: str = "",
        pool: DecodePool | None = None,
        decoded: tuple[Decoded, float] | None = None,
    ) -> BatchResult:
        """Commits micro-batch ``batch_id`` of this table from its raw Kafka records,
        already in the driver (driver mode's columns: :func:`~cdc_sink.spark._driver.
        raw_columns`), exactly once; returns what became of it. A router that splits one
        micro-batch among many tables (:mod:`cdc_sink.spark.database`) calls this.

        Args:
            raw: The table's records of the batch, in order.
            batch_id: Spark's micro-batch id.
            refused: A mask of the records refused for ``reason`` (stored as the
                version's rejects) instead of applied (None: none is).
            reason: Why, with ``refused``.
            pool: Decode worker processes to decode the records in (a router's, shared
                by its tables; None: decoded in the calling thread).
            decoded: ``raw`` already decoded, and the seconds it took (a router's decode
                shared by tables of one schema); used by the first attempt only, and
                only without ``refused``.

        Raises:
            InvalidOption: The writer's apply mode does not prepare rows in the driver.
            Exception: Whatever failed; nothing of the batch is visible then.
        """
        mode = self.mode
        if not isinstance(mode, DriverApply):
            raise InvalidOption(
                "a routed table is prepared in the driver: apply_mode='driver' with "
                "decode.where='driver' and decode.json_decoder='python'",
                option="apply_mode",
            )
        if refused is None or not refused.any():
            once = [decoded]  # a retry after a conflict decodes again: nothing is reused

            def prepare(txn: Transaction) -> PreparedBatch:
                given, once[0] = once[0], None
                return mode.prepare_rows(txn, raw, pool, given)

            return self.write_with(prepare, batch_id)
        if refused.all():
            return self.reject_rows(raw, batch_id, reason)
        kept, out = raw.filter(pa.array(~refused)), raw.filter(pa.array(refused))
        return self.write_with(
            lambda txn: with_refused(mode.prepare_rows(txn, kept, pool), out, reason), batch_id
        )

    def reject_rows(
        self, raw: pa.Table, batch_id: int, reasons: str | Sequence[str]
    ) -> BatchResult:
        """Commits micro-batch ``batch_id`` of this table with every record of ``raw``
        refused for ``reasons`` (one for all, or one per record; e.g. a table stopped by a
        change it cannot take), exactly once: the rejects are stored with a version of
        their own and forwarded as dead letters."""
        return self.write_with(lambda txn: rejected_batch(raw, reasons), batch_id)

    def write_with(
        self, prepare: Callable[[Transaction], PreparedBatch], batch_id: int
    ) -> BatchResult:
        """Commits micro-batch ``batch_id`` exactly once, its buckets prepared into the
        transaction by ``prepare``; returns what became of it.

        Raises:
            Exception: Whatever failed; nothing of the batch is visible then.
        """
        t0 = time.perf_counter()
        for attempt in range(COMMIT_ATTEMPTS):
            txn = self.table.transaction(app_id=self.app_id, batch_id=batch_id)
            if txn.skipped:  # a replay after a restart, or a lost race's winner
                st = BatchStats(batch_id, None, True, 0, 0, result="skipped")
                st.dead_letters_forwarded, st.phases["dead_letters"] = self._forward(txn)
                self._finish(st, t0)
                return "skipped"
            try:
                with txn:  # any error: nothing of the attempt is visible
                    prepared = prepare(txn)
                    t1 = time.perf_counter()
                    res = self._commit(txn, prepared)
                    prepared.phases["commit"] = time.perf_counter() - t1
                break
            except CommitConflict as exc:
                if attempt + 1 < COMMIT_ATTEMPTS:  # the writer follows the log, and retries
                    logger.warning("batch %d: %s; deciding it again", batch_id, exc)
                    continue
                self._failed(batch_id, exc, t0)
                raise
            except BaseException as exc:
                self._failed(batch_id, exc, t0)
                raise
        st = self._committed_stats(batch_id, prepared, res)
        st.dead_letters_forwarded, st.phases["dead_letters"] = self._forward(txn)
        self._finish(st, t0)
        return "committed"

    def _failed(self, batch_id: int, exc: BaseException, t0: float) -> None:
        """Records a failed batch's stats."""
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

    def _evolve_schema(self, df: DataFrame) -> None:
        """Schema evolution, for any format whose decoder evolves the table's schema
        (:meth:`~cdc_sink.formats.Decoder.evolution`; e.g. ``debezium-avro`` with the
        decoder option ``schema_evolution="add_columns"``): the columns the batch's writer
        schemas add are added, each in a version of its own, before the batch is decided.
        A change the table cannot take raises (the batch fails, nothing is rejected)."""
        evolution = self._evolution()
        if evolution is None:
            return
        prefixes = _value_prefixes(df, evolution.prefix_bytes)
        for name, type_ in evolution.columns_to_add(prefixes, self.table.schema):
            logger.info("schema evolution: adding column %s %s", name, type_)
            self.table.add_column(name, type_)

    def _evolution(self) -> SchemaEvolution | None:
        """The schema evolution of the sink's decoder (None: the decoder evolves none, or
        the values are decoded in the JVM)."""
        if self.options.jvm_json:
            return None
        return get_decoder(self.format, **self.options.decode.options).evolution()

    def _commit(self, txn: Transaction, prepared: PreparedBatch) -> CommitResult:
        """Commits the transaction: the batch's rejects, then its log entry."""
        offsets = self._all_offsets(prepared.offsets)
        res = txn.commit(
            events=prepared.log_events, rejects=prepared.rejects, source_offsets=offsets
        )
        self._offsets = offsets
        return res

    def _committed_stats(
        self, batch_id: int, prepared: PreparedBatch, res: CommitResult
    ) -> BatchStats:
        """The :class:`BatchStats` of a committed batch."""
        rejects = prepared.rejects
        counts = dict(res.counts)
        counts["rejected"] = rejects.num_rows
        self.dead_letters += rejects.num_rows
        by_reason = dict(Counter(rejects.column("reason").to_pylist())) if rejects.num_rows else {}
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
    def _forward(self, txn: Transaction | None = None) -> tuple[int, float]:
        """Forwards committed rejects to the dead-letter sink, after the batch of ``txn``
        (or, without one, at close); (records, seconds)."""
        if self.dead_letter is None:
            return 0, 0.0
        t0 = time.perf_counter()
        upto = self.table.version
        try:
            if txn is not None:
                n = txn.forward_dead_letters(self.dead_letter, checked=self._forwarded)
            else:
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
        """Forwards what is left, closes the dead-letter sink's clients and stops what the
        apply mode started (decode worker processes)."""
        if self._mode is not None:
            self._mode.close()
        self._forward()
        close = getattr(self.dead_letter, "close", None)
        if close is not None:
            close()

    # ------------------------------------------------------------------ offsets
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


class SinkFunction:
    """The ``foreachBatch`` callable returned by :func:`sink`: ``fn(df, batch_id)`` commits
    one micro-batch of Kafka records as one table version.

    It is the router of the sink: it hands each micro-batch to the :class:`TableWriter`
    of its table. With one table (today's sink) the whole batch goes to that one writer,
    whose state it shows (``table``, ``stats``, ``on_batch``...).

    Args:
        path: The table: a directory or an object-store URL (``s3://bucket/prefix``...,
            opened with ``options.storage_options``).
        schema: The schema to create the table with when ``path`` holds none.
        options: The sink's options (checked here; defaults: :class:`SinkOptions`).
        dead_letter: Where rejected events are forwarded (None: kept in the table only).

    Raises:
        InvalidOption: ``path`` holds no table and no ``schema`` was given, or an option
            is bad (see :meth:`SinkOptions.checked`).

    Attributes:
        writer: The table's :class:`TableWriter`.
    """

    def __init__(
        self,
        path: str,
        *,
        schema: TableSchema | None = None,
        options: SinkOptions | None = None,
        dead_letter: DeadLetterSink | None = None,
    ) -> None:
        checked = (options or SinkOptions()).checked()
        storage = checked.storage_options or None
        try:
            table = open_table(path, options=checked.table, storage_options=storage)
        except TableNotFound:
            if schema is None:
                raise InvalidOption(
                    f"no table at {path} and no schema to create it with", option="schema"
                ) from None
            table = create_table(path, schema, options=checked.table, storage_options=storage)
        self.writer = TableWriter(path, checked, dead_letter, table)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """Commits micro-batch ``batch_id`` (Kafka source rows ``df``) exactly once, each
        table's rows by its writer.

        Raises:
            Exception: Whatever failed; nothing of the batch is visible then, and Spark
                retries it.
        """
        for writer, rows in self._route(df):
            writer.write(rows, batch_id)

    def _route(self, df: DataFrame) -> list[tuple[TableWriter, DataFrame]]:
        """The writers of the batch's tables, each with its rows: one table, all of them."""
        return [(self.writer, df)]

    # ------------------------------------------------------------------ the one table's writer
    @property
    def path(self) -> str:
        """The table's path or URL."""
        return self.writer.path

    @property
    def options(self) -> SinkOptions:
        """The checked options."""
        return self.writer.options

    @property
    def app_id(self) -> str:
        """The writer id of the sink's commits."""
        return self.writer.app_id

    @property
    def dead_letter(self) -> DeadLetterSink | None:
        """Where rejected events are forwarded."""
        return self.writer.dead_letter

    @property
    def table(self) -> Table:
        """The table, open in this process (opened here on first use)."""
        return self.writer.table

    @property
    def mode(self) -> ApplyStrategy:
        """The apply mode, made in this process on first use."""
        return self.writer.mode

    @property
    def stats(self) -> deque[BatchStats]:
        """The :class:`BatchStats` of the last batches run in this process."""
        return self.writer.stats

    @property
    def on_batch(self) -> Callable[[BatchStats], None] | None:
        """Called with each batch's :class:`BatchStats` (exceptions logged); of this
        process only (not pickled)."""
        return self.writer.on_batch

    @on_batch.setter
    def on_batch(self, fn: Callable[[BatchStats], None] | None) -> None:
        self.writer.on_batch = fn

    @property
    def dead_letters(self) -> int:
        """Rejects recorded by this process's commits."""
        return self.writer.dead_letters

    @dead_letters.setter
    def dead_letters(self, n: int) -> None:
        self.writer.dead_letters = n

    @property
    def dead_letters_forwarded(self) -> int:
        """Dead letters this process forwarded."""
        return self.writer.dead_letters_forwarded

    @property
    def format(self) -> FormatName:
        """Encoding of the Kafka values."""
        return self.writer.format

    @property
    def apply_mode(self) -> ApplyMode:
        """Where the buckets are prepared."""
        return self.writer.apply_mode

    @property
    def decode_in(self) -> DecodeIn:
        """Where the Kafka values are decoded."""
        return self.writer.decode_in

    @property
    def decode_pool(self) -> DecodePool | None:
        """Driver mode's decode worker processes (None: decoding in the driver's thread)."""
        return self.writer.decode_pool

    @property
    def bucket_figures(self) -> dict[int, BucketFigures]:
        """Executors mode: memory figures of the buckets held by executors, per bucket."""
        return self.writer.bucket_figures

    @property
    def misaligned_batches(self) -> int:
        """Bucket-partitioned batches found split across tasks (each was shuffled)."""
        return self.writer.misaligned_batches

    def gc_floor(self) -> int | None:
        """The oldest version GC must keep so that no reject is lost before it is
        forwarded (:meth:`TableWriter.gc_floor`)."""
        return self.writer.gc_floor()

    def close(self) -> None:
        """Closes the writer (:meth:`TableWriter.close`)."""
        self.writer.close()


def _value_prefixes(df: DataFrame, n: int) -> pa.BinaryArray:
    """The distinct ``n``-byte prefixes of the batch's message values (one small distinct
    query in Spark; shorter values and null ones are left out)."""
    from pyspark.sql import functions as F

    value = F.col("value")
    rows = (
        df.where(F.length(value) >= n)
        .select(F.substring(value, 1, n).alias("prefix"))
        .distinct()
        .collect()
    )
    return pa.array([bytes(r["prefix"]) for r in rows], pa.binary())


def default_app_id(path: str | os.PathLike[str]) -> str:
    """The writer id of a sink that names none: derived from the table's absolute path
    (or its URL)."""
    where = parse_store_url(os.fspath(path))
    return f"cdc_sink:{where.prefix if where.kind == 'local' else where.url}"


def _apply_mode(path: str, options: SinkOptions) -> ApplyStrategy:
    """The apply mode the (checked) options ask for."""
    if options.apply_mode == "executors":
        return ExecutorsApply(path, options)
    if options.decode_in == "executors":
        return TaskDecodeApply(path, options)
    if options.jvm_json:
        return JvmDriverApply(path, options)
    return DriverApply(path, options)


REMOVED_KEYWORDS: Mapping[str, str] = MappingProxyType(
    {
        "format": "SinkOptions(format=...)",
        "app_id": "SinkOptions(app_id=...)",
        "apply_mode": "SinkOptions(apply_mode=...)",
        "bucket_partitioned": "SinkOptions(bucket_partitioned=...)",
        "table_options": "SinkOptions(table=TableOptions(...))",
        "json_decoder": "SinkOptions(decode=DecodeOptions(json_decoder=...))",
        "decoder_options": "SinkOptions(decode=DecodeOptions(options={...}))",
        "decode_processes": "SinkOptions(decode=DecodeOptions(processes=...))",
        "decode_in": "SinkOptions(decode=DecodeOptions(where=...))",
    }
)
"""The keywords :func:`sink` took before it took one :class:`SinkOptions`, each with the
field that replaces it (README.md, "Migrating from the sink's keywords")."""


def sink(
    path: str | os.PathLike[str],
    schema: TableSchema | Mapping[str, Any] | None = None,
    *,
    dead_letter: DeadLetterSink | None = None,
    options: SinkOptions | None = None,
    **removed: Never,
) -> SinkFunction:
    """Returns the ``foreachBatch`` function that commits Kafka CDC micro-batches.

    Every option is a field of the one :class:`SinkOptions` value ``options`` (the wire
    format, the writer id, the apply mode, how values are decoded, the table's options,
    the object store's options)::

        sink(path, schema, options=SinkOptions(format="debezium", apply_mode="executors"))

    Args:
        path: The table (created from ``schema`` when missing): a directory, or an
            object-store URL (``s3://bucket/prefix``, ``gs://...``, ``az://...``) with
            ``options.storage_options`` and the environment's credentials.
        schema: Table schema (object or dict) used to create the table.
        dead_letter: Where rejected events go (None: kept in the table and counted).
        options: Every option in one value (default: :class:`SinkOptions`).
        **removed: None: a keyword the sink took before (``format=``, ``app_id=``...)
            raises :class:`~cdc_sink.errors.InvalidArgument` naming the field of
            :class:`SinkOptions` that replaces it (:data:`REMOVED_KEYWORDS`).

    Returns:
        A :class:`SinkFunction` (callable ``(df, batch_id)``, with ``.table`` and
        ``.stats``).

    Raises:
        InvalidOption: No table at ``path`` and no ``schema``, or a bad option or
            combination of options (:meth:`SinkOptions.checked` lists them), checked
            before anything is created.
        InvalidArgument: A keyword other than ``schema``, ``dead_letter`` and ``options``
            (a ``TypeError``, as Python's own for an unknown keyword), or ``options`` is
            not a :class:`SinkOptions`.
    """
    if removed:
        raise InvalidArgument(_removed_keywords_message(removed))
    if options is not None and not isinstance(options, SinkOptions):
        raise InvalidArgument(f"sink() options must be a SinkOptions, not {type(options).__name__}")
    opts = (options or SinkOptions()).checked()
    if opts.app_id is None:
        opts = replace(opts, app_id=default_app_id(path))
    if schema is not None and not isinstance(schema, TableSchema):
        schema = TableSchema.from_dict(schema)
    return SinkFunction(os.fspath(path), schema=schema, options=opts, dead_letter=dead_letter)


def _removed_keywords_message(given: Mapping[str, Any]) -> str:
    """Why :func:`sink` refuses ``given``: each keyword with what replaces it."""
    parts = []
    for name in given:
        instead = REMOVED_KEYWORDS.get(name)
        parts.append(
            f"{name}= is now {instead}"
            if instead
            else f"{name}= is not an argument (sink takes path, schema, dead_letter, options)"
        )
    return (
        "sink() got an unexpected keyword argument: "
        + "; ".join(parts)
        + " (README.md, 'Migrating from the sink's keywords')"
    )
