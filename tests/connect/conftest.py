"""Fixtures of the Spark Connect tests: one real Connect server per test session
(started on first use by :mod:`cdc_sink_testkit.connect`, stopped at the end), a Connect
client session to it, and the integration tests' real Kafka broker."""

from __future__ import annotations

import os
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


@pytest.fixture(scope="module")
def connect_spark(connect_server: ConnectServer) -> Iterator[SparkSession]:
    """A Spark Connect client session (``SparkSession.builder.remote``) to the server,
    for one test module.

    Creating it marks the whole process as a Connect client (pyspark sets
    ``SPARK_CONNECT_MODE_ENABLED``, after which its classic sessions and functions
    refuse to work), so the mark is taken back when the module is done: the other
    folders' tests use a classic local session in the same process.
    """
    from pyspark.sql import SparkSession

    marked = "SPARK_CONNECT_MODE_ENABLED" in os.environ
    session = SparkSession.builder.remote(connect_server.url).create()
    try:
        yield session
    finally:
        session.stop()
        if not marked:
            os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
