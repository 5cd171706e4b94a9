"""The whole-database router without Spark: micro-batches of Debezium records (Arrow, the
driver's raw columns) routed to many tables under a root, created from the schemas the
messages carry, evolved, stopped, skipped; exactly once per table, also across a failure
between two tables' commits.

The messages are Debezium's documented MySQL tutorial events
(tests/formats/debezium_docs/mysql_customers_create.json) with the table, the fields and
the values changed; the expected tables are computed by a dictionary model.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cdc_sink.errors import InvalidOption
from cdc_sink.spark import DecodeOptions, SinkOptions
from cdc_sink.spark.database import UNROUTED, DatabaseOptions, DatabaseSink
from cdc_sink.spark.writer import TableWriter
from cdc_sink.table import open_table

DOCS = Path(__file__).parent.parent / "formats" / "debezium_docs"
CREATE = json.loads((DOCS / "mysql_customers_create.json").read_text())
KEY = json.loads((DOCS / "mysql_customers_key.json").read_text())

Field = tuple[str, str, bool]  # name, Connect type, optional
CUSTOMERS: list[Field] = [
    ("id", "int32", False),
    ("first_name", "string", False),
    ("last_name", "string", False),
    ("email", "string", False),
]
ORDERS: list[Field] = [
    ("order_number", "int32", False),
    ("purchaser", "int32", False),
    ("quantity", "int32", False),
]


def _struct(fields: Sequence[Field], name: str) -> dict[str, Any]:
    return {
        "type": "struct",
        "fields": [{"type": t, "optional": o, "field": f} for f, t, o in fields],
        "optional": True,
        "name": name,
    }


def message(
    table: str,
    fields: Sequence[Field],
    op: str,
    row: dict[str, Any] | None,
    *,
    before: dict[str, Any] | None = None,
    key_field: str | None = "id",
    db: str = "inventory",
) -> tuple[bytes | None, bytes]:
    """A Debezium JSON message (key, value) of ``table``, shaped as the docs' event."""
    doc = copy.deepcopy(CREATE)
    env = doc["schema"]
    value_name = f"dbserver1.{db}.{table}.Value"
    for i, f in enumerate(env["fields"]):
        if f.get("field") in ("before", "after"):
            env["fields"][i] = {**_struct(fields, value_name), "field": f["field"]}
    env["name"] = f"dbserver1.{db}.{table}.Envelope"
    p = doc["payload"]
    p["before"], p["after"], p["op"] = before, row, op
    p["source"]["db"], p["source"]["table"] = db, table
    key: bytes | None = None
    if key_field is not None:
        kt = next(t for f, t, _ in fields if f == key_field)
        kdoc = {
            "schema": {
                "type": "struct",
                "fields": [{"type": kt, "optional": False, "field": key_field}],
                "optional": False,
                "name": f"dbserver1.{db}.{table}.Key",
            },
            "payload": {key_field: (row or before or {})[key_field]},
        }
        key = json.dumps(kdoc).encode()
    return key, json.dumps(doc).encode()


def batch(messages: Sequence[tuple[bytes | None, bytes | None]], start: int = 0) -> pa.Table:
    """The driver's raw columns of ``messages`` (one topic per table, partition 0)."""
    topics = []
    for _, v in messages:
        table = json.loads(v)["payload"]["source"]["table"] if v and b'"source"' in v else "x"
        topics.append(f"dbserver1.inventory.{table}")
    n = len(messages)
    return pa.table(
        {
            "key": pa.array([k for k, _ in messages], pa.binary()),
            "value": pa.array([v for _, v in messages], pa.binary()),
            "topic": pa.array(topics, pa.string()),
            "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(start, start + n), pa.int64()),
            "__kafka_ms": pa.array([1_700_000_000_000] * n, pa.int64()),
        }
    )


def customer(i: int, **more: Any) -> dict[str, Any]:
    return {"id": i, "first_name": f"f{i}", "last_name": f"l{i}", "email": f"{i}@x", **more}


def order(i: int, q: int) -> dict[str, Any]:
    return {"order_number": i, "purchaser": 1000 + i % 3, "quantity": q}


def rows_of(root: Path, name: str, key: str) -> list[dict[str, Any]]:
    return sorted(open_table(str(root / name)).read().to_pylist(), key=lambda r: r[key])


def sink(root: Path, processes: int = 0, **opts: Any) -> DatabaseSink:
    """A router over ``root`` decoding in ``processes`` worker processes (0: its threads)."""
    return DatabaseSink(
        DatabaseOptions(str(root), num_buckets=2, **opts),
        options=SinkOptions(format="debezium", decode=DecodeOptions(processes=processes)),
    )


@pytest.mark.parametrize("processes", [0, 1])
def test_tables_are_created_from_the_messages_and_hold_exactly_their_rows(
    tmp_path: Path, processes: int
) -> None:
    """Also with the tables' events decoded in a worker process shared by the tables."""
    s = sink(tmp_path, processes)
    msgs = [
        message("customers", CUSTOMERS, "r", customer(1)),
        message("orders", ORDERS, "r", order(1, 5), key_field="order_number"),
        message("customers", CUSTOMERS, "c", customer(2)),
        message("customers", CUSTOMERS, "u", customer(1, email="new@x"), before=customer(1)),
        message("orders", ORDERS, "c", order(2, 7), key_field="order_number"),
        message("orders", ORDERS, "d", None, before=order(1, 5), key_field="order_number"),
    ]
    st = s.write_rows(batch(msgs), 0)
    assert st.tables == {"inventory.customers": "committed", "inventory.orders": "committed"}
    assert rows_of(tmp_path, "inventory.customers", "id") == [
        customer(1, email="new@x"),
        customer(2),
    ]
    assert rows_of(tmp_path, "inventory.orders", "order_number") == [order(2, 7)]
    t = open_table(str(tmp_path / "inventory.customers"))
    assert t.schema.primary_key == ("id",) or list(t.schema.primary_key) == ["id"]
    pool = s._decode_pool
    assert (pool is not None and pool.running) == bool(processes)
    assert all(w.mode.decode_pool is None for w in s.writers.values())  # none of their own
    s.close()
    assert s._decode_pool is None


def test_a_replayed_batch_commits_nothing_again(tmp_path: Path) -> None:
    msgs = [
        message("customers", CUSTOMERS, "c", customer(1)),
        message("orders", ORDERS, "c", order(1, 1), key_field="order_number"),
    ]
    sink(tmp_path).write_rows(batch(msgs), 3)
    versions = {
        n: open_table(str(tmp_path / n)).version
        for n in ("inventory.customers", "inventory.orders")
    }
    again = sink(tmp_path).write_rows(batch(msgs), 3)  # a restarted job replays batch 3
    assert set(again.tables.values()) == {"skipped"}
    for n, v in versions.items():
        assert open_table(str(tmp_path / n)).version == v


def test_a_failure_between_two_tables_commits_replays_only_the_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    msgs = [
        message("customers", CUSTOMERS, "c", customer(1)),
        message("orders", ORDERS, "c", order(1, 1), key_field="order_number"),
    ]
    real = TableWriter.write_rows
    failed: list[str] = []

    def flaky(self: TableWriter, raw: pa.Table, batch_id: int, **kw: Any) -> Any:
        if self.path.endswith("inventory.orders") and not failed:
            failed.append(self.path)
            raise OSError("injected: the process dies before this table's commit")
        return real(self, raw, batch_id, **kw)

    monkeypatch.setattr(TableWriter, "write_rows", flaky)
    with pytest.raises(OSError, match="injected"):
        sink(tmp_path).write_rows(batch(msgs), 0)
    customers = open_table(str(tmp_path / "inventory.customers"))
    assert customers.is_committed(customers.versions()[-1]["app_id"], 0)
    st = sink(tmp_path).write_rows(batch(msgs), 0)  # Spark's retry, in a new process
    assert st.tables == {"inventory.customers": "skipped", "inventory.orders": "committed"}
    assert rows_of(tmp_path, "inventory.customers", "id") == [customer(1)]
    assert rows_of(tmp_path, "inventory.orders", "order_number") == [order(1, 1)]
    data = [
        v
        for v in open_table(str(tmp_path / "inventory.customers")).versions()
        if v.get("batch_id") == 0
    ]
    assert len(data) == 1


def test_a_new_optional_column_is_added_and_earlier_rows_read_null(tmp_path: Path) -> None:
    s = sink(tmp_path)
    s.write_rows(batch([message("customers", CUSTOMERS, "c", customer(1))]), 0)
    wider = [*CUSTOMERS, ("phone", "string", True)]
    s.write_rows(batch([message("customers", wider, "c", customer(2, phone="555"))], 1), 1)
    assert rows_of(tmp_path, "inventory.customers", "id") == [
        customer(1, phone=None),
        customer(2, phone="555"),
    ]


@pytest.mark.parametrize("processes", [0, 1])
def test_a_change_the_table_cannot_take_stops_only_that_table(
    tmp_path: Path, processes: int
) -> None:
    s = sink(tmp_path, processes)
    s.write_rows(
        batch(
            [
                message("customers", CUSTOMERS, "c", customer(1)),
                message("orders", ORDERS, "c", order(1, 1), key_field="order_number"),
            ]
        ),
        0,
    )
    retyped = [("id", "int32", False), ("first_name", "int64", False), *CUSTOMERS[2:]]
    msgs = [
        message("customers", CUSTOMERS, "c", customer(2)),
        message("customers", retyped, "c", {**customer(3), "first_name": 7}),
        message("orders", ORDERS, "c", order(2, 2), key_field="order_number"),
        message("customers", CUSTOMERS, "c", customer(4)),
    ]
    st = s.write_rows(batch(msgs, 2), 1)
    assert st.tables["inventory.orders"] == "committed"
    assert rows_of(tmp_path, "inventory.customers", "id") == [customer(1), customer(2)]
    assert rows_of(tmp_path, "inventory.orders", "order_number") == [order(1, 1), order(2, 2)]
    rejects = open_table(str(tmp_path / "inventory.customers")).rejects()
    assert rejects.column("offset").to_pylist() == [3, 5]
    assert all("first_name" in r for r in rejects.column("reason").to_pylist())
    # a new process: the stop holds, even for records of the old schema
    later = sink(tmp_path).write_rows(
        batch([message("customers", CUSTOMERS, "c", customer(5))], 6), 2
    )
    assert later.tables == {"inventory.customers": "committed"}
    assert rows_of(tmp_path, "inventory.customers", "id") == [customer(1), customer(2)]
    last = open_table(str(tmp_path / "inventory.customers")).rejects()
    assert last.column("offset").to_pylist() == [6]
    assert last.column("reason")[0].as_py().startswith("table stopped:")
    s.close()


def test_a_schema_the_table_took_is_not_compared_again_until_the_table_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The router remembers the source schemas a table's schema took unchanged (one
    process): a batch of one of them compares nothing; after the table widened a
    column, the old schema is compared again, and refused as the narrowing it now is."""
    from cdc_sink.spark import database

    compared: list[str] = []
    real = database.schema_change

    def counted(table: Any, source: Any) -> Any:
        compared.append(source.columns[-1].name)
        return real(table, source)

    monkeypatch.setattr(database, "schema_change", counted)
    narrow = [*CUSTOMERS, ("visits", "int32", False)]
    wide = [*CUSTOMERS, ("visits", "int64", False)]
    s = sink(tmp_path)
    s.write_rows(batch([message("customers", narrow, "c", customer(1, visits=1))]), 0)
    s.write_rows(batch([message("customers", narrow, "c", customer(2, visits=2))], 1), 1)
    assert len(compared) == 1  # the first batch's check, after the table was created
    s.write_rows(batch([message("customers", wide, "c", customer(3, visits=3))], 2), 2)
    st = s.write_rows(batch([message("customers", narrow, "c", customer(4, visits=4))], 3), 3)
    assert len(compared) == 3
    assert st.tables["inventory.customers"] == "committed"  # its record, as a reject
    rejects = open_table(str(tmp_path / "inventory.customers")).rejects()
    assert rejects.column("offset").to_pylist() == [3]
    assert "visits" in rejects.column("reason")[0].as_py()
    assert [r["id"] for r in rows_of(tmp_path, "inventory.customers", "id")] == [1, 2, 3]


def test_a_new_key_with_the_same_value_schema_is_refused(tmp_path: Path) -> None:
    """The schema the router remembers is the value's and the key's together."""
    s = sink(tmp_path)
    s.write_rows(batch([message("customers", CUSTOMERS, "c", customer(1))]), 0)
    s.write_rows(batch([message("customers", CUSTOMERS, "c", customer(2))], 1), 1)
    rekeyed = message("customers", CUSTOMERS, "c", customer(3), key_field="email")
    s.write_rows(batch([rekeyed], 2), 2)
    rejects = open_table(str(tmp_path / "inventory.customers")).rejects()
    assert rejects.column("offset").to_pylist() == [2]
    assert "key" in rejects.column("reason")[0].as_py()
    assert [r["id"] for r in rows_of(tmp_path, "inventory.customers", "id")] == [1, 2]


def test_a_table_without_a_key_is_skipped_unless_key_columns_name_one(tmp_path: Path) -> None:
    msgs = [message("audit", CUSTOMERS, "c", customer(1), key_field=None)]
    st = sink(tmp_path).write_rows(batch(msgs), 0)
    assert st.tables == {"inventory.audit": "skipped"}
    assert not (tmp_path / "inventory.audit").exists()
    st = sink(tmp_path, key_columns={"inventory.audit": ("id",)}).write_rows(batch(msgs), 1)
    assert st.tables == {"inventory.audit": "committed"}
    assert rows_of(tmp_path, "inventory.audit", "id") == [customer(1)]


def test_records_naming_no_table_are_dead_letters_with_their_coordinates(tmp_path: Path) -> None:
    good = message("customers", CUSTOMERS, "c", customer(1))
    no_source = (None, json.dumps({"payload": {"op": "c", "after": customer(9)}}).encode())
    heartbeat = (None, json.dumps({"ts_ms": 1}).encode())
    st = sink(tmp_path).write_rows(batch([no_source, good, heartbeat, (b"k", None)]), 0)
    assert st.unrouted == 1
    assert st.ignored.get("tombstone") == 1
    rejects = open_table(str(tmp_path / UNROUTED)).rejects()
    assert rejects.column("offset").to_pylist() == [0]
    assert rejects.column("value")[0].as_py() == no_source[1]
    assert "source" in rejects.column("reason")[0].as_py()


def test_include_and_exclude_select_tables_by_name(tmp_path: Path) -> None:
    msgs = [
        message("customers", CUSTOMERS, "c", customer(1)),
        message("orders", ORDERS, "c", order(1, 1), key_field="order_number"),
    ]
    st = sink(tmp_path, exclude_tables=(r".*\.orders",)).write_rows(batch(msgs), 0)
    assert st.tables == {"inventory.customers": "committed"}
    assert st.ignored["excluded"] == 1
    st = sink(tmp_path / "b", include_tables=(r".*\.orders",)).write_rows(batch(msgs), 0)
    assert st.tables == {"inventory.orders": "committed"}


def test_table_name_format(tmp_path: Path) -> None:
    s = sink(tmp_path, table_name_format="{db}_{table}")
    s.write_rows(batch([message("customers", CUSTOMERS, "c", customer(1))]), 0)
    assert rows_of(tmp_path, "inventory_customers", "id") == [customer(1)]


def test_tables_over_the_memory_budget_are_released_and_reopened(tmp_path: Path) -> None:
    s = sink(tmp_path, memory_budget_bytes=1)
    s.write_rows(batch([message("customers", CUSTOMERS, "c", customer(1))]), 0)
    s.write_rows(
        batch([message("orders", ORDERS, "c", order(1, 1), key_field="order_number")], 1), 1
    )
    assert "inventory.customers" not in s.writers  # released: not written in batch 1
    s.write_rows(batch([message("customers", CUSTOMERS, "c", customer(2))], 2), 2)
    assert rows_of(tmp_path, "inventory.customers", "id") == [customer(1), customer(2)]


@pytest.mark.parametrize(
    ("opts", "option"),
    [
        ({"table_name_format": "{nope}"}, "table_name_format"),
        ({"include_tables": ("(",)}, "include_tables"),
        ({"commit_threads": 0}, "commit_threads"),
    ],
)
def test_bad_options_are_refused_naming_the_option(
    tmp_path: Path, opts: dict[str, Any], option: str
) -> None:
    with pytest.raises(InvalidOption) as e:
        sink(tmp_path, **opts)
    assert e.value.option == option


def test_formats_without_a_source_block_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidOption, match="Debezium"):
        DatabaseSink(DatabaseOptions(str(tmp_path)), options=SinkOptions(format="json"))


def test_a_refused_schema_is_refused_per_kafka_partition_from_its_first_record(
    tmp_path: Path,
) -> None:
    """Kafka orders records within a partition only: records of partition 0 are applied
    whatever partition 1 carries; in partition 1 the refused schema's first record and
    every later one are refused, the earlier ones applied."""
    retyped = [("id", "int32", False), ("first_name", "int64", False), *CUSTOMERS[2:]]
    msgs = [
        message("customers", CUSTOMERS, "c", customer(1)),  # p1
        message("customers", retyped, "c", {**customer(2), "first_name": 2}),  # p1, refused
        message("customers", CUSTOMERS, "c", customer(3)),  # p1, after it: refused
        message("customers", CUSTOMERS, "c", customer(4)),  # p0
        message("customers", CUSTOMERS, "c", customer(5)),  # p0
    ]
    raw = batch(msgs).set_column(3, "partition", pa.array([1, 1, 1, 0, 0], pa.int32()))
    raw = raw.set_column(4, "offset", pa.array([10, 11, 12, 20, 21], pa.int64()))
    sink(tmp_path).write_rows(raw, 0)
    assert rows_of(tmp_path, "inventory.customers", "id") == [
        customer(1),
        customer(4),
        customer(5),
    ]
    rejects = open_table(str(tmp_path / "inventory.customers")).rejects()
    assert sorted(
        zip(
            rejects.column("partition").to_pylist(),
            rejects.column("offset").to_pylist(),
            strict=True,
        )
    ) == [
        (1, 11),
        (1, 12),
    ]


def _kafka_columns(raw: pa.Table) -> pa.RecordBatch:
    """``raw`` as the Kafka source's columns a routing task gets."""
    ts = pa.array([1_700_000_000_000_000] * raw.num_rows, pa.timestamp("us", tz="UTC"))
    cols = [
        raw.column(c).combine_chunks() for c in ("key", "value", "topic", "partition", "offset")
    ]
    return pa.RecordBatch.from_arrays(
        [*cols, ts], names=["key", "value", "topic", "partition", "offset", "timestamp"]
    )


def test_the_routing_task_tags_batches_with_and_without_tables(tmp_path: Path) -> None:
    """Executors mode's routing task: each record's table, the first record of each schema
    per partition, the reason of a record naming no table; a batch holding no table's
    record (only heartbeats, say: a topic of its own in a task of its own) too."""
    s = sink(tmp_path)
    task = s._tag_task()
    heartbeat = (None, json.dumps({"ts_ms": 1}).encode())
    no_source = (None, json.dumps({"payload": {"op": "c", "after": {"id": 1}}}).encode())
    only = task.tag(_kafka_columns(batch([heartbeat, heartbeat])))
    assert only.column("__table").to_pylist() == ["\x00heartbeat"] * 2
    assert only.column("__rep").to_pylist() == [False, False]
    wider = [*CUSTOMERS, ("phone", "string", True)]
    msgs = [
        message("customers", CUSTOMERS, "c", customer(1)),
        no_source,
        message("customers", CUSTOMERS, "c", customer(2)),
        message("customers", wider, "c", customer(3, phone="1")),
        message("orders", ORDERS, "c", order(1, 1), key_field="order_number"),
    ]
    got = task.tag(_kafka_columns(batch(msgs)))
    assert got.column("__table").to_pylist() == [
        "inventory.customers",
        UNROUTED,
        "inventory.customers",
        "inventory.customers",
        "inventory.orders",
    ]
    assert got.column("__rep").to_pylist() == [True, False, False, True, True]
    reasons = got.column("__reason").to_pylist()
    assert reasons[1] and "source" in reasons[1]
    assert reasons[0] is None


def test_a_commit_lost_to_another_writer_is_decided_again(tmp_path: Path) -> None:
    """The writer commits without reading the log: another writer's version (a notebook's
    add_column here) is learnt from the conditional create the writer loses; the table's
    writer then decides the batch again and commits it at the next version, once."""
    sink(tmp_path).write_rows(batch([message("customers", CUSTOMERS, "c", customer(1))]), 0)
    path = str(tmp_path / "inventory.customers")
    writer = TableWriter(path, SinkOptions(format="debezium", app_id="w").checked())
    writer.write_rows(batch([message("customers", CUSTOMERS, "c", customer(2))], 1), 1)
    open_table(path).add_column("note", "string")  # elsewhere
    got = writer.write_rows(batch([message("customers", CUSTOMERS, "c", customer(3))], 2), 2)
    assert got == "committed"
    assert [st.result for st in writer.stats] == ["committed", "committed"]
    t = open_table(path)
    assert [v["batch_id"] for v in t.versions() if v["app_id"] == "w"] == [1, 2]
    assert rows_of(tmp_path, "inventory.customers", "id") == [
        customer(i, note=None) for i in (1, 2, 3)
    ]
