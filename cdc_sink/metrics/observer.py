"""Per-micro-batch observation of a sink: metrics, the table gauges and one log line.

:class:`BatchObserver` is what the streaming job (and ``cdc-sink demo``) hangs on
``SinkFunction.on_batch``: after every micro-batch it counts the batch in
:class:`~cdc_sink.metrics.sink.SinkMetrics` (with the table store's requests and bytes
since the batch before, :mod:`cdc_sink.metrics.store`), refreshes the table gauges from
``table.stats()`` (the directory walk at most every ``disk_max_age`` seconds) and logs
one ``key=value`` line::

    batch batch_id=12 result=committed version=13 events=5000 rejects=3 applied=4990
    stale=7 ignored=0 read_s=0.041 decode_s=0.012 apply_s=0.030 commit_s=0.004
    dead_letters_s=0.000 total_s=0.090 freshness_p50_ms=310 freshness_p99_ms=820
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from cdc_sink.metrics.sink import PHASES, BatchFigures, SinkMetrics, batch_result, outcome_counts
from cdc_sink.metrics.tables import TableMetrics
from cdc_sink.storage.objectstore.counters import StoreCounters

__all__ = ["BatchObserver", "format_batch"]

logger = logging.getLogger(__name__)


def format_batch(st: BatchFigures) -> str:
    """The ``key=value`` log line of one micro-batch (without a trailing newline)."""
    result = batch_result(st)
    parts = [f"batch_id={st.batch_id}", f"result={result}"]
    if result == "skipped":
        return "batch " + " ".join([*parts, "(already committed)"])
    if result == "failed":
        error = getattr(st, "error", None)
        phases = getattr(st, "phases", None) or {}
        parts += [f"{p}_s={phases[p]:.3f}" for p in PHASES if p in phases]
        parts.append(f"total_s={st.total_s:.3f}")
        if error:
            parts.append(f"error={error!r}")
        return "batch " + " ".join(parts)
    parts += [f"version={st.version}", f"events={st.events}", f"rejects={st.rejected}"]
    parts += [f"{k}={v}" for k, v in outcome_counts(st).items() if k != "rejected"]
    phases = getattr(st, "phases", None) or {
        "decode": getattr(st, "decode_s", 0.0),
        "apply": getattr(st, "apply_s", 0.0),
    }
    parts += [f"{p}_s={float(phases[p]):.3f}" for p in PHASES if p in phases]
    parts.append(f"total_s={st.total_s:.3f}")
    fresh = st.freshness_ms()
    if len(fresh):
        p50, p99 = np.percentile(np.asarray(fresh, dtype=np.float64), [50, 99])
        parts += [f"freshness_p50_ms={p50:.0f}", f"freshness_p99_ms={p99:.0f}"]
    return "batch " + " ".join(parts)


class BatchObserver:
    """Observes a sink's micro-batches (see the module docstring).

    Args:
        sink_fn: The ``SinkFunction`` (``.table``, ``.on_batch``).
        metrics: Where to count (``None``: only the log line).
        log: Logger of the per-batch line (default this module's).
        stats_interval: Seconds between two refreshes of the table gauges from batches.
        disk_max_age: Seconds a directory walk of the table is reused for its gauges.
        tables: The per-table metrics (:class:`~cdc_sink.metrics.tables.TableMetrics`)
            this one-table job also reports to, as a many-table job's router does: its
            batches under ``table_name``, and the table's memory as the tables open.
        table_name: The table's ``table`` label.
    """

    def __init__(
        self,
        sink_fn: Any,
        metrics: SinkMetrics | None,
        *,
        log: logging.Logger | None = None,
        stats_interval: float = 5.0,
        disk_max_age: float = 10.0,
        tables: TableMetrics | None = None,
        table_name: str = "",
    ) -> None:
        self.sink_fn = sink_fn
        self.tables = tables
        self.table_name = table_name
        self.metrics = metrics
        self.log = log or logger
        self.stats_interval = stats_interval
        self.disk_max_age = disk_max_age
        self._refreshed_at: float | None = None
        self._dirty = False

    def attach(self) -> BatchObserver:
        """Sets ``sink_fn.on_batch`` to :meth:`on_batch` and meters the table's store
        (:meth:`meter_store`); returns ``self``."""
        self.sink_fn.on_batch = self.on_batch
        self.meter_store()
        return self

    def meter_store(self) -> None:
        """Has the metrics attribute the object-store requests of ``sink_fn.table`` to
        operations (:meth:`SinkMetrics.meter_store`): those made so far as ``open``, then
        each micro-batch as ``commit``. Opens the table if the sink has not yet. A table
        without a store's counters (a stand-in in tests) is not metered; a failure is
        logged. In executors mode only the driver's requests are counted."""
        if self.metrics is None:
            return
        try:
            store = getattr(self.sink_fn.table, "store", None)
            counters = getattr(store, "counters", None)
            if isinstance(counters, StoreCounters):
                self.metrics.meter_store(counters)
        except Exception:
            self.log.warning("cannot meter the table's store requests", exc_info=True)

    def on_batch(self, st: BatchFigures) -> None:
        """Counts, logs and refreshes the table gauges after one micro-batch."""
        if self.metrics is not None:
            self.metrics.observe_batch(st)
        if self.tables is not None:
            self.tables.observe(self.table_name, st)
        result = batch_result(st)
        try:
            line = format_batch(st)
        except Exception:  # a log line never fails the stream
            self.log.warning("cannot format the figures of batch %s", st.batch_id, exc_info=True)
        else:
            if result == "failed":
                self.log.error(line)
            else:
                self.log.info(line)
        if result == "committed" and self.metrics is not None:
            if st.version is not None:
                self.metrics.observe_table_version(st.version)
            self._dirty = True
            self.refresh_if_due()

    def refresh_if_due(self) -> None:
        """Refreshes the table gauges if a batch committed since the last refresh and
        ``stats_interval`` has passed (the job calls it from its main loop too)."""
        due = (
            self._refreshed_at is None
            or time.monotonic() - self._refreshed_at >= self.stats_interval
        )
        if self._dirty and due:
            self.refresh_table()

    def refresh_table(self) -> None:
        """Sets the table gauges from ``table.stats()`` now (failures are logged)."""
        if self.metrics is None:
            return
        self._refreshed_at = time.monotonic()
        self._dirty = False
        try:
            with self.metrics.measure_store("stats"):
                stats = self.sink_fn.table.stats(disk_max_age=self.disk_max_age)
            # Executors mode: the tablets live in the executors; their tasks report them.
            remote = getattr(self.sink_fn, "bucket_figures", None)
            if remote:
                from cdc_sink.stats import with_remote_buckets

                stats = with_remote_buckets(stats, remote)
        except Exception:
            self.log.warning("table statistics failed; table gauges not refreshed", exc_info=True)
            return
        self.metrics.observe_table(stats)
        if self.tables is not None:
            self.tables.tables_open(1, stats.memory_bytes)
