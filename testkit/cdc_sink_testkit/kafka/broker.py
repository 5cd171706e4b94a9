"""Real Kafka for tests and the demo: a local KRaft broker, a container, or a cluster.

:class:`LocalKafka` runs a genuine single-node Apache Kafka (combined broker and
controller, KRaft) from the jars that
:func:`cdc_sink_testkit.kafka.jars.resolve_kafka_broker_jars` resolves from Maven
Central: ``java -cp <jars> kafka.Kafka server.properties`` in a private temporary
directory, listening on 127.0.0.1 only, on free ports.

:func:`start_kafka` (alias :func:`kafka_for_tests`) picks what to use:

1. ``$CDC_SINK_KAFKA_BOOTSTRAP`` set: that external cluster (nothing is started).
2. a Docker engine answers ``docker info`` and the project's Kafka image is there:
   :class:`TestcontainersKafka` (``kind="docker"`` also starts the engine and builds
   the image, see ``docker/``).
3. otherwise: :class:`LocalKafka`.

All three share the :class:`KafkaHandle` interface (``bootstrap_servers``, ``stop()``,
``create_topic()``, context manager).

A broker never outlives the Python process that started it: it runs in its own process
group, which is stopped by ``stop()``, by an ``atexit`` handler, and - should Python
die without running it (SIGKILL, SIGTERM) - by a small watchdog process that notices
the end of its stdin pipe from the parent and kills the group.

The pieces live beside this module, which re-exports their public names:
:mod:`~cdc_sink_testkit.kafka.handle` (:class:`KafkaHandle`, :class:`ExternalKafka`),
:mod:`~cdc_sink_testkit.kafka.kraft` (the node's configuration and JVM command),
:mod:`~cdc_sink_testkit.process` (the process group and its watchdog),
:mod:`~cdc_sink_testkit.kafka.probes` (free ports, readiness) and
:mod:`~cdc_sink_testkit.kafka.container` (:class:`TestcontainersKafka`); topics are
created by the product's :func:`cdc_sink.kafka.admin.create_topic`.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from cdc_sink.kafka.admin import admin_client, create_topic
from cdc_sink.utils.extras import require
from cdc_sink_testkit.kafka.container import (
    IMAGE_ENV,
    TestcontainersKafka,
    docker_available,
    docker_kafka_image,
)
from cdc_sink_testkit.kafka.handle import (
    ExternalKafka,
    KafkaHandle,
    KafkaStartError,
    register_live,
    unregister_live,
)
from cdc_sink_testkit.kafka.kraft import (
    KAFKA_MAIN_CLASS,
    LOG4J2,
    STORAGE_TOOL_CLASS,
    find_java,
    jvm_command,
    random_cluster_id,
    server_properties,
)
from cdc_sink_testkit.kafka.probes import broker_answers, free_port, free_port_pair, port_open
from cdc_sink_testkit.process import ChildServer, ServedProcess, tail
from cdc_sink_testkit.tls import CertificateError, make_server_certificate

logger = logging.getLogger(__name__)

__all__ = [
    "BOOTSTRAP_ENV",
    "IMAGE_ENV",
    "KAFKA_MAIN_CLASS",
    "KIND_ENV",
    "STORAGE_TOOL_CLASS",
    "ExternalKafka",
    "KafkaHandle",
    "KafkaStartError",
    "LocalKafka",
    "TestcontainersKafka",
    "create_topic",
    "docker_available",
    "docker_kafka_image",
    "kafka_for_tests",
    "start_kafka",
    "start_own_kafka",
]

BOOTSTRAP_ENV = "CDC_SINK_KAFKA_BOOTSTRAP"
KIND_ENV = "CDC_SINK_KAFKA"  # force "local", "docker" or "external"


class LocalKafka(ServedProcess, KafkaHandle):
    """A real single-node KRaft Kafka broker (broker + controller) run as a child JVM.

    Args:
        num_partitions: ``num.partitions``, the default for new topics.
        heap: The JVM's maximum heap (``-Xmx``).
        startup_timeout: Seconds ``start()`` waits for the broker to answer.
        stop_timeout: Seconds ``stop()`` waits after SIGTERM before SIGKILL.
        extra_properties: More ``server.properties`` entries (they win).
        jars: The broker classpath; resolved from Maven Central by default.
        keep_dir: Keep the temporary directory (data, logs) after ``stop()``.
        sasl_users: User names and passwords of a second listener,
            ``SASL_PLAINTEXT`` (:attr:`sasl_bootstrap_servers`), that takes SASL/PLAIN,
            SCRAM-SHA-256 and SCRAM-SHA-512 (the SCRAM credentials are written when the
            storage is formatted). The PLAINTEXT listener stays, for setting up tests.
        ssl: Also listen with TLS: an ``SSL`` listener (:attr:`ssl_bootstrap_servers`)
            and, with ``sasl_users``, a ``SASL_SSL`` one
            (:attr:`sasl_ssl_bootstrap_servers`) taking the same users and mechanisms.
            The broker's certificate, for ``127.0.0.1``, is made at start under a
            throwaway CA (:func:`cdc_sink_testkit.tls.make_server_certificate`) and read
            as a PEM key store; :attr:`ca_file` is what a client must trust. Clients
            are not asked for a certificate.

    Use as a context manager, or ``start()``/``stop()``.
    """

    LOG_NAME = "broker.log"

    def __init__(
        self,
        *,
        num_partitions: int = 1,
        heap: str = "512m",
        startup_timeout: float = 120.0,
        stop_timeout: float = 15.0,
        extra_properties: Mapping[str, str] | None = None,
        jars: Sequence[Path] | None = None,
        keep_dir: bool = False,
        sasl_users: Mapping[str, str] | None = None,
        ssl: bool = False,
    ) -> None:
        self._init_broker(num_partitions, startup_timeout)
        self.sasl_users = dict(sasl_users or {})
        self.ssl = ssl
        #: The secured listeners' ports by security protocol (``SASL_PLAINTEXT``,
        #: ``SSL``, ``SASL_SSL``), chosen at start.
        self.listener_ports: dict[str, int] = {}
        self.heap = heap
        self.stop_timeout = stop_timeout
        self.extra_properties = dict(extra_properties or {})
        self._jars = list(jars) if jars is not None else None
        self.keep_dir = keep_dir
        self.port: int | None = None
        self.controller_port: int | None = None
        self.cluster_id: str | None = None
        self.workdir: Path | None = None
        self._child = ChildServer()
        self._lock = threading.Lock()

    # -- public API --------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        if self.port is None or not self.is_running:
            raise RuntimeError("LocalKafka is not running: call start() first")
        return f"{self.host}:{self.port}"

    @property
    def sasl_bootstrap_servers(self) -> str:
        """The SASL_PLAINTEXT listener (with ``sasl_users``)."""
        return self._listener("SASL_PLAINTEXT", "give sasl_users")

    @property
    def ssl_bootstrap_servers(self) -> str:
        """The SSL listener (with ``ssl=True``)."""
        return self._listener("SSL", "give ssl=True")

    @property
    def sasl_ssl_bootstrap_servers(self) -> str:
        """The SASL_SSL listener (with ``sasl_users`` and ``ssl=True``)."""
        return self._listener("SASL_SSL", "give sasl_users and ssl=True")

    @property
    def ca_file(self) -> Path | None:
        """The CA certificate (PEM) a client of the TLS listeners trusts (``ssl=True``,
        once started)."""
        return None if not self.ssl or self.workdir is None else self.workdir / "tls" / "ca.pem"

    def start(self) -> LocalKafka:
        """Format storage, launch the broker and wait until it answers; return self."""
        require("confluent_kafka", feature="LocalKafka")  # before any JVM starts
        with self._lock:
            if self.is_running:
                return self
            from cdc_sink_testkit.kafka.jars import resolve_kafka_broker_jars

            jars = self._jars if self._jars is not None else resolve_kafka_broker_jars()
            java = find_java()
            last_error: KafkaStartError | None = None
            for _attempt in range(3):  # a free port can be taken between probe and bind
                try:
                    self._launch(java, jars)
                    self._wait_ready()
                    logger.info("local Kafka broker (KRaft) up at %s", self.bootstrap_servers)
                    return self
                except KafkaStartError as exc:
                    last_error = exc
                    bind_race = "Address already in use" in str(exc)
                    logger.warning("local Kafka broker did not start: %s", exc)
                    self._teardown()
                    if not bind_race:
                        break
                except BaseException:  # e.g. KeyboardInterrupt while waiting: no orphan
                    self._teardown()
                    raise
            assert last_error is not None
            raise last_error

    def stop(self) -> None:
        """SIGTERM the broker's process group, SIGKILL after a grace, remove its dir."""
        with self._lock:
            self._teardown()

    def kill(self) -> None:
        """SIGKILL the broker, as a crash would, keeping its directory, data and ports.

        :meth:`restart` brings the same broker back; :meth:`stop` still removes it.
        """
        with self._lock:
            self._kill()

    def restart(self) -> LocalKafka:
        """Start the broker again on the same data directory and ports (killing it first
        if it still runs) and wait until it answers; return self.

        Raises:
            RuntimeError: The broker was never started, or was stopped.
            KafkaStartError: It did not come back (it is then stopped and removed).
        """
        with self._lock:
            if self.workdir is None or self.port is None or self.cluster_id is None:
                raise RuntimeError("LocalKafka.restart(): not started, or stopped")
            from cdc_sink_testkit.kafka.jars import resolve_kafka_broker_jars

            jars = self._jars if self._jars is not None else resolve_kafka_broker_jars()
            self._kill()
            try:
                self._spawn(self._jvm(find_java(), jars))
                self._wait_ready()
            except BaseException:
                self._teardown()
                raise
            logger.info("local Kafka broker restarted at %s", self.bootstrap_servers)
            return self

    def __enter__(self) -> LocalKafka:
        return self.start()

    # -- internals ---------------------------------------------------------------------

    def _properties(self, data_dir: Path) -> dict[str, str]:
        assert self.port is not None and self.controller_port is not None
        return server_properties(
            host=self.host,
            port=self.port,
            controller_port=self.controller_port,
            data_dir=data_dir,
            num_partitions=self.num_partitions,
            extra={**self._listener_properties(), **self.extra_properties},
        )

    def _secured_protocols(self) -> list[str]:
        """The security protocols of the listeners beside PLAINTEXT, from the options."""
        protocols = ["SASL_PLAINTEXT"] if self.sasl_users else []
        if self.ssl:
            protocols += ["SSL", "SASL_SSL"] if self.sasl_users else ["SSL"]
        return protocols

    def _listener(self, protocol: str, hint: str) -> str:
        port = self.listener_ports.get(protocol)
        if port is None or not self.is_running:
            raise RuntimeError(f"LocalKafka has no running {protocol} listener ({hint})")
        return f"{self.host}:{port}"

    def _listener_properties(self) -> dict[str, str]:
        """The secured listeners' entries (none without ``sasl_users`` or ``ssl``): each
        listener named after its protocol, SASL's mechanisms per SASL listener, and the
        broker's PEM key store."""
        if not self.listener_ports:
            return {}
        h, p, cp = self.host, self.port, self.controller_port
        extra = [f"{name}://{h}:{port}" for name, port in self.listener_ports.items()]
        props = {
            "listeners": ",".join([f"PLAINTEXT://{h}:{p}", f"CONTROLLER://{h}:{cp}", *extra]),
            "advertised.listeners": ",".join([f"PLAINTEXT://{h}:{p}", *extra]),
            "listener.security.protocol.map": ",".join(
                ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
                + [f"{name}:{name}" for name in self.listener_ports]
            ),
        }
        plain_users = " ".join(f'user_{u}="{pw}"' for u, pw in self.sasl_users.items())
        scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        for name in self.listener_ports:
            if not name.startswith("SASL"):
                continue
            prefix = f"listener.name.{name.lower()}"
            props["sasl.enabled.mechanisms"] = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
            props[f"{prefix}.plain.sasl.jaas.config"] = (
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};"
            )
            props[f"{prefix}.scram-sha-256.sasl.jaas.config"] = scram
            props[f"{prefix}.scram-sha-512.sasl.jaas.config"] = scram
        if self.ssl:
            assert self.workdir is not None
            props["ssl.keystore.type"] = "PEM"
            props["ssl.keystore.location"] = str(self.workdir / "tls" / "server.pem")
            props["ssl.client.auth"] = "none"
        return props

    def _scram_arguments(self) -> list[str]:
        """``kafka-storage format`` arguments writing each SASL user's SCRAM credentials."""
        return [
            arg
            for user, pw in self.sasl_users.items()
            for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512")
            for arg in ("--add-scram", f"{mech}=[name={user},password={pw}]")
        ]

    def _launch(self, java: str, jars: Sequence[Path]) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="cdc_sink-kafka-"))
        data_dir = self.workdir / "data"
        self.port, self.controller_port = free_port_pair(self.host)
        self.listener_ports = {}
        for protocol in self._secured_protocols():
            taken = {self.port, self.controller_port, *self.listener_ports.values()}
            port = free_port(self.host)
            while port in taken:
                port = free_port(self.host)
            self.listener_ports[protocol] = port
        self.cluster_id = random_cluster_id()
        if self.ssl:
            try:
                make_server_certificate(self.workdir / "tls", self.host)
            except CertificateError as exc:
                raise KafkaStartError(str(exc)) from exc

        props_file = self.workdir / "server.properties"
        props_file.write_text("".join(f"{k}={v}\n" for k, v in self._properties(data_dir).items()))
        log4j = self.workdir / "log4j2.properties"
        log4j.write_text(LOG4J2.format(log=self.workdir / "broker.log"))
        jvm = self._jvm(java, jars)
        fmt = subprocess.run(
            [
                *jvm,
                STORAGE_TOOL_CLASS,
                "format",
                "-t",
                self.cluster_id,
                "-c",
                str(props_file),
                *self._scram_arguments(),
            ],
            cwd=self.workdir,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=self.startup_timeout,
            check=False,
        )
        if fmt.returncode != 0:
            raise KafkaStartError(
                f"formatting Kafka storage failed ({fmt.returncode}):\n"
                f"{(fmt.stdout + fmt.stderr)[-4000:]}\n{tail(self.workdir / 'broker.log', 40)}"
            )
        self._spawn(jvm)

    def _jvm(self, java: str, jars: Sequence[Path]) -> list[str]:
        assert self.workdir is not None
        return jvm_command(java, heap=self.heap, workdir=self.workdir, jars=jars)

    def _spawn(self, jvm: list[str]) -> None:
        """Starts the broker JVM on the formatted ``workdir`` and its watchdog."""
        assert self.workdir is not None
        props_file = self.workdir / "server.properties"
        self._child.launch(
            [*jvm, KAFKA_MAIN_CLASS, str(props_file)],
            cwd=self.workdir,
            log=self.workdir / "stdout.log",
            grace=self.stop_timeout,
            workdir=None if self.keep_dir else self.workdir,
        )
        register_live(self)

    def _wait_ready(self) -> None:
        assert self.port is not None
        deadline = time.monotonic() + self.startup_timeout
        # Poll the socket first, so librdkafka does not log "connection refused".
        while not port_open(self.host, self.port):
            self._check_alive()
            if time.monotonic() > deadline:
                self._fail(
                    f"the broker did not listen on {self.host}:{self.port} "
                    f"within {self.startup_timeout}s"
                )
            time.sleep(0.1)
        admin = admin_client(
            f"{self.host}:{self.port}", **{"socket.connection.setup.timeout.ms": 2000}
        )
        last: Exception | None = None
        while True:
            self._check_alive()
            try:
                if broker_answers(admin):
                    return
            except Exception as exc:  # KafkaException while the broker is still starting
                last = exc
            else:
                last = None
            if time.monotonic() > deadline:
                self._fail(
                    f"the broker did not answer within {self.startup_timeout}s"
                    + (f" ({last})" if last else "")
                )
            time.sleep(0.1)

    def _check_alive(self) -> None:
        code = self._child.exit_code()
        if code is not None:
            self._fail(f"the broker exited with code {code} while starting")

    def _fail(self, why: str) -> None:
        assert self.workdir is not None
        raise KafkaStartError(
            f"{why}.\n--- tail of {self.workdir / 'broker.log'} ---\n"
            f"{tail(self.workdir / 'broker.log', 60)}\n"
            f"--- tail of stdout/stderr ---\n{tail(self.workdir / 'stdout.log', 20)}"
        )

    def _kill(self) -> None:
        self._child.kill()

    def _teardown(self) -> None:
        self._child.stop(self.stop_timeout)
        unregister_live(self)
        if self.workdir is not None and not self.keep_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None


def start_kafka(
    *, num_partitions: int = 1, kind: Literal["auto", "local", "docker", "external"] | None = None
) -> KafkaHandle:
    """Start (or point at) a Kafka cluster and return its handle.

    ``kind`` defaults to ``$CDC_SINK_KAFKA`` or ``"auto"``: an external cluster when
    ``$CDC_SINK_KAFKA_BOOTSTRAP`` is set, else a container when a Docker engine answers
    and the Kafka image is already there (``"auto"`` never waits for an image build),
    else :class:`LocalKafka`. ``"docker"`` starts the Docker engine if needed
    (:func:`cdc_sink_testkit.docker_engine.ensure_engine`) and builds the image if missing.
    The caller stops the handle.
    """
    chosen = kind or os.environ.get(KIND_ENV) or "auto"
    bootstrap = os.environ.get(BOOTSTRAP_ENV)
    if chosen == "external" or (chosen == "auto" and bootstrap):
        if not bootstrap:
            raise ValueError(f"kind='external' needs ${BOOTSTRAP_ENV}")
        logger.info("using the external Kafka cluster at %s", bootstrap)
        return ExternalKafka(bootstrap)
    if chosen == "docker":
        from cdc_sink_testkit.docker_engine import ensure_engine

        ensure_engine()
        return TestcontainersKafka(num_partitions=num_partitions).start()
    if chosen == "auto" and docker_available():
        image = docker_kafka_image(build=False)
        if image is not None:
            return TestcontainersKafka(num_partitions=num_partitions, image=image).start()
    if chosen not in ("auto", "local"):
        raise ValueError(f"unknown Kafka kind {chosen!r}")
    return LocalKafka(num_partitions=num_partitions).start()


def start_own_kafka(num_partitions: int = 1) -> KafkaHandle:
    """A broker a test suite keeps to itself (one it may bounce or load): the cluster
    ``$CDC_SINK_KAFKA_BOOTSTRAP`` names, else a :class:`LocalKafka` (never a container
    shared with other suites). The caller stops it (``with start_own_kafka() as k:``)."""
    kind: Literal["external", "local"] = "external" if os.environ.get(BOOTSTRAP_ENV) else "local"
    return start_kafka(num_partitions=num_partitions, kind=kind)


kafka_for_tests = start_kafka
