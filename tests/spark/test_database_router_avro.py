"""The whole-database router on Debezium Avro through a real schema registry (the
session's), without Spark: tables created from the writer schemas the registry gives
for the messages' ids (value and key), a new schema version adding a column, and a
registry outage during a table's creation (the batch fails, nothing is created, the
retry commits it).

The Avro messages are written by Confluent's own serializer from the Connect schemas of
tests/spark/test_database_router.py (Debezium's documented tutorial events).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cdc_sink.formats.avro_wire import SchemaRegistryUnavailable
from cdc_sink.spark import DecodeOptions, SinkOptions
from cdc_sink.spark.database import DatabaseOptions, DatabaseSink
from cdc_sink_testkit.avro_connect import avro_datum, avro_schema
from tests.avro.produce import AvroWriter
from tests.spark.test_database_router import (
    CUSTOMERS,
    ORDERS,
    Field,
    batch,
    customer,
    message,
    order,
    rows_of,
)


def avro_message(
    url: str, table: str, fields: list[Field], row: dict[str, Any], *, key_field: str = "id"
) -> tuple[bytes, bytes]:
    """The Avro (key, value) of the JSON message of :func:`message`, through the
    registry (subjects ``dbserver1.inventory.<table>-key`` and ``-value``)."""
    k, v = message(table, fields, "c", row, key_field=key_field)
    assert k is not None
    kdoc, vdoc = json.loads(k), json.loads(v)
    topic = f"dbserver1.inventory.{table}"
    value = AvroWriter(url, topic, avro_schema(vdoc["schema"]))
    key = AvroWriter(url, topic, avro_schema(kdoc["schema"]), key=True)
    return (
        key(avro_datum(kdoc["schema"], kdoc["payload"])),
        value(avro_datum(vdoc["schema"], vdoc["payload"])),
    )


def avro_sink(root: Path, url: str) -> DatabaseSink:
    return DatabaseSink(
        DatabaseOptions(str(root), num_buckets=2),
        options=SinkOptions(
            format="debezium-avro", decode=DecodeOptions(options={"registry_url": url})
        ),
    )


def raw(messages: list[tuple[bytes, bytes]], tables: list[str], start: int = 0) -> pa.Table:
    """:func:`batch` of Avro messages (their topics named from ``tables``)."""
    out = batch([(None, b"{}")] * len(messages), start)
    return (
        out.set_column(0, "key", pa.array([k for k, _ in messages], pa.binary()))
        .set_column(1, "value", pa.array([v for _, v in messages], pa.binary()))
        .set_column(2, "topic", pa.array([f"dbserver1.inventory.{t}" for t in tables]))
    )


@pytest.mark.usefixtures("schema_registry")
def test_avro_tables_are_created_and_evolved_from_the_registry(
    tmp_path: Path, schema_registry: Any
) -> None:
    url = schema_registry.url
    s = avro_sink(tmp_path, url)
    first = [
        avro_message(url, "customers", CUSTOMERS, customer(1)),
        avro_message(url, "orders", ORDERS, order(1, 3), key_field="order_number"),
    ]
    st = s.write_rows(raw(first, ["customers", "orders"]), 0)
    assert st.tables == {"inventory.customers": "committed", "inventory.orders": "committed"}
    wider = [*CUSTOMERS, ("phone", "string", True)]
    st = s.write_rows(
        raw([avro_message(url, "customers", wider, customer(2, phone="1"))], ["customers"], 2), 1
    )
    assert st.tables == {"inventory.customers": "committed"}
    assert rows_of(tmp_path, "inventory.customers", "id") == [
        customer(1, phone=None),
        customer(2, phone="1"),
    ]
    assert rows_of(tmp_path, "inventory.orders", "order_number") == [order(1, 3)]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.usefixtures("schema_registry")
def test_a_registry_outage_fails_the_batch_and_creates_nothing(
    tmp_path: Path, schema_registry: Any
) -> None:
    url = schema_registry.url
    msgs = [avro_message(url, "products", CUSTOMERS, customer(7))]
    down = avro_sink(tmp_path, f"http://127.0.0.1:{_closed_port()}")
    with pytest.raises(SchemaRegistryUnavailable):
        down.write_rows(raw(msgs, ["products"]), 0)
    assert not (tmp_path / "inventory.products").exists()
    st = avro_sink(tmp_path, url).write_rows(raw(msgs, ["products"]), 0)  # the retry
    assert st.tables == {"inventory.products": "committed"}
    assert rows_of(tmp_path, "inventory.products", "id") == [customer(7)]
