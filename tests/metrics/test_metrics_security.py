"""The metrics endpoint's TLS and basic auth, with a real server and real clients: an
HTTPS client verifying a self-signed certificate made here (``openssl req``), 401 without
or with wrong credentials and 200 with the right ones, no cleartext answer on a TLS
port, a stalled handshake that holds no other scrape up, and the credentials read from a
file or an environment variable (never a command line)."""

from __future__ import annotations

import base64
import http.client
import shlex
import shutil
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter

from cdc_sink.metrics.server import (
    AUTH_ENV,
    BasicAuth,
    MetricsServer,
    MetricsServerError,
    load_basic_auth,
    start_metrics_server,
)
from tests.dashboards.prometheus_server import PrometheusServer

USER, PASSWORD = "prometheus", "s3cret:with-colon"


@pytest.fixture
def registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    Counter("scrape_me", "a test counter", registry=reg).inc()
    return reg


@pytest.fixture
def tls_server(registry: CollectorRegistry, cert: tuple[Path, Path]) -> Iterator[MetricsServer]:
    crt, key = cert
    with start_metrics_server(
        registry, port=0, tls_cert=crt, tls_key=key, auth=BasicAuth(USER, PASSWORD)
    ) as server:
        yield server


def _client_context(crt: Path) -> ssl.SSLContext:
    """A client that verifies the server against the test certificate."""
    ctx = ssl.create_default_context(cafile=str(crt))
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    return ctx


def _get(
    server: MetricsServer, crt: Path | None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    conn: http.client.HTTPConnection
    if crt is None:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    else:
        conn = http.client.HTTPSConnection(
            "127.0.0.1", server.port, timeout=10, context=_client_context(crt)
        )
    try:
        conn.request("GET", "/metrics", headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def _basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


# ---------------------------------------------------------------------- TLS + auth
def test_the_right_credentials_over_verified_tls_get_the_metrics(
    tls_server: MetricsServer, cert: tuple[Path, Path]
) -> None:
    assert tls_server.url == f"https://127.0.0.1:{tls_server.port}/metrics"
    status, _, body = _get(tls_server, cert[0], _basic(USER, PASSWORD))
    assert status == 200
    assert b"scrape_me_total 1.0" in body


@pytest.mark.parametrize(
    "headers",
    [
        {},
        _basic(USER, "wrong"),
        _basic("someone", PASSWORD),
        _basic(USER, PASSWORD + "x"),
        {"Authorization": "Basic !!not-base64!!"},
        {"Authorization": f"Bearer {PASSWORD}"},
    ],
    ids=["none", "wrong-password", "wrong-user", "longer-password", "not-base64", "bearer"],
)
def test_missing_or_wrong_credentials_get_401(
    tls_server: MetricsServer, cert: tuple[Path, Path], headers: dict[str, str]
) -> None:
    status, got, body = _get(tls_server, cert[0], headers)
    assert status == 401
    assert got["WWW-Authenticate"].startswith("Basic ")
    assert b"scrape_me" not in body


def test_a_tls_port_gives_no_cleartext_answer(tls_server: MetricsServer) -> None:
    with pytest.raises((http.client.HTTPException, OSError)):
        _get(tls_server, None, _basic(USER, PASSWORD))


def test_a_client_that_does_not_trust_the_certificate_is_refused(
    tls_server: MetricsServer,
) -> None:
    conn = http.client.HTTPSConnection(
        "127.0.0.1", tls_server.port, timeout=10, context=ssl.create_default_context()
    )
    with pytest.raises(ssl.SSLCertVerificationError):
        conn.request("GET", "/metrics")
    conn.close()


def test_a_stalled_handshake_holds_no_other_scrape_up(
    tls_server: MetricsServer, cert: tuple[Path, Path]
) -> None:
    """The handshake runs in the request's thread: a connection that never sends its
    ClientHello does not stop the server from accepting the next one."""
    with socket.create_connection(("127.0.0.1", tls_server.port), timeout=10):
        status, _, _ = _get(tls_server, cert[0], _basic(USER, PASSWORD))
    assert status == 200


# ---------------------------------------------------------------------- auth without TLS
def test_basic_auth_alone_on_loopback(registry: CollectorRegistry) -> None:
    with start_metrics_server(registry, port=0, auth=BasicAuth(USER, PASSWORD)) as server:
        assert server.url.startswith("http://")
        assert _get(server, None)[0] == 401
        assert _get(server, None, _basic(USER, PASSWORD))[0] == 200


def test_without_options_the_endpoint_is_open_plain_http(registry: CollectorRegistry) -> None:
    with start_metrics_server(registry, port=0) as server:
        assert _get(server, None)[0] == 200


# ---------------------------------------------------------------------- bad settings
def test_a_certificate_without_a_key_is_refused(
    registry: CollectorRegistry, cert: tuple[Path, Path]
) -> None:
    with pytest.raises(ValueError, match="both a certificate and a key"):
        start_metrics_server(registry, port=0, tls_cert=cert[0])


def test_an_unreadable_certificate_is_an_error_naming_it(
    registry: CollectorRegistry, tmp_path: Path, cert: tuple[Path, Path]
) -> None:
    missing = tmp_path / "nope.pem"
    with pytest.raises(MetricsServerError, match=r"nope\.pem"):
        start_metrics_server(registry, port=0, tls_cert=missing, tls_key=cert[1])


# ---------------------------------------------------------------------- credentials
def test_credentials_come_from_a_file_first_then_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(AUTH_ENV, raising=False)
    assert load_basic_auth() is None
    monkeypatch.setenv(AUTH_ENV, f"{USER}:{PASSWORD}")
    assert load_basic_auth() == BasicAuth(USER, PASSWORD)
    f = tmp_path / "auth"
    f.write_text(f"other:{PASSWORD}\nignored\n")
    f.chmod(0o600)
    assert load_basic_auth(f) == BasicAuth("other", PASSWORD)


@pytest.mark.parametrize("text", ["no-colon", ":password", "user:", "us:er"])
def test_malformed_credentials_are_refused(text: str, tmp_path: Path) -> None:
    f = tmp_path / "auth"
    f.write_text(text + "\n")
    if text == "us:er":  # a colon in the password is fine: it is 'us' and 'er'
        assert load_basic_auth(f) == BasicAuth("us", "er")
        return
    with pytest.raises(ValueError):
        load_basic_auth(f)


def test_a_missing_auth_file_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(MetricsServerError, match="absent"):
        load_basic_auth(tmp_path / "absent")


def test_the_password_is_not_in_the_repr() -> None:
    assert PASSWORD not in repr(BasicAuth(USER, PASSWORD))


def test_the_streaming_job_takes_tls_files_and_an_auth_file_but_no_password() -> None:
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "streaming_jobs" / "cdc_to_tablets.py"
    spec = importlib.util.spec_from_file_location("_jobs_cdc_to_tablets_sec", path)
    assert spec is not None and spec.loader is not None
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    base = ["--bootstrap-servers", "k:9092", "--topic", "t", "--table-path", "/t"]
    args = job.build_parser().parse_args(
        [
            *base,
            *shlex.split(
                "--metrics-tls-cert /c.pem --metrics-tls-key /k.pem --metrics-auth-file /auth"
            ),
        ]
    )
    assert (args.metrics_tls_cert, args.metrics_tls_key) == ("/c.pem", "/k.pem")
    assert args.metrics_auth_file == "/auth"
    options = {o for a in job.build_parser()._actions for o in a.option_strings}
    assert not {o for o in options if "password" in o}


def test_the_job_image_health_check_sees_a_tls_and_auth_endpoint_alive(
    tls_server: MetricsServer, registry: CollectorRegistry
) -> None:
    """docker/healthcheck.py: an endpoint behind TLS and basic auth answers (401), so the
    container is healthy; a closed port is not."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "docker" / "healthcheck.py"
    spec = importlib.util.spec_from_file_location("_docker_healthcheck", path)
    assert spec is not None and spec.loader is not None
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    assert check.metrics_ok("127.0.0.1", str(tls_server.port))
    with start_metrics_server(registry, port=0) as plain:
        assert check.metrics_ok("127.0.0.1", str(plain.port))
    assert not check.metrics_ok("127.0.0.1", str(plain.port))  # closed now


def test_prometheus_scrapes_the_endpoint_with_the_documented_settings(
    tls_server: MetricsServer, cert: tuple[Path, Path], tmp_path: Path
) -> None:
    """A real Prometheus with the scrape settings of dashboards/README.md (``scheme:
    https``, ``tls_config.ca_file``, ``basic_auth`` with a ``password_file``) scrapes the
    endpoint; with a wrong password its target is down with a 401."""
    if shutil.which("prometheus") is None:
        pytest.skip("no prometheus binary (make install)")
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.write_text(PASSWORD)
    bad.write_text("wrong")
    target = f"127.0.0.1:{tls_server.port}"
    prom = PrometheusServer(tmp_path / "prom", [target])
    prom.config["scrape_configs"] = [
        {
            "job_name": name,
            "scheme": "https",
            "tls_config": {"ca_file": str(cert[0])},
            "basic_auth": {"username": USER, "password_file": str(secret)},
            "static_configs": [{"targets": [target]}],
        }
        for name, secret in (("good", good), ("bad", bad))
    ]
    with prom:
        health = _wait_for_health(prom)
    assert health["good"] == ("up", "")
    assert health["bad"][0] == "down" and "401" in health["bad"][1]


def _wait_for_health(prom: PrometheusServer) -> dict[str, tuple[str, str]]:
    """Each scrape job's target health and last error, once every job was scraped
    (polls Prometheus's targets API: the scrapes run in its own process)."""
    deadline = time.monotonic() + 60
    while True:
        data = prom.api("targets", {"state": "active"})
        got = {t["labels"]["job"]: (t["health"], t["lastError"]) for t in data["activeTargets"]}
        if len(got) == 2 and "unknown" not in {h for h, _ in got.values()}:
            return got
        assert time.monotonic() < deadline, got
        time.sleep(0.2)
