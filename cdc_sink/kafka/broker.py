"""Real Kafka for tests and the demo: a local KRaft broker, a container, or a cluster.

:class:`LocalKafka` runs a genuine single-node Apache Kafka (combined broker and
controller, KRaft) from the jars that :func:`cdc_sink.kafka.jars.resolve_kafka_broker_jars`
resolves from Maven Central: ``java -cp <jars> kafka.Kafka server.properties`` in a
private temporary directory, listening on 127.0.0.1 only, on free ports.

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
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from cdc_sink.errors import CdcSinkError

logger = logging.getLogger(__name__)

__all__ = [
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
]

KAFKA_MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL_CLASS = "kafka.tools.StorageTool"
BOOTSTRAP_ENV = "CDC_SINK_KAFKA_BOOTSTRAP"
KIND_ENV = "CDC_SINK_KAFKA"  # force "local", "docker" or "external"
IMAGE_ENV = "CDC_SINK_KAFKA_IMAGE"  # the image TestcontainersKafka runs


class KafkaStartError(CdcSinkError, RuntimeError):
    """A Kafka broker could not be started (the message ends with its log's tail)."""


# -- shared interface -------------------------------------------------------------------


class KafkaHandle:
    """A running Kafka cluster: where it is, how to stop it, how to make topics."""

    @property
    def bootstrap_servers(self) -> str:
        raise NotImplementedError

    def stop(self) -> None:
        """Stop what this handle started (idempotent; a no-op for an external cluster)."""

    def create_topic(self, name: str, partitions: int = 1, *, replication_factor: int = 1,
                     config: Mapping[str, str] | None = None, timeout: float = 30.0) -> None:
        """Create ``name`` and wait until every partition has a leader."""
        create_topic(self.bootstrap_servers, name, partitions,
                     replication_factor=replication_factor, config=config, timeout=timeout)

    def __enter__(self) -> KafkaHandle:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def create_topic(bootstrap_servers: str, name: str, partitions: int = 1, *,
                 replication_factor: int = 1, config: Mapping[str, str] | None = None,
                 timeout: float = 30.0) -> None:
    """Create a topic with confluent-kafka's AdminClient and wait for its leaders."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported
        AdminClient,
        NewTopic,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    topic = NewTopic(name, num_partitions=partitions, replication_factor=replication_factor,
                     config=dict(config or {}))
    futures = admin.create_topics([topic], operation_timeout=timeout, request_timeout=timeout)
    try:
        futures[name].result(timeout=timeout)
    except KafkaException as exc:
        raise CdcSinkError(f"cannot create topic {name!r}: {exc}") from exc
    deadline = time.monotonic() + timeout
    while True:
        md = admin.list_topics(topic=name, timeout=max(1.0, deadline - time.monotonic()))
        t = md.topics.get(name)
        if (t is not None and t.error is None and len(t.partitions) == partitions
                and all(p.leader >= 0 for p in t.partitions.values())):
            return
        if time.monotonic() > deadline:
            raise CdcSinkError(f"topic {name!r} has no leader for every partition after "
                               f"{timeout}s")
        time.sleep(0.05)


# -- local KRaft broker -----------------------------------------------------------------

# Live brokers (local processes and containers) of this process, stopped at interpreter
# exit. Strong references: a broker that was started stays alive (and reachable for this
# handler) until it is stopped.
_LIVE: set[LocalKafka | TestcontainersKafka] = set()


@atexit.register
def _stop_all_at_exit() -> None:
    for broker in list(_LIVE):
        with contextlib.suppress(Exception):
            broker.stop()


# Runs in its own process: waits for EOF on stdin (the parent closed the pipe or died),
# then stops the broker's process group (SIGTERM, and SIGKILL after a grace period) and
# removes the broker's directory (argv[3], empty to keep it).
_WATCHDOG = """
import os, shutil, signal, sys, time
pgid, grace, workdir = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
signal.signal(signal.SIGINT, signal.SIG_IGN)
try:
    while sys.stdin.buffer.read(4096):
        pass
except Exception:
    pass
def alive():
    try:
        os.killpg(pgid, 0)
        return True
    except OSError:
        return False
if alive():
    try:
        os.killpg(pgid, signal.SIGTERM)
    except OSError:
        pass
    end = time.monotonic() + grace
    while alive() and time.monotonic() < end:
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
    time.sleep(0.5)
if workdir:
    shutil.rmtree(workdir, ignore_errors=True)
"""


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _random_cluster_id() -> str:
    # Kafka's Uuid string: 16 random bytes, URL-safe base64 without padding; Kafka's own
    # generator also avoids ids that start with '-' (they read as command-line options).
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def _find_java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise KafkaStartError("a Java runtime (17 or newer) is needed to run Kafka: "
                              "'java' is not on PATH and JAVA_HOME is not set")
    return found


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no {path.name})"
    return "\n".join(text.splitlines()[-lines:])


_LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


class LocalKafka(KafkaHandle):
    """A real single-node KRaft Kafka broker (broker + controller) run as a child JVM.

    Args:
        num_partitions: ``num.partitions``, the default for new topics.
        heap: The JVM's maximum heap (``-Xmx``).
        startup_timeout: Seconds ``start()`` waits for the broker to answer.
        stop_timeout: Seconds ``stop()`` waits after SIGTERM before SIGKILL.
        extra_properties: More ``server.properties`` entries (they win).
        jars: The broker classpath; resolved from Maven Central by default.
        keep_dir: Keep the temporary directory (data, logs) after ``stop()``.

    Use as a context manager, or ``start()``/``stop()``.
    """

    def __init__(self, *, num_partitions: int = 1, heap: str = "512m",
                 startup_timeout: float = 120.0, stop_timeout: float = 15.0,
                 extra_properties: Mapping[str, str] | None = None,
                 jars: Sequence[Path] | None = None, keep_dir: bool = False) -> None:
        if num_partitions < 1:
            raise ValueError("num_partitions must be >= 1")
        self.host = "127.0.0.1"
        self.num_partitions = num_partitions
        self.heap = heap
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.extra_properties = dict(extra_properties or {})
        self._jars = list(jars) if jars is not None else None
        self.keep_dir = keep_dir
        self.port: int | None = None
        self.controller_port: int | None = None
        self.cluster_id: str | None = None
        self.workdir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    # -- public API --------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        if self.port is None or not self.is_running:
            raise RuntimeError("LocalKafka is not running: call start() first")
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def log_path(self) -> Path | None:
        return self.workdir / "broker.log" if self.workdir is not None else None

    def start(self) -> LocalKafka:
        """Format storage, launch the broker and wait until it answers; return self."""
        with self._lock:
            if self.is_running:
                return self
            from cdc_sink.kafka.jars import resolve_kafka_broker_jars

            jars = self._jars if self._jars is not None else resolve_kafka_broker_jars()
            java = _find_java()
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
            from cdc_sink.kafka.jars import resolve_kafka_broker_jars

            jars = self._jars if self._jars is not None else resolve_kafka_broker_jars()
            self._kill()
            try:
                self._spawn(self._jvm(_find_java(), jars))
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
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{self.host}:{self.controller_port}",
            "listeners": (f"PLAINTEXT://{self.host}:{self.port},"
                          f"CONTROLLER://{self.host}:{self.controller_port}"),
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(data_dir),
            "num.partitions": str(self.num_partitions),
            "auto.create.topics.enable": "false",
            "default.replication.factor": "1",
            "min.insync.replicas": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "5",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            "log.retention.hours": "168",
            "delete.topic.enable": "true",
        }
        props.update(self.extra_properties)
        return props

    def _launch(self, java: str, jars: Sequence[Path]) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="cdc_sink-kafka-"))
        data_dir = self.workdir / "data"
        self.port = _free_port(self.host)
        self.controller_port = _free_port(self.host)
        while self.controller_port == self.port:
            self.controller_port = _free_port(self.host)
        self.cluster_id = _random_cluster_id()

        props_file = self.workdir / "server.properties"
        props_file.write_text(
            "".join(f"{k}={v}\n" for k, v in self._properties(data_dir).items()))
        log4j = self.workdir / "log4j2.properties"
        log4j.write_text(_LOG4J2.format(log=self.workdir / "broker.log"))
        jvm = self._jvm(java, jars)
        fmt = subprocess.run(
            [*jvm, STORAGE_TOOL_CLASS, "format", "-t", self.cluster_id,
             "-c", str(props_file)],
            cwd=self.workdir, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=self.startup_timeout, check=False,
        )
        if fmt.returncode != 0:
            raise KafkaStartError(
                f"formatting Kafka storage failed ({fmt.returncode}):\n"
                f"{(fmt.stdout + fmt.stderr)[-4000:]}\n{_tail(self.workdir / 'broker.log', 40)}")
        self._spawn(jvm)

    def _jvm(self, java: str, jars: Sequence[Path]) -> list[str]:
        assert self.workdir is not None
        return [
            java, f"-Xmx{self.heap}", "-Xms64m", "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",  # C1 only: starts in about half the time
            "-Xss1m",
            "-Djava.awt.headless=true", "-Djava.net.preferIPv4Stack=true",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.workdir}",
            "-cp", os.pathsep.join(str(j) for j in jars),
        ]

    def _spawn(self, jvm: list[str]) -> None:
        """Starts the broker JVM on the formatted ``workdir`` and its watchdog."""
        assert self.workdir is not None
        props_file = self.workdir / "server.properties"
        out = open(self.workdir / "stdout.log", "ab")  # noqa: SIM115 - owned by the child
        try:
            self._proc = subprocess.Popen(
                [*jvm, KAFKA_MAIN_CLASS, str(props_file)],
                cwd=self.workdir, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,  # own process group
            )
        finally:
            out.close()
        _LIVE.add(self)
        # The watchdog holds the read end of a pipe whose write end only this process
        # has (close-on-exec): when this process dies, it sees EOF and kills the group.
        self._watchdog = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(self._proc.pid), str(self.stop_timeout),
             "" if self.keep_dir else str(self.workdir)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def _wait_ready(self) -> None:
        from confluent_kafka.admin import AdminClient

        assert self._proc is not None and self.port is not None
        deadline = time.monotonic() + self.startup_timeout
        # Poll the socket first, so librdkafka does not log "connection refused".
        while not _port_open(self.host, self.port):
            self._check_alive()
            if time.monotonic() > deadline:
                self._fail(f"the broker did not listen on {self.host}:{self.port} "
                           f"within {self.startup_timeout}s")
            time.sleep(0.1)
        admin = AdminClient({"bootstrap.servers": f"{self.host}:{self.port}",
                             "socket.connection.setup.timeout.ms": 2000})
        last: Exception | None = None
        while True:
            self._check_alive()
            try:
                md = admin.list_topics(timeout=2.0)
                if md.brokers:
                    return
            except Exception as exc:  # KafkaException while the broker is still starting
                last = exc
            else:
                last = None
            if time.monotonic() > deadline:
                self._fail(f"the broker did not answer within {self.startup_timeout}s"
                           + (f" ({last})" if last else ""))
            time.sleep(0.1)

    def _check_alive(self) -> None:
        assert self._proc is not None
        code = self._proc.poll()
        if code is not None:
            self._fail(f"the broker exited with code {code} while starting")

    def _fail(self, why: str) -> None:
        assert self.workdir is not None
        raise KafkaStartError(
            f"{why}.\n--- tail of {self.workdir / 'broker.log'} ---\n"
            f"{_tail(self.workdir / 'broker.log', 60)}\n"
            f"--- tail of stdout/stderr ---\n{_tail(self.workdir / 'stdout.log', 20)}")

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        self._stop_watchdog()
        if proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                proc.wait(timeout=10)

    def _stop_watchdog(self) -> None:
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            # Ours to stop first: it must not signal the group after the broker is gone.
            with contextlib.suppress(OSError):
                watchdog.kill()
            with contextlib.suppress(Exception):
                watchdog.wait(timeout=5)
            if watchdog.stdin is not None:
                with contextlib.suppress(OSError):
                    watchdog.stdin.close()

    def _teardown(self) -> None:
        proc, self._proc = self._proc, None
        self._stop_watchdog()
        if proc is not None:
            _terminate_group(proc, self.stop_timeout)
        _LIVE.discard(self)
        if self.workdir is not None and not self.keep_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None


def _terminate_group(proc: subprocess.Popen[Any], grace: float) -> None:
    pgid = proc.pid  # start_new_session=True: the broker leads its own group
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
    # Whatever is left in the group (the JVM is alone in it, but be thorough).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.wait(timeout=10)


# -- other kinds of cluster -------------------------------------------------------------


class ExternalKafka(KafkaHandle):
    """A cluster that runs elsewhere: nothing to start or stop."""

    def __init__(self, bootstrap_servers: str) -> None:
        self._bootstrap = bootstrap_servers

    @property
    def bootstrap_servers(self) -> str:
        return self._bootstrap


class TestcontainersKafka(KafkaHandle):
    """A KRaft broker in a Docker container, run with testcontainers on the host network.

    The image is the project's own (``docker/kafka/Dockerfile``, built once per machine by
    :func:`cdc_sink.docker_images.ensure_kafka_image` from the Maven Central jars of
    ``cdc_sink/kafka/pom.xml``; no registry needed), or ``$CDC_SINK_KAFKA_IMAGE``, or the
    ``image`` argument: any image configured like ``apache/kafka`` (``KAFKA_*`` variables,
    ``CLUSTER_ID``). The container uses host networking and listens on 127.0.0.1 only,
    on free ports. Testcontainers' Ryuk reaper is not used when its image is not present
    locally; instead, as for :class:`LocalKafka`, ``stop()``, an ``atexit`` handler and a
    watchdog process (for a killed Python) remove the container.

    Args:
        num_partitions: ``num.partitions``, the default for new topics.
        image: The image; default as described above.
        startup_timeout: Seconds ``start()`` waits for the broker to answer.
    """

    __test__ = False  # not a pytest test class despite its name

    def __init__(self, *, num_partitions: int = 1, image: str | None = None,
                 startup_timeout: float = 120.0) -> None:
        if num_partitions < 1:
            raise ValueError("num_partitions must be >= 1")
        self.host = "127.0.0.1"
        self.num_partitions = num_partitions
        self.image = image
        self.startup_timeout = startup_timeout
        self.port: int | None = None
        self.controller_port: int | None = None
        self._container: Any = None
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    @property
    def bootstrap_servers(self) -> str:
        if self.port is None or self._container is None:
            raise RuntimeError("TestcontainersKafka is not running: call start() first")
        return f"{self.host}:{self.port}"

    @property
    def container_id(self) -> str | None:
        """The running container's id (None before ``start()`` or after ``stop()``)."""
        if self._container is None:
            return None
        return str(self._container.get_wrapped_container().id)

    def start(self) -> TestcontainersKafka:
        """Build the image if needed, run the container and wait until Kafka answers."""
        with self._lock:
            if self._container is not None:
                return self
            image = self.image or docker_kafka_image(build=True)
            assert image is not None
            self.image = image
            try:
                self._launch(image)
                self._wait_ready()
            except BaseException:
                self._teardown()
                raise
            logger.info("Kafka container (%s) up at %s", image, self.bootstrap_servers)
            return self

    def stop(self) -> None:
        """Remove the container (and its anonymous volume); idempotent."""
        with self._lock:
            self._teardown()

    def __enter__(self) -> TestcontainersKafka:
        return self.start()

    def _launch(self, image: str) -> None:
        from testcontainers.core.config import testcontainers_config
        from testcontainers.core.container import DockerContainer

        from cdc_sink.docker_images import image_exists

        if not testcontainers_config.ryuk_disabled and not image_exists(
                testcontainers_config.ryuk_image):
            testcontainers_config.ryuk_disabled = True  # it could not be pulled
        self.port = _free_port(self.host)
        self.controller_port = _free_port(self.host)
        while self.controller_port == self.port:
            self.controller_port = _free_port(self.host)
        env = {
            "CLUSTER_ID": _random_cluster_id(),
            "KAFKA_NODE_ID": "1",
            "KAFKA_PROCESS_ROLES": "broker,controller",
            "KAFKA_LISTENERS": (f"PLAINTEXT://{self.host}:{self.port},"
                                f"CONTROLLER://{self.host}:{self.controller_port}"),
            "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://{self.host}:{self.port}",
            "KAFKA_CONTROLLER_QUORUM_VOTERS": f"1@{self.host}:{self.controller_port}",
            "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
            "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "KAFKA_INTER_BROKER_LISTENER_NAME": "PLAINTEXT",
            "KAFKA_NUM_PARTITIONS": str(self.num_partitions),
            "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
            "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
            "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
            "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
            "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
            "KAFKA_HEAP_OPTS": "-Xmx512m -Xms64m",
        }
        container = DockerContainer(image).with_kwargs(network_mode="host")
        for key, value in env.items():
            container = container.with_env(key, value)
        container.start()
        self._container = container
        _LIVE.add(self)
        # Removes the container should this process die without stop() (see LocalKafka).
        self._watchdog = subprocess.Popen(
            [sys.executable, "-c", _CONTAINER_WATCHDOG, self.container_id or ""],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def _logs_tail(self, lines: int = 60) -> str:
        try:
            out, err = self._container.get_logs()
            text = (out + err).decode(errors="replace")
        except Exception as exc:  # the container may be gone
            return f"(no logs: {exc})"
        return "\n".join(text.splitlines()[-lines:])

    def _wait_ready(self) -> None:
        from confluent_kafka.admin import AdminClient

        assert self.port is not None
        deadline = time.monotonic() + self.startup_timeout
        admin: Any = None
        while True:
            wrapped = self._container.get_wrapped_container()
            wrapped.reload()
            if wrapped.status in ("exited", "dead"):
                raise KafkaStartError(f"the Kafka container exited while starting:\n"
                                      f"{self._logs_tail()}")
            if _port_open(self.host, self.port):
                if admin is None:
                    admin = AdminClient({"bootstrap.servers": self.bootstrap_servers,
                                         "socket.connection.setup.timeout.ms": 2000})
                try:
                    if admin.list_topics(timeout=2.0).brokers:
                        return
                except Exception:  # KafkaException while the broker is still starting
                    pass
            if time.monotonic() > deadline:
                raise KafkaStartError(f"the Kafka container did not answer within "
                                      f"{self.startup_timeout}s:\n{self._logs_tail()}")
            time.sleep(0.2)

    def _teardown(self) -> None:
        container, watchdog = self._container, self._watchdog
        self._container, self._watchdog = None, None
        if container is not None:
            with contextlib.suppress(Exception):
                container.stop()  # removes it (force) with its anonymous volumes
        if watchdog is not None:
            if watchdog.stdin is not None:
                with contextlib.suppress(OSError):
                    watchdog.stdin.close()  # EOF: it removes the (gone) container and exits
            with contextlib.suppress(Exception):
                watchdog.wait(timeout=30)
        _LIVE.discard(self)


# Waits for EOF on stdin (the parent stopped it or died), then force-removes the container.
_CONTAINER_WATCHDOG = """
import signal, subprocess, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
try:
    while sys.stdin.buffer.read(4096):
        pass
except Exception:
    pass
if sys.argv[1]:
    subprocess.run(["docker", "rm", "-f", "-v", sys.argv[1]], capture_output=True, timeout=60)
"""


def docker_available(timeout: float = 10.0) -> bool:
    """True when a Docker engine answers ``docker info`` (a client alone is not enough)."""
    from cdc_sink.docker_engine import engine_running

    return engine_running(timeout=timeout)


def docker_kafka_image(*, build: bool) -> str | None:
    """The Kafka image for :class:`TestcontainersKafka`.

    ``$CDC_SINK_KAFKA_IMAGE`` when set; else the project's image
    (``docker/kafka/Dockerfile`` of this checkout), built (with the local base) when
    ``build`` and missing. None when there is none and ``build`` is false.

    Raises:
        KafkaStartError: No image is named and this checkout has no ``docker/``.
    """
    from cdc_sink.docker_images import (
        ensure_kafka_image,
        image_exists,
        kafka_image_tag,
        repo_root,
    )

    named = os.environ.get(IMAGE_ENV)
    if named:
        return named
    root = repo_root()
    if root is None:
        if not build:
            return None
        raise KafkaStartError(f"no Kafka image: set ${IMAGE_ENV} (e.g. apache/kafka) or run "
                              "from a checkout that has docker/kafka/Dockerfile")
    if not build:
        tag = kafka_image_tag(root)
        return tag if tag is not None and image_exists(tag) else None
    return ensure_kafka_image(root).tag


def start_kafka(*, num_partitions: int = 1,
                kind: Literal["auto", "local", "docker", "external"] | None = None
                ) -> KafkaHandle:
    """Start (or point at) a Kafka cluster and return its handle.

    ``kind`` defaults to ``$CDC_SINK_KAFKA`` or ``"auto"``: an external cluster when
    ``$CDC_SINK_KAFKA_BOOTSTRAP`` is set, else a container when a Docker engine answers
    and the Kafka image is already there (``"auto"`` never waits for an image build),
    else :class:`LocalKafka`. ``"docker"`` starts the Docker engine if needed
    (:func:`cdc_sink.docker_engine.ensure_engine`) and builds the image if missing.
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
        from cdc_sink.docker_engine import ensure_engine

        ensure_engine()
        return TestcontainersKafka(num_partitions=num_partitions).start()
    if chosen == "auto" and docker_available():
        image = docker_kafka_image(build=False)
        if image is not None:
            return TestcontainersKafka(num_partitions=num_partitions, image=image).start()
    if chosen not in ("auto", "local"):
        raise ValueError(f"unknown Kafka kind {chosen!r}")
    return LocalKafka(num_partitions=num_partitions).start()


kafka_for_tests = start_kafka
