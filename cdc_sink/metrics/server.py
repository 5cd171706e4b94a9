"""The ``/metrics`` HTTP endpoint of a job (prometheus-client's WSGI server, one thread).

Binds ``127.0.0.1`` unless told otherwise; port ``0`` picks a free port (read it back
from :attr:`MetricsServer.port`). A port already in use is a :class:`MetricsServerError`
naming it. The server runs in a daemon thread: a scrape that fails never touches the
stream.
"""

from __future__ import annotations

import errno
import logging
import threading
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

from cdc_sink.errors import CdcSinkError

__all__ = ["MetricsServer", "MetricsServerError", "start_metrics_server"]

logger = logging.getLogger(__name__)


class MetricsServerError(CdcSinkError):
    """The metrics endpoint could not be started (e.g. its port is in use)."""


class MetricsServer:
    """A running ``/metrics`` endpoint; :meth:`close` stops it."""

    def __init__(self, httpd: Any, thread: threading.Thread, host: str) -> None:
        self._httpd = httpd
        self._thread = thread
        self.host = host
        self.port: int = int(httpd.server_port)

    @property
    def url(self) -> str:
        """``http://host:port/metrics``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

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


def start_metrics_server(
    registry: CollectorRegistry, *, host: str = "127.0.0.1", port: int = 0
) -> MetricsServer:
    """Serves ``registry`` on ``http://host:port/metrics`` from a daemon thread.

    Args:
        registry: What to serve (e.g. :attr:`SinkMetrics.registry`).
        host: Address to bind (default loopback only).
        port: TCP port; 0 picks a free one.

    Returns:
        The server (``.port`` is the bound port, ``.url`` the endpoint).

    Raises:
        MetricsServerError: The port is in use, or the address cannot be bound.
    """
    if not 0 <= port <= 65535:
        raise ValueError(f"metrics port {port} is not a TCP port (0..65535)")
    try:
        httpd, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise MetricsServerError(
                f"metrics port {port} on {host} is already in use (choose another "
                "--metrics-port, or 0 for a free one)"
            ) from exc
        raise MetricsServerError(
            f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}"
        ) from exc
    server = MetricsServer(httpd, thread, host)
    logger.info("serving metrics on %s", server.url)
    return server
