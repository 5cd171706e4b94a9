"""The streaming job's Prometheus metrics (see docs/observability.md for the list).

One :class:`SinkMetrics` per job, on its own ``CollectorRegistry`` (never the global one,
so two jobs or two tests in one process do not collide). Every series carries the labels
``table`` and ``app_id``; the other labels take values from small fixed sets (``op``,
``outcome``, ``result``, ``phase``, ``reason`` classes, the store's ``kind``,
``direction`` and ``operation``), and every combination is created
at zero up front, so a dashboard query finds its series before the first event.

Its ``observe_*`` methods never raise: a failure is logged (and counted in
``cdc_sink_metrics_errors_total``) and the stream goes on.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from cdc_sink.metrics.histogram import BulkHistogram
from cdc_sink.metrics.reasons import REASON_CLASSES, classify_reasons
from cdc_sink.metrics.store import STORE_OPERATIONS, StoreMeter, StoreOperation
from cdc_sink.storage.objectstore.counters import CALL_KINDS, CallKind, Counts

if TYPE_CHECKING:
    from collections.abc import Iterator

    from cdc_sink.stats import TableStats
    from cdc_sink.storage.objectstore.counters import StoreCounters

__all__ = ["OPS", "OUTCOMES", "PHASES", "RESULTS", "BatchFigures", "SinkMetrics"]

logger = logging.getLogger(__name__)

OPS: tuple[str, ...] = ("insert", "upsert", "update", "delete", "truncate", "unknown")
OUTCOMES: tuple[str, ...] = ("applied", "stale", "ignored", "rejected")
RESULTS: tuple[str, ...] = ("committed", "skipped", "failed")
PHASES: tuple[str, ...] = ("read", "decode", "apply", "commit", "dead_letters")

SECONDS_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
)
EVENTS_BUCKETS = (1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000)
FRESHNESS_BUCKETS = (
    0.05,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    3.0,
    5.0,
    7.5,
    10.0,
    15.0,
    20.0,
    30.0,
    60.0,
    120.0,
)
MAINTENANCE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class BatchFigures(Protocol):
    """What :meth:`SinkMetrics.observe_batch` reads from a micro-batch
    (:class:`cdc_sink.spark.writer.BatchStats` has it). Optional attributes, read when
    present: ``result``, ``phases``, ``ops``, ``rejects_by_reason``."""

    batch_id: int
    version: int | None
    skipped: bool
    events: int
    rejected: int
    counts: dict[str, int]
    total_s: float
    committed_ms: int

    def freshness_ms(self) -> np.ndarray:
        """Produce-to-visible latencies (ms) of a sample of the batch's events."""


_F = TypeVar("_F", bound=Callable[..., None])


def _never_raises(fn: _F) -> _F:
    """Logs (and counts) an exception of a metrics update instead of raising it."""

    @functools.wraps(fn)
    def run(self: SinkMetrics, *args: Any, **kwargs: Any) -> None:
        try:
            fn(self, *args, **kwargs)
        except Exception:
            self._errors += 1
            with contextlib.suppress(Exception):  # the counter itself may be broken
                self._m_errors.labels(**self._base).inc()
            if self._errors <= 3 or self._errors % 100 == 0:
                logger.warning(
                    "metrics update %s failed (%d so far); the stream goes on",
                    fn.__name__,
                    self._errors,
                    exc_info=True,
                )

    return run  # type: ignore[return-value]


def batch_result(st: BatchFigures) -> str:
    """``committed``, ``skipped`` or ``failed`` for a micro-batch's figures."""
    result = getattr(st, "result", None)
    if result in RESULTS:
        return str(result)
    return "skipped" if st.skipped else "committed"


def outcome_counts(st: BatchFigures) -> dict[str, int]:
    """Events of a batch by outcome (``applied``, ``stale``, ``ignored``, ``rejected``).

    ``applied`` = inserted + updated + deleted (+ truncated); ``ignored`` = deletes of
    keys that were not live, plus events the decoder skipped on purpose (e.g. Debezium
    tombstones: read, neither decoded nor rejected), so the four outcomes add up to the
    events read; ``rejected`` = every rejected event (decoder, validation and tablet).
    """
    c = st.counts or {}
    applied = sum(int(c.get(k, 0)) for k in ("inserted", "updated", "deleted", "truncated"))
    stale = int(c.get("stale", 0))
    rejected = int(st.rejected)
    ignored = int(c.get("ignored", 0))
    ignored += max(0, int(st.events) - applied - stale - rejected - ignored)
    return {"applied": applied, "stale": stale, "ignored": ignored, "rejected": rejected}


_BASE = ("table", "app_id")
_DIRECTIONS: dict[str, CallKind] = {"read": "GET", "written": "PUT"}
"""The ``direction`` label of the store's bytes -> the call kind that moves them."""


class _Declare:
    """Declares metrics with the labels ``table`` and ``app_id`` first, on one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def counter(self, name: str, doc: str, *labels: str) -> Counter:
        """A counter."""
        return Counter(name, doc, (*_BASE, *labels), registry=self.registry)

    def gauge(self, name: str, doc: str, *labels: str) -> Gauge:
        """A gauge."""
        return Gauge(name, doc, (*_BASE, *labels), registry=self.registry)

    def histogram(self, name: str, doc: str, buckets: tuple[float, ...], *labels: str) -> Histogram:
        """A histogram with ``buckets``."""
        return Histogram(name, doc, (*_BASE, *labels), buckets=buckets, registry=self.registry)


class SinkMetrics:
    """The metrics of one streaming job writing one table.

    Args:
        table: Value of the ``table`` label (the table's name).
        app_id: Value of the ``app_id`` label (the writer id).
        registry: Registry to register on (default: a new one, :attr:`registry`).
    """

    def __init__(
        self, table: str, app_id: str, *, registry: CollectorRegistry | None = None
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.table = table
        self.app_id = app_id
        self._base = {"table": table, "app_id": app_id}
        self._errors = 0
        f = _Declare(self.registry)
        self._m_errors = f.counter(
            "cdc_sink_metrics_errors_total",
            "Metrics updates that failed (logged; the stream went on).",
        )
        self._declare_batch_metrics(f)
        self._declare_kafka_metrics(f)
        self._declare_table_metrics(f)
        self._declare_maintenance_metrics(f)
        self._declare_store_metrics(f)
        self._meter: StoreMeter | None = None
        self._init_series()

    def _declare_batch_metrics(self, f: _Declare) -> None:
        """Events and micro-batches."""
        counter, gauge, histogram = f.counter, f.gauge, f.histogram
        self._events = counter(
            "cdc_sink_events_total",
            'Events read from Kafka. op="all" with outcome applied|stale|ignored|rejected: '
            "what became of them (applied: inserted, updated or deleted a row; stale: older "
            "than the row's sequence; ignored: a delete of a missing key or an event the "
            "decoder skipped on purpose; rejected: sent to the dead letters). op=<op> with "
            'outcome="received": valid events with that op (op="unknown": events '
            "the decoder or the validation rejected, or skipped). Both views add up to the "
            "events read.",
            "op",
            "outcome",
        )
        self._dead_letters = counter(
            "cdc_sink_dead_letters_total",
            "Rejected events (written to the dead-letter sink when one is configured), by "
            "reason class.",
            "reason",
        )
        self._batches = counter(
            "cdc_sink_batches_total",
            "Micro-batches by result: committed (a new version), skipped "
            "(a replay of a batch already committed), failed.",
            "result",
        )
        self._phase = histogram(
            "cdc_sink_batch_phase_seconds",
            "Time of a committed micro-batch spent in each phase: read "
            "(Kafka to Arrow), decode, apply, commit, dead_letters.",
            SECONDS_BUCKETS,
            "phase",
        )
        self._duration = histogram(
            "cdc_sink_batch_duration_seconds",
            "Wall time of a committed micro-batch in the sink.",
            SECONDS_BUCKETS,
        )
        self._batch_events = histogram(
            "cdc_sink_batch_events",
            "Events (Kafka records) per committed micro-batch.",
            EVENTS_BUCKETS,
        )
        self._freshness = BulkHistogram(
            "cdc_sink_freshness_seconds",
            "Time from an event's producer timestamp (ts_ms, else its Kafka record "
            "timestamp) to the commit of the version that made it visible; a sample of up "
            "to 20,000 events per micro-batch.",
            _BASE,
            FRESHNESS_BUCKETS,
        )
        f.registry.register(self._freshness)
        self._last_commit = gauge(
            "cdc_sink_last_commit_timestamp_seconds", "Unix time of the last committed micro-batch."
        )
        self._last_batch = gauge(
            "cdc_sink_last_batch_id", "Id of the last micro-batch the sink saw."
        )

    def _declare_kafka_metrics(self, f: _Declare) -> None:
        """Kafka, from Spark's query progress."""
        gauge = f.gauge
        self._input_rps = gauge(
            "cdc_sink_kafka_input_rows_per_second",
            "Rows/s arriving from Kafka (Spark's inputRowsPerSecond).",
        )
        self._processed_rps = gauge(
            "cdc_sink_kafka_processed_rows_per_second",
            "Rows/s processed (Spark's processedRowsPerSecond).",
        )
        self._avg_behind = gauge(
            "cdc_sink_kafka_avg_offsets_behind_latest",
            "Average over partitions of the offsets between the last "
            "processed and the latest (Kafka source's "
            "avgOffsetsBehindLatest).",
        )
        self._max_behind = gauge(
            "cdc_sink_kafka_max_offsets_behind_latest",
            "Largest per-partition offsets behind latest (maxOffsetsBehindLatest).",
        )

    def _declare_table_metrics(self, f: _Declare) -> None:
        """The table."""
        gauge = f.gauge
        self._t_version = gauge("cdc_sink_table_version", "Latest committed table version.")
        self._t_oldest = gauge("cdc_sink_table_oldest_version", "Oldest readable version.")
        self._t_rows = gauge(
            "cdc_sink_table_live_rows",
            "Live rows at the latest version (over the buckets the writer holds in memory).",
        )
        self._t_memory = gauge(
            "cdc_sink_table_memory_bytes", "Bytes held by the writer's in-memory tablets."
        )
        self._t_deltas = gauge(
            "cdc_sink_table_outstanding_delta_versions",
            "Largest number of uncompacted delta versions of one column, over the buckets.",
        )
        self._t_wal = gauge("cdc_sink_table_wal_bytes", "Bytes of WAL segments on disk.")
        self._t_snap = gauge(
            "cdc_sink_table_snapshot_bytes",
            "Bytes of snapshots (manifests and page files) on disk.",
        )

    def _declare_maintenance_metrics(self, f: _Declare) -> None:
        """Compaction and GC."""
        counter, histogram = f.counter, f.histogram
        self._compactions = counter(
            "cdc_sink_compactions_total",
            "Table compactions run by the job (a snapshot version of every bucket).",
        )
        self._compaction_s = histogram(
            "cdc_sink_compaction_duration_seconds",
            "Duration of a table compaction.",
            MAINTENANCE_BUCKETS,
        )
        self._gc_runs = counter(
            "cdc_sink_gc_runs_total", "GC runs by result (ok, failed).", "result"
        )
        self._gc_s = histogram(
            "cdc_sink_gc_duration_seconds", "Duration of a GC run.", MAINTENANCE_BUCKETS
        )
        self._gc_files = counter("cdc_sink_gc_removed_files_total", "Files removed by GC.")
        self._gc_bytes = counter("cdc_sink_gc_removed_bytes_total", "Bytes removed by GC.")

    def _declare_store_metrics(self, f: _Declare) -> None:
        """The table's object-store requests and bytes, per operation."""
        self._store_requests = f.counter(
            "cdc_sink_store_requests_total",
            "Requests the table's store made, by kind (GET, PUT, LIST, DELETE, HEAD) and by "
            "operation (open, commit: a micro-batch; compaction, gc, cold_read, stats: the "
            "table gauges; other), as the store counts them (cache hits make none).",
            "kind",
            "operation",
        )
        self._store_bytes = f.counter(
            "cdc_sink_store_bytes_total",
            "Bytes the table's store moved, by direction (read: returned by GETs; written: "
            "sent by PUTs) and by operation (as cdc_sink_store_requests_total).",
            "direction",
            "operation",
        )

    def _init_series(self) -> None:
        """Creates every label combination at zero."""
        b = self._base
        for outcome in OUTCOMES:
            self._events.labels(**b, op="all", outcome=outcome)
        for op in OPS:
            self._events.labels(**b, op=op, outcome="received")
        for reason in REASON_CLASSES:
            self._dead_letters.labels(**b, reason=reason)
        for result in RESULTS:
            self._batches.labels(**b, result=result)
        for phase in PHASES:
            self._phase.labels(**b, phase=phase)
        for result in ("ok", "failed"):
            self._gc_runs.labels(**b, result=result)
        for operation in STORE_OPERATIONS:
            for kind in CALL_KINDS:
                self._store_requests.labels(**b, kind=kind, operation=operation)
            for direction in _DIRECTIONS:
                self._store_bytes.labels(**b, direction=direction, operation=operation)
        self._freshness.labels(self.table, self.app_id)
        for m in (
            self._m_errors,
            self._duration,
            self._batch_events,
            self._compactions,
            self._compaction_s,
            self._gc_s,
            self._gc_files,
            self._gc_bytes,
        ):
            m.labels(**b)

    # ------------------------------------------------------------------ updates
    @_never_raises
    def observe_batch(self, st: BatchFigures) -> None:
        """Counts one micro-batch (committed, skipped or failed)."""
        b = self._base
        result = batch_result(st)
        self._settle_store("commit")
        self._batches.labels(**b, result=result).inc()
        self._last_batch.labels(**b).set(st.batch_id)
        if result == "skipped":
            return
        self._observe_phases(st)
        if result == "failed":
            return
        self._observe_events(st)
        self._observe_rejects(st)
        self._duration.labels(**b).observe(float(st.total_s))
        self._batch_events.labels(**b).observe(int(st.events))
        fresh = st.freshness_ms()
        if len(fresh):
            self._freshness.observe_many(
                np.asarray(fresh, dtype=np.float64) / 1000.0, self.table, self.app_id
            )
        if st.committed_ms:
            self._last_commit.labels(**b).set(st.committed_ms / 1000.0)

    def _observe_phases(self, st: BatchFigures) -> None:
        """The time of each phase of a batch that was not skipped."""
        phases: Mapping[str, float] = getattr(st, "phases", None) or {}
        if not phases:  # a BatchStats without per-phase figures
            phases = {
                "decode": float(getattr(st, "decode_s", 0.0)),
                "apply": float(getattr(st, "apply_s", 0.0)),
            }
        for phase, seconds in phases.items():
            if phase in PHASES:
                self._phase.labels(**self._base, phase=phase).observe(float(seconds))

    def _observe_events(self, st: BatchFigures) -> None:
        """A committed batch's events by outcome, and by op when the batch has them."""
        b = self._base
        for outcome, n in outcome_counts(st).items():
            self._events.labels(**b, op="all", outcome=outcome).inc(n)
        ops: Mapping[str, int] | None = getattr(st, "ops", None)
        if ops is None:
            return
        known = 0
        for op, n in ops.items():
            name = op if op in OPS else "unknown"
            self._events.labels(**b, op=name, outcome="received").inc(int(n))
            known += int(n)
        self._events.labels(**b, op="unknown", outcome="received").inc(
            max(0, int(st.events) - known)
        )

    def _observe_rejects(self, st: BatchFigures) -> None:
        """A committed batch's rejects by reason class (``other`` without reasons)."""
        by_reason: Mapping[str, int] | None = getattr(st, "rejects_by_reason", None)
        if by_reason is not None:
            for cls, n in classify_reasons(by_reason).items():
                self._dead_letters.labels(**self._base, reason=cls).inc(n)
        elif st.rejected:
            self._dead_letters.labels(**self._base, reason="other").inc(int(st.rejected))

    @_never_raises
    def observe_table(self, stats: TableStats) -> None:
        """Sets the table gauges from :meth:`cdc_sink.table.Table.stats`."""
        b = self._base
        self._t_version.labels(**b).set(stats.version)
        self._t_oldest.labels(**b).set(stats.oldest_version)
        self._t_rows.labels(**b).set(stats.live_rows)
        self._t_memory.labels(**b).set(stats.memory_bytes)
        self._t_deltas.labels(**b).set(stats.outstanding_delta_versions)
        self._t_wal.labels(**b).set(stats.wal_bytes)
        self._t_snap.labels(**b).set(stats.snapshot_bytes)

    @_never_raises
    def observe_table_version(self, version: int) -> None:
        """Sets the version gauge (cheap: after every committed batch)."""
        self._t_version.labels(**self._base).set(version)

    @_never_raises
    def observe_compaction(self, seconds: float) -> None:
        """Counts one compaction that took ``seconds`` (and the store's requests since
        the last settlement, as ``compaction``)."""
        self._settle_store("compaction")
        self._compactions.labels(**self._base).inc()
        self._compaction_s.labels(**self._base).observe(seconds)

    @_never_raises
    def observe_gc(
        self, seconds: float, *, ok: bool, removed_files: int = 0, removed_bytes: int = 0
    ) -> None:
        """Counts one GC run, its duration and what it removed (and the store's
        requests since the last settlement, as ``gc``)."""
        b = self._base
        self._settle_store("gc")
        self._gc_runs.labels(**b, result="ok" if ok else "failed").inc()
        self._gc_s.labels(**b).observe(seconds)
        self._gc_files.labels(**b).inc(removed_files)
        self._gc_bytes.labels(**b).inc(removed_bytes)

    @_never_raises
    def observe_progress(
        self,
        *,
        input_rows_per_second: float | None,
        processed_rows_per_second: float | None,
        avg_offsets_behind: float | None,
        max_offsets_behind: float | None,
    ) -> None:
        """Sets the Kafka gauges from a Spark query progress (``None``: left as is)."""
        b = self._base
        for g, v in (
            (self._input_rps, input_rows_per_second),
            (self._processed_rps, processed_rows_per_second),
            (self._avg_behind, avg_offsets_behind),
            (self._max_behind, max_offsets_behind),
        ):
            if v is not None and np.isfinite(v):
                g.labels(**b).set(float(v))

    # ------------------------------------------------------------------ the store
    def meter_store(self, counters: StoreCounters) -> StoreMeter:
        """Attributes the requests and bytes of the table's store (``table.store.counters``)
        to operations from now on (:mod:`cdc_sink.metrics.store`): what it counted so far
        as ``open``; then each micro-batch as ``commit``, each compaction and GC run as
        reported to :meth:`observe_compaction` and :meth:`observe_gc`, and the blocks of
        :meth:`measure_store`. Replaces another store metered before; the same counters
        again keep their meter (nothing counted twice)."""
        if self._meter is None or self._meter.counters is not counters:
            self._meter = StoreMeter(counters, self.observe_store)
        return self._meter

    @contextlib.contextmanager
    def measure_store(self, operation: StoreOperation) -> Iterator[None]:
        """Attributes the metered store's requests during the block to ``operation``
        (nothing happens without a metered store)."""
        meter = self._meter
        if meter is None:
            yield
            return
        with meter.measure(operation):
            yield

    def _settle_store(self, operation: StoreOperation) -> None:
        if self._meter is not None:
            self._meter.settle(operation)

    @_never_raises
    def observe_store(self, operation: StoreOperation, spent: Counts) -> None:
        """Adds the requests and bytes of one ``operation`` (:class:`StoreMeter` calls it)."""
        b = self._base
        for kind in CALL_KINDS:
            if spent.requests[kind]:
                self._store_requests.labels(**b, kind=kind, operation=operation).inc(
                    spent.requests[kind]
                )
        for direction, kind in _DIRECTIONS.items():
            if spent.bytes[kind]:
                self._store_bytes.labels(**b, direction=direction, operation=operation).inc(
                    spent.bytes[kind]
                )

    # ------------------------------------------------------------------ reading
    def render(self) -> bytes:
        """The registry in Prometheus text format (what ``/metrics`` serves)."""
        return bytes(generate_latest(self.registry))

    def value(self, name: str, **labels: str) -> float | None:
        """One sample's value (``name`` as exposed, e.g. ``cdc_sink_events_total``;
        ``table``/``app_id`` are filled in), or ``None``."""
        v = self.registry.get_sample_value(name, {**self._base, **labels})
        return None if v is None else float(v)
