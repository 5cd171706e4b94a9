"""An endpoint bound off loopback without basic auth or TLS says so (issue 49, finding 14):
a warning in the log and the gauge ``cdc_sink_metrics_endpoint_unprotected`` on the
endpoint itself, one series for each protection it lacks; nothing on loopback, nothing
when both are given. Real servers, scraped by a real client."""

from __future__ import annotations

import logging
import ssl
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families

from cdc_sink.metrics.server import BasicAuth, start_metrics_server

UNPROTECTED = "cdc_sink_metrics_endpoint_unprotected"
AUTH = BasicAuth("prometheus", "s3cret")


def _registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    Counter("scrape_me", "a test counter", registry=reg).inc()
    return reg


def _unprotected(port: int, *, tls: bool = False, auth: bool = False) -> dict[str, float]:
    """The endpoint's ``missing`` -> value series of the gauge, scraped on 127.0.0.1."""
    req = urllib.request.Request(f"{'https' if tls else 'http'}://127.0.0.1:{port}/metrics")
    if auth:
        req.add_header("Authorization", "Basic cHJvbWV0aGV1czpzM2NyZXQ=")  # prometheus:s3cret
    ctx = ssl._create_unverified_context() if tls else None
    with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
        text = resp.read().decode()
    assert "scrape_me_total" in text
    return {
        s.labels["missing"]: s.value
        for fam in text_string_to_metric_families(text)
        if fam.name == UNPROTECTED
        for s in fam.samples
    }


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "cdc_sink.metrics.server" and r.levelno == logging.WARNING
    ]


def test_every_interface_with_neither_auth_nor_tls_is_warned_and_shown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="cdc_sink.metrics.server"),
        start_metrics_server(_registry(), host="0.0.0.0", port=0) as server,
    ):
        assert _unprotected(server.port) == {"auth": 1.0, "tls": 1.0}
    (warning,) = _warnings(caplog)
    assert "0.0.0.0" in warning and "neither basic auth nor TLS" in warning


def test_auth_without_tls_off_loopback_is_warned_and_shown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="cdc_sink.metrics.server"),
        start_metrics_server(_registry(), host="0.0.0.0", port=0, auth=AUTH) as server,
    ):
        assert _unprotected(server.port, auth=True) == {"tls": 1.0}
    (warning,) = _warnings(caplog)
    assert "password crosses the network in clear" in warning
    assert "s3cret" not in warning


def test_auth_and_tls_off_loopback_is_quiet(
    cert: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    crt, key = cert
    with (
        caplog.at_level(logging.WARNING, logger="cdc_sink.metrics.server"),
        start_metrics_server(
            _registry(), host="0.0.0.0", port=0, tls_cert=crt, tls_key=key, auth=AUTH
        ) as server,
    ):
        assert _unprotected(server.port, tls=True, auth=True) == {}
    assert _warnings(caplog) == []


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "127.0.0.2"])
def test_loopback_without_auth_or_tls_is_quiet(host: str, caplog: pytest.LogCaptureFixture) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="cdc_sink.metrics.server"),
        start_metrics_server(_registry(), host=host, port=0) as server,
    ):
        if host == "127.0.0.1":
            assert _unprotected(server.port) == {}
    assert _warnings(caplog) == []


def test_a_second_server_of_the_same_registry_shares_the_gauge() -> None:
    reg = _registry()
    with (
        start_metrics_server(reg, host="0.0.0.0", port=0) as one,
        start_metrics_server(reg, host="0.0.0.0", port=0) as two,
    ):
        assert _unprotected(one.port) == _unprotected(two.port) == {"auth": 1.0, "tls": 1.0}
