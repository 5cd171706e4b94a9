"""Shared fixtures of the integration tests: a real Kafka cluster and a local Spark.

``kafka`` is one of two real single-node KRaft brokers, each started once per session
(on first use) and stopped at its end, so both ways of running Kafka stay exercised:

* ``docker``: the project's Kafka image (``docker/kafka/Dockerfile``, built once per
  machine) run by testcontainers on the host network, where a Docker engine is reachable
  or can be started (:func:`cdc_sink_testkit.docker_engine.ensure_engine`);
* ``local``: the broker run from Maven Central's jars as a child JVM (``LocalKafka``).

Each test module uses one of them: the modules of :data:`LOCAL_BROKER_MODULES` the local
broker, the others the container. Where no Docker engine can be started, every module
uses the local broker (a warning says why). ``$CDC_SINK_KAFKA`` (``local``, ``docker``,
``external`` with ``$CDC_SINK_KAFKA_BOOTSTRAP``) puts every module on one kind.
"""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from cdc_sink_testkit.kafka import BOOTSTRAP_ENV, KIND_ENV, KafkaHandle, start_kafka

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Modules run against the local Maven-jar broker; every other module gets the container.
LOCAL_BROKER_MODULES = frozenset({"test_producer", "test_deadletter_kafka"})


class _Brokers:
    """The session's brokers, one per kind, started on first use."""

    def __init__(self) -> None:
        self.handles: dict[str, KafkaHandle] = {}
        self.docker_unavailable: str | None = None

    def get(self, kind: str) -> KafkaHandle:
        if kind == "docker" and self.docker_unavailable is None:
            from cdc_sink_testkit.docker_engine import DockerUnavailable, ensure_engine

            try:
                ensure_engine()
            except DockerUnavailable as exc:
                self.docker_unavailable = str(exc)
        if kind == "docker" and self.docker_unavailable is not None:
            warnings.warn(
                f"no Docker engine ({self.docker_unavailable}): the local broker "
                "stands in for the container",
                stacklevel=2,
            )
            kind = "local"
        if kind not in self.handles:
            self.handles[kind] = start_kafka(num_partitions=1, kind=kind)  # type: ignore[arg-type]
        return self.handles[kind]

    def stop(self) -> None:
        for handle in self.handles.values():
            handle.stop()
        self.handles.clear()


@pytest.fixture(scope="session")
def _kafka_brokers() -> Iterator[_Brokers]:
    brokers = _Brokers()
    try:
        yield brokers
    finally:
        brokers.stop()


def kafka_kind_for(module_name: str) -> str:
    """The kind of broker a test module runs against (see the module docstring)."""
    forced = os.environ.get(KIND_ENV)
    if forced and forced != "auto":
        return forced
    if os.environ.get(BOOTSTRAP_ENV):
        return "external"
    return "local" if module_name in LOCAL_BROKER_MODULES else "docker"


@pytest.fixture(scope="module")
def kafka(request: pytest.FixtureRequest, _kafka_brokers: _Brokers) -> KafkaHandle:
    """A running Kafka cluster (``.bootstrap_servers``, ``.create_topic(...)``)."""
    module = request.module.__name__.rsplit(".", 1)[-1]
    return _kafka_brokers.get(kafka_kind_for(module))


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """A local SparkSession (local[2]) with Spark's Kafka source, cdc_sink's JVM connector
    and S3A (``s3a://``, cdc_sink.spark.s3a) on its classpath."""
    from cdc_sink.spark.s3a import resolve_s3a_jars
    from cdc_sink.spark.session import local_spark, local_spark_conf

    jars = [local_spark_conf()["spark.jars"], *map(str, resolve_s3a_jars())]
    session = local_spark("cdc_sink-tests", extra_conf={"spark.jars": ",".join(jars)})
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name no other test uses (the cluster may be shared or external)."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:80]
    return f"t-{base}-{uuid.uuid4().hex[:8]}"
