"""Kafka: the producer SDK, dead-letter sinks, and a local KRaft broker from Maven jars.

    from cdc_sink.kafka import CdcProducer
    with CdcProducer(servers, "orders", schema, format="json") as p:
        p.upsert({"order_id": 1}, {"status": "paid"}, seq=7)

Names are imported on first use, so importing this package loads no Kafka client.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["CdcProducer", "DeliveryError", "KafkaDeadLetter", "LocalKafka",
           "ParquetDeadLetter", "start_kafka"]

_WHERE = {
    "CdcProducer": "cdc_sink.kafka.producer",
    "DeliveryError": "cdc_sink.kafka.producer",
    "KafkaDeadLetter": "cdc_sink.kafka.deadletter",
    "ParquetDeadLetter": "cdc_sink.kafka.deadletter",
    "LocalKafka": "cdc_sink.kafka.broker",
    "start_kafka": "cdc_sink.kafka.broker",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'cdc_sink.kafka' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
