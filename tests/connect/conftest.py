"""Fixtures of the Spark Connect tests: one real Connect server per test session
(started on first use by :mod:`cdc_sink_testkit.connect`, stopped at the end), a Connect
client session to it, and the integration tests' real Kafka broker."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from cdc_sink_testkit.connect import ConnectServer
from tests.integration.conftest import _kafka_brokers, kafka, topic_name

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["_kafka_brokers", "connect_server", "connect_spark", "kafka", "topic_name"]


@pytest.fixture(scope="session")
def connect_server() -> Iterator[ConnectServer]:
    """A Spark Connect server (local[2], Spark's Kafka source) on 127.0.0.1."""
    with ConnectServer() as server:
        yield server


@pytest.fixture(scope="session")
def connect_spark(connect_server: ConnectServer) -> Iterator[SparkSession]:
    """A Spark Connect client session (``SparkSession.builder.remote``) to the server."""
    from pyspark.sql import SparkSession

    session = SparkSession.builder.remote(connect_server.url).create()
    try:
        yield session
    finally:
        session.stop()
