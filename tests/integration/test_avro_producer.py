"""The producer SDK writes the ``debezium-avro`` format: events registered and encoded
through the real registry, produced to real Kafka, decoded back by the decoder."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from cdc_sink.formats.debezium_avro import DebeziumAvroDecoder
from cdc_sink.kafka.producer import CdcProducer
from cdc_sink_testkit.registry import LocalRegistry
from tests.integration.test_producer import SCHEMA, _consume

pytestmark = [pytest.mark.integration, pytest.mark.kafka]


def test_the_producer_writes_debezium_avro(
    kafka: Any, schema_registry: LocalRegistry, topic_name: str
) -> None:
    kafka.create_topic(topic_name, 2)
    columns = [c.name for c in SCHEMA.value_columns]
    with CdcProducer(
        kafka.bootstrap_servers,
        topic_name,
        SCHEMA,
        format="debezium-avro",
        encoder_options={"registry_url": schema_registry.url},
    ) as p:
        for i in range(20):
            row = {c: None for c in columns} | {"status": f"s{i}", "amount": "1.25", "seq": i}
            p.upsert({"order_id": i}, row, seq=i)
        p.delete({"order_id": 3}, seq=99)
    subjects = schema_registry.request("GET", "/subjects")
    assert isinstance(subjects, list) and f"{topic_name}-value" in subjects
    msgs = _consume(kafka.bootstrap_servers, topic_name, 21)
    dec = DebeziumAvroDecoder(registry_url=schema_registry.url)
    batch, rejects = dec.decode(pa.array([m.value() for m in msgs], pa.binary()), SCHEMA)
    assert len(rejects) == 0, rejects.reasons
    assert sorted(batch.op.tolist()) == [1] * 20 + [3]
    assert sorted(k for k in batch.keys[0].to_pylist()) == sorted([*range(20), 3])
