"""Real Kafka for tests and the demo: a local KRaft broker, a container, or a cluster.

:class:`LocalKafka` runs a genuine single-node Apache Kafka (combined broker and
controller, KRaft) from the jars that :func:`cdc_sink.kafka.jars.resolve_kafka_broker_jars`
resolves from Maven Central: ``java -cp <jars> kafka.Kafka server.properties`` in a
private temporary directory, listening on 127.0.0.1 only, on free ports.

:func:`start_kafka` (alias :func:`kafka_for_tests`) picks what to use:

1. ``$CDC_SINK_KAFKA_BOOTSTRAP`` set: that external cluster (nothing is started).
2. a Docker engine answers ``docker info``: testcontainers' ``KafkaContainer``.
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

__all__ = [
    "ExternalKafka",
    "KafkaHandle",
    "KafkaStartError",
    "LocalKafka",
    "TestcontainersKafka",
    "create_topic",
    "docker_available",
    "kafka_for_tests",
    "start_kafka",
]

KAFKA_MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL_CLASS = "kafka.tools.StorageTool"
BOOTSTRAP_ENV = "CDC_SINK_KAFKA_BOOTSTRAP"
KIND_ENV = "CDC_SINK_KAFKA"  # force "local", "docker" or "external"


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

# Live brokers of this process, stopped at interpreter exit. Strong references: a broker
# that was started stays alive (and reachable for this handler) until it is stopped.
_LIVE: set[LocalKafka] = set()


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
                    return self
                except KafkaStartError as exc:
                    last_error = exc
                    bind_race = "Address already in use" in str(exc)
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
        classpath = os.pathsep.join(str(j) for j in jars)
        jvm = [
            java, f"-Xmx{self.heap}", "-Xms64m", "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",  # C1 only: starts in about half the time
            "-Xss1m",
            "-Djava.awt.headless=true", "-Djava.net.preferIPv4Stack=true",
            f"-Dlog4j2.configurationFile={log4j}", f"-Dkafka.logs.dir={self.workdir}",
            "-cp", classpath,
        ]
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

        out = open(self.workdir / "stdout.log", "wb")  # noqa: SIM115 - owned by the child
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

    def _teardown(self) -> None:
        proc, watchdog, self._proc, self._watchdog = self._proc, self._watchdog, None, None
        if watchdog is not None:
            # Ours to stop first: it must not signal the group after the broker is gone.
            with contextlib.suppress(OSError):
                watchdog.kill()
            with contextlib.suppress(Exception):
                watchdog.wait(timeout=5)
            if watchdog.stdin is not None:
                with contextlib.suppress(OSError):
                    watchdog.stdin.close()
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
    """Kafka in a Docker container (testcontainers' ``KafkaContainer``, KRaft mode)."""

    __test__ = False  # not a pytest test class despite its name

    def __init__(self, *, num_partitions: int = 1,
                 image: str = "confluentinc/cp-kafka:7.9.1") -> None:
        try:
            from testcontainers.community.kafka import KafkaContainer
        except ImportError:  # testcontainers < 4.10
            from testcontainers.kafka import KafkaContainer

        self._container: Any = (
            KafkaContainer(image).with_kraft()
            .with_env("KAFKA_AUTO_CREATE_TOPICS_ENABLE", "false")
            .with_env("KAFKA_NUM_PARTITIONS", str(num_partitions))
        )
        self._started = False

    def start(self) -> TestcontainersKafka:
        if not self._started:
            self._container.start()
            self._started = True
        return self

    @property
    def bootstrap_servers(self) -> str:
        return str(self._container.get_bootstrap_server())

    def stop(self) -> None:
        if self._started:
            self._started = False
            self._container.stop()


def docker_available(timeout: float = 10.0) -> bool:
    """True when a Docker engine answers ``docker info`` (a client alone is not enough)."""
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=timeout,
                              check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def start_kafka(*, num_partitions: int = 1,
                kind: Literal["auto", "local", "docker", "external"] | None = None
                ) -> KafkaHandle:
    """Start (or point at) a Kafka cluster and return its handle.

    ``kind`` defaults to ``$CDC_SINK_KAFKA`` or ``"auto"``: an external cluster when
    ``$CDC_SINK_KAFKA_BOOTSTRAP`` is set, else a container when a Docker engine
    answers, else :class:`LocalKafka`. The caller stops the handle.
    """
    chosen = kind or os.environ.get(KIND_ENV) or "auto"
    bootstrap = os.environ.get(BOOTSTRAP_ENV)
    if chosen == "external" or (chosen == "auto" and bootstrap):
        if not bootstrap:
            raise ValueError(f"kind='external' needs ${BOOTSTRAP_ENV}")
        return ExternalKafka(bootstrap)
    if chosen == "docker" or (chosen == "auto" and docker_available()):
        return TestcontainersKafka(num_partitions=num_partitions).start()
    if chosen not in ("auto", "local"):
        raise ValueError(f"unknown Kafka kind {chosen!r}")
    return LocalKafka(num_partitions=num_partitions).start()


kafka_for_tests = start_kafka
