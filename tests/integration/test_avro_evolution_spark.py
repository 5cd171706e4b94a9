"""Schema evolution from the registry through real Kafka and Spark, in both apply modes.

The source table gains an optional column mid-stream (a new value-schema version of the
topic's subject, written by Confluent's serializer): with the decoder option
``schema_evolution="add_columns"`` the table gains the column in a version of its own,
before the batch that first carries it; the events of both schema versions apply; time
travel to before that version reads without the column. A schema the table cannot take
(a key column gone) stops the stream with an error naming it, and dead-letters nothing.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from cdc_sink import open_table
from cdc_sink.kafka.deadletter import ParquetDeadLetter
from cdc_sink.spark import DecodeOptions, SinkOptions, sink
from cdc_sink_testkit.registry import LocalRegistry
from tests.avro.connect import avro_datum, avro_schema
from tests.avro.produce import AvroWriter
from tests.formats.test_debezium_docs import MYSQL_CREATE, MYSQL_CUSTOMERS, MYSQL_SCHEMA, doc
from tests.integration.streams import start_sink_query

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka]

KEY_SCHEMA = doc("mysql_customers_key.json")["schema"]
ANNE = {"first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org"}


def _rows_schema(*add: dict[str, Any], drop: str | None = None) -> dict[str, Any]:
    out = copy.deepcopy(MYSQL_SCHEMA)
    for f in out["fields"][:2]:
        f["fields"] = [g for g in f["fields"] if g["field"] != drop] + list(add)
    return out


NOTE = {"type": "string", "optional": True, "field": "note"}
V2 = _rows_schema(NOTE)


def _create(row: dict[str, Any]) -> dict[str, Any]:
    p = json.loads(json.dumps(MYSQL_CREATE["payload"]))
    p["after"] = row
    return p


class Evolving:
    def __init__(
        self, spark: Any, kafka: Any, registry: LocalRegistry, topic: str, tmp: Path, mode: str
    ) -> None:
        self.kafka, self.topic, self.tmp, self.registry = kafka, topic, tmp, registry
        kafka.create_topic(topic, partitions=1)
        self.dlq = ParquetDeadLetter(tmp / "dlq")
        fn = sink(
            tmp / "t",
            schema=MYSQL_CUSTOMERS,
            dead_letter=self.dlq,
            options=SinkOptions(
                format="debezium-avro",
                apply_mode=mode,
                app_id="evolve",
                decode=DecodeOptions(
                    options={"registry_url": registry.url, "schema_evolution": "add_columns"}
                ),
            ),
        )
        self.keys = AvroWriter(registry.url, topic, avro_schema(KEY_SCHEMA), key=True)
        self.query = start_sink_query(spark, kafka.bootstrap_servers, topic, fn, tmp / "ckpt")

    def send(self, connect: dict[str, Any], *rows: dict[str, Any], subject: str | None = None):
        from confluent_kafka import Producer

        values = AvroWriter(self.registry.url, subject or self.topic, avro_schema(connect))
        p = Producer({"bootstrap.servers": self.kafka.bootstrap_servers})
        for row in rows:
            p.produce(
                self.topic,
                key=self.keys(avro_datum(KEY_SCHEMA, {"id": row["id"]})),
                value=values(avro_datum(connect, _create(row))),
            )
        assert p.flush(30) == 0
        self.query.processAllAvailable()


@pytest.mark.parametrize("mode", ["driver", "executors"])
def test_a_column_added_upstream_reaches_the_table(
    spark: Any,
    kafka: Any,
    schema_registry: LocalRegistry,
    topic_name: str,
    tmp_path: Path,
    mode: str,
) -> None:
    s = Evolving(spark, kafka, schema_registry, topic_name, tmp_path, mode)
    try:
        s.send(MYSQL_SCHEMA, {"id": 1004, **ANNE})
        table = open_table(tmp_path / "t")
        before = table.version
        assert "note" not in table.schema.names
        s.send(V2, {"id": 7, **ANNE, "note": "hi"})  # the new schema version
        s.send(MYSQL_SCHEMA, {"id": 8, **ANNE})  # a late writer of the old version
        table = open_table(tmp_path / "t")
        assert table.schema.column("note").nullable
        rows = {r.pop("id"): r for r in table.read().to_pylist()}
        assert rows == {
            1004: {**ANNE, "note": None},
            7: {**ANNE, "note": "hi"},
            8: {**ANNE, "note": None},
        }
        kinds = {e["version"]: e["kind"] for e in table.versions()}
        added = [v for v, k in kinds.items() if k == "schema"]
        assert len(added) == 1 and added[0] == before + 1  # its own version, before the batch
        old = table.read(version=before)
        assert "note" not in old.column_names and old.column("id").to_pylist() == [1004]
        assert s.dlq.read().num_rows == 0
    finally:
        s.query.stop()


def test_a_schema_the_table_cannot_take_stops_the_stream(
    spark: Any, kafka: Any, schema_registry: LocalRegistry, topic_name: str, tmp_path: Path
) -> None:
    s = Evolving(spark, kafka, schema_registry, topic_name, tmp_path, "driver")
    try:
        s.send(MYSQL_SCHEMA, {"id": 1004, **ANNE})
        other = f"{topic_name}-other-value"  # the registry refuses it under the topic's
        with pytest.raises(Exception, match="key column 'id' is not a field") as info:
            s.send(_rows_schema(drop="id"), {**ANNE, "id": 9}, subject=other)
        assert other in str(info.value)
        assert open_table(tmp_path / "t").read().num_rows == 1
        assert s.dlq.read().num_rows == 0
    finally:
        s.query.stop()
