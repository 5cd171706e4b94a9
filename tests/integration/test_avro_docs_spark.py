"""Debezium's documented events in Avro through real Kafka, a real schema registry and real
Spark, in both apply modes: the table equals what the JSON path gives for the same
changes.

The messages are the fixtures of tests/formats/debezium_docs (Debezium's documentation:
the MySQL tutorial's ``customers`` events; PostgreSQL create, update, REPLICA IDENTITY
DEFAULT/NOTHING deletes, truncate and logical-decoding messages), written by Confluent's
Avro serializer through the session's Apicurio Registry, values and keys, and streamed
with ``format="debezium-avro"``. After each step the table must equal a table fed the
same changes in Debezium JSON through :meth:`Table.apply` (the JSON decoder, no Spark),
and no message may be dead-lettered.

A registry outage mid-stream (driver mode): a micro-batch whose schema the driver has not
fetched yet fails while the registry is down; the query restarted from its checkpoint
once the registry is back applies it, with no dead letter and nothing lost.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cdc_sink import create_table, open_table
from cdc_sink.formats import get_decoder
from cdc_sink.formats.avro_wire import cache_clear
from cdc_sink.kafka.deadletter import ParquetDeadLetter
from cdc_sink.schema import TableSchema
from cdc_sink.spark import DecodeOptions, SinkOptions, sink
from cdc_sink_testkit.registry import LocalRegistry
from tests.avro.connect import avro_datum, avro_schema, connect_json
from tests.avro.produce import AvroWriter
from tests.formats.test_avro_debezium import PG_AVRO_SCHEMA
from tests.formats.test_debezium_docs import (
    MYSQL_CREATE,
    MYSQL_CUSTOMERS,
    MYSQL_SCHEMA,
    PG_CREATE,
    PG_CUSTOMERS,
    PG_KEY_SCHEMA,
    PLACEHOLDER,
    PLACEHOLDER_B64,
    PRICE,
    TYPES,
    create,
    delete_payload,
    doc,
    row,
    types_schema,
)
from tests.integration.streams import start_sink_query

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka]

MODES = pytest.mark.parametrize("mode", ["driver", "executors"])
MYSQL_KEY_SCHEMA = doc("mysql_customers_key.json")["schema"]


class Stream:
    """The sink on one topic, fed Avro; a twin table fed the same changes as JSON."""

    def __init__(
        self,
        spark: Any,
        kafka: Any,
        registry: LocalRegistry,
        topic: str,
        tmp: Path,
        schema: TableSchema,
        mode: str,
        connect: dict[str, Any],
        key_schema: dict[str, Any],
        **options: Any,
    ) -> None:
        self.spark, self.kafka, self.topic, self.tmp = spark, kafka, topic, tmp
        self.schema, self.mode, self.options = schema, mode, options
        self.connect, self.key_schema = connect, key_schema
        self.values = AvroWriter(registry.url, topic, avro_schema(connect))
        self.keys = AvroWriter(registry.url, topic, avro_schema(key_schema), key=True)
        kafka.create_topic(topic, partitions=1)
        self.dlq = ParquetDeadLetter(tmp / "dlq")
        self.fn = sink(
            tmp / "t",
            schema=schema,
            dead_letter=self.dlq,
            options=SinkOptions(
                format="debezium-avro",
                apply_mode=mode,
                app_id="avro-docs",
                decode=DecodeOptions(options={"registry_url": registry.url, **options}),
            ),
        )
        self.twin = create_table(tmp / "json", schema)
        self.json = get_decoder("debezium", **options)
        self.batches = 0
        self.query = self.start()

    def start(self) -> Any:
        return start_sink_query(
            self.spark, self.kafka.bootstrap_servers, self.topic, self.fn, self.tmp / "ckpt"
        )

    def produce(self, *changes: tuple[Any, Any]) -> None:
        """Produces (key, payload) changes in Avro and applies them as JSON to the twin."""
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.kafka.bootstrap_servers})
        json_values, json_keys = [], []
        for key, payload in changes:
            k = None if key is None else self.keys(avro_datum(self.key_schema, key))
            v = None if payload is None else self.values(avro_datum(self.connect, payload))
            p.produce(self.topic, key=k, value=v)
            json_keys.append(None if key is None else json.dumps(key).encode())
            json_values.append(
                None
                if payload is None
                else json.dumps(
                    {"schema": self.connect, "payload": connect_json(self.connect, payload)}
                ).encode()
            )
        assert p.flush(30) == 0
        batch, rejects = self.json.decode(
            pa.array(json_values, pa.binary()), self.schema, keys=pa.array(json_keys, pa.binary())
        )
        assert len(rejects) == 0, rejects.reasons
        self.batches += 1
        self.twin.apply(batch, app_id="json", batch_id=self.batches)

    def send(self, *changes: tuple[Any, Any]) -> dict[Any, dict[str, Any]]:
        """Produces, waits until processed; the sink's rows by id (== the JSON twin's)."""
        self.produce(*changes)
        self.query.processAllAvailable()
        got = _rows(open_table(self.tmp / "t").read())
        assert got == _rows(open_table(self.tmp / "json").read())
        assert self.dlq.read().num_rows == 0
        return got

    def stop(self) -> None:
        self.query.stop()


OpenStream = Callable[..., Stream]
"""``open_stream(schema, mode, connect, key_schema, **decoder_options)``: a :class:`Stream`
on the test's topic, registry and directory, stopped when the test ends."""


@pytest.fixture
def open_stream(
    spark: Any, kafka: Any, schema_registry: LocalRegistry, topic_name: str, tmp_path: Path
) -> Iterator[OpenStream]:
    opened: list[Stream] = []

    def open_(*args: Any, **options: Any) -> Stream:
        s = Stream(spark, kafka, schema_registry, topic_name, tmp_path, *args, **options)
        opened.append(s)
        return s

    yield open_
    for s in opened:
        s.stop()


def _rows(table: pa.Table) -> dict[Any, dict[str, Any]]:
    """Rows by id (a NaN as the text "NaN": NaN != NaN in comparisons)."""
    return {
        r.pop("id"): {k: "NaN" if isinstance(v, float) and v != v else v for k, v in r.items()}
        for r in table.to_pylist()
    }


ANNE = {"first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org"}


@MODES
def test_mysql_tutorial_customers_through_spark(open_stream: OpenStream, mode: str) -> None:
    s = open_stream(MYSQL_CUSTOMERS, mode, MYSQL_SCHEMA, MYSQL_KEY_SCHEMA)
    key = {"id": 1004}
    assert s.send((key, MYSQL_CREATE["payload"])) == {1004: ANNE}
    rows = s.send((key, doc("mysql_customers_update_payload.json")))
    assert rows[1004]["first_name"] == "Anne Marie"
    # the delete, then the tombstone (a null value): skipped, not a dead letter
    assert s.send((key, doc("mysql_customers_delete_payload.json")), (key, None)) == {}


@MODES
def test_postgres_customers_deletes_truncate_and_messages_through_spark(
    open_stream: OpenStream, mode: str
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
    s = open_stream(schema, mode, PG_AVRO_SCHEMA, PG_KEY_SCHEMA, sequence_source="lsn")

    def create(i: int, lsn: int) -> dict[str, Any]:
        p = json.loads(json.dumps(PG_CREATE["payload"]))
        p["after"]["id"] = i
        p["source"]["lsn"] = lsn
        return p

    assert s.send(({"id": 1}, PG_CREATE["payload"]))[1]["lsn"] == 24023128
    assert s.send(({"id": 1}, doc("pg_customers_update_payload.json")))[1]["first_name"] == (
        "Anne Marie"
    )
    assert s.send(({"id": 1}, doc("pg_customers_delete_payload.json"))) == {}
    rows = s.send(*[({"id": i}, create(i, 50_000_000 + i)) for i in range(2, 12)])
    assert sorted(rows) == list(range(2, 12))
    nothing = delete_payload(None)  # REPLICA IDENTITY NOTHING: the key names the row
    nothing["source"]["lsn"] = 60_000_000
    assert sorted(s.send(({"id": 2}, nothing))) == list(range(3, 12))
    rows = s.send(
        (None, doc("pg_customers_truncate_payload.json")),
        (None, doc("pg_message_transactional_payload.json")),
        (None, doc("pg_message_nontransactional_payload.json")),
    )
    assert rows == {}


def test_registry_outage_mid_stream_fails_the_batch_then_resumes(
    open_stream: OpenStream, schema_registry: LocalRegistry, tmp_path: Path
) -> None:
    s = open_stream(MYSQL_CUSTOMERS, "driver", MYSQL_SCHEMA, MYSQL_KEY_SCHEMA)
    assert s.send(({"id": 1004}, MYSQL_CREATE["payload"])) == {1004: ANNE}
    later = dict(MYSQL_CREATE["payload"], after={**ANNE, "id": 7})
    schema_registry.kill()
    cache_clear()  # as a driver that never fetched the schema: the batch needs the registry
    try:
        s.produce(({"id": 7}, later))
        with pytest.raises(Exception, match=r"SchemaRegistryUnavailable|unreachable"):
            s.query.processAllAvailable()
    finally:
        schema_registry.restart()
    assert open_table(tmp_path / "t").read().num_rows == 1  # nothing applied meanwhile
    assert s.dlq.read().num_rows == 0  # and nothing dead-lettered
    if not schema_registry.persistent:  # Apicurio 2 restarts empty: write it again
        pytest.skip("the Java 17 registry keeps no schemas across a restart")
    s.query = s.start()  # the query restarted from its checkpoint
    s.query.processAllAvailable()
    got = _rows(open_table(tmp_path / "t").read())
    assert got == _rows(open_table(tmp_path / "json").read()) == {1004: ANNE, 7: ANNE}
    assert s.dlq.read().num_rows == 0


TYPES_KEY_SCHEMA = {
    "type": "struct",
    "name": "pg.public.types.Key",
    "optional": False,
    "fields": [{"type": "int32", "optional": False, "field": "id"}],
}


@MODES
def test_postgres_type_mappings_and_toast_through_spark(open_stream: OpenStream, mode: str) -> None:
    """Every PostgreSQL type mapping of the documentation, then an update whose TOASTed
    text and bytea did not change (the placeholder: the table keeps their values)."""
    s = open_stream(TYPES, mode, types_schema("precise"), TYPES_KEY_SCHEMA)
    rows = s.send(
        ({"id": 1}, create(row(price=PRICE["precise"]))),
        ({"id": 2}, create(row(id=2, r="Infinity", d="NaN", price=None))),
    )
    assert rows[1]["t"] == "hello" and rows[1]["b"] == b"\x01\x02\x03"
    toast = {"id": 1, "t": PLACEHOLDER, "b": PLACEHOLDER_B64, "small": 7}
    rows = s.send(({"id": 1}, {"before": None, "after": toast, "op": "u"}))
    assert (rows[1]["t"], rows[1]["b"], rows[1]["small"]) == ("hello", b"\x01\x02\x03", 7)
