"""Real Kafka for tests, benchmarks and the demo.

    from cdc_sink_testkit.kafka import start_kafka
    with start_kafka(num_partitions=3) as kafka:
        kafka.create_topic("orders", 3)
        ... kafka.bootstrap_servers ...

:func:`start_kafka` picks an external cluster (``$CDC_SINK_KAFKA_BOOTSTRAP``), a Docker
container or a local KRaft broker (:class:`LocalKafka`); see
:mod:`cdc_sink_testkit.kafka.broker`. Topics are created with the product's
:func:`cdc_sink.kafka.admin.create_topic` (re-exported here).
"""

from __future__ import annotations

from cdc_sink.kafka.admin import create_topic
from cdc_sink_testkit.kafka.broker import (
    BOOTSTRAP_ENV,
    KIND_ENV,
    LocalKafka,
    kafka_for_tests,
    start_kafka,
    start_own_kafka,
)
from cdc_sink_testkit.kafka.container import IMAGE_ENV, TestcontainersKafka
from cdc_sink_testkit.kafka.handle import ExternalKafka, KafkaHandle, KafkaStartError

__all__ = [
    "BOOTSTRAP_ENV",
    "IMAGE_ENV",
    "KIND_ENV",
    "ExternalKafka",
    "KafkaHandle",
    "KafkaStartError",
    "LocalKafka",
    "TestcontainersKafka",
    "create_topic",
    "kafka_for_tests",
    "start_kafka",
    "start_own_kafka",
]
