"""Fixtures of the chaos suite: its own Kafka broker (the local Maven-jar broker, or the
cluster ``$CDC_SINK_KAFKA_BOOTSTRAP`` names), started once per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cdc_sink_testkit.kafka import KafkaHandle, start_own_kafka


@pytest.fixture(scope="session")
def chaos_kafka() -> Iterator[KafkaHandle]:
    """A running Kafka cluster for the chaos runs."""
    with start_own_kafka() as handle:
        yield handle
