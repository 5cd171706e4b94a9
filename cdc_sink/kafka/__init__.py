"""Kafka: the producer SDK, dead-letter sinks, and a local KRaft broker from Maven jars.

    from cdc_sink.kafka import CdcProducer
    with CdcProducer(servers, "orders", schema, format="json") as p:
        p.upsert({"order_id": 1}, {"status": "paid"}, seq=7)

Names are imported on first use, so importing this package loads no Kafka client; type
checkers see the real classes and functions (the ``TYPE_CHECKING`` imports below).
Producing and consuming need the ``kafka`` extra (``pip install 'cdc_sink[kafka]'``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdc_sink._lazy import lazy_exports

if TYPE_CHECKING:
    from cdc_sink.kafka.broker import LocalKafka, start_kafka
    from cdc_sink.kafka.deadletter import KafkaDeadLetter, ParquetDeadLetter
    from cdc_sink.kafka.producer import CdcProducer, DeliveryError

__all__ = [
    "CdcProducer",
    "DeliveryError",
    "KafkaDeadLetter",
    "LocalKafka",
    "ParquetDeadLetter",
    "start_kafka",
]

_WHERE = {
    "CdcProducer": "cdc_sink.kafka.producer",
    "DeliveryError": "cdc_sink.kafka.producer",
    "KafkaDeadLetter": "cdc_sink.kafka.deadletter",
    "ParquetDeadLetter": "cdc_sink.kafka.deadletter",
    "LocalKafka": "cdc_sink.kafka.broker",
    "start_kafka": "cdc_sink.kafka.broker",
}


__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
