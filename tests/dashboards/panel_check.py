"""The panel check of the dashboard tests: every query of a dashboard, as Grafana sends
it, against a real Prometheus."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from tests.dashboards.dashboard_files import panel_queries, substitute
from tests.dashboards.prometheus_server import PrometheusServer, finite_series

__all__ = ["RATE_INTERVAL", "STEP", "check_panels", "wait_for"]

RATE_INTERVAL = "30s"  # what $__rate_interval becomes
STEP = "2s"  # of the range queries (Grafana: time range / max data points)

T = TypeVar("T")


def wait_for(what: str, fn: Callable[[], T | None], timeout: float) -> T:
    """Polls ``fn`` until it returns a value, failing the test after ``timeout`` seconds
    (what is awaited runs in other processes: Prometheus's scrapes, a job's batches)."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.5)


def check_panels(
    prom: PrometheusServer,
    dashboard: dict[str, Any],
    table: str,
    app_id: str,
    start: float,
    end: float,
) -> list[str]:
    """Every panel query of ``dashboard``, substituted for this job, as Grafana sends it
    for a dashboard showing ``start..end`` (the job's run): the instant query at ``end``
    (``/api/v1/query``) must return at least one series, and it or the range query must
    hold a finite value (a histogram quantile over a window without observations is NaN:
    nothing drawn). Returns the panels (named) that fail."""
    failed = []
    for q in panel_queries(dashboard):
        expr = substitute(q.expr, table=table, app_id=app_id, rate_interval=RATE_INTERVAL)
        instant = prom.query(expr, at=end)
        drawn = finite_series(instant) or finite_series(
            prom.query_range(expr, start, end, step=STEP)
        )
        if not instant or not drawn:
            failed.append(
                f"panel {q.name!r}: {expr} -> instant {instant}, "
                f"{len(drawn)} series with data over the run"
            )
    return failed
