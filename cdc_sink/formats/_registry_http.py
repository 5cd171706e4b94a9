"""The schema registry client's connections (private to :mod:`.avro_wire`).

Per process: for each registry (its :class:`~.avro_wire.RegistrySettings`), up to
:data:`FETCH_THREADS` idle HTTP/1.1 connections kept alive between calls, and one pool
of :data:`FETCH_THREADS` threads that fetch schema ids together. Both are rebuilt in a
forked child (a Spark Python worker), never shared across processes. A connection the
server closed while idle is replaced once, on a new connection. The proxy of the
``http_proxy``/``https_proxy``/``no_proxy`` environment is used as ``urllib`` uses it;
no redirect is followed. What :func:`request` answers is the status and at most
:data:`MAX_BODY_BYTES` + 1 bytes of the body (more is the caller's error to raise).
"""

from __future__ import annotations

import base64
import http.client
import os
import ssl
import threading
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdc_sink.errors import InvalidOption

if TYPE_CHECKING:
    from cdc_sink.formats.avro_wire import RegistrySettings

__all__ = ["FETCH_THREADS", "MAX_BODY_BYTES", "clear", "executor", "request"]

FETCH_THREADS = 8
"""Schema ids fetched at once, and keep-alive connections kept, per registry."""
MAX_BODY_BYTES = 16 << 20
"""The largest answer read."""


@dataclass(frozen=True)
class _Endpoint:
    """How to reach one registry: its host, TLS, the path prefix, and a proxy if the
    environment names one for it."""

    host: str
    port: int | None
    tls: ssl.SSLContext | None
    prefix: str
    proxy: tuple[str, int | None] | None = None
    proxy_headers: tuple[tuple[str, str], ...] = ()

    def connect(self, timeout: float) -> http.client.HTTPConnection:
        """A new (not yet connected) connection."""
        host, port = self.proxy or (self.host, self.port)
        if self.tls is None:
            return http.client.HTTPConnection(host, port, timeout=timeout)
        conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=self.tls)
        if self.proxy is not None:
            conn.set_tunnel(self.host, self.port, headers=dict(self.proxy_headers))
        return conn


def _endpoint(settings: RegistrySettings) -> _Endpoint:
    u = urllib.parse.urlsplit(settings.url)
    host, port = u.hostname or "", u.port
    tls = _tls_context(settings) if u.scheme == "https" else None
    proxy_url = (
        None if urllib.request.proxy_bypass(host) else urllib.request.getproxies().get(u.scheme)
    )
    if not proxy_url:
        return _Endpoint(host, port, tls, u.path)
    p = urllib.parse.urlsplit(proxy_url if "://" in proxy_url else f"http://{proxy_url}")
    headers: tuple[tuple[str, str], ...] = ()
    if p.username is not None:
        cred = f"{urllib.parse.unquote(p.username)}:{urllib.parse.unquote(p.password or '')}"
        headers = (("Proxy-Authorization", "Basic " + base64.b64encode(cred.encode()).decode()),)
    prefix = u.path if tls is not None else f"{u.scheme}://{u.netloc}{u.path}"
    return _Endpoint(host, port, tls, prefix, (p.hostname or "", p.port), headers)


def _tls_context(settings: RegistrySettings) -> ssl.SSLContext:
    """The TLS context of ``settings`` (its CA bundle and client certificate).

    Raises:
        InvalidOption: A TLS file cannot be read (the error names its key).
    """
    what = "ca_location"
    try:
        ctx = ssl.create_default_context(cafile=settings.ca_location)
        if settings.certificate_location:
            what = "certificate_location"
            ctx.load_cert_chain(
                settings.certificate_location, settings.key_location, password=_no_password
            )
        return ctx
    except (OSError, ValueError) as exc:
        path = (
            getattr(settings, what)
            if what == "ca_location"
            else (f"{settings.certificate_location} (key {settings.key_location})")
        )
        raise InvalidOption(
            f"decoder option 'registry_ssl': {what} {path!r} cannot be loaded "
            f"({type(exc).__name__}: {getattr(exc, 'strerror', None) or exc})",
            option="registry_ssl",
        ) from exc


def _no_password() -> str:
    return ""  # an encrypted key fails to load instead of prompting on the terminal


class _Pool:
    """The keep-alive connections and the fetching threads of this process (rebuilt in
    a forked child: a connection or a thread is never shared across processes)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: dict[RegistrySettings, list[http.client.HTTPConnection]] = {}
        self.endpoints: dict[RegistrySettings, _Endpoint] = {}
        self._executor: ThreadPoolExecutor | None = None

    def endpoint(self, settings: RegistrySettings) -> _Endpoint:
        with self.lock:
            end = self.endpoints.get(settings)
        if end is None:
            end = _endpoint(settings)
            with self.lock:
                end = self.endpoints.setdefault(settings, end)
        return end

    def take(
        self, settings: RegistrySettings, end: _Endpoint
    ) -> tuple[http.client.HTTPConnection, bool]:
        """An idle connection to the registry (and ``True``), else a new one."""
        with self.lock:
            idle = self.idle.get(settings)
            if idle:
                return idle.pop(), True
        return end.connect(settings.timeout), False

    def give(self, settings: RegistrySettings, conn: http.client.HTTPConnection) -> None:
        """Keeps ``conn`` for the next call (up to :data:`FETCH_THREADS` per registry)."""
        with self.lock:
            idle = self.idle.setdefault(settings, [])
            if len(idle) < FETCH_THREADS:
                idle.append(conn)
                return
        conn.close()

    def executor(self) -> ThreadPoolExecutor:
        with self.lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(FETCH_THREADS, "cdc-sink-registry")
            return self._executor

    def clear(self) -> None:
        with self.lock:
            conns = [c for idle in self.idle.values() for c in idle]
            self.idle.clear()
            self.endpoints.clear()
        for c in conns:
            c.close()


_pool = _Pool()


def _after_fork() -> None:
    global _pool
    _pool = _Pool()  # the parent's connections and threads are not this process's


os.register_at_fork(after_in_child=_after_fork)


def request(
    settings: RegistrySettings, method: str, path: str, data: bytes | None, headers: dict[str, str]
) -> tuple[int, bytes]:
    """One exchange on a kept-alive connection (a new one when the kept one turns out to
    have been closed by the server): the status and up to 16 MiB + 1 byte of body."""
    end = _pool.endpoint(settings)
    if end.proxy is not None and end.tls is None:
        headers = {**headers, **dict(end.proxy_headers)}
    conn, reused = _pool.take(settings, end)
    try:
        return _exchange(settings, conn, method, end.prefix + path, data, headers)
    except ConnectionError:
        if not reused:
            raise
    conn = end.connect(settings.timeout)  # the server had closed the idle connection
    return _exchange(settings, conn, method, end.prefix + path, data, headers)


def _exchange(
    settings: RegistrySettings,
    conn: http.client.HTTPConnection,
    method: str,
    target: str,
    data: bytes | None,
    headers: dict[str, str],
) -> tuple[int, bytes]:
    try:
        conn.request(method, target, body=data, headers=headers)
        resp = conn.getresponse()
        body = resp.read(MAX_BODY_BYTES + 1)
    except BaseException:
        conn.close()
        raise
    if resp.isclosed() and not resp.will_close:
        _pool.give(settings, conn)  # read to its end: the connection serves the next call
    else:
        conn.close()
    return resp.status, body


def executor() -> ThreadPoolExecutor:
    """The threads of this process that fetch schema ids together."""
    return _pool.executor()


def clear() -> None:
    """Closes every kept connection of this process (tests)."""
    _pool.clear()
