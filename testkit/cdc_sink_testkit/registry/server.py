"""A local schema registry (Apicurio Registry) run as a child JVM.

:class:`LocalRegistry` starts the release :func:`~.dist.resolve_release` picks on two
free ``127.0.0.1`` ports (the API and Quarkus' management interface), waits until the
Confluent-compatible API answers, and sets the global compatibility to ``BACKWARD`` (the
registry's default is ``NONE``; Confluent's is ``BACKWARD``). Apicurio 3 keeps its
schemas in an H2 file in the registry's own directory, so :meth:`LocalRegistry.restart`
brings back the same schemas and ids (:attr:`LocalRegistry.persistent`); Apicurio 2 (the
Java 17 fallback) keeps them in memory, and a restart starts empty.

The JVM runs in its own process group, stopped by :meth:`LocalRegistry.stop` (by pid) or,
should this process die first, by the same watchdog as the local Kafka broker
(:mod:`cdc_sink_testkit.process`).
"""

from __future__ import annotations

import json
import logging
import shutil
import ssl
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from cdc_sink_testkit.kafka.probes import free_port, free_port_pair
from cdc_sink_testkit.process import ChildServer, ServedProcess, tail
from cdc_sink_testkit.registry.dist import RegistryStartError, Release, resolve_release
from cdc_sink_testkit.tls import CertificateError, make_server_certificate

__all__ = ["CCOMPAT_PATH", "LocalRegistry", "start_registry"]

logger = logging.getLogger(__name__)

CCOMPAT_PATH = "/apis/ccompat/v7"
"""Where Apicurio serves Confluent's schema registry API."""
_REQUEST_TIMEOUT_S = 5.0


class LocalRegistry(ServedProcess):
    """Apicurio Registry on ``127.0.0.1``, with Confluent's API at :attr:`url`.

    Args:
        heap: The JVM's maximum heap (``-Xmx``).
        startup_timeout: Seconds :meth:`start` waits for the API to answer.
        stop_timeout: Seconds :meth:`stop` waits after SIGTERM before SIGKILL.
        compatibility: The global compatibility level set once it answers.
        release: What to run (default: :func:`~.dist.resolve_release`).
        tls: Serve ``https`` only, with a certificate for ``127.0.0.1`` made at start
            under a throwaway CA (:attr:`ca_file` is what a client must trust).

    Use as a context manager, or :meth:`start` / :meth:`stop`.
    """

    LOG_NAME = "registry.log"

    def __init__(
        self,
        *,
        heap: str = "256m",
        startup_timeout: float = 180.0,
        stop_timeout: float = 15.0,
        compatibility: str = "BACKWARD",
        release: Release | None = None,
        tls: bool = False,
    ) -> None:
        self.tls = tls
        self.heap = heap
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.compatibility = compatibility
        self.release = release
        self.host = "127.0.0.1"
        self.port: int | None = None
        self.management_port: int | None = None
        self.workdir: Path | None = None
        self._child = ChildServer()
        self._lock = threading.Lock()

    # -- public API --------------------------------------------------------------------
    @property
    def url(self) -> str:
        """The base URL of the Confluent-compatible API (``http://127.0.0.1:<p>/apis/ccompat/v7``)."""
        if self.port is None:
            raise RuntimeError("LocalRegistry is not started: call start() first")
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.host}:{self.port}{CCOMPAT_PATH}"

    @property
    def ca_file(self) -> Path | None:
        """The certificate a client must trust (``tls=True``; the CA of the registry's own
        certificate)."""
        return None if not self.tls or self.workdir is None else self.workdir / "tls" / "ca.pem"

    @property
    def persistent(self) -> bool:
        """Whether :meth:`restart` keeps the schemas (Apicurio 3's H2 file storage)."""
        return self.release is not None and self.release.major >= 3

    def start(self) -> LocalRegistry:
        """Resolves the registry (once), starts it and waits until it answers; returns self.

        Raises:
            RegistryStartError: No suitable Java, or it did not start (the message ends
                with the tail of its log).
            JarResolutionError: Maven could not fetch it.
        """
        with self._lock:
            if self.is_running:
                return self
            if self.release is None:
                self.release = resolve_release()
            self.workdir = Path(tempfile.mkdtemp(prefix="cdc_sink-registry-"))
            if self.tls:
                self._make_certificate()
            last: RegistryStartError | None = None
            for _attempt in range(3):  # a free port can be taken between probe and bind
                self.port, self.management_port = free_port_pair(self.host)
                try:
                    self._spawn()
                    self._wait_ready()
                    self._configure()
                    logger.info("schema registry %s up at %s", self.release.version, self.url)
                    return self
                except RegistryStartError as exc:
                    last = exc
                    self._kill()
                    if "Address already in use" not in str(exc):
                        break
                except BaseException:
                    self._teardown()
                    raise
            self._teardown()
            assert last is not None
            raise last

    def stop(self) -> None:
        """Stops the JVM (SIGTERM to its group, SIGKILL after the grace) and removes its
        directory (idempotent)."""
        with self._lock:
            self._teardown()

    def kill(self) -> None:
        """Stops the JVM and keeps its directory and ports, so :meth:`restart` brings the
        same registry back (an outage)."""
        with self._lock:
            self._kill()

    def restart(self) -> LocalRegistry:
        """Starts the registry again on the same ports and storage (stopping it first if
        it runs) and waits until it answers; returns self.

        Raises:
            RuntimeError: It was never started, or was stopped.
            RegistryStartError: It did not come back.
        """
        with self._lock:
            if self.workdir is None or self.port is None:
                raise RuntimeError("LocalRegistry.restart(): not started, or stopped")
            self._kill()
            try:
                self._spawn()
                self._wait_ready()
                self._configure()
            except BaseException:
                self._teardown()
                raise
            return self

    def request(self, method: str, path: str, body: object | None = None) -> object:
        """One call of the registry's API (``path`` below :attr:`url`); the JSON answer.

        Raises:
            urllib.error.URLError: The registry did not answer, or answered an error.
        """
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
        )
        context = None
        if self.tls and self.ca_file is not None:
            context = ssl.create_default_context(cafile=str(self.ca_file))
        with urllib.request.urlopen(req, timeout=_REQUEST_TIMEOUT_S, context=context) as resp:
            return json.loads(resp.read() or b"null")

    def register(self, subject: str, schema: object) -> int:
        """Registers an Avro schema (a JSON-able object) under ``subject``; its id."""
        got = self.request("POST", f"/subjects/{subject}/versions", {"schema": json.dumps(schema)})
        assert isinstance(got, dict)
        return int(got["id"])

    # -- internals ---------------------------------------------------------------------
    def _command(self) -> list[str]:
        rel, wd = self.release, self.workdir
        assert rel is not None and wd is not None
        cmd = [
            rel.java.path,
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",  # C1 only: starts faster
            "-Djava.net.preferIPv4Stack=true",
            f"-Dquarkus.http.host={self.host}",
            *self._listener_properties(),
            f"-Dquarkus.management.host={self.host}",
            f"-Dquarkus.management.port={self.management_port}",
            "-Dquarkus.log.level=WARN",
        ]
        if rel.major >= 3:
            cmd += [
                "-Dapicurio.ccompat.use-canonical-hash=true",
                "-Dapicurio.storage.kind=sql",
                "-Dapicurio.storage.sql.kind=h2",
                f"-Dapicurio.datasource.url=jdbc:h2:file:{wd / 'h2' / 'registry'}",
                "-Dapicurio.datasource.username=sa",
                "-Dapicurio.datasource.password=sa",
            ]
        return [*cmd, "-jar", str(rel.jar)]

    def _listener_properties(self) -> list[str]:
        """Where it listens: plain ``http`` on :attr:`port`, or (``tls``) ``https`` only,
        its plain port moved to a port of its own that refuses requests."""
        if not self.tls:
            return [f"-Dquarkus.http.port={self.port}"]
        assert self.workdir is not None
        tls = self.workdir / "tls"
        plain = free_port(self.host)
        return [
            f"-Dquarkus.http.port={plain}",
            f"-Dquarkus.http.ssl-port={self.port}",
            "-Dquarkus.http.insecure-requests=disabled",
            f"-Dquarkus.http.ssl.certificate.files={tls / 'cert.pem'}",
            f"-Dquarkus.http.ssl.certificate.key-files={tls / 'key.pem'}",
        ]

    def _make_certificate(self) -> None:
        """A certificate for ``127.0.0.1`` under a CA of its own, valid for a day
        (:func:`~cdc_sink_testkit.tls.make_server_certificate`)."""
        assert self.workdir is not None
        try:
            make_server_certificate(self.workdir / "tls", self.host)
        except CertificateError as exc:
            raise RegistryStartError(str(exc)) from exc

    def _spawn(self) -> None:
        assert self.workdir is not None and self.release is not None
        self._child.launch(
            self._command(),
            cwd=self.release.directory,
            log=self.workdir / "registry.log",
            grace=self.stop_timeout,
            workdir=self.workdir,
        )

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        last: Exception | None = None
        while True:
            code = self._child.exit_code()
            if code is not None:
                self._fail(f"the registry exited with code {code} while starting")
            try:
                self.request("GET", "/config")
                return
            except (urllib.error.URLError, OSError, ValueError) as exc:
                last = exc
            if time.monotonic() > deadline:
                self._fail(f"the registry did not answer within {self.startup_timeout}s ({last})")
            time.sleep(0.2)

    def _configure(self) -> None:
        try:
            self.request("PUT", "/config", {"compatibility": self.compatibility})
        except (urllib.error.URLError, OSError) as exc:
            self._fail(f"setting compatibility {self.compatibility} failed: {exc}")

    def _fail(self, why: str) -> None:
        log = self.log_path
        text = tail(log, 60) if log is not None else ""
        raise RegistryStartError(f"{why}.\n--- tail of {log} ---\n{text}")

    def _kill(self) -> None:
        self._child.stop(self.stop_timeout)

    def _teardown(self) -> None:
        self._kill()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
        self.port = self.management_port = None


def start_registry(**options: object) -> LocalRegistry:
    """A started :class:`LocalRegistry` (keyword ``options`` as its constructor's)."""
    return LocalRegistry(**options).start()  # type: ignore[arg-type]
