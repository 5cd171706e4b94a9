"""Fixtures of the chaos suite: its own Kafka broker (the local Maven-jar broker, or the
cluster ``$CDC_SINK_KAFKA_BOOTSTRAP`` names), started once per session."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from cdc_sink_testkit.kafka import BOOTSTRAP_ENV, KafkaHandle, start_kafka


@pytest.fixture(scope="session")
def chaos_kafka() -> Iterator[KafkaHandle]:
    """A running Kafka cluster for the chaos runs."""
    handle = start_kafka(
        num_partitions=1, kind="external" if os.environ.get(BOOTSTRAP_ENV) else "local"
    )
    try:
        yield handle
    finally:
        handle.stop()
