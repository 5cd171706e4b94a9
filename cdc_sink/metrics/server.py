"""The ``/metrics`` HTTP endpoint of a job (prometheus-client's WSGI app, one thread).

Binds ``127.0.0.1`` unless told otherwise; port ``0`` picks a free port (read it back
from :attr:`MetricsServer.port`). A port already in use is a :class:`MetricsServerError`
naming it. The server runs in a daemon thread (each request in a thread of its own): a
scrape that fails never touches the stream.

Optional, for an endpoint reachable from other hosts:

- **TLS**: ``tls_cert`` and ``tls_key`` (PEM files) serve HTTPS (TLS 1.2 or newer). The
  handshake runs in the request's thread with a timeout, so a client that never completes
  it holds no other scrape up.
- **Basic auth**: :class:`BasicAuth` (a username and password, read from a file or an
  environment variable by :func:`load_basic_auth`, never from a command line). A request
  without the right ``Authorization`` header gets 401; the check compares digests with
  :func:`hmac.compare_digest`. Without TLS the password crosses the network in clear: use
  both.

An endpoint bound off loopback without basic auth or without TLS is logged as a warning
and shown by the gauge ``cdc_sink_metrics_endpoint_unprotected{missing="auth"|"tls"}``
(1 for each protection it lacks; no series on loopback or when both are given), so an
alert can catch a deployment that exposed it by mistake.

prometheus-client's own ``start_http_server`` takes a certificate but has no basic auth,
so the endpoint is its :func:`~prometheus_client.make_wsgi_app` served by
:mod:`wsgiref` with the checks above.
"""

from __future__ import annotations

import base64
import binascii
import errno
import hashlib
import hmac
import ipaddress
import logging
import os
import socket
import ssl
import stat
import threading
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Gauge, make_wsgi_app

from cdc_sink.errors import MetricsServerError

__all__ = [
    "AUTH_ENV",
    "BasicAuth",
    "MetricsServer",
    "MetricsServerError",
    "load_basic_auth",
    "start_metrics_server",
]

logger = logging.getLogger(__name__)

AUTH_ENV = "CDC_SINK_METRICS_AUTH"
"""The environment variable :func:`load_basic_auth` reads ``username:password`` from
when no file is given."""

REQUEST_TIMEOUT_S = 30.0
"""Seconds a connection may stay silent (TLS handshake, request) before it is closed."""

_LOOPBACK = ("127.0.0.1", "::1", "localhost")
_unprotected: weakref.WeakKeyDictionary[CollectorRegistry, Gauge] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class BasicAuth:
    """HTTP basic-auth credentials of the endpoint (RFC 7617).

    Attributes:
        username: Non-empty, without ``:``.
        password: Non-empty (never shown by ``repr``).
    """

    username: str
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        if not self.username or ":" in self.username:
            raise ValueError("metrics auth: the username must be non-empty and have no ':'")
        if not self.password:
            raise ValueError("metrics auth: the password must be non-empty")

    @classmethod
    def parse(cls, text: str) -> BasicAuth:
        """Credentials from ``username:password`` (the password may hold ``:``).

        Raises:
            ValueError: No ``:``, or an empty username or password.
        """
        user, sep, password = text.strip("\r\n").partition(":")
        if not sep:
            raise ValueError("metrics auth: expected 'username:password'")
        return cls(user, password)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> BasicAuth:
        """Credentials from the first line of a file: ``username:password``.

        A file that other users may read is used, with a warning.

        Raises:
            MetricsServerError: The file cannot be read.
            ValueError: Its first line is not ``username:password``.
        """
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
            mode = p.stat().st_mode
        except OSError as exc:
            raise MetricsServerError(
                f"cannot read the metrics auth file {str(p)!r}: {exc.strerror or exc}"
            ) from exc
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            logger.warning(
                "the metrics auth file %s is readable by other users (mode %o): chmod 600 it",
                p,
                stat.S_IMODE(mode),
            )
        lines = text.splitlines()
        return cls.parse(lines[0] if lines else "")

    def accepts(self, header: str | None) -> bool:
        """True when ``header`` (an ``Authorization`` value) carries these credentials."""
        if not header:
            return False
        scheme, _, token = header.strip().partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            given = base64.b64decode(token.strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        want = f"{self.username}:{self.password}".encode()
        # digests: equal lengths, so the comparison time says nothing about the password
        return hmac.compare_digest(hashlib.sha256(given).digest(), hashlib.sha256(want).digest())


def load_basic_auth(
    file: str | os.PathLike[str] | None = None, *, env: str = AUTH_ENV
) -> BasicAuth | None:
    """The endpoint's credentials: from ``file`` when given, else from the environment
    variable ``env`` (``username:password``) when set and non-empty, else None.

    Raises:
        MetricsServerError: ``file`` cannot be read.
        ValueError: The credentials are not ``username:password``.
    """
    if file is not None:
        return BasicAuth.from_file(file)
    text = os.environ.get(env, "")
    return BasicAuth.parse(text) if text else None


class MetricsServer:
    """A running ``/metrics`` endpoint; :meth:`close` stops it."""

    def __init__(
        self, httpd: Any, thread: threading.Thread, host: str, *, tls: bool = False
    ) -> None:
        self._httpd = httpd
        self._thread = thread
        self.host = host
        self.tls = tls
        self.port: int = int(httpd.server_port)

    @property
    def url(self) -> str:
        """``http://host:port/metrics`` (``https`` with TLS)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stops serving (waits for the server thread; idempotent)."""
        if self._httpd is None:
            return
        httpd, self._httpd = self._httpd, None
        httpd.shutdown()
        httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Handler(WSGIRequestHandler):
    """A request handler that logs nothing (a scrape every few seconds) and closes a
    connection silent for :data:`REQUEST_TIMEOUT_S`."""

    timeout = REQUEST_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        del format, args


class _Server(ThreadingMixIn, WSGIServer):
    """wsgiref's server, a thread per request; with an SSL context, each connection's
    TLS handshake runs in its own request thread (never in the accepting one)."""

    daemon_threads = True
    ssl_context: ssl.SSLContext | None = None

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.ssl_context is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(REQUEST_TIMEOUT_S)
        try:
            conn = self.ssl_context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:  # not TLS, or a failed handshake
            logger.debug("metrics: TLS handshake with %s failed: %s", client_address, exc)
            return
        try:
            super().finish_request(conn, client_address)
        finally:
            conn.close()


_App = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def _guarded(app: _App, auth: BasicAuth) -> _App:
    """``app`` behind basic auth: 401 (with a ``WWW-Authenticate`` challenge) without the
    right credentials."""
    body = b"401 Unauthorized: this endpoint needs HTTP basic auth\n"

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if auth.accepts(environ.get("HTTP_AUTHORIZATION")):
            return app(environ, start_response)
        start_response(
            "401 Unauthorized",
            [
                ("WWW-Authenticate", 'Basic realm="cdc_sink metrics", charset="UTF-8"'),
                ("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Length", str(len(body))),
            ],
        )
        return [body]

    return guarded


def _ssl_context(cert: str | os.PathLike[str], key: str | os.PathLike[str]) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(certfile=os.fspath(cert), keyfile=os.fspath(key))
    except (OSError, ssl.SSLError) as exc:
        raise MetricsServerError(
            f"cannot load the metrics TLS certificate {os.fspath(cert)!r} and key "
            f"{os.fspath(key)!r}: {getattr(exc, 'strerror', None) or exc}"
        ) from exc
    return ctx


def _is_loopback(host: str) -> bool:
    """Whether ``host`` binds the loopback interface only (``""``, ``0.0.0.0`` and
    ``::`` bind every interface; a name other than ``localhost`` may be any)."""
    if host in _LOOPBACK:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _warn_if_unprotected(registry: CollectorRegistry, host: str, *, tls: bool, auth: bool) -> None:
    """Logs a warning and sets ``cdc_sink_metrics_endpoint_unprotected`` when the
    endpoint is bound off loopback without basic auth or without TLS."""
    missing = [name for name, given in (("auth", auth), ("tls", tls)) if not given]
    if _is_loopback(host) or not missing:
        return
    gauge = _unprotected.get(registry)
    if gauge is None:  # one gauge per registry, however many servers serve it
        gauge = _unprotected[registry] = Gauge(
            "cdc_sink_metrics_endpoint_unprotected",
            "1 for each protection (auth, tls) the /metrics endpoint lacks off loopback.",
            ("missing",),
            registry=registry,
        )
    for name in missing:
        gauge.labels(missing=name).set(1)
    if not auth and not tls:
        why = "neither basic auth nor TLS: anyone who reaches the port reads them, in clear"
    elif not tls:
        why = "basic auth without TLS: the password crosses the network in clear"
    else:
        why = "TLS without basic auth: anyone who reaches the port reads them"
    logger.warning(
        "metrics served on %s (not loopback) with %s (give --metrics-auth-file and a TLS "
        "certificate and key, or bind 127.0.0.1)",
        host or "every interface",
        why,
    )


def start_metrics_server(
    registry: CollectorRegistry,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    tls_cert: str | os.PathLike[str] | None = None,
    tls_key: str | os.PathLike[str] | None = None,
    auth: BasicAuth | None = None,
) -> MetricsServer:
    """Serves ``registry`` on ``http(s)://host:port/metrics`` from a daemon thread.

    Args:
        registry: What to serve (e.g. :attr:`SinkMetrics.registry`).
        host: Address to bind (default loopback only).
        port: TCP port; 0 picks a free one.
        tls_cert: PEM certificate (chain) file: serve HTTPS (with ``tls_key``).
        tls_key: PEM private key file of ``tls_cert``.
        auth: Require these basic-auth credentials (see :func:`load_basic_auth`).

    Returns:
        The server (``.port`` is the bound port, ``.url`` the endpoint).

    Raises:
        MetricsServerError: The port is in use, the address cannot be bound, or the
            certificate or key cannot be loaded.
        ValueError: A port out of range, or only one of ``tls_cert`` and ``tls_key``.
    """
    if not 0 <= port <= 65535:
        raise ValueError(f"metrics port {port} is not a TCP port (0..65535)")
    if (tls_cert is None) != (tls_key is None):
        raise ValueError("metrics TLS needs both a certificate and a key file")
    ctx = _ssl_context(tls_cert, tls_key) if tls_cert is not None and tls_key is not None else None
    app: _App = make_wsgi_app(registry)
    if auth is not None:
        app = _guarded(app, auth)
    _warn_if_unprotected(registry, host, tls=ctx is not None, auth=auth is not None)

    class Server(_Server):
        ssl_context = ctx

    try:
        Server.address_family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        httpd = make_server(host, port, app, Server, handler_class=_Handler)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise MetricsServerError(
                f"metrics port {port} on {host} is already in use (choose another "
                "--metrics-port, or 0 for a free one)"
            ) from exc
        raise MetricsServerError(
            f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}"
        ) from exc
    thread = threading.Thread(target=httpd.serve_forever, name="cdc_sink-metrics", daemon=True)
    thread.start()
    server = MetricsServer(httpd, thread, host, tls=ctx is not None)
    logger.info("serving metrics on %s%s", server.url, " (basic auth)" if auth is not None else "")
    return server
