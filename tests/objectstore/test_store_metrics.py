"""The sink's metrics of object-store requests and bytes, on each backend (a directory and
the S3 server): a table written by the job's own pieces (the batch observer after every
micro-batch, the maintenance's compaction and GC) and read cold by a fresh reader; each
operation's ``cdc_sink_store_requests_total`` and ``cdc_sink_store_bytes_total`` equal
what the store itself counted during that operation, and together everything it counted."""

from __future__ import annotations

import numpy as np

from cdc_sink.job.schedule import Maintenance
from cdc_sink.metrics import SinkMetrics
from cdc_sink.metrics.observer import BatchObserver
from cdc_sink.metrics.store import STORE_OPERATIONS, StoreOperation
from cdc_sink.spark.writer import BatchStats
from cdc_sink.storage.objectstore.counters import CALL_KINDS, CallKind, Counts, StoreCounters
from cdc_sink.table import Table, TableOptions, create_table, open_table
from tests.durability import checks, workload
from tests.objectstore.conftest import Target

SEED = 5
BATCHES = 8
COMPACT_AFTER = (3, 6)
"""The batches after which the maintenance compacts the table ..."""
GC_AFTER = (4, 8)
"""... and after which it runs GC."""
OPTS = TableOptions.for_tests()
DIRECTIONS: dict[str, CallKind] = {"read": "GET", "written": "PUT"}


class _Sink:
    """What the observer reads of the job's sink: its table and ``on_batch``."""

    on_batch = None

    def __init__(self, table: Table) -> None:
        self.table = table


def _zero() -> Counts:
    return StoreCounters().snapshot()


def _plus(a: Counts, b: Counts) -> Counts:
    return Counts(
        {k: a.requests[k] + b.requests[k] for k in CALL_KINDS},
        {k: a.bytes[k] + b.bytes[k] for k in CALL_KINDS},
    )


Figures = tuple[dict[CallKind, float], dict[str, float]]


def _exported(m: SinkMetrics, operation: str) -> Figures:
    """(requests per kind, bytes per direction) of ``operation`` as the metrics have them."""
    requests = {
        k: m.value("cdc_sink_store_requests_total", kind=k, operation=operation) or 0.0
        for k in CALL_KINDS
    }
    nbytes = {
        d: m.value("cdc_sink_store_bytes_total", direction=d, operation=operation) or 0.0
        for d in DIRECTIONS
    }
    return requests, nbytes


def _expected(c: Counts) -> Figures:
    return (
        {k: float(c.requests[k]) for k in CALL_KINDS},
        {d: float(c.bytes[k]) for d, k in DIRECTIONS.items()},
    )


def _committed(i: int, version: int) -> BatchStats:
    return BatchStats(i, version, False, 14, 0, {}, committed_ms=1, phases={"commit": 0.0})


def _gc(table: Table, m: SinkMetrics) -> None:
    """A GC run reported as the job's maintenance reports it (not ``Maintenance.gc``
    itself: its log line reads the oldest version after reporting, and those requests
    go to the next batch)."""
    plan = table.gc(dry_run=False, retain_versions=2, retain_seconds=0.0)
    m.observe_gc(0.0, ok=True, removed_files=len(plan))


def test_store_metrics_equal_the_store_counts_of_each_operation(target: Target) -> None:
    table = create_table(
        target.url, workload.schema(), options=OPTS, storage_options=target.options or None
    )
    counters = table.store.counters
    m = SinkMetrics("t", workload.APP_ID)
    spent = dict.fromkeys(STORE_OPERATIONS, _zero())
    spent["open"] = counters.snapshot()
    observer = BatchObserver(_Sink(table), m, stats_interval=0).attach()
    maintenance = Maintenance(
        table, m, compact_every=0, gc_every=0, retain_versions=2, retain_seconds=0.0
    )
    for i in range(1, BATCHES + 1):
        before = counters.snapshot()
        res = table.apply(workload.batch(SEED, i), app_id=workload.APP_ID, batch_id=i)
        applied = counters.snapshot()
        observer.on_batch(_committed(i, res.version))  # then the table gauges' refresh
        observed = counters.snapshot()
        spent["commit"] = _plus(spent["commit"], applied.minus(before))
        spent["stats"] = _plus(spent["stats"], observed.minus(applied))
        operation: StoreOperation
        for after, run, operation in (
            (COMPACT_AFTER, maintenance.compact, "compaction"),
            (GC_AFTER, lambda: _gc(table, m), "gc"),
        ):
            if i in after:
                before = counters.snapshot()
                run()
                spent[operation] = _plus(spent[operation], counters.snapshot().minus(before))

    reader = open_table(target.url, options=OPTS, storage_options=target.options or None)
    reader_metrics = SinkMetrics("t", "reader")
    opened = reader.store.counters.snapshot()
    reader_metrics.meter_store(reader.store.counters)
    before = reader.store.counters.snapshot()
    with reader_metrics.measure_store("cold_read"):
        rows = checks.rows_of(reader.read(version=reader.version))
    cold = reader.store.counters.snapshot().minus(before)

    batches = [workload.batch(SEED, i) for i in range(1, BATCHES + 1)]
    assert rows == checks.model_after(batches)[BATCHES]
    assert spent["commit"].requests["PUT"] >= BATCHES  # (what the assertions below compare)
    assert spent["compaction"].requests["PUT"] > 0 and spent["gc"].requests["LIST"] > 0
    if target.backend == "s3":  # a local store removes GC's files with unlink, uncounted
        assert spent["gc"].requests["DELETE"] > 0
    assert spent["stats"].total_requests > 0 and cold.requests["GET"] > 0
    for operation in STORE_OPERATIONS:
        assert _exported(m, operation) == _expected(spent[operation]), operation
    assert _exported(reader_metrics, "open") == _expected(opened)
    assert _exported(reader_metrics, "cold_read") == _expected(cold)
    total = _zero()
    for c in spent.values():
        total = _plus(total, c)
    assert total == counters.snapshot()  # every request attributed, none twice


def test_a_measured_block_settles_what_came_before_it_as_other(target: Target) -> None:
    table = create_table(
        target.url, workload.schema(), options=OPTS, storage_options=target.options or None
    )
    counters = table.store.counters
    m = SinkMetrics("t", workload.APP_ID)
    m.meter_store(counters)
    before = counters.snapshot()
    table.apply(workload.batch(SEED, 1))  # not reported to the metrics
    between = counters.snapshot()
    with m.measure_store("cold_read"):
        open_table(target.url, options=OPTS, storage_options=target.options or None)
        table.read(version=0)
    after = counters.snapshot()
    assert between.minus(before).total_requests > 0
    assert _exported(m, "other") == _expected(between.minus(before))
    assert _exported(m, "cold_read") == _expected(after.minus(between))
    assert np.isclose(sum(_exported(m, "commit")[0].values()), 0.0)
