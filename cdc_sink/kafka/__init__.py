"""Kafka: the producer SDK and the dead-letter sinks (the client side of Kafka).

    from cdc_sink.kafka import CdcProducer
    with CdcProducer(servers, "orders", schema, format="json") as p:
        p.upsert({"order_id": 1}, {"status": "paid"}, seq=7)

Names are imported on first use, so importing this package loads no Kafka client; type
checkers see the real classes and functions (the ``TYPE_CHECKING`` imports below).
Producing and consuming need the ``kafka`` extra (``pip install 'cdc_sink[kafka]'``).
:mod:`cdc_sink.kafka.admin` creates topics; :mod:`cdc_sink.kafka.jars` resolves Spark's
Kafka source. A Kafka broker to test against is not part of the product: it is in the test
kit, ``cdc_sink_testkit.kafka`` (docs/compatibility.md, "Migration: the test kit").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdc_sink.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from cdc_sink.kafka.deadletter import KafkaDeadLetter, ParquetDeadLetter
    from cdc_sink.kafka.producer import CdcProducer, DeliveryError

__all__ = [
    "CdcProducer",
    "DeliveryError",
    "KafkaDeadLetter",
    "ParquetDeadLetter",
]

_WHERE = {
    "CdcProducer": "cdc_sink.kafka.producer",
    "DeliveryError": "cdc_sink.kafka.producer",
    "KafkaDeadLetter": "cdc_sink.kafka.deadletter",
    "ParquetDeadLetter": "cdc_sink.kafka.deadletter",
}


__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
