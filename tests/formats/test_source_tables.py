"""Routing Debezium messages by the source table their ``source`` block names
(:func:`cdc_sink.formats.source_tables.route`).

The messages are Debezium's documented ones (tests/formats/debezium_docs, see its
README), with and without JsonConverter's envelope; heartbeats, transaction metadata and
schema changes are built from the shapes Debezium documents and writes
(``io.debezium.schema.SchemaFactory``: schema names and fields). The Avro messages are
written by Confluent's serializer through the session's schema registry, from the
Connect schemas of the same documented events (as tests/formats/test_avro_debezium.py).
"""

from __future__ import annotations

import copy
import json
import random
import uuid
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdc_sink.errors import InvalidArgument, InvalidOption
from cdc_sink.formats import _jsonscan
from cdc_sink.formats import route as exported_route
from cdc_sink.formats.avro_wire import cache_clear
from cdc_sink.formats.source_tables import (
    HEARTBEAT,
    KIND_NAMES,
    MESSAGE,
    OTHER,
    ROW,
    SCHEMA_CHANGE,
    TRANSACTION,
    Routed,
    SourceTable,
    route,
)
from cdc_sink_testkit.inventory import HEARTBEAT_SCHEMA, TRANSACTION_SCHEMA
from cdc_sink_testkit.registry import LocalRegistry
from tests.avro.connect import avro_datum, avro_schema
from tests.avro.offline import URL as OFFLINE_URL
from tests.avro.offline import OfflineRegistry, header
from tests.avro.produce import AvroWriter
from tests.formats.fuzz_decoders import byte_mutations, ci_settings, json_mutations, truncations
from tests.formats.test_debezium_docs import MYSQL_CREATE, MYSQL_SCHEMA, PG_CREATE, PG_SCHEMA, doc
from tests.formats.test_neighbours import HOSTILE

MYSQL = SourceTable("inventory", None, "customers")
PG = SourceTable("postgres", "public", "customers")
ENVELOPES = pytest.mark.parametrize("envelope", [True, False], ids=["schema", "no-schema"])


def value(payload: Any, schema: Any, envelope: bool) -> bytes:
    """A message value as JsonConverter writes it, with or without the schema."""
    return json.dumps({"schema": schema, "payload": payload} if envelope else payload).encode()


def binary(values: list[bytes | None]) -> pa.Array:
    return pa.array(values, pa.binary())


def routed_json(values: list[bytes | None], keys: list[bytes | None] | None = None) -> Routed:
    return route("debezium", binary(values), None if keys is None else binary(keys))


def table_of(r: Routed, i: int) -> SourceTable | None:
    code = int(r.codes[i])
    return None if code < 0 else r.tables[code]


def kinds(r: Routed) -> list[str]:
    return [KIND_NAMES[k] for k in r.kinds.tolist()]


def check_shape(r: Routed, n: int) -> None:
    """The arrays have one entry per message, and agree with each other."""
    assert r.codes.shape == r.kinds.shape == r.reasons.shape == (n,)
    assert r.codes.dtype == np.int32 and r.kinds.dtype == np.int8 and r.reasons.dtype == object
    assert ((r.codes >= -1) & (r.codes < len(r.tables))).all()
    assert set(r.kinds.tolist()) <= set(range(len(KIND_NAMES)))
    assert ((r.codes >= 0) == (r.kinds == ROW)).all()
    has_reason = np.array([x is not None for x in r.reasons], dtype=bool)
    assert (has_reason == (r.kinds == OTHER)).all()
    assert all(isinstance(x, str) for x in r.reasons[has_reason])
    assert len(r.schema_rows) == len(r.tables)
    if len(r.tables):  # every table's first message is its first representative
        firsts = [int(np.flatnonzero(r.codes == t)[0]) for t in range(len(r.tables))]
        assert [int(rows[0]) for rows in r.schema_rows] == firsts
        assert firsts == sorted(firsts)  # tables in order of first appearance


def with_table(payload: dict[str, Any], table: str, **source: Any) -> dict[str, Any]:
    """The payload of a documented event, its source naming another table."""
    out = copy.deepcopy(payload)
    out["source"]["table"] = table
    out["source"].update(source)
    return out


def with_phone(schema: dict[str, Any]) -> dict[str, Any]:
    """A later version of an envelope schema: its row has one more optional column."""
    out = copy.deepcopy(schema)
    for f in out["fields"]:
        if f["field"] in ("before", "after"):
            f["fields"].append({"type": "string", "optional": True, "field": "phone"})
    return out


# ============================================================ documented events
@ENVELOPES
def test_every_documented_event_routes_to_its_table(envelope: bool):
    values = [
        value(MYSQL_CREATE["payload"], MYSQL_SCHEMA, envelope),
        value(doc("mysql_customers_update_payload.json"), MYSQL_SCHEMA, envelope),
        value(doc("mysql_customers_delete_payload.json"), MYSQL_SCHEMA, envelope),
        json.dumps(doc("mysql_customers_tombstone.json")).encode(),
        None,
        value(PG_CREATE["payload"], PG_SCHEMA, envelope),
        value(doc("pg_customers_update_payload.json"), PG_SCHEMA, envelope),
        value(doc("pg_customers_delete_payload.json"), PG_SCHEMA, envelope),
        value(doc("pg_customers_truncate_payload.json"), PG_SCHEMA, envelope),
        value(doc("pg_message_transactional_payload.json"), None, envelope),
        value(doc("pg_message_nontransactional_payload.json"), None, envelope),
    ]
    r = routed_json(values)
    check_shape(r, len(values))
    assert r.tables == [MYSQL, PG]
    assert [table_of(r, i) for i in range(len(values))] == [MYSQL] * 3 + [None] * 2 + [PG] * 4 + [
        None
    ] * 2
    assert kinds(r) == ["row"] * 3 + ["tombstone"] * 2 + ["row"] * 4 + ["message"] * 2
    assert r.reasons.tolist() == [None] * len(values)
    assert [t.qualified() for t in r.tables] == ["inventory.customers", "postgres.public.customers"]


def test_the_exported_route_is_this_one_and_other_formats_are_refused():
    assert exported_route is route
    for fmt in ("json", "rowv2", "avro"):
        with pytest.raises(InvalidArgument, match=f"needs a Debezium format.*{fmt!r}"):
            route(fmt, binary([b"{}"]), None)
    with pytest.raises(InvalidArgument, match="binary"):
        route("debezium", pa.array([1, 2]), None)
    with pytest.raises(InvalidOption, match="nonsense"):
        route("debezium", binary([b"{}"]), None, decoder_options={"nonsense": 1})
    with pytest.raises(ValueError, match="one entry per value"):
        route("debezium", binary([b"{}"]), binary([None, None]))


def test_chunked_and_string_arrays_route_as_binary_ones():
    values = [
        value(MYSQL_CREATE["payload"], MYSQL_SCHEMA, True),
        None,
        value(PG_CREATE["payload"], None, False),
    ]
    want = routed_json(values)
    chunked = pa.chunked_array([binary(values[:1]), binary(values[1:])])
    strings = pa.array([None if v is None else v.decode() for v in values], pa.large_string())
    for arr in (chunked, strings):
        r = route("debezium", arr, None)
        assert r.tables == want.tables == [MYSQL, PG]
        assert r.codes.tolist() == want.codes.tolist() == [0, -1, 1]
        assert r.kinds.tolist() == want.kinds.tolist()


def test_an_empty_batch_routes_nothing():
    r = routed_json([])
    check_shape(r, 0)
    assert r.tables == [] and r.schema_rows == []


# ============================================================ many tables
def test_interleaved_messages_of_three_tables_get_their_codes():
    mysql_orders = with_table(MYSQL_CREATE["payload"], "orders")
    pg_items = with_table(PG_CREATE["payload"], "items", schema="sales")
    by_table = {
        SourceTable("inventory", None, "orders"): value(mysql_orders, MYSQL_SCHEMA, True),
        MYSQL: value(MYSQL_CREATE["payload"], MYSQL_SCHEMA, False),
        SourceTable("postgres", "sales", "items"): value(pg_items, PG_SCHEMA, True),
    }
    names = list(by_table)
    rng = random.Random(7)
    order = [rng.randrange(3) for _ in range(60)]
    values = [by_table[names[k]] for k in order]
    r = routed_json(values)
    check_shape(r, len(values))
    first_seen = list(dict.fromkeys(order))
    assert r.tables == [names[k] for k in first_seen]
    assert [table_of(r, i) for i in range(len(values))] == [names[k] for k in order]
    assert r.tables[r.codes[order.index(2)]].qualified() == "postgres.sales.items"


def test_the_same_table_in_another_database_or_schema_is_another_table():
    values = [
        value(PG_CREATE["payload"], PG_SCHEMA, True),
        value(with_table(PG_CREATE["payload"], "customers", schema="archive"), None, False),
        value(with_table(PG_CREATE["payload"], "customers", db="other"), None, False),
        value(with_table(MYSQL_CREATE["payload"], "customers", db="other"), None, False),
    ]
    r = routed_json(values)
    assert r.tables == [
        PG,
        SourceTable("postgres", "archive", "customers"),
        SourceTable("other", "public", "customers"),
        SourceTable("other", None, "customers"),
    ]
    assert r.codes.tolist() == [0, 1, 2, 3]


def test_enveloped_and_schemaless_messages_of_a_table_share_its_code():
    values = [
        value(MYSQL_CREATE["payload"], MYSQL_SCHEMA, True),
        value(MYSQL_CREATE["payload"], None, False),
        value(MYSQL_CREATE["payload"], None, True),  # {"schema": null, "payload": ...}
        json.dumps(MYSQL_CREATE, indent=2).encode(),  # other bytes, same JSON
    ]
    r = routed_json(values)
    assert r.tables == [MYSQL]
    assert r.codes.tolist() == [0, 0, 0, 0]


def test_escaped_and_unicode_names_are_read_as_json_text():
    plain = value(with_table(MYSQL_CREATE["payload"], "k\u00fcnden"), None, False)
    escaped = plain.replace(b"k\\u00fcnden", b"k\\u00fc\\u006eden")
    assert escaped != plain
    r = routed_json([plain, escaped])
    assert r.tables == [SourceTable("inventory", None, "k\u00fcnden")]
    assert r.codes.tolist() == [0, 0]


def test_messages_spanning_several_runs_route_as_one_batch():
    """Enough bytes for several runs of the scan: codes and schema keys are the
    batch's, not a run's."""
    orders = value(with_table(MYSQL_CREATE["payload"], "orders"), MYSQL_SCHEMA, True)
    customers = value(MYSQL_CREATE["payload"], MYSQL_SCHEMA, True)
    count = (12 << 20) // len(customers)
    values = [orders if i % 3 == 0 else customers for i in range(count)]
    values[-1] = value(MYSQL_CREATE["payload"], None, False)  # a new schema key at the end
    r = routed_json(values)
    check_shape(r, count)
    assert r.tables == [SourceTable("inventory", None, "orders"), MYSQL]
    want = np.where(np.arange(count) % 3 == 0, 0, 1)
    want[-1] = 1
    assert (r.codes == want).all()
    assert [rows.tolist() for rows in r.schema_rows] == [[0], [1, count - 1]]


# ============================================================ schema representatives
def test_schema_rows_give_one_message_per_distinct_schema_of_each_table():
    v2 = with_phone(MYSQL_SCHEMA)
    pg_other = copy.deepcopy(PG_SCHEMA)
    pg_other["name"] = "PostgreSQL_server.public.customers.Envelope2"
    values = [
        value(MYSQL_CREATE["payload"], MYSQL_SCHEMA, True),  # 0: mysql v1
        value(PG_CREATE["payload"], PG_SCHEMA, True),  # 1: pg
        value(MYSQL_CREATE["payload"], MYSQL_SCHEMA, True),  # 2: mysql v1 again
        value(MYSQL_CREATE["payload"], v2, True),  # 3: mysql v2
        value(MYSQL_CREATE["payload"], None, False),  # 4: mysql without a schema
        value(PG_CREATE["payload"], PG_SCHEMA, True),  # 5: pg again
        value(MYSQL_CREATE["payload"], v2, True),  # 6: mysql v2 again
        value(MYSQL_CREATE["payload"], None, False),  # 7: without a schema again
        value(PG_CREATE["payload"], pg_other, True),  # 8: pg, another schema
        None,  # 9: a tombstone: no table, no schema
    ]
    r = routed_json(values)
    check_shape(r, len(values))
    assert r.tables == [MYSQL, PG]
    assert [rows.tolist() for rows in r.schema_rows] == [[0, 3, 4], [1, 8]]
    assert all(rows.dtype.kind == "i" for rows in r.schema_rows)


def test_schema_texts_are_each_schema_keys_envelope_schema():
    """What a reader of the schemas parses instead of the whole message: the envelope
    ``schema`` bytes of each key, also of the messages whose schema was cut off a run
    (the runs of a batch spanning several share the keys)."""
    v2 = with_phone(MYSQL_SCHEMA)
    count = (12 << 20) // len(value(MYSQL_CREATE["payload"], MYSQL_SCHEMA, True))
    values = [value(MYSQL_CREATE["payload"], MYSQL_SCHEMA, True)] * count
    values[1] = value(MYSQL_CREATE["payload"], None, False)
    values[-1] = value(MYSQL_CREATE["payload"], v2, True)
    r = routed_json(values)
    for i, want in ((0, MYSQL_SCHEMA), (count // 2, MYSQL_SCHEMA), (count - 1, v2)):
        assert json.loads(r.schema_texts[int(r.schema_keys[i])]) == want
    assert r.schema_keys[1] == -1 and -1 not in r.schema_texts
    assert sorted(r.schema_texts) == sorted(set(r.schema_keys.tolist()) - {-1})


def test_schema_rows_of_a_shared_schema_cut_off_the_run_are_its_first_message():
    """The decoder cuts the envelope schema off the messages repeating the first one's;
    they still count as that schema."""
    values = [value(MYSQL_CREATE["payload"], MYSQL_SCHEMA, True)] * 5
    values.insert(2, value(MYSQL_CREATE["payload"], None, False))
    r = routed_json(values)
    assert r.codes.tolist() == [0] * 6
    assert [rows.tolist() for rows in r.schema_rows] == [[0, 2]]


# ============================================================ what names no table
def test_tombstones_name_no_table_and_are_no_error_with_or_without_keys():
    key = json.dumps(doc("mysql_customers_key.json")).encode()
    values: list[bytes | None] = [
        None,
        b"",
        b"null",
        json.dumps(doc("mysql_customers_tombstone.json")).encode(),
        value(MYSQL_CREATE["payload"], MYSQL_SCHEMA, True),
    ]
    for keys in (None, [key] * 5, [key, None, key, None, key]):
        r = routed_json(values, keys)
        check_shape(r, 5)
        assert kinds(r) == ["tombstone"] * 4 + ["row"]
        assert r.codes.tolist() == [-1, -1, -1, -1, 0]
        assert r.reasons.tolist() == [None] * 5


# the PostgreSQL connector's documented transaction boundaries (postgresql.adoc)
BEGIN = {
    "status": "BEGIN",
    "id": "571:53195829",
    "ts_ms": 1486500577125,
    "event_count": None,
    "data_collections": None,
}
END = {
    "status": "END",
    "id": "571:53195832",
    "ts_ms": 1486500577691,
    "event_count": 2,
    "data_collections": [
        {"data_collection": "s1.a", "event_count": 1},
        {"data_collection": "s2.a", "event_count": 1},
    ],
}
# the SQL Server connector's documented schema change event (sqlserver.adoc), one column
SCHEMA_CHANGE_EVENT = {
    "source": {
        "version": "{debezium-version}",
        "connector": "sqlserver",
        "name": "server1",
        "ts_ms": 0,
        "snapshot": "true",
        "db": "testDB",
        "schema": "dbo",
        "table": "customers",
        "change_lsn": None,
        "commit_lsn": "00000025:00000d98:00a2",
        "event_serial_no": None,
    },
    "ts_ms": 1588252618953,
    "databaseName": "testDB",
    "schemaName": "dbo",
    "ddl": None,
    "tableChanges": [
        {
            "type": "CREATE",
            "id": '"testDB"."dbo"."customers"',
            "table": {"primaryKeyColumnNames": ["id"], "columns": [{"name": "id"}]},
        }
    ],
}
SCHEMA_CHANGE_SCHEMA = {
    "type": "struct",
    "fields": [],
    "optional": False,
    "name": "io.debezium.connector.sqlserver.SchemaChangeValue",
    "version": 1,
}


@ENVELOPES
def test_heartbeats_transactions_and_schema_changes_are_no_error(envelope: bool):
    values = [
        value({"ts_ms": 1718000000123}, HEARTBEAT_SCHEMA, envelope),
        value(BEGIN, TRANSACTION_SCHEMA, envelope),
        value(MYSQL_CREATE["payload"], MYSQL_SCHEMA, envelope),
        value(END, TRANSACTION_SCHEMA, envelope),
        value(SCHEMA_CHANGE_EVENT, SCHEMA_CHANGE_SCHEMA, envelope),
    ]
    r = routed_json(values)
    check_shape(r, len(values))
    assert r.kinds.tolist() == [HEARTBEAT, TRANSACTION, ROW, TRANSACTION, SCHEMA_CHANGE]
    assert r.codes.tolist() == [-1, -1, 0, -1, -1]
    assert r.reasons.tolist() == [None] * 5
    assert r.tables == [MYSQL]


def test_a_schema_name_decides_the_kind_whatever_the_payload():
    """The heartbeat topic's adjusted schema name ends with Debezium's."""
    named = dict(HEARTBEAT_SCHEMA, name="prefix_io.debezium.connector.common.Heartbeat")
    r = routed_json([value({"ts_ms": 1, "extra": 2}, named, True)])
    assert r.kinds.tolist() == [HEARTBEAT]


SOURCE = MYSQL_CREATE["payload"]["source"]


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({"op": "c", "after": {"id": 1}}, "event has no source block"),
        ({"op": "c", "after": {"id": 1}, "source": None}, "event has no source block"),
        ({"op": "c", "after": {"id": 1}, "source": "inventory"}, "event has no source block"),
        ({"op": "c", "after": {"id": 1}, "source": {}}, "source block names no table"),
        (
            {"op": "c", "source": {k: v for k, v in SOURCE.items() if k != "table"}},
            "source block names no table",
        ),
        ({"op": "c", "source": dict(SOURCE, table="")}, "source block names no table"),
        ({"op": "c", "source": dict(SOURCE, table=None)}, "source block names no table"),
        ({"op": "c", "source": dict(SOURCE, table=7)}, "source.table is not a string"),
        ({"op": "c", "source": dict(SOURCE, db=["x"])}, "source.db is not a string"),
        ({"after": {"id": 1}}, "event has no source block"),
        ({}, "event has no source block"),
    ],
)
@ENVELOPES
def test_a_change_event_that_names_no_table_is_other_with_its_reason(
    payload: dict[str, Any], reason: str, envelope: bool
):
    values = [value(MYSQL_CREATE["payload"], None, False), value(payload, None, envelope)]
    r = routed_json(values)
    check_shape(r, 2)
    assert kinds(r) == ["row", "other"]
    assert r.codes.tolist() == [0, -1]
    assert r.reasons[1] == reason


@pytest.mark.parametrize(
    "raw",
    [b"not json", b"[1, 2]", b'"text"', b"{", b'{"payload": 3}', b"\xff\xfe", b"12"],
)
def test_a_value_that_is_not_a_json_object_is_other_with_a_reason(raw: bytes):
    r = routed_json([raw, value(MYSQL_CREATE["payload"], None, False)])
    check_shape(r, 2)
    assert kinds(r) == ["other", "row"]
    assert isinstance(r.reasons[0], str) and r.reasons[0]


def test_a_table_named_without_an_op_still_routes_to_its_table():
    """Its table's decoder rejects it with its own reason (``event has no 'op'``)."""
    payload = {k: v for k, v in MYSQL_CREATE["payload"].items() if k != "op"}
    r = routed_json([value(payload, None, False)])
    assert r.tables == [MYSQL] and kinds(r) == ["row"]


# ============================================================ Avro
@pytest.fixture
def registry(schema_registry: LocalRegistry) -> LocalRegistry:
    cache_clear()  # every test fetches its schemas
    return schema_registry


class Topic:
    """Avro values of one Connect schema written through the registry."""

    def __init__(self, registry: LocalRegistry, connect: dict[str, Any]) -> None:
        self.connect = connect
        topic = f"route-{uuid.uuid4().hex[:10]}"
        self.writer = AvroWriter(registry.url, topic, avro_schema(connect))

    def __call__(self, payload: Any) -> bytes:
        return self.writer(avro_datum(self.connect, payload))


def routed_avro(registry: LocalRegistry, values: list[bytes | None]) -> Routed:
    return route(
        "debezium-avro", binary(values), None, decoder_options={"registry_url": registry.url}
    )


def test_avro_documented_events_route_to_their_tables(registry: LocalRegistry):
    mysql = Topic(registry, MYSQL_SCHEMA)
    pg = Topic(registry, PG_SCHEMA)
    values = [
        mysql(MYSQL_CREATE["payload"]),
        pg(PG_CREATE["payload"]),
        mysql(doc("mysql_customers_update_payload.json")),
        None,  # tombstone
        pg(dict(PG_CREATE["payload"], op="u")),  # the docs' update has a key-only before
        mysql(doc("mysql_customers_delete_payload.json")),
        pg(doc("pg_customers_truncate_payload.json")),
        b"",
        mysql(with_table(MYSQL_CREATE["payload"], "orders")),
    ]
    r = routed_avro(registry, values)
    check_shape(r, len(values))
    orders = SourceTable("inventory", None, "orders")
    assert r.tables == [MYSQL, PG, orders]
    assert r.codes.tolist() == [0, 1, 0, -1, 1, 0, 1, -1, 2]
    assert kinds(r) == ["row"] * 3 + ["tombstone"] + ["row"] * 3 + ["tombstone", "row"]
    assert r.reasons.tolist() == [None] * len(values)


def test_avro_schema_rows_give_one_message_per_writer_schema(registry: LocalRegistry):
    v2 = with_phone(MYSQL_SCHEMA)
    one, two = Topic(registry, MYSQL_SCHEMA), Topic(registry, v2)
    pg = Topic(registry, PG_SCHEMA)
    payload = MYSQL_CREATE["payload"]
    values = [one(payload), pg(PG_CREATE["payload"]), one(payload), two(payload), two(payload)]
    assert one.writer.schema_id(values[0]) != two.writer.schema_id(values[3])
    r = routed_avro(registry, values)
    assert r.tables == [MYSQL, PG]
    assert [rows.tolist() for rows in r.schema_rows] == [[0, 3], [1]]


def test_avro_heartbeats_transactions_and_messages_are_no_error(registry: LocalRegistry):
    heartbeat = Topic(registry, HEARTBEAT_SCHEMA)
    transaction = Topic(registry, TRANSACTION_SCHEMA)
    message = Topic(registry, PG_MESSAGE_SCHEMA)
    mysql = Topic(registry, MYSQL_SCHEMA)
    schema_change = Topic(registry, AVRO_SCHEMA_CHANGE_SCHEMA)
    change = {k: SCHEMA_CHANGE_EVENT[k] for k in ("ts_ms", "databaseName", "schemaName")}
    values = [
        heartbeat({"ts_ms": 1718000000123}),
        transaction(BEGIN),
        mysql(MYSQL_CREATE["payload"]),
        transaction(END),
        message(doc("pg_message_transactional_payload.json")),
        schema_change({"source": {"db": "testDB", "table": "customers"}, **change}),
    ]
    r = routed_avro(registry, values)
    check_shape(r, len(values))
    assert r.kinds.tolist() == [HEARTBEAT, TRANSACTION, ROW, TRANSACTION, MESSAGE, SCHEMA_CHANGE]
    assert r.codes.tolist() == [-1, -1, 0, -1, -1, -1]
    assert r.reasons.tolist() == [None] * len(values)


def test_avro_messages_that_name_no_table_are_other_with_a_reason(registry: LocalRegistry):
    mysql = Topic(registry, MYSQL_SCHEMA)
    no_table = copy.deepcopy(MYSQL_CREATE["payload"])
    no_table["source"]["table"] = None  # the field is optional in the docs' schema
    good = mysql(MYSQL_CREATE["payload"])
    not_envelope = Topic(registry, {"type": "struct", "fields": [FIELD_ID], "name": "Key"})
    values = [
        good,
        mysql(no_table),
        b"\x01garbage",  # a magic byte other than 0
        b"\x00\x00",  # too short for the header
        good[:-3],  # cut short
        not_envelope({"id": 1}),
    ]
    r = routed_avro(registry, values)
    check_shape(r, len(values))
    assert kinds(r) == ["row"] + ["other"] * 5
    assert r.reasons[1] == "source block names no table"
    assert "magic byte 0x01" in r.reasons[2]
    assert "5-byte header" in r.reasons[3]
    assert r.reasons[4].startswith("malformed event")
    assert "not a Debezium change event envelope" in r.reasons[5]


def test_avro_needs_the_registry_option():
    with pytest.raises(InvalidOption, match="registry_url"):
        route("debezium-avro", binary([header(1) + b"\x00"]), None)


FIELD_ID = {"type": "int32", "optional": False, "field": "id"}
AVRO_SCHEMA_CHANGE_SCHEMA = {  # a schema change event's value (its source names a table)
    "type": "struct",
    "fields": [
        {
            "type": "struct",
            "fields": [
                {"type": "string", "optional": False, "field": "db"},
                {"type": "string", "optional": True, "field": "table"},
            ],
            "optional": False,
            "name": "io.debezium.connector.sqlserver.Source",
            "field": "source",
        },
        {"type": "int64", "optional": False, "field": "ts_ms"},
        {"type": "string", "optional": True, "field": "databaseName"},
        {"type": "string", "optional": True, "field": "schemaName"},
    ],
    "optional": False,
    "name": "io.debezium.connector.sqlserver.SchemaChangeValue",
}
PG_MESSAGE_SCHEMA = {  # a PostgreSQL logical decoding message's value (postgresql.adoc)
    "type": "struct",
    "fields": [
        {
            "type": "struct",
            "fields": [
                {"type": "string", "optional": False, "field": "version"},
                {"type": "string", "optional": False, "field": "connector"},
                {"type": "string", "optional": False, "field": "name"},
                {"type": "int64", "optional": False, "field": "ts_ms"},
                {"type": "int64", "optional": True, "field": "ts_us"},
                {"type": "int64", "optional": True, "field": "ts_ns"},
                {"type": "boolean", "optional": True, "field": "snapshot"},
                {"type": "string", "optional": False, "field": "db"},
                {"type": "string", "optional": False, "field": "schema"},
                {"type": "string", "optional": False, "field": "table"},
                {"type": "int64", "optional": True, "field": "txId"},
                {"type": "int64", "optional": True, "field": "lsn"},
                {"type": "int64", "optional": True, "field": "xmin"},
            ],
            "optional": False,
            "name": "io.debezium.connector.postgresql.Source",
            "field": "source",
        },
        {"type": "string", "optional": False, "field": "op"},
        {"type": "int64", "optional": True, "field": "ts_ms"},
        {"type": "int64", "optional": True, "field": "ts_us"},
        {"type": "int64", "optional": True, "field": "ts_ns"},
        {
            "type": "struct",
            "fields": [
                {"type": "string", "optional": False, "field": "prefix"},
                {"type": "bytes", "optional": True, "field": "content"},
            ],
            "optional": False,
            "name": "io.debezium.connector.postgresql.Message",
            "field": "message",
        },
    ],
    "optional": False,
    "name": "io.debezium.connector.postgresql.MessageValue",
}


# ============================================================ fuzz
DOCUMENTED = [
    value(MYSQL_CREATE["payload"], MYSQL_SCHEMA, True),
    value(doc("mysql_customers_update_payload.json"), None, False),
    value(PG_CREATE["payload"], PG_SCHEMA, True),
    value(doc("pg_customers_truncate_payload.json"), None, False),
    value(BEGIN, TRANSACTION_SCHEMA, True),
    value({"ts_ms": 1}, None, False),
]
DOCUMENTED_ROUTED = routed_json(list(DOCUMENTED))
FUZZ = ci_settings(60)


@FUZZ
@given(st.lists(st.one_of(st.none(), st.binary(max_size=64)), max_size=20))
def test_arbitrary_bytes_never_raise(values: list[bytes | None]):
    r = routed_json(values)
    check_shape(r, len(values))


@FUZZ
@given(st.integers(0, 2**32 - 1), st.integers(1, 12))
def test_mutated_documented_events_never_raise_nor_disturb_their_neighbours(seed: int, count: int):
    rng = random.Random(seed)
    fuzzed: list[bytes | None] = []
    for msg in DOCUMENTED:
        fuzzed += json_mutations(msg, rng, count)
        fuzzed += byte_mutations(msg, rng, count)
        fuzzed += rng.sample(truncations(msg, rng), min(count, len(truncations(msg, rng))))
    rng.shuffle(fuzzed)
    values = [*DOCUMENTED, *fuzzed, *DOCUMENTED]
    r = routed_json(values)
    check_shape(r, len(values))
    k = len(DOCUMENTED)
    for i in (*range(k), *range(len(values) - k, len(values))):  # the valid ones
        j = i % k if i < k else i - (len(values) - k)
        assert r.kinds[i] == DOCUMENTED_ROUTED.kinds[j]
        assert table_of(r, i) == table_of(DOCUMENTED_ROUTED, j)


def outcome(r: Routed, i: int) -> tuple[int, SourceTable | None, str | None]:
    return int(r.kinds[i]), table_of(r, i), r.reasons[i]


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
def test_a_message_routes_the_same_whatever_its_neighbours(compiled: bool, monkeypatch: Any):
    """Shuffled, each message after a hostile fragment (an open string, a trailing
    backslash...), with the compiled scan and with numpy's."""
    if not compiled:
        monkeypatch.setattr(_jsonscan, "_cscan", None)

    @ci_settings(15)
    @given(st.integers(0, 2**32 - 1))
    def run(seed: int) -> None:
        rng = random.Random(seed)
        msgs = [*DOCUMENTED, *(m for msg in DOCUMENTED for m in json_mutations(msg, rng, 6))]
        order = list(range(len(msgs)))
        rng.shuffle(order)
        mixed: list[bytes | None] = []
        for k, i in enumerate(order):
            mixed += [HOSTILE[k % len(HOSTILE)], msgs[i]]
        first, second = routed_json(list(msgs)), routed_json(mixed)
        for k, i in enumerate(order):
            assert outcome(first, i) == outcome(second, 2 * k + 1), msgs[i][:300]
        for i in range(len(DOCUMENTED)):
            assert outcome(first, i) == outcome(DOCUMENTED_ROUTED, i)

    run()


@FUZZ
@given(st.lists(st.one_of(st.none(), st.binary(max_size=48)), max_size=12))
def test_arbitrary_avro_bodies_never_raise(values: list[bytes | None]):
    offline = OfflineRegistry()
    envelope = offline.register(avro_schema(PG_MESSAGE_SCHEMA))
    mp = pytest.MonkeyPatch()
    try:
        offline.install(mp)
        msgs = [
            v if v is None else header(envelope if i % 3 else 99) + v for i, v in enumerate(values)
        ]
        r = route(
            "debezium-avro", binary(msgs), None, decoder_options={"registry_url": OFFLINE_URL}
        )
    finally:
        mp.undo()
    check_shape(r, len(values))
