"""The panel check of test_prometheus_scrape.py is not vacuous: against a real Prometheus
scraping a small exporter, a panel whose query matches nothing, or only NaN, is reported
by name, and a panel with data is not."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.dashboards.panel_check import check_panels, wait_for
from tests.dashboards.prometheus_server import PrometheusServer, free_port

pytestmark = [pytest.mark.integration]


def test_a_panel_without_data_fails_naming_the_panel(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

    registry = CollectorRegistry()
    events = Counter(
        "cdc_sink_events_total", "events", ["table", "app_id", "op", "outcome"], registry=registry
    )
    fresh = Histogram(
        "cdc_sink_freshness_seconds", "freshness", ["table", "app_id"], registry=registry
    )
    app_id = "cdc_to_tablets:/tmp/a.b/checkpoint"
    events.labels("orders", app_id, "insert", "received").inc(5)
    fresh.labels("orders", app_id)  # a histogram that never observed: NaN quantiles
    port = free_port()
    httpd, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        dashboard = {
            "panels": [
                {"type": "row", "title": "r"},
                {
                    "type": "timeseries",
                    "title": "Good",
                    "targets": [
                        {
                            "refId": "A",
                            "expr": 'sum by (op) (rate(cdc_sink_events_total{table=~"$table",'
                            ' app_id=~"$app_id"}[$__rate_interval]))',
                        }
                    ],
                },
                {
                    "type": "timeseries",
                    "title": "Wrong table",
                    "targets": [{"refId": "A", "expr": 'cdc_sink_events_total{table=~"$table-x"}'}],
                },
                {
                    "type": "timeseries",
                    "title": "Never observed",
                    "targets": [
                        {
                            "refId": "A",
                            "expr": "histogram_quantile(0.5, sum by (le) (rate("
                            'cdc_sink_freshness_seconds_bucket{app_id=~"$app_id"}'
                            "[$__rate_interval])))",
                        }
                    ],
                },
            ]
        }
        with PrometheusServer(tmp_path / "prometheus", [f"127.0.0.1:{port}"]) as prom:
            start = time.time()
            wait_for(
                "two scrapes",
                lambda: prom.value(f'count_over_time(up{{instance="127.0.0.1:{port}"}}[1m]) >= 2'),
                60,
            )
            failed = check_panels(prom, dashboard, "orders", app_id, start - 5, time.time())
    finally:
        httpd.shutdown()
        thread.join(timeout=5)
    assert [f.split(":")[0] for f in failed] == [
        "panel 'Wrong table [A]'",
        "panel 'Never observed [A]'",
    ], "\n".join(failed)
