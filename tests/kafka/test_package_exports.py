"""The public names of cdc_sink.kafka (DESIGN §4) resolve, lazily."""

from __future__ import annotations

import subprocess
import sys

import pytest

import cdc_sink.kafka as kafka_pkg
from cdc_sink.kafka.broker import LocalKafka, start_kafka
from cdc_sink.kafka.deadletter import KafkaDeadLetter, ParquetDeadLetter
from cdc_sink.kafka.producer import CdcProducer, DeliveryError


def test_public_names_resolve_to_their_implementations() -> None:
    assert kafka_pkg.CdcProducer is CdcProducer
    assert kafka_pkg.DeliveryError is DeliveryError
    assert kafka_pkg.KafkaDeadLetter is KafkaDeadLetter
    assert kafka_pkg.ParquetDeadLetter is ParquetDeadLetter
    assert kafka_pkg.LocalKafka is LocalKafka
    assert kafka_pkg.start_kafka is start_kafka
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = kafka_pkg.Nope


def test_importing_the_package_loads_no_kafka_client() -> None:
    code = "import sys, cdc_sink.kafka; print('confluent_kafka' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
