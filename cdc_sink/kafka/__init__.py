"""Kafka: the producer SDK, dead-letter sinks, and a local KRaft broker from Maven jars.

    from cdc_sink.kafka import CdcProducer
    with CdcProducer(servers, "orders", schema, format="json") as p:
        p.upsert({"order_id": 1}, {"status": "paid"}, seq=7)

Names are imported on first use, so importing this package loads no Kafka client; type
checkers see the real classes and functions (the ``TYPE_CHECKING`` imports below).
Producing and consuming need the ``kafka`` extra (``pip install 'cdc_sink[kafka]'``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cdc_sink.kafka.broker import LocalKafka, start_kafka
    from cdc_sink.kafka.deadletter import KafkaDeadLetter, ParquetDeadLetter
    from cdc_sink.kafka.producer import CdcProducer, DeliveryError

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
    """Imports the module that defines ``name`` on first use (PEP 562)."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'cdc_sink.kafka' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
