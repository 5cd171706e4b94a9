"""Debezium's documented events through real Kafka and real Spark, in every apply mode,
with and without the JsonConverter schema envelope.

The messages are the fixtures of tests/formats/debezium_docs (copied from Debezium's
documentation: the MySQL tutorial's ``customers`` events; PostgreSQL create, update,
REPLICA IDENTITY DEFAULT/NOTHING deletes, truncate and logical-decoding messages),
produced with the Kafka message keys Debezium writes. After each step the table read
back must show what the source database holds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cdc_sink import open_table
from cdc_sink.kafka.deadletter import ParquetDeadLetter
from cdc_sink.schema import TableSchema
from cdc_sink.spark import DecodeOptions, SinkOptions, sink
from tests.formats.test_debezium_docs import (
    MYSQL_CREATE,
    MYSQL_CUSTOMERS,
    MYSQL_SCHEMA,
    PG_CREATE,
    PG_CUSTOMERS,
    PG_KEY_SCHEMA,
    PG_SCHEMA,
    delete_payload,
    doc,
    value,
)
from tests.integration.streams import start_sink_query

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka]

MODES = pytest.mark.parametrize("mode", ["driver", "executors"])
ENVELOPES = pytest.mark.parametrize("envelope", [True, False], ids=["schema", "no-schema"])

ANNE = {"first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org"}
ANNE_MARIE = {**ANNE, "first_name": "Anne Marie"}


class Stream:
    """A running query of the sink on its own topic."""

    def __init__(
        self,
        spark: Any,
        kafka: Any,
        topic: str,
        tmp: Path,
        schema: TableSchema,
        mode: str,
        **decoder_options: Any,
    ) -> None:
        self.kafka, self.topic, self.tmp = kafka, topic, tmp
        kafka.create_topic(topic, partitions=1)
        self.dlq = ParquetDeadLetter(tmp / "dlq")
        fn = sink(
            tmp / "t",
            schema=schema,
            dead_letter=self.dlq,
            options=SinkOptions(
                format="debezium",
                apply_mode=mode,
                app_id="docs",
                decode=DecodeOptions(options=decoder_options),
            ),
        )
        self.query = start_sink_query(spark, kafka.bootstrap_servers, topic, fn, tmp / "ckpt")

    def send(self, *records: tuple[bytes | None, bytes | None]) -> dict[Any, dict[str, Any]]:
        """Produces (key, value) records, waits until processed; the table's rows by id."""
        from confluent_kafka import Producer

        p = Producer(
            {"bootstrap.servers": self.kafka.bootstrap_servers, "enable.idempotence": True}
        )
        for key, val in records:
            p.produce(self.topic, key=key, value=val)
        assert p.flush(30) == 0
        self.query.processAllAvailable()
        rows = open_table(self.tmp / "t").read().to_pylist()
        return {r.pop("id"): r for r in rows}

    def stop(self) -> None:
        self.query.stop()


@MODES
@ENVELOPES
def test_mysql_tutorial_customers_through_spark(
    spark: Any, kafka: Any, topic_name: str, tmp_path: Path, mode: str, envelope: bool
) -> None:
    s = Stream(spark, kafka, topic_name, tmp_path, MYSQL_CUSTOMERS, mode)
    try:
        key = json.dumps(
            doc("mysql_customers_key.json")
            if envelope
            else doc("mysql_customers_key.json")["payload"]
        ).encode()
        assert s.send((key, value(MYSQL_CREATE["payload"], MYSQL_SCHEMA, envelope))) == {1004: ANNE}
        assert s.send(
            (key, value(doc("mysql_customers_update_payload.json"), MYSQL_SCHEMA, envelope))
        ) == {1004: ANNE_MARIE}
        # the delete, then both tombstone forms Debezium writes: skipped, not dead letters
        assert (
            s.send(
                (key, value(doc("mysql_customers_delete_payload.json"), MYSQL_SCHEMA, envelope)),
                (key, json.dumps(doc("mysql_customers_tombstone.json")).encode()),
                (key, None),
            )
            == {}
        )
        assert s.dlq.read().num_rows == 0
    finally:
        s.stop()


@MODES
@ENVELOPES
def test_postgres_customers_deletes_truncate_and_messages_through_spark(
    spark: Any, kafka: Any, topic_name: str, tmp_path: Path, mode: str, envelope: bool
) -> None:
    """Sequence from source.lsn, so the key-only deletes apply on a sequence table."""
    schema = TableSchema.from_dict(
        {
            "columns": [*PG_CUSTOMERS.to_dict()["columns"], {"name": "lsn", "type": "int64"}],
            "primary_key": ["id"],
            "sequence_column": "lsn",
            "num_buckets": 4,
        }
    )
    s = Stream(spark, kafka, topic_name, tmp_path, schema, mode, sequence_source="lsn")

    def key(i: int) -> bytes:
        return value({"id": i}, PG_KEY_SCHEMA, envelope)

    def create(i: int, lsn: int) -> bytes:
        p = json.loads(json.dumps(PG_CREATE["payload"]))
        p["after"]["id"] = i
        p["source"]["lsn"] = lsn
        return value(p, PG_SCHEMA, envelope)

    try:
        rows = s.send((key(1), value(PG_CREATE["payload"], PG_SCHEMA, envelope)))
        assert rows == {1: {**ANNE, "lsn": 24023128}}
        rows = s.send((key(1), value(doc("pg_customers_update_payload.json"), PG_SCHEMA, envelope)))
        assert rows[1]["first_name"] == "Anne Marie"
        # REPLICA IDENTITY DEFAULT: 'before' holds only the key
        assert (
            s.send((key(1), value(doc("pg_customers_delete_payload.json"), PG_SCHEMA, envelope)))
            == {}
        )
        # REPLICA IDENTITY NOTHING: no 'before' at all; the Kafka message key names the row
        rows = s.send(*[(key(i), create(i, 50_000_000 + i)) for i in range(2, 12)])
        assert sorted(rows) == list(range(2, 12))
        nothing = delete_payload(None)
        nothing["source"]["lsn"] = 60_000_000
        assert sorted(s.send((key(2), value(nothing, PG_SCHEMA, envelope)))) == list(range(3, 12))
        # truncate clears every bucket; logical-decoding messages change nothing
        assert (
            s.send(
                (None, value(doc("pg_customers_truncate_payload.json"), PG_SCHEMA, envelope)),
                (None, value(doc("pg_message_transactional_payload.json"), PG_SCHEMA, envelope)),
                (None, value(doc("pg_message_nontransactional_payload.json"), PG_SCHEMA, envelope)),
            )
            == {}
        )
        assert s.dlq.read().num_rows == 0
    finally:
        s.stop()
