"""The test kit's Debezium inventory stream (:mod:`cdc_sink_testkit.inventory`): its
messages have the shapes Debezium documents, and its reference model is what the
decoders and a table make of them.

The strongest check: each table's messages, decoded by the ``debezium`` (or
``debezium-avro``) decoder with a schema written here by hand and applied to a cdc_sink
table in a few commits, give the reference at each commit's message index.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import io
import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from cdc_sink.formats import get_decoder
from cdc_sink.formats.avro_wire import cache_clear
from cdc_sink.formats.debezium_avro import DebeziumAvroDecoder
from cdc_sink.schema import TableSchema
from cdc_sink.table import create_table
from cdc_sink_testkit.inventory import (
    DATABASE_TABLES,
    InventoryStream,
    Message,
    inventory_stream,
)
from cdc_sink_testkit.registry import LocalRegistry
from tests.avro.offline import URL, OfflineRegistry

DOCS = Path(__file__).parent / "formats" / "debezium_docs"
EVENTS = 900
INT32_MAX = 2**31 - 1


def doc(name: str) -> Any:
    return json.loads((DOCS / name).read_text())


# The tables as a user declares them to the sink (their final schemas), by hand.
def _schema(columns: list[tuple[str, str, bool]], key: list[str]) -> TableSchema:
    return TableSchema.from_dict(
        {
            "columns": [
                {
                    "name": n,
                    "type": t,
                    "nullable": nullable,
                    **({"default": 0} if n == "loyalty" else {}),
                }
                for n, t, nullable in columns
            ],
            "primary_key": key,
            "num_buckets": 2,
        }
    )


TS = "timestamp[us, UTC]"


def table_schemas(flavor: str) -> dict[str, TableSchema]:
    weight = "float32" if flavor == "mysql" else "float64"
    s = _schema
    return {
        "customers": s(
            [
                ("id", "int32", False),
                ("first_name", "string", False),
                ("last_name", "string", False),
                ("email", "string", False),
                ("phone", "string", True),
                ("loyalty", "int32", False),
            ],
            ["id"],
        ),
        "addresses": s(
            [
                ("id", "int32", False),
                ("customer_id", "int32", False),
                ("street", "string", False),
                ("city", "string", False),
                ("state", "string", False),
                ("zip", "string", False),
                ("type", "string", False),
            ],
            ["id"],
        ),
        "orders": s(
            [
                ("order_number", "int32", False),
                ("order_date", "date32", False),
                ("purchaser", "int32", False),
                ("quantity", "int32", False),
                ("product_id", "int32", False),
            ],
            ["order_number"],
        ),
        "products": s(
            [
                ("id", "int32", False),
                ("name", "string", False),
                ("description", "string", True),
                ("weight", weight, True),
            ],
            ["id"],
        ),
        "products_on_hand": s(
            [("product_id", "int32", False), ("quantity", "int64", False)], ["product_id"]
        ),
        "geom": s([("id", "int32", False), ("g", "binary", False), ("h", "binary", True)], ["id"]),
        "order_lines": s(
            [
                ("order_number", "int32", False),
                ("line_no", "int16", False),
                ("product_id", "int32", False),
                ("quantity", "int32", False),
                ("unit_price", "decimal128(10, 2)", False),
                ("created_at", TS, False),
                ("updated_at", TS, True),
            ],
            ["order_number", "line_no"],
        ),
        "customer_events": s(
            [
                ("event_id", "int64", False),
                ("customer_id", "int32", False),
                ("kind", "string", False),
                ("detail", "string", True),
                ("occurred_at", TS, False),
            ],
            ["event_id"],  # no primary key in the source: the user names it
        ),
        "promotions": s(
            [
                ("id", "int32", False),
                ("code", "string", False),
                ("discount", "decimal128(5, 2)", False),
                ("valid_until", TS, True),
            ],
            ["id"],
        ),
    }


class Registrar:
    """The in-process registry with the registry client's ``register(subject, schema)``."""

    def __init__(self, offline: OfflineRegistry) -> None:
        self.offline = offline
        self.subjects: dict[str, list[int]] = {}

    def register(self, subject: str, schema: object) -> int:
        sid = self.offline.register(schema)
        self.subjects.setdefault(subject, []).append(sid)
        return sid


@pytest.fixture(scope="module", params=["mysql", "postgres"])
def json_stream(request: pytest.FixtureRequest) -> InventoryStream:
    return inventory_stream(request.param, "json", events=EVENTS)


def values(msgs: list[Message]) -> list[dict[str, Any] | None]:
    return [None if m.value is None else json.loads(m.value) for m in msgs]


def short(stream: InventoryStream, qualified: str) -> str:
    return qualified.rsplit(".", 1)[1]


def table_messages(stream: InventoryStream, table: str) -> list[tuple[int, Message]]:
    topic = stream.tables[table]
    return [(i, m) for i, m in enumerate(stream.messages()) if m.topic == topic]


# ------------------------------------------------------------------ reference vs table
def check_against_table(
    stream: InventoryStream,
    tmp_path: Path,
    decode: Any,
    cuts: list[int],
    *,
    min_rows: int = 300,
) -> None:
    """Decodes and applies each table's messages up to each cut; the table read then
    equals the reference at that cut."""
    schemas = table_schemas(stream.flavor)
    n_checked = 0
    for qualified in stream.tables:
        schema = schemas[short(stream, qualified)]
        table = create_table(tmp_path / qualified, schema)
        msgs = table_messages(stream, qualified)
        keys = list(stream.key_columns(qualified))
        assert keys == list(schema.primary_key)
        prev = 0
        for cut in cuts:
            part = [m for i, m in msgs if prev <= i < cut]
            if qualified == stream.refused_table:
                assert stream.refused_from is not None
                part = [m for i, m in msgs if prev <= i < min(cut, stream.refused_from)]
            prev = cut
            if part:
                got = decode(
                    pa.array([m.value for m in part], pa.binary()),
                    schema,
                    keys=pa.array([m.key for m in part], pa.binary()),
                )
                assert len(got.rejects) == 0, (qualified, got.rejects.reasons)
                table.apply(got.batch)
            expected = stream.reference_at(cut).get(qualified)
            read = table.read()
            if expected is None:
                assert read.num_rows == 0, qualified
                continue
            read = read.select(expected.column_names).sort_by([(k, "ascending") for k in keys])
            assert read.to_pylist() == expected.to_pylist(), (qualified, cut)
            n_checked += expected.num_rows
    assert n_checked > min_rows


def test_reference_is_what_the_json_decoder_and_a_table_make_of_each_table(
    json_stream: InventoryStream, tmp_path: Path
) -> None:
    n = len(json_stream.messages())
    decoder = get_decoder("debezium")
    check_against_table(json_stream, tmp_path, decoder.decode_with_meta, [n // 3, 2 * n // 3, n])


@pytest.mark.parametrize("flavor", ["mysql", "postgres"])
def test_reference_is_what_the_avro_decoder_and_a_table_make_of_each_table(
    flavor: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    offline = OfflineRegistry()
    offline.install(monkeypatch)
    stream = inventory_stream(flavor, "avro", events=EVENTS, registry=Registrar(offline))
    n = len(stream.messages())
    decoder = DebeziumAvroDecoder(registry_url=URL)
    check_against_table(stream, tmp_path, decoder.decode_with_meta, [n // 2, n])


def test_a_real_registry_takes_every_schema_version_and_serves_the_decoder(
    schema_registry: LocalRegistry, tmp_path: Path
) -> None:
    """Apicurio (compatibility BACKWARD) takes the added columns and the widening under
    each topic's subject; the decoder reads them back by id."""
    cache_clear()
    prefix = f"inv{uuid.uuid4().hex[:8]}"
    stream = inventory_stream(
        "postgres", "avro", events=600, registry=schema_registry, topic_prefix=prefix
    )
    versions = schema_registry.request(
        "GET", f"/subjects/{prefix}.inventory.customers-value/versions"
    )
    assert versions == [1, 2, 3]
    decoder = DebeziumAvroDecoder(registry_url=schema_registry.url)
    n = len(stream.messages())
    check_against_table(stream, tmp_path, decoder.decode_with_meta, [n], min_rows=100)


def test_refused_change_stops_the_tables_reference_before_it(tmp_path: Path) -> None:
    stream = inventory_stream("mysql", "json", events=EVENTS, refused_change=True)
    assert stream.refused_table == "inventory.orders"
    at = stream.refused_from
    assert at is not None
    msgs = stream.messages()
    assert msgs[at].topic == "dbserver1.inventory.orders"
    # the first message of orders whose quantity is a string, and every later one is
    quantity = [
        (i, next(f for f in v["schema"]["fields"][1]["fields"] if f["field"] == "quantity"))
        for i, (m, v) in enumerate(zip(msgs, values(msgs), strict=True))
        if m.topic == "dbserver1.inventory.orders" and v is not None
    ]
    assert next(i for i, f in quantity if f["type"] == "string") == at
    assert all(f["type"] == "string" for i, f in quantity if i >= at)
    assert all(f["type"] == "int32" for i, f in quantity if i < at)
    # the table's reference stays as it was before the change; the others go on
    before, end = stream.reference_at(at), stream.reference()
    assert end["inventory.orders"].equals(before["inventory.orders"])
    assert not end["inventory.customers"].equals(before["inventory.customers"])
    # the rest of the stream is the one without the change
    plain = inventory_stream("mysql", "json", events=EVENTS)
    assert plain.reference()["inventory.customers"].equals(end["inventory.customers"])
    n = len(msgs)
    check_against_table(stream, tmp_path, get_decoder("debezium").decode_with_meta, [n])
    # the change is one the table cannot take: every later row of orders is refused
    later = [
        m.value
        for i, m in enumerate(msgs)
        if m.topic == "dbserver1.inventory.orders" and i >= at and m.value is not None
    ]
    rows = [v for v in later if json.loads(v)["payload"]["op"] in ("c", "u")]
    got = get_decoder("debezium").decode_with_meta(
        pa.array(rows, pa.binary()), table_schemas("mysql")["orders"]
    )
    assert len(rows) > 5 and len(got.rejects) == len(rows)
    assert all("quantity" in r for r in got.rejects.reasons)


def test_refused_change_registers_under_a_subject_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reg = Registrar(OfflineRegistry())
    inventory_stream("postgres", "avro", events=EVENTS, registry=reg, refused_change=True)
    assert len(reg.subjects["dbserver1.inventory.orders-value-refused"]) == 1
    assert len(reg.subjects["dbserver1.inventory.orders-value"]) == 1


# ------------------------------------------------------------------ documented shapes
ENVELOPE_FIELDS = ["before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns"]
# documentation/modules/ROOT/partials/modules/all-connectors/shared-mariadb-mysql.adoc,
# the create event's value schema
MYSQL_SOURCE = [
    "version",
    "connector",
    "name",
    "ts_ms",
    "ts_us",
    "ts_ns",
    "snapshot",
    "db",
    "table",
    "server_id",
    "gtid",
    "file",
    "pos",
    "row",
    "thread",
    "query",
]


def test_envelopes_keys_and_sources_have_debeziums_documented_shape(
    json_stream: InventoryStream,
) -> None:
    s = json_stream
    flavor_source = {
        "mysql": ("io.debezium.connector.mysql.Source", MYSQL_SOURCE),
        "postgres": (
            "io.debezium.connector.postgresql.Source",
            # the documented create event's schema, with "sequence" its payload shows
            [f["field"] for f in doc("pg_customers_create.json")["schema"]["fields"][2]["fields"]],
        ),
    }[s.flavor]
    for table, topic in s.tables.items():
        name = short(s, table)
        assert topic == f"dbserver1.inventory.{name}"
        for m in (m for _, m in table_messages(s, table) if m.value is not None):
            v = json.loads(m.value)
            schema, payload = v["schema"], v["payload"]
            assert schema["name"] == f"dbserver1.inventory.{name}.Envelope"
            assert [f["field"] for f in schema["fields"]] == ENVELOPE_FIELDS
            assert list(payload) == ENVELOPE_FIELDS
            before, after, source = schema["fields"][:3]
            assert before["name"] == after["name"] == f"dbserver1.inventory.{name}.Value"
            assert before["fields"] == after["fields"] and before["optional"] is True
            assert source["name"] == flavor_source[0]
            got = [f["field"] for f in source["fields"]]
            if s.flavor == "postgres":
                assert [f for f in got if f != "sequence"] == flavor_source[1]
            else:
                assert got == flavor_source[1]
            assert list(payload["source"]) == got
            src = payload["source"]
            assert src["name"] == "dbserver1" and src["table"] == name
            assert src["db"] == ("inventory" if s.flavor == "mysql" else "postgres")
            if s.flavor == "postgres":
                assert src["schema"] == "inventory" and isinstance(src["lsn"], int)
            else:
                assert src["file"] == "mysql-bin.000003" and isinstance(src["pos"], int)
            assert src["snapshot"] is (payload["op"] == "r")
            assert payload["op"] in ("r", "c", "u", "d", "t")
            if m.key is not None:
                k = json.loads(m.key)
                assert k["schema"]["name"] == f"dbserver1.inventory.{name}.Key"
                assert [f["field"] for f in k["schema"]["fields"]] == list(s.key_columns(table))
                row = payload["after"] or payload["before"]
                assert k["payload"] == {f: row[f] for f in k["payload"]}


def test_the_tutorials_customers_are_as_documented(json_stream: InventoryStream) -> None:
    """The snapshot's customers rows, schema and key as the tutorial shows them."""
    created = doc("mysql_customers_create.json")
    key = doc("mysql_customers_key.json")
    msgs = [m for _, m in table_messages(json_stream, next(iter(json_stream.tables)))]
    first = [json.loads(m.value) for m in msgs[:4]]
    assert [v["payload"]["op"] for v in first] == ["r"] * 4
    assert first[0]["schema"]["fields"][1]["fields"] == created["schema"]["fields"][1]["fields"]
    assert first[3]["payload"]["after"] == created["payload"]["after"]
    assert json.loads(msgs[3].key) == key


def field_of(v: dict[str, Any], name: str) -> dict[str, Any]:
    return next(f for f in v["schema"]["fields"][1]["fields"] if f["field"] == name)


def test_logical_types_are_debeziums(json_stream: InventoryStream) -> None:
    s = json_stream
    by_table = {short(s, t): values([m for _, m in table_messages(s, t)]) for t in s.tables}
    order = next(v for v in by_table["orders"] if v is not None)
    assert field_of(order, "order_date") == {
        "type": "int32",
        "name": "io.debezium.time.Date",
        "version": 1,
        "optional": False,
        "field": "order_date",
    }
    assert (
        order["payload"]["after"]["order_date"] == (dt.date(2016, 1, 16) - dt.date(1970, 1, 1)).days
    )
    line = next(v for v in by_table["order_lines"] if v is not None)
    assert field_of(line, "unit_price") == {
        "type": "bytes",
        "name": "org.apache.kafka.connect.data.Decimal",
        "version": 1,
        "parameters": {"scale": "2", "connect.decimal.precision": "10"},
        "optional": False,
        "field": "unit_price",
    }
    assert field_of(line, "created_at")["name"] == "io.debezium.time.MicroTimestamp"
    assert field_of(line, "created_at")["type"] == "int64"
    assert field_of(line, "updated_at")["name"] == "io.debezium.time.ZonedTimestamp"
    assert field_of(line, "updated_at")["type"] == "string"
    assert field_of(line, "line_no")["type"] == "int16"
    ref = s.reference_at(len(s.messages()))
    lines = [v for v in by_table["order_lines"] if v is not None and v["payload"]["op"] == "r"]
    after = lines[0]["payload"]["after"]
    unscaled = int.from_bytes(base64.b64decode(after["unit_price"]), "big", signed=True)
    assert decimal.Decimal(unscaled).scaleb(-2) > 0
    zoned = [
        v["payload"]["after"]["updated_at"] for v in lines if v["payload"]["after"]["updated_at"]
    ]
    assert zoned and all(
        z.endswith("Z") and len(z) == len("2026-03-02T08:00:00.000000Z") for z in zoned
    )
    address = next(v for v in by_table["addresses"] if v is not None)
    assert field_of(address, "type")["name"] == "io.debezium.data.Enum"
    assert field_of(address, "type")["parameters"] == {"allowed": "SHIPPING,BILLING,LIVING"}
    geom = next(v for v in by_table["geom"] if v is not None)
    g, h = field_of(geom, "g"), field_of(geom, "h")
    assert g["name"] == h["name"] == "io.debezium.data.geometry.Geometry"
    assert [f["field"] for f in g["fields"]] == ["wkb", "srid"]
    assert (g["optional"], h["optional"]) == (False, True)
    point = geom["payload"]["after"]["g"]
    assert base64.b64decode(point["wkb"])[:5] == b"\x01\x01\x00\x00\x00"  # WKB LE point
    weight = field_of(next(v for v in by_table["products"] if v is not None), "weight")
    assert weight["type"] == ("float" if s.flavor == "mysql" else "double")
    assert ref[s.qualified("geom")].num_rows > 0


def test_deletes_are_followed_by_tombstones_and_the_keyless_table_has_null_keys(
    json_stream: InventoryStream,
) -> None:
    s = json_stream
    msgs = s.messages()
    vals = values(msgs)
    deletes = 0
    for i, (m, v) in enumerate(zip(msgs, vals, strict=True)):
        if v is None:
            prev = msgs[i - 1]
            assert json.loads(prev.value)["payload"]["op"] == "d"
            assert (prev.topic, prev.key) == (m.topic, m.key)
        elif m.topic in s.tables.values() and v["payload"]["op"] == "d":
            deletes += 1
            assert msgs[i + 1].value is None
    assert deletes > 10
    keyless = s.tables[s.no_key_table]
    assert s.no_key_table.endswith("inventory.customer_events")
    assert s.no_key_columns == ("event_id",)
    ops = Counter(
        v["payload"]["op"]
        for m, v in zip(msgs, vals, strict=True)
        if m.topic == keyless and v is not None
    )
    assert ops["c"] > 10 and ops["u"] > 0 and ops["d"] > 0
    assert all(m.key is None for m in msgs if m.topic == keyless)
    others = [m for m, v in zip(msgs, vals, strict=True) if m.topic != keyless and v is not None]
    keyed = [m for m in others if m.topic in s.tables.values()]
    truncates = [m for m in keyed if json.loads(m.value)["payload"]["op"] == "t"]
    assert all(m.key is not None for m in keyed if m not in truncates)


def test_truncate_is_postgres_only_as_documented(json_stream: InventoryStream) -> None:
    s = json_stream
    msgs = s.messages()
    truncates = [
        (i, m, v)
        for i, (m, v) in enumerate(zip(msgs, values(msgs), strict=True))
        if v is not None and m.topic in s.tables.values() and v["payload"]["op"] == "t"
    ]
    if s.flavor == "mysql":
        assert truncates == []
        return
    ((i, m, v),) = truncates
    table = "postgres.inventory.order_lines"
    assert m.topic == s.tables[table] and m.key is None
    documented = doc("pg_customers_truncate_payload.json")
    assert set(documented) <= set(v["payload"])
    assert v["payload"]["before"] is None and v["payload"]["after"] is None
    assert s.reference_at(i)[table].num_rows > 0
    assert s.reference_at(i + 1)[table].num_rows == 0
    assert s.reference()[table].num_rows > 0  # orders placed after it


def test_a_table_appears_mid_stream(json_stream: InventoryStream) -> None:
    s = json_stream
    msgs = s.messages()
    promotions = s.qualified("promotions")
    first = table_messages(s, promotions)[0][0]
    first_change = next(
        i
        for i, v in enumerate(values(msgs))
        if v is not None and v.get("payload", {}).get("op") in ("c", "u", "d")
    )
    assert first > first_change + 100
    assert promotions not in s.reference_at(first)
    assert promotions in s.reference_at(first + 1)
    assert len(s.reference_at(first)) == len(DATABASE_TABLES) - 1


def test_columns_are_added_mid_stream(json_stream: InventoryStream) -> None:
    s = json_stream
    customers = s.qualified("customers")
    msgs = table_messages(s, customers)
    shapes: list[list[str]] = []
    for i, m in msgs:
        names = [f["field"] for f in json.loads(m.value)["schema"]["fields"][1]["fields"]]
        if not shapes or shapes[-1] != names:
            shapes.append(names)
            if len(shapes) > 1:
                assert s.reference_at(i + 1)[customers].column_names == names
                assert s.reference_at(i)[customers].column_names == shapes[-2]
    base = ["id", "first_name", "last_name", "email"]
    assert shapes == [base, [*base, "phone"], [*base, "phone", "loyalty"]]
    last = json.loads(msgs[-1][1].value)
    assert field_of(last, "phone") == {"type": "string", "optional": True, "field": "phone"}
    assert field_of(last, "loyalty") == {
        "type": "int32",
        "optional": False,
        "default": 0,
        "field": "loyalty",
    }
    ref = s.reference()[customers]
    assert ref.schema.field("loyalty").type == pa.int32()
    early = ref.filter(pa.compute.less(ref["id"], 1005)).to_pylist()
    assert len(early) == 4 and all(r["loyalty"] is not None for r in early)


def test_a_column_is_widened_and_then_holds_a_value_beyond_int32(
    json_stream: InventoryStream,
) -> None:
    s = json_stream
    table = s.qualified("products_on_hand")
    seen: list[str] = []
    big_after_widening = False
    for _, m in table_messages(s, table):
        if m.value is None:
            continue
        v = json.loads(m.value)
        t = field_of(v, "quantity")["type"]
        if not seen or seen[-1] != t:
            seen.append(t)
        q = v["payload"]["after"]["quantity"]
        if q > INT32_MAX:
            assert t == "int64"
            big_after_widening = True
    assert seen == ["int32", "int64"] and big_after_widening
    assert s.reference()[table].schema.field("quantity").type == pa.int64()
    assert s.reference_at(200)[table].schema.field("quantity").type == pa.int32()


def test_heartbeats_and_transaction_metadata(json_stream: InventoryStream) -> None:
    s = json_stream
    msgs = s.messages()
    beats = [m for m in msgs if m.topic == "__debezium-heartbeat.dbserver1"]
    assert len(beats) >= 3
    for m in beats:
        assert json.loads(m.key)["payload"] == {"serverName": "dbserver1"}
        v = json.loads(m.value)
        assert v["schema"]["name"] == "io.debezium.connector.common.Heartbeat"
        assert isinstance(v["payload"]["ts_ms"], int)
    open_tx: dict[str, Any] | None = None
    counted: Counter[str] = Counter()
    for m in msgs:
        if m.topic == "dbserver1.transaction":
            v = json.loads(m.value)
            p = v["payload"]
            assert v["schema"]["name"] == "io.debezium.connector.common.TransactionMetadataValue"
            assert json.loads(m.key)["payload"] == {"id": p["id"]}
            if p["status"] == "BEGIN":
                assert open_tx is None and p["event_count"] is None
                open_tx, counted = p, Counter()
            else:
                assert open_tx is not None and p["status"] == "END" and p["id"] == open_tx["id"]
                assert p["event_count"] == sum(counted.values())
                assert {
                    c["data_collection"]: c["event_count"] for c in p["data_collections"]
                } == counted
                open_tx = None
        elif m.topic in s.tables.values() and m.value is not None:
            p = json.loads(m.value)["payload"]
            if p["op"] == "r":
                assert p["transaction"] is None and open_tx is None
                continue
            tx = p["transaction"]
            assert open_tx is not None and tx["id"] == open_tx["id"]
            coll = m.topic.split(".", 1)[1]
            counted[coll] += 1
            assert tx["total_order"] == sum(counted.values())
            assert tx["data_collection_order"] == counted[coll]
    assert open_tx is None


def test_counts_and_determinism(json_stream: InventoryStream) -> None:
    s = json_stream
    counts = s.events_by_table()
    assert set(counts) == set(s.tables) and all(n > 0 for n in counts.values())
    changes = sum(1 for m in s.messages() if m.topic in s.tables.values() and m.value is not None)
    assert sum(counts.values()) == changes >= EVENTS
    again = inventory_stream(s.flavor, "json", seed=s.seed, events=EVENTS)
    assert again.messages() == s.messages()
    other = inventory_stream(s.flavor, "json", seed=s.seed + 1, events=EVENTS)
    assert other.messages() != s.messages()
    assert s.reference_at(0) == {}
    with pytest.raises(ValueError):
        s.reference_at(len(s.messages()) + 1)


def test_avro_schemas_are_named_and_versioned_as_debeziums() -> None:
    reg = Registrar(OfflineRegistry())
    stream = inventory_stream("mysql", "avro", events=EVENTS, registry=reg)
    subjects = reg.subjects
    assert len(subjects["dbserver1.inventory.customers-value"]) == 3  # + phone, + loyalty
    assert len(subjects["dbserver1.inventory.products_on_hand-value"]) == 2  # widened
    assert len(subjects["dbserver1.inventory.customers-key"]) == 1
    assert "dbserver1.inventory.customer_events-key" not in subjects
    texts = reg.offline.texts
    envelope = json.loads(texts[subjects["dbserver1.inventory.customers-value"][-1]])
    assert (
        envelope["name"] == "Envelope" and envelope["namespace"] == "dbserver1.inventory.customers"
    )
    assert [f["name"] for f in envelope["fields"]] == ENVELOPE_FIELDS
    value = envelope["fields"][0]["type"][1]
    assert value["connect.name"] == "dbserver1.inventory.customers.Value"
    loyalty = next(f for f in value["fields"] if f["name"] == "loyalty")
    assert loyalty == {
        "name": "loyalty",
        "type": {"type": "int", "connect.default": 0},
        "default": 0,
    }
    key = json.loads(texts[subjects["dbserver1.inventory.customers-key"][0]])
    assert key["connect.name"] == "dbserver1.inventory.customers.Key"
    ids = {m.value[1:5] for m in stream.messages() if m.value is not None}
    assert all(m.value[0] == 0 for m in stream.messages() if m.value is not None)
    assert len(ids) == sum(len(v) for k, v in subjects.items() if k.endswith("-value"))
    for topic in ("dbserver1.transaction", "__debezium-heartbeat.dbserver1"):
        assert f"{topic}-value" in subjects and f"{topic}-key" in subjects


def test_invalid_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="flavor"):
        inventory_stream("oracle", "json")
    with pytest.raises(ValueError, match="encoding"):
        inventory_stream("mysql", "protobuf")
    with pytest.raises(ValueError, match="registry"):
        inventory_stream("mysql", "avro")
    with pytest.raises(ValueError, match="events"):
        inventory_stream("mysql", "json", events=50)


class Recorder:
    """A producer that keeps what it is given."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes | None, bytes | None, int | None]] = []
        self.flushed = 0

    def produce(
        self, topic: str, key: bytes | None, value: bytes | None, *, partition: int | None = None
    ) -> None:
        self.records.append((topic, key, value, partition))

    def flush(self, timeout: float = 30.0) -> int:
        self.flushed += 1
        return 0


def test_produce_sends_every_message_in_order_to_one_partition(
    json_stream: InventoryStream,
) -> None:
    producer = Recorder()
    assert json_stream.produce(producer) == len(json_stream.messages())
    assert producer.flushed == 1
    assert [(t, k, v) for t, k, v, _ in producer.records] == [
        (m.topic, m.key, m.value) for m in json_stream.messages()
    ]
    assert {p for *_, p in producer.records} == {0}
    assert set(json_stream.topics()) == {m.topic for m in json_stream.messages()}


def test_avro_messages_are_whole_datums_of_their_registered_schemas() -> None:
    """Every Avro key and value (tables, heartbeats, transaction records) reads back to
    its last byte with the schema its id names, and says what the JSON stream says."""
    offline = OfflineRegistry()
    avro = inventory_stream("mysql", "avro", events=400, registry=Registrar(offline))
    js = inventory_stream("mysql", "json", events=400)
    assert len(avro.messages()) == len(js.messages())
    kinds: Counter[str] = Counter()
    for a, j in zip(avro.messages(), js.messages(), strict=True):
        assert a.topic == j.topic
        for got, want in ((a.key, j.key), (a.value, j.value)):
            assert (got is None) == (want is None)
            if got is None or want is None:
                continue
            assert got[0] == 0
            buf = io.BytesIO(got[5:])
            datum = fastavro.schemaless_reader(buf, offline.parsed[int.from_bytes(got[1:5], "big")])
            assert buf.tell() == len(got) - 5
            payload = json.loads(want)["payload"]
            assert isinstance(datum, dict) and list(datum) == list(payload)
            for name in ("op", "status", "id", "serverName", "ts_ms"):
                if name in payload and not isinstance(payload[name], dict):
                    assert datum[name] == payload[name]
            kinds[a.topic.rsplit(".", 1)[-1] if "inventory" not in a.topic else "table"] += 1
    assert kinds["table"] > 500 and kinds["transaction"] > 100 and kinds["dbserver1"] > 0


def test_a_primary_key_update_is_a_delete_its_tombstone_and_a_create(
    json_stream: InventoryStream,
) -> None:
    s = json_stream
    msgs = s.messages()
    table = s.qualified("promotions")
    rekeys = []
    for i in range(len(msgs) - 2):
        a, tomb, c = msgs[i : i + 3]
        if a.topic != s.tables[table] or a.value is None or c.value is None:
            continue
        old, new = json.loads(a.value)["payload"], json.loads(c.value)["payload"]
        if old["op"] == "d" and tomb.value is None and c.topic == a.topic and new["op"] == "c":
            before, after = dict(old["before"]), dict(new["after"])
            if {**before, "id": 0} == {**after, "id": 0}:
                rekeys.append((i, before["id"], after["id"]))
    assert rekeys
    i, old_id, new_id = rekeys[0]
    ids = s.reference_at(i + 3)[table].column("id").to_pylist()
    assert new_id in ids and old_id not in ids
