"""The configuration of a single-node KRaft Kafka (combined broker and controller).

One node, listening on 127.0.0.1 only: ``PLAINTEXT`` for clients on ``port``,
``CONTROLLER`` on ``controller_port``, replication factor 1 everywhere, no topic
auto-creation. :func:`server_properties` is that node's ``server.properties`` (for the
JVM run by :class:`cdc_sink_testkit.kafka.broker.LocalKafka`), :func:`container_env` the same as
``KAFKA_*`` variables (for images configured like ``apache/kafka``, run by
:class:`cdc_sink_testkit.kafka.container.TestcontainersKafka`).
"""

from __future__ import annotations

import base64
import os
import shutil
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from cdc_sink_testkit.kafka.handle import KafkaStartError

__all__ = [
    "KAFKA_MAIN_CLASS",
    "LOG4J2",
    "STORAGE_TOOL_CLASS",
    "container_env",
    "find_java",
    "jvm_command",
    "random_cluster_id",
    "server_properties",
]

KAFKA_MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL_CLASS = "kafka.tools.StorageTool"


def server_properties(
    *,
    host: str,
    port: int,
    controller_port: int,
    data_dir: Path,
    num_partitions: int,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The broker's ``server.properties`` (``extra`` entries win)."""
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{host}:{controller_port}",
        "listeners": (f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}"),
        "advertised.listeners": f"PLAINTEXT://{host}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(data_dir),
        "num.partitions": str(num_partitions),
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
    props.update(extra or {})
    return props


def container_env(
    *, host: str, port: int, controller_port: int, num_partitions: int
) -> dict[str, str]:
    """The same node as ``KAFKA_*`` environment variables (with a fresh ``CLUSTER_ID``)."""
    env = {
        "CLUSTER_ID": random_cluster_id(),
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": (f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}"),
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://{host}:{port}",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": f"1@{host}:{controller_port}",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "KAFKA_INTER_BROKER_LISTENER_NAME": "PLAINTEXT",
        "KAFKA_NUM_PARTITIONS": str(num_partitions),
        "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "KAFKA_HEAP_OPTS": "-Xmx512m -Xms64m",
    }
    return env


def random_cluster_id() -> str:
    """A new KRaft cluster id (what ``kafka-storage random-uuid`` prints)."""
    # Kafka's Uuid string: 16 random bytes, URL-safe base64 without padding; Kafka's own
    # generator also avoids ids that start with '-' (they read as command-line options).
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def find_java() -> str:
    """The ``java`` executable: ``$JAVA_HOME/bin/java``, else the one on PATH.

    Raises:
        KafkaStartError: There is none.
    """
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise KafkaStartError(
            "a Java runtime (17 or newer) is needed to run Kafka: "
            "'java' is not on PATH and JAVA_HOME is not set"
        )
    return found


def jvm_command(java: str, *, heap: str, workdir: Path, jars: Sequence[Path]) -> list[str]:
    """The JVM and its options (small heap, C1 only, logging into ``workdir``), up to the
    main class."""
    return [
        java,
        f"-Xmx{heap}",
        "-Xms64m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",  # C1 only: starts in about half the time
        "-Xss1m",
        "-Djava.awt.headless=true",
        "-Djava.net.preferIPv4Stack=true",
        f"-Dlog4j2.configurationFile={workdir / 'log4j2.properties'}",
        f"-Dkafka.logs.dir={workdir}",
        "-cp",
        os.pathsep.join(str(j) for j in jars),
    ]


# The broker logs into <workdir>/broker.log (log4j2, through slf4j), quietly.
LOG4J2 = """\
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
