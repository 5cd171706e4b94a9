"""Per-table metrics of a many-table job (cdc_sink.metrics.tables): bounded ``table``
labels that keep the worst tables, ``_other`` adding up exactly, stopped tables always
labelled, hooks that never raise."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cdc_sink.errors import InvalidOption
from cdc_sink.metrics import SinkMetrics
from cdc_sink.metrics.tables import MAX_SKIP_REASONS, OTHER, TableMetrics
from cdc_sink.spark.writer import BatchStats

APP = "job-1"
PER_TABLE = {
    "cdc_sink_table_events_total",
    "cdc_sink_table_rejects_total",
    "cdc_sink_table_last_commit_timestamp_seconds",
    "cdc_sink_table_freshness_p99_seconds",
    "cdc_sink_table_stopped",
}
METRIC_NAMES = PER_TABLE | {
    "cdc_sink_tables_known",
    "cdc_sink_tables_open",
    "cdc_sink_tables_open_bytes",
    "cdc_sink_tables_created_total",
    "cdc_sink_tables_stopped",
    "cdc_sink_tables_skipped_events_total",
}
COMMITTED_MS = 1_700_000_000_000


def batch(events: int, *, rejected: int = 0, freshness_ms: float = 100.0) -> BatchStats:
    """A committed batch whose freshness sample is ``freshness_ms`` for every event."""
    return BatchStats(
        batch_id=1,
        version=2,
        skipped=False,
        events=events,
        rejected=rejected,
        committed_ms=COMMITTED_MS,
        ts_sample=np.full(10, COMMITTED_MS - freshness_ms, dtype=np.float64),
    )


def series(m: TableMetrics, name: str) -> dict[str, float]:
    """``table`` label value -> value of every sample of ``name``."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(generate_latest(m.registry).decode()):
        for s in fam.samples:
            if s.name == name:
                assert s.labels["app_id"] == APP
                out[s.labels["table"]] = s.value
    return out


def events_by_label(m: TableMetrics) -> dict[str, float]:
    return series(m, "cdc_sink_table_events_total")


def test_cap_holds_with_more_tables_than_max_tables() -> None:
    m = TableMetrics(max_tables=10, app_id=APP)
    for i in range(10 + 20):
        m.observe(f"db.t{i:02d}", batch(5, freshness_ms=10.0 * (i % 7)))
    for name in sorted(PER_TABLE):
        labels = series(m, name)
        assert len(labels) <= 10 + 1, name
        assert set(labels) - {OTHER} <= set(m.labelled())
    assert len(m.labelled()) == 10
    assert m.value("cdc_sink_tables_known") == 30


def test_the_worst_tables_by_freshness_keep_their_labels() -> None:
    m = TableMetrics(max_tables=5, app_id=APP)
    order = [7, 3, 19, 0, 11, 15, 2, 18, 9, 4, 16, 1, 17, 6, 12, 5, 14, 8, 13, 10]
    for i in order:  # freshness i seconds: the worst five are 15..19
        m.observe(f"t{i}", batch(1, freshness_ms=1000.0 * i))
    assert m.labelled() == [f"t{i}" for i in range(15, 20)]
    fresh = series(m, "cdc_sink_table_freshness_p99_seconds")
    assert fresh == {f"t{i}": pytest.approx(float(i)) for i in range(15, 20)}


def test_stopped_then_rejects_then_freshness_order_the_tables() -> None:
    m = TableMetrics(max_tables=2, app_id=APP)
    m.observe("slow", batch(1, freshness_ms=60_000))
    m.observe("slower", batch(1, freshness_ms=90_000))
    m.observe("rejecting", batch(3, rejected=1, freshness_ms=10))  # rejects beat freshness
    assert m.labelled() == ["rejecting", "slower"]
    m.table_stopped("fast", "column type change")  # stopped beats everything
    assert m.labelled() == ["fast", "rejecting"]


def test_a_table_worse_than_the_best_labelled_one_replaces_it() -> None:
    m = TableMetrics(max_tables=3, app_id=APP)
    for name, ms in (("a", 1000), ("b", 2000), ("c", 3000)):
        m.observe(name, batch(10, freshness_ms=ms))
    m.observe("d", batch(7, freshness_ms=500))  # better than all: counted in _other
    assert m.labelled() == ["a", "b", "c"]
    assert events_by_label(m) == {"a": 10, "b": 10, "c": 10, OTHER: 7}

    m.observe("d", batch(4, freshness_ms=1500))  # now worse than a, the best labelled
    assert m.labelled() == ["b", "c", "d"]
    got = events_by_label(m)
    assert "a" not in got  # its series is removed...
    assert got == {"b": 10, "c": 10, "d": 4, OTHER: 7 + 10}  # ...and its count folded
    for name in ("cdc_sink_table_freshness_p99_seconds", "cdc_sink_table_stopped"):
        assert "a" not in series(m, name)
        assert m.value(name, table="d") is not None


def test_other_adds_up_exactly_to_every_event_and_reject() -> None:
    rng = np.random.default_rng(5)
    m = TableMetrics(max_tables=4, app_id=APP)
    total_events = total_rejects = 0
    for _ in range(400):
        t = f"db.t{rng.integers(0, 25)}"
        events = int(rng.integers(0, 50))
        rejected = int(rng.integers(0, 3)) if rng.random() < 0.2 else 0
        m.observe(t, batch(events, rejected=rejected, freshness_ms=float(rng.integers(1, 9000))))
        total_events += events
        total_rejects += rejected
        if rng.random() < 0.02:
            m.table_stopped(t, "schema change")
    assert sum(events_by_label(m).values()) == total_events
    assert sum(series(m, "cdc_sink_table_rejects_total").values()) == total_rejects
    assert len(events_by_label(m)) <= 4 + 1


def test_stopped_tables_are_always_labelled_up_to_the_cap() -> None:
    m = TableMetrics(max_tables=3, app_id=APP)
    for i in range(6):
        m.observe(f"bad{i}", batch(1, rejected=1, freshness_ms=50_000))
    m.table_stopped("quiet1", "column dropped")
    m.table_stopped("quiet2", "type change")
    assert {"quiet1", "quiet2"} <= set(m.labelled())
    assert series(m, "cdc_sink_table_stopped")["quiet1"] == 1
    m.table_stopped("quiet3", "x")
    m.table_stopped("quiet4", "x")  # a fourth: the cap is full of stopped tables
    stopped = series(m, "cdc_sink_table_stopped")
    assert sorted(k for k, v in stopped.items() if k != OTHER and v == 1) == m.labelled()
    assert len(m.labelled()) == 3
    assert stopped[OTHER] == 1  # the stopped table without a label of its own
    assert m.value("cdc_sink_tables_stopped") == 4
    m.table_stopped("quiet1", "again")  # stopping twice counts once
    assert m.value("cdc_sink_tables_stopped") == 4


def test_a_stopped_table_that_earns_its_label_later_leaves_others_stopped_count() -> None:
    m = TableMetrics(max_tables=1, app_id=APP)
    m.table_stopped("s1", "x")
    m.table_stopped("s2", "x")  # cap full: counted under _other
    assert series(m, "cdc_sink_table_stopped") == {"s1": 1, OTHER: 1}
    m.observe("s2", batch(1, rejected=1))  # now worse than s1: takes its label
    assert series(m, "cdc_sink_table_stopped") == {"s2": 1, OTHER: 1}


def test_job_gauges_and_counters() -> None:
    m = TableMetrics(max_tables=2, app_id=APP)
    m.table_created("inventory.customers")
    m.table_created("inventory.orders")
    m.table_skipped("inventory.audit", "no primary key", 12)
    m.table_skipped("inventory.audit", "No Primary Key!", 3)
    m.tables_open(2, 4096)
    assert m.value("cdc_sink_tables_created_total") == 2
    assert m.value("cdc_sink_tables_known") == 3
    assert m.value("cdc_sink_tables_open") == 2
    assert m.value("cdc_sink_tables_open_bytes") == 4096
    assert m.value("cdc_sink_tables_skipped_events_total", reason="no_primary_key") == 15


def test_skip_reasons_are_bounded_and_never_urls() -> None:
    m = TableMetrics(app_id=APP)
    for i in range(MAX_SKIP_REASONS + 10):
        m.table_skipped("t", f"reason {i}", 1)
    m.table_skipped("t", "s3://key:secret@bucket/x", 1)
    reasons: set[str] = set()
    for fam in text_string_to_metric_families(generate_latest(m.registry).decode()):
        for s in fam.samples:
            if s.name == "cdc_sink_tables_skipped_events_total":
                reasons.add(s.labels["reason"])
    assert len(reasons) <= MAX_SKIP_REASONS + 1
    assert "other" in reasons and not any("secret" in r or "s3" in r for r in reasons)


@pytest.mark.parametrize(
    "name", ["", OTHER, "s3://bucket/db.t", "user:pw@host", "a/b", "x" * 500, "tab\tle"]
)
def test_names_unfit_for_a_label_are_counted_under_other(name: str) -> None:
    m = TableMetrics(max_tables=5, app_id=APP)
    m.observe(name, batch(3))
    assert m.labelled() == []
    assert events_by_label(m) == {OTHER: 3}


def test_hooks_never_raise_on_odd_input(caplog: pytest.LogCaptureFixture) -> None:
    m = TableMetrics(max_tables=2, app_id=APP)
    with caplog.at_level(logging.WARNING, logger="cdc_sink.metrics"):
        m.observe("t", object())  # type: ignore[arg-type]
        m.observe(None, batch(2))  # type: ignore[arg-type]
        m.observe("t", batch(-5, rejected=-1))
        m.observe("nan", batch(1, freshness_ms=float("nan")))
        m.table_skipped("t", None, "many")  # type: ignore[arg-type]
        m.tables_open("x", None)  # type: ignore[arg-type]
        m.table_stopped(42, None)  # type: ignore[arg-type]
        m.table_created(None)  # type: ignore[arg-type]
    errors = m.value("cdc_sink_tables_metrics_errors_total")
    assert errors is not None and errors >= 3
    assert "metrics update" in caplog.text
    got = events_by_label(m)
    assert got["t"] == 0 and got[OTHER] == 2 and got["nan"] == 1
    assert "None" not in got and "42" not in got


def test_skipped_and_failed_batches_count_no_events() -> None:
    m = TableMetrics(app_id=APP)
    skipped = BatchStats(
        batch_id=1, version=None, skipped=True, events=9, rejected=0, result="skipped"
    )
    failed = BatchStats(
        batch_id=2, version=None, skipped=False, events=9, rejected=1, result="failed"
    )
    m.observe("t", skipped)
    m.observe("t", failed)
    assert events_by_label(m)["t"] == 0
    assert "t" not in series(m, "cdc_sink_table_last_commit_timestamp_seconds")


def test_shares_a_registry_with_sink_metrics() -> None:
    registry = CollectorRegistry()
    SinkMetrics("orders", APP, registry=registry)
    m = TableMetrics(registry, app_id=APP)
    m.observe("db.orders", batch(4, freshness_ms=2500))
    assert m.value("cdc_sink_table_events_total", table="db.orders") == 4
    assert m.value("cdc_sink_table_freshness_p99_seconds", table="db.orders") == 2.5
    assert m.value("cdc_sink_table_last_commit_timestamp_seconds", table="db.orders") == (
        COMMITTED_MS / 1000
    )


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_max_tables_must_be_a_positive_integer(bad: object) -> None:
    with pytest.raises(InvalidOption):
        TableMetrics(max_tables=bad)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- the dashboard


@pytest.mark.integration
def test_every_table_panel_has_data_from_a_real_prometheus(tmp_path: Path) -> None:
    """The dashboard's panels over these metrics, as Grafana sends them, against a real
    Prometheus scraping a TableMetrics: each query returns a finite series, with the
    ``table`` variable on ``All`` (the job-wide series carry no ``table`` label) and, for
    the per-table panels, on one table."""
    from cdc_sink.metrics import start_metrics_server
    from tests.dashboards.dashboard_files import (
        committed_dashboard,
        metric_names,
        panel_queries,
        panels,
    )
    from tests.dashboards.panel_check import RATE_INTERVAL, check_panels, wait_for
    from tests.dashboards.prometheus_server import PrometheusServer, finite_series

    m = TableMetrics(max_tables=3, app_id=APP)
    m.table_stopped("db.t1", "column type change")
    server = start_metrics_server(m.registry)
    stop = threading.Event()

    def feed() -> None:
        i = 0
        while not stop.wait(0.2):
            i += 1
            m.observe(f"db.t{i % 6}", batch(10, rejected=i % 2, freshness_ms=100.0 * (i % 6)))
            m.table_created(f"db.t{i}")
            m.table_skipped("db.audit", "no primary key", 2)
            m.tables_open(3, 1000 + i)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    dashboard = committed_dashboard()
    ours = [
        p
        for p in panels(dashboard)
        if any(metric_names(t["expr"]) & METRIC_NAMES for t in p["targets"])
    ]
    per_table = [p for p in ours if all(metric_names(t["expr"]) <= PER_TABLE for t in p["targets"])]
    assert {p["title"] for p in ours} >= {
        "Worst tables by freshness",
        "Rejects by table",
        "Stopped tables",
        "Tables open / memory",
    }
    try:
        target = f"127.0.0.1:{server.port}"
        with PrometheusServer(tmp_path / "prometheus", [target]) as prom:
            start = time.time()
            wait_for(
                "five scrapes",
                lambda: prom.value(f'count_over_time(up{{instance="{target}"}}[1m]) >= 5'),
                60,
            )
            end = time.time()
            empty = []
            for q in panel_queries({"panels": ours}):
                expr = (
                    q.expr.replace("$__rate_interval", RATE_INTERVAL)
                    .replace("$table", ".*")
                    .replace("$app_id", APP)
                )
                if not finite_series(prom.query(expr, at=end)):
                    empty.append(f"{q.name}: {expr}")
            empty += check_panels(prom, {"panels": per_table}, "db.t1", APP, start - 5, end)
    finally:
        stop.set()
        feeder.join(timeout=5)
        server.close()
    assert empty == [], "\n".join(empty)


def test_the_families_are_the_documented_ones_and_the_dashboards_know_them() -> None:
    from tests.dashboards.dashboard_files import METRICS

    m = TableMetrics(app_id=APP)
    m.observe("t", batch(1))
    m.table_skipped("u", "no primary key", 1)  # a reason's series exists once seen
    samples = {
        s.name
        for fam in text_string_to_metric_families(generate_latest(m.registry).decode())
        for s in fam.samples
    }
    exported = {n for n in samples if not n.endswith("_created")}
    assert exported == METRIC_NAMES | {"cdc_sink_tables_metrics_errors_total"}
    assert set(METRICS) >= METRIC_NAMES
