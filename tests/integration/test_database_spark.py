"""A whole database through a real Kafka broker and real Spark (driver mode here; the
inventory test runs executors mode): six
Debezium source tables, one topic each (two partitions), read by one query with
``subscribePattern`` into ``database_sink``; a table appears mid-stream, a column is
added mid-stream, one table gets a change it cannot take (stopped: its later records
are dead letters, the other tables go on), one table has no key (skipped), and records
naming no table go to the dead letters with their Kafka coordinates. Several
micro-batches (``maxOffsetsPerTrigger``); at the end every table equals its dictionary
model and each table's log holds every batch at most once.

The messages are Debezium's documented MySQL tutorial events with the tables, fields and
values changed (tests/spark/test_database_router.py builds them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cdc_sink import open_table
from cdc_sink.kafka.deadletter import ParquetDeadLetter
from cdc_sink.spark import DatabaseOptions, SinkOptions, database_sink
from cdc_sink_testkit.demo.database import start_database_query
from tests.spark.test_database_router import CUSTOMERS, ORDERS, Field, customer, message, order

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka]

PRODUCTS: list[Field] = [
    ("id", "int32", False),
    ("name", "string", False),
    ("weight", "float64", True),
]
RETYPED: list[Field] = [
    ("id", "int32", False),
    ("name", "int64", False),
    ("weight", "float64", True),
]
WIDER: list[Field] = [*CUSTOMERS, ("phone", "string", True)]


class Model:
    """The tables the messages make (keyed dictionaries), and the messages per topic."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.tables: dict[str, dict[Any, dict[str, Any]]] = {}
        self.by_topic: dict[str, list[tuple[bytes | None, bytes | None]]] = {}
        self.stopped: set[str] = set()
        self.dead: list[bytes] = []

    def send(
        self,
        table: str,
        fields: list[Field],
        op: str,
        row: dict[str, Any] | None,
        *,
        before: dict[str, Any] | None = None,
        key: str | None = "id",
        counts: bool = True,
    ) -> None:
        k, v = message(table, fields, op, row, before=before, key_field=key)
        self.by_topic.setdefault(f"{self.prefix}.{table}", []).append((k, v))
        name = f"inventory.{table}"
        if not counts or key is None:
            return
        if name in self.stopped:
            self.dead.append(v)
            return
        rows = self.tables.setdefault(name, {})
        if op == "d":
            assert before is not None
            rows.pop(before[key], None)
        else:
            assert row is not None
            rows[row[key]] = dict(row)

    def stop(self, table: str) -> None:
        self.stopped.add(f"inventory.{table}")


def workload(prefix: str) -> Model:
    m = Model(prefix)
    for i in range(1, 21):
        m.send("customers", CUSTOMERS, "r", customer(i))
        m.send("orders", ORDERS, "r", order(i, i), key="order_number")
        m.send("products", PRODUCTS, "r", {"id": i, "name": f"p{i}", "weight": i / 2})
        m.send("addresses", CUSTOMERS, "r", customer(100 + i))
        m.send("audit", CUSTOMERS, "c", customer(i), key=None)  # no primary key
    for i in range(1, 21, 2):
        m.send("customers", CUSTOMERS, "u", customer(i, email="u@x"), before=customer(i))
        m.send("orders", ORDERS, "d", None, before=order(i, i), key="order_number")
    for i in range(21, 31):  # a table that appears mid-stream
        m.send("geom", PRODUCTS, "c", {"id": i, "name": f"g{i}", "weight": None})
    for i in range(21, 31):  # a column added mid-stream; earlier rows read null
        m.send("customers", WIDER, "c", customer(i, phone=f"{i}"))
    for rows in m.tables["inventory.customers"].values():
        rows.setdefault("phone", None)
    m.send(
        "products",
        PRODUCTS,
        "u",
        {"id": 3, "name": "p3b", "weight": 9.0},
        before={"id": 3, "name": "p3", "weight": 1.5},
    )
    m.stop("products")  # a type change: products stops here
    m.send("products", RETYPED, "c", {"id": 50, "name": 5, "weight": 1.0})
    m.send("products", PRODUCTS, "c", {"id": 51, "name": "p51", "weight": 1.0})
    for i in range(31, 41):
        m.send("addresses", CUSTOMERS, "c", customer(100 + i))
    return m


def produce(kafka: Any, m: Model) -> None:
    from confluent_kafka import Producer

    for topic in m.by_topic:
        kafka.create_topic(topic, partitions=1)
    p = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    for topic, msgs in m.by_topic.items():
        for k, v in msgs:
            p.produce(topic, key=k, value=v)
    no_source = json.dumps({"payload": {"op": "c", "after": {"id": 1}}}).encode()
    p.produce(f"{m.prefix}.customers", key=None, value=no_source)  # names no table
    p.produce(f"{m.prefix}.customers", key=b"k", value=None)  # a tombstone
    m.dead.append(no_source)
    assert p.flush(30) == 0


@pytest.mark.parametrize("mode", ["driver"])  # executors: test_database_inventory.py
def test_a_database_through_kafka_and_spark(
    spark: Any, kafka: Any, tmp_path: Path, mode: str, topic_name: str
) -> None:
    prefix = topic_name.replace("-", "_")
    m = workload(prefix)
    produce(kafka, m)
    dlq = ParquetDeadLetter(tmp_path / "dlq")
    fn = database_sink(
        DatabaseOptions(str(tmp_path / "root"), num_buckets=2, commit_threads=4),
        options=SinkOptions(format="debezium", apply_mode=mode, app_id=f"db-{mode}"),
        dead_letter=dlq,
    )
    query = start_database_query(
        spark, kafka.bootstrap_servers, prefix + r"\..*", fn, tmp_path / "ckpt", 60
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert len(fn.stats) >= 3  # several micro-batches
    root = tmp_path / "root"
    for name, rows in m.tables.items():
        t = open_table(str(root / name))
        key = t.schema.primary_key[0]
        got = {r[key]: r for r in t.read().to_pylist()}
        assert got == rows, name
        batches = [v["batch_id"] for v in t.versions() if v.get("batch_id") is not None]
        assert len(batches) == len(set(batches)), name
    assert not (root / "inventory.audit").exists()  # no key: skipped
    dead = sorted(bytes(r["value"]) for r in dlq.read(deduplicate=False).to_pylist())
    assert dead == sorted(m.dead)
