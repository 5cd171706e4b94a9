"""The ``debezium-avro`` decoder on Debezium's documented events, written in Avro by
Confluent's serializer through a real schema registry, against the JSON decoder.

Each case is one of tests/formats/test_debezium_docs.py's (copied from Debezium's
documentation): its Connect schema becomes the Avro schema Confluent's Avro converter
derives (tests/avro/connect.py), its payload the datum. The Avro decoder must give the
same batch (ops, keys, columns set, values, seq), the same rejected positions, the same
skip counts and timestamps as the JSON decoder on the same events with the envelope.
"""

from __future__ import annotations

import copy
import json
import pickle
import uuid
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from cdc_sink.errors import CdcSinkError, InvalidOption
from cdc_sink.formats import Decoded
from cdc_sink.formats.avro_wire import cache_clear
from cdc_sink.formats.debezium_avro import DebeziumAvroDecoder
from cdc_sink.schema import TableSchema
from cdc_sink_testkit.registry import LocalRegistry
from tests.avro.connect import avro_datum, avro_schema, connect_json
from tests.avro.produce import AvroWriter
from tests.formats.support import assert_same_batch
from tests.formats.test_debezium_docs import (
    MYSQL_CREATE,
    MYSQL_CUSTOMERS,
    MYSQL_SCHEMA,
    PG_CREATE,
    PG_CUSTOMERS,
    PG_KEY_SCHEMA,
    PG_SCHEMA,
    PLACEHOLDER,
    PLACEHOLDER_B64,
    PRICE,
    TYPES,
    create,
    decode,
    delete_payload,
    doc,
    row,
    types_schema,
)

binary = pa.binary()


class Case:
    """Events of one Connect schema, as Avro (through the registry) and as JSON."""

    def __init__(self, registry: LocalRegistry, connect: dict[str, Any]) -> None:
        self.registry = registry
        self.connect = connect
        self.topic = f"docs-{uuid.uuid4().hex[:10]}"
        self.writer = AvroWriter(registry.url, self.topic, avro_schema(connect))

    def avro(self, payloads: list[Any]) -> list[bytes | None]:
        return [None if p is None else self.writer(avro_datum(self.connect, p)) for p in payloads]

    def json(self, payloads: list[Any]) -> list[bytes | None]:
        return [
            None
            if p is None
            else json.dumps(
                {"schema": self.connect, "payload": connect_json(self.connect, p)}
            ).encode()
            for p in payloads
        ]

    def keys(self, key_schema: dict[str, Any], keys: list[Any]) -> tuple[list[Any], list[Any]]:
        w = AvroWriter(self.registry.url, self.topic, avro_schema(key_schema), key=True)
        avro = [None if k is None else w(avro_datum(key_schema, k)) for k in keys]
        js = [
            None if k is None else json.dumps({"schema": key_schema, "payload": k}).encode()
            for k in keys
        ]
        return avro, js

    def both(
        self,
        payloads: list[Any],
        table: TableSchema,
        keys: tuple[list[Any], list[Any]] | None = None,
        **options: Any,
    ) -> tuple[Decoded, Decoded]:
        dec = DebeziumAvroDecoder(registry_url=self.registry.url, **options)
        got = dec.decode_with_meta(
            pa.array(self.avro(payloads), binary),
            table,
            keys=None if keys is None else pa.array(keys[0], binary),
        )
        want = decode(self.json(payloads), table, keys=None if keys is None else keys[1], **options)
        return got, want


def assert_same(got: Decoded, want: Decoded) -> None:
    """The Avro decoder's result is the JSON decoder's."""
    assert got.rejects.positions.tolist() == want.rejects.positions.tolist(), (
        got.rejects.reasons,
        want.rejects.reasons,
    )
    assert_same_batch(_nan_free(got.batch), _nan_free(want.batch))
    assert (got.skipped, got.messages) == (want.skipped, want.messages)
    assert (got.ts_ms is None) == (want.ts_ms is None)
    if got.ts_ms is not None and want.ts_ms is not None:
        assert got.ts_ms.tolist() == want.ts_ms.tolist()


def _nan_free(batch: Any) -> Any:
    """The batch with NaN floats as a marker string (NaN != NaN in list comparisons)."""
    import pyarrow.compute as pc

    out = copy.copy(batch)
    out.values = dict(batch.values)
    for cid, arr in batch.values.items():
        if pa.types.is_floating(arr.type):
            nan = pc.is_nan(arr).fill_null(False)
            out.values[cid] = pc.if_else(nan, pa.scalar(-0.123456789, arr.type), arr)
    return out


@pytest.fixture
def registry(schema_registry: LocalRegistry) -> LocalRegistry:
    cache_clear()  # every test fetches its schemas
    return schema_registry


# ============================================================ MySQL tutorial
MYSQL_EVENTS = [
    MYSQL_CREATE["payload"],
    doc("mysql_customers_update_payload.json"),
    doc("mysql_customers_delete_payload.json"),
    None,  # the tombstone (a null value)
]


def test_mysql_tutorial_create_update_delete_and_tombstone(registry: LocalRegistry):
    got, want = Case(registry, MYSQL_SCHEMA).both(MYSQL_EVENTS, MYSQL_CUSTOMERS)
    assert len(got.rejects) == 0 and len(got.batch) == 3 and got.skipped == 1
    assert_same(got, want)


def test_mysql_binlog_position_is_the_sequence(registry: LocalRegistry):
    table = TableSchema.from_dict(
        {
            "columns": [*MYSQL_CUSTOMERS.to_dict()["columns"], {"name": "s", "type": "int64"}],
            "primary_key": ["id"],
            "sequence_column": "s",
        }
    )
    case = Case(registry, MYSQL_SCHEMA)
    got, want = case.both(MYSQL_EVENTS, table, sequence_source="binlog")
    assert got.batch.seq is not None and got.batch.seq.tolist()[0] == (3 << 32) + 154
    assert_same(got, want)
    got, want = case.both(MYSQL_EVENTS, table)  # the row has no sequence column
    assert got.rejects.positions.tolist() == [0, 1, 2]
    assert all("seq is missing" in r for r in got.rejects.reasons)
    assert_same(got, want)


# ============================================================ PostgreSQL
def _key_only_before(schema: dict[str, Any]) -> dict[str, Any]:
    """The documented schema with the row's non-key fields optional: the documented
    REPLICA IDENTITY DEFAULT delete's ``before`` holds only the key, which Avro's record
    of required fields could not carry."""
    out = copy.deepcopy(schema)
    for f in out["fields"][:2]:
        for g in f["fields"]:
            g["optional"] = g["optional"] or g["field"] != "id"
    return out


PG_AVRO_SCHEMA = _key_only_before(PG_SCHEMA)
PG_EVENTS = [
    PG_CREATE["payload"],
    doc("pg_customers_update_payload.json"),
    doc("pg_customers_delete_payload.json"),
    doc("pg_customers_truncate_payload.json"),
    doc("pg_message_transactional_payload.json"),
    doc("pg_message_nontransactional_payload.json"),
]


def test_postgres_documented_events(registry: LocalRegistry):
    case = Case(registry, PG_AVRO_SCHEMA)
    got, want = case.both(PG_EVENTS, PG_CUSTOMERS)
    assert len(got.batch) == 4 and got.messages == 2
    assert_same(got, want)
    got, want = case.both(PG_EVENTS, PG_CUSTOMERS, truncate="reject")
    assert got.rejects.positions.tolist() == [3] and "truncate='reject'" in got.rejects.reasons[0]
    assert_same(got, want)


@pytest.mark.parametrize("source", ["lsn", "ts_ms", "column"])
def test_postgres_source_positions_as_the_sequence(registry: LocalRegistry, source: str):
    table = TableSchema.from_dict(
        {
            "columns": [*PG_CUSTOMERS.to_dict()["columns"], {"name": "lsn", "type": "int64"}],
            "primary_key": ["id"],
            "sequence_column": "lsn",
        }
    )
    got, want = Case(registry, PG_AVRO_SCHEMA).both(PG_EVENTS, table, sequence_source=source)
    assert_same(got, want)


def test_replica_identity_full_default_and_nothing_deletes(registry: LocalRegistry):
    full = {"id": 1, "first_name": "A", "last_name": "K", "email": "a@k"}
    payloads = [delete_payload(full), delete_payload({"id": 2}), delete_payload(None)]
    case = Case(registry, PG_AVRO_SCHEMA)
    keys = case.keys(PG_KEY_SCHEMA, [{"id": 1}, {"id": 2}, {"id": 3}])
    got, want = case.both(payloads, PG_CUSTOMERS, keys=keys)
    assert len(got.rejects) == 0 and [k.as_py() for k in got.batch.keys[0]] == [1, 2, 3]
    assert_same(got, want)
    got, want = case.both(payloads, PG_CUSTOMERS)  # no message keys
    assert (
        got.rejects.positions.tolist() == [2]
        and "without a message key" in (got.rejects.reasons[0])
    )
    assert_same(got, want)
    nulls = case.keys(PG_KEY_SCHEMA, [{"id": 1}, {"id": 2}, None])
    got, want = case.both(payloads, PG_CUSTOMERS, keys=nulls)
    assert "message key is null" in got.rejects.reasons[0]
    assert_same(got, want)


# ============================================================ PostgreSQL data types
@pytest.mark.parametrize("mode", ["precise", "string", "double"])
def test_every_mapped_type_decodes_as_in_json(registry: LocalRegistry, mode: str):
    payloads = [
        create(row(price=PRICE[mode])),
        create(row(id=2, r="Infinity", d="NaN", price=PRICE[mode])),
        create(row(id=3, n={"scale": 0, "value": "AWNFeF2KAAA="}, price=PRICE[mode])),
        create(row(id=4, ts=9223372036825200000, price=PRICE[mode])),  # PostgreSQL infinity
        create(row(id=5, day=2932897, price=PRICE[mode])),  # 10000-01-01
        create(row(id=6, tz="10000-01-01T00:00:00Z", price=PRICE[mode])),
        create(row(id=7, small=None, t=None, price=None)),  # real nulls
        create(row(id=8, tsn=-1, ts3=-62135596800001, price=PRICE[mode])),
    ]
    got, want = Case(registry, types_schema(mode)).both(payloads, TYPES)
    assert got.batch.positions.tolist() == [0, 1, 6], got.rejects.reasons
    assert_same(got, want)


def test_decimals_beyond_their_precision_are_rejected(registry: LocalRegistry):
    case = Case(registry, types_schema("precise"))
    payloads = [create(row(price="WvMQekAA")), create(row(id=2, price=PRICE["precise"]))]
    got, want = case.both(payloads, TYPES)
    assert got.rejects.positions.tolist() == [0] and "column 'price'" in got.rejects.reasons[0]
    assert_same(got, want)
    case = Case(registry, types_schema("string"))
    got, want = case.both([create(row(price="1000000000000.00"))], TYPES)
    assert got.rejects.positions.tolist() == [0]
    assert_same(got, want)


def test_date_and_time_of_day_fields_in_a_timestamp_column(registry: LocalRegistry):
    schema = types_schema("precise")
    for part in ("before", "after"):
        f = next(f for f in schema["fields"] if f["field"] == part)
        f["fields"] = [
            dict(g, name="io.debezium.time.Date", type="int32")
            if g["field"] == "ts"
            else dict(g, name="io.debezium.time.MicroTime")
            if g["field"] == "ts3"
            else g
            for g in f["fields"]
        ]
    payloads = [create({"id": 1, "ts": 19000}), create({"id": 2, "ts3": 45_000_000})]
    got, want = Case(registry, schema).both(payloads, TYPES)
    assert got.rejects.positions.tolist() == [1]
    assert_same(got, want)


def test_unchanged_toasted_values_are_absent(registry: LocalRegistry):
    after = {"id": 1, "t": PLACEHOLDER, "b": PLACEHOLDER_B64, "small": 7}
    payloads = [{"before": None, "after": after, "op": "u"}]
    got, want = Case(registry, types_schema("precise")).both(payloads, TYPES)
    assert got.batch.values.keys() == want.batch.values.keys()
    assert_same(got, want)
    none = Case(registry, types_schema("precise"))
    got, want = none.both(payloads, TYPES, unavailable_value_placeholder=None)
    assert_same(got, want)


def test_columns_the_table_lacks_are_rejected_or_ignored(registry: LocalRegistry):
    narrow = TableSchema.from_dict(
        {
            "columns": [{"name": "id", "type": "int32"}, {"name": "t", "type": "string"}],
            "primary_key": ["id"],
        }
    )
    case = Case(registry, types_schema("precise"))
    payloads = [create(row()), delete_payload({"id": 1})]
    got, want = case.both(payloads, narrow)
    assert got.rejects.positions.tolist() == [0] and "unknown column" in got.rejects.reasons[0]
    assert_same(got, want)
    got, want = case.both(payloads, narrow, ignore_unknown_columns=True)
    assert len(got.rejects) == 0
    assert_same(got, want)


def test_schema_groups_decode_in_message_order(registry: LocalRegistry):
    """Events of two schemas (an added column) interleaved: one batch, in order."""
    v1 = Case(registry, MYSQL_SCHEMA)
    wider = copy.deepcopy(MYSQL_SCHEMA)
    for f in wider["fields"][:2]:
        f["fields"].append({"type": "string", "optional": True, "field": "note"})
    v2 = Case(registry, wider)
    table = TableSchema.from_dict(
        {
            "columns": [*MYSQL_CUSTOMERS.to_dict()["columns"], {"name": "note", "type": "string"}],
            "primary_key": ["id"],
        }
    )
    p1 = MYSQL_CREATE["payload"]
    p2 = copy.deepcopy(p1)
    p2["after"]["note"] = "hi"
    p2["after"]["id"] = 7
    values = [v1.avro([p1])[0], v2.avro([p2])[0], v1.avro([p1])[0]]
    assert len({AvroWriter.schema_id(v1.writer, v) for v in values if v}) == 2
    out = DebeziumAvroDecoder(registry_url=registry.url).decode_with_meta(
        pa.array(values, binary), table
    )
    want = decode(v1.json([p1]) + v2.json([p2]) + v1.json([p1]), table)
    assert_same(out, want)


# ============================================================ options, pickling
def test_options_are_checked_and_the_decoder_pickles(registry: LocalRegistry):
    for bad in (
        {"registry_url": "ftp://x"},
        {"registry_url": registry.url, "registry_timeout": 0},
        {"registry_url": registry.url, "registry_auth": "nopassword"},
        {"registry_url": registry.url, "registry_ssl": {"cafile": "x"}},
        {"registry_url": registry.url, "truncate": "ignore"},
    ):
        with pytest.raises(InvalidOption):
            DebeziumAvroDecoder(**bad)
    dec = pickle.loads(pickle.dumps(DebeziumAvroDecoder(registry_url=registry.url)))
    case = Case(registry, MYSQL_SCHEMA)
    out = dec.decode_with_meta(pa.array(case.avro(MYSQL_EVENTS), binary), MYSQL_CUSTOMERS)
    assert len(out.batch) == 3
    with pytest.raises(InvalidOption, match="registry_url"):
        DebeziumAvroDecoder().decode(pa.array(case.avro(MYSQL_EVENTS), binary), MYSQL_CUSTOMERS)
    assert isinstance(InvalidOption("x", option="y"), CdcSinkError)
    assert np.array_equal(
        DebeziumAvroDecoder().decode(pa.array([None, b""], binary), MYSQL_CUSTOMERS)[0].op, []
    )


# ============================================================ the registry of formats
def test_the_format_is_registered_with_its_decoder_and_encoder(registry: LocalRegistry):
    from cdc_sink.batch import ChangeBatch
    from cdc_sink.formats import get_decoder, get_format
    from tests.formats.support import ALL_TYPES

    fmt = get_format("debezium-avro")
    assert fmt.decoder is DebeziumAvroDecoder and fmt.decoder.reads_keys
    assert {"registry_url", "registry_timeout", "registry_auth", "registry_ssl"} <= (
        fmt.decoder_options
    )
    full = {c.name: None for c in ALL_TYPES.value_columns} | {"name": "x", "i32": 2}
    no_blob = {k: v for k, v in full.items() if k != "blob"} | {"name": "y"}
    events = [
        {"op": "insert", "key": {"id": 1}, "set": full},
        {"op": "upsert", "key": {"id": 2}, "set": no_blob},  # blob: the placeholder
        {"op": "delete", "key": {"id": 1}, "ts_ms": 5},
    ]
    subject = f"registered-{uuid.uuid4().hex[:8]}-value"
    values = fmt.encode(events, ALL_TYPES, registry_url=registry.url, subject=subject)
    dec = get_decoder("debezium-avro", registry_url=registry.url)
    out = dec.decode_with_meta(pa.array(values, binary), ALL_TYPES)
    assert len(out.rejects) == 0, out.rejects.reasons
    want, _ = ChangeBatch.from_events(
        [{**events[0], "op": "upsert"}, events[1], events[2]], ALL_TYPES
    )
    want.position = out.batch.position
    assert_same_batch(out.batch, want)  # the placeholder decodes as absent
    assert out.ts_ms is not None and out.ts_ms.tolist()[2] == 5
    partial = [{"op": "upsert", "key": {"id": 3}, "set": {"name": "z", "i32": 3}}]
    with pytest.raises(ValueError, match="full rows: column 'i8'"):
        fmt.encode(partial, ALL_TYPES, registry_url=registry.url, subject=subject)
