"""Shared fixtures of the integration tests: a real Kafka cluster and a local Spark.

Both are session-scoped (started once, on first use) and stopped at the end of the
session. ``kafka`` is whatever :func:`cdc_sink.kafka.broker.start_kafka` picks: the
cluster named by ``$CDC_SINK_KAFKA_BOOTSTRAP``, a testcontainers container where a
Docker engine answers, else a local KRaft broker from Maven Central's jars.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from cdc_sink.kafka.broker import KafkaHandle, start_kafka

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def kafka() -> Iterator[KafkaHandle]:
    """A running Kafka cluster (``.bootstrap_servers``, ``.create_topic(...)``)."""
    handle = start_kafka(num_partitions=1)
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """A local SparkSession (local[2]) with Spark's Kafka source on its classpath."""
    from cdc_sink.spark.session import local_spark

    session = local_spark("cdc_sink-tests")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name no other test uses (the cluster may be shared or external)."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:80]
    return f"t-{base}-{uuid.uuid4().hex[:8]}"
