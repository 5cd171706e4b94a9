"""The two Debezium decoders agree: every case here is decoded from Avro and from JSON.

Each case is a Connect schema, its events' payloads, a table and decoder options: the
Avro messages are what Confluent's converter writes for them (the schema from
:func:`tests.avro.connect.avro_schema`, written by fastavro; the schemas served by an
in-process registry, :mod:`tests.avro.offline`), the JSON messages JsonConverter's with
the envelope. Both decoders must give the same batch, the same rejects (positions), the
same skip and message counts and timestamps (issue 49, finding 8): documented events,
every mapped type, geometries, and source positions of events without a binlog file.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pyarrow as pa
import pytest

from cdc_sink.formats import Decoded
from cdc_sink.formats.debezium_avro import DebeziumAvroDecoder
from cdc_sink.schema import TableSchema
from tests.avro.connect import avro_datum, avro_schema, connect_json
from tests.avro.offline import URL, OfflineRegistry
from tests.formats.test_avro_debezium import (
    MYSQL_EVENTS,
    PG_AVRO_SCHEMA,
    PG_EVENTS,
    assert_same,
)
from tests.formats.test_debezium_docs import (
    MYSQL_CUSTOMERS,
    MYSQL_SCHEMA,
    PG_CUSTOMERS,
    PRICE,
    TYPES,
    create,
    decode,
    row,
    types_schema,
)

binary = pa.binary()
WKB = bytes.fromhex("0101000000000000000000f03f0000000000000040")  # POINT(1 2)


def both(
    registry: OfflineRegistry,
    connect: dict[str, Any],
    payloads: list[Any],
    table: TableSchema,
    **options: Any,
) -> tuple[Decoded, Decoded]:
    """The Avro decoder's result and the JSON decoder's on the same events."""
    sid = registry.register(avro_schema(connect))
    avro = [None if p is None else registry.message(sid, avro_datum(connect, p)) for p in payloads]
    js = [
        None
        if p is None
        else json.dumps({"schema": connect, "payload": connect_json(connect, p)}).encode()
        for p in payloads
    ]
    dec = DebeziumAvroDecoder(registry_url=URL, **options)
    got = dec.decode_with_meta(pa.array(avro, binary), table)
    return got, decode(js, table, **options)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> OfflineRegistry:
    reg = OfflineRegistry()
    reg.install(monkeypatch)
    return reg


def _with_sequence(table: TableSchema, name: str) -> TableSchema:
    d = table.to_dict()
    return TableSchema.from_dict(
        {
            "columns": [*d["columns"], {"name": name, "type": "int64"}],
            "primary_key": d["primary_key"],
            "sequence_column": name,
        }
    )


def _geometry_schema() -> dict[str, Any]:
    geo = {
        "type": "struct",
        "optional": True,
        "field": "g",
        "name": "io.debezium.data.geometry.Geometry",
        "version": 1,
        "fields": [
            {"type": "bytes", "optional": False, "field": "wkb"},
            {"type": "int32", "optional": True, "field": "srid"},
        ],
    }
    rec = {
        "type": "struct",
        "optional": True,
        "name": "pg.public.places.Value",
        "fields": [{"type": "int32", "optional": False, "field": "id"}, geo],
    }
    return {
        "type": "struct",
        "optional": False,
        "name": "pg.public.places.Envelope",
        "fields": [
            {**rec, "field": "before"},
            {**rec, "field": "after"},
            {"type": "string", "optional": False, "field": "op"},
        ],
    }


PLACES = TableSchema.from_dict(
    {
        "columns": [{"name": "id", "type": "int32"}, {"name": "g", "type": "binary"}],
        "primary_key": ["id"],
    }
)
_B64 = base64.b64encode(WKB).decode()

CASES: dict[str, tuple[dict[str, Any], list[Any], TableSchema, dict[str, Any]]] = {
    "mysql tutorial": (MYSQL_SCHEMA, MYSQL_EVENTS, MYSQL_CUSTOMERS, {}),
    "mysql binlog seq": (
        MYSQL_SCHEMA,
        MYSQL_EVENTS,
        _with_sequence(MYSQL_CUSTOMERS, "s"),
        {"sequence_source": "binlog"},
    ),
    "postgres documented": (PG_AVRO_SCHEMA, PG_EVENTS, PG_CUSTOMERS, {}),
    # a truncate and logical decoding messages have no source.file: not an error of
    # their group (the rows are refused for their missing binlog position)
    "postgres events, binlog seq": (
        PG_AVRO_SCHEMA,
        PG_EVENTS,
        _with_sequence(PG_CUSTOMERS, "s"),
        {"sequence_source": "binlog"},
    ),
    **{
        f"types {mode}": (
            types_schema(mode),
            [
                create(row(price=PRICE[mode])),
                create(row(id=4, ts=9223372036825200000, price=PRICE[mode])),
                create(row(id=7, small=None, t=None, price=None)),
            ],
            TYPES,
            {},
        )
        for mode in ("precise", "string", "double")
    },
    "geometry": (
        _geometry_schema(),
        [
            create({"id": 1, "g": {"wkb": _B64, "srid": 4326}}),
            create({"id": 2, "g": {"wkb": _B64, "srid": None}}),
            create({"id": 3, "g": None}),
        ],
        PLACES,
        {},
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_avro_and_json_give_the_same_rows_and_rejects(registry: OfflineRegistry, name: str):
    connect, payloads, table, options = CASES[name]
    got, want = both(registry, connect, payloads, table, **options)
    assert_same(got, want)
    assert len(got.batch) + len(got.rejects) + got.skipped == len(payloads)


def test_a_geometry_column_holds_the_wkb_in_both(registry: OfflineRegistry):
    connect, payloads, table, _ = CASES["geometry"]
    got, want = both(registry, connect, payloads, table)
    assert len(got.rejects) == 0 and len(want.rejects) == 0, (
        got.rejects.reasons,
        want.rejects.reasons,
    )
    values = want.batch.values[table.column("g").id].to_pylist()
    assert values == [WKB, WKB, None]


def test_events_without_a_binlog_file_decode_in_both(registry: OfflineRegistry):
    connect, payloads, table, options = CASES["postgres events, binlog seq"]
    got, want = both(registry, connect, payloads, table, **options)
    assert got.messages == want.messages == 2
    assert not any("undecodable" in r for r in got.rejects.reasons), got.rejects.reasons
    assert all("seq is missing" in r for r in got.rejects.reasons)
    assert_same(got, want)


def _null_scale(connect: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The TYPES schema with the price Decimal's scale parameter null (Connect refuses
    it), and its Avro schema saying the same."""
    bad = copy.deepcopy(connect)
    avro = avro_schema(connect)
    for f in bad["fields"][:2]:
        for g in f["fields"]:
            if g["field"] == "price":
                g["parameters"] = {"scale": None, "connect.decimal.precision": "10"}
    value = avro["fields"][0]["type"][1]
    for g in value["fields"]:
        if g["name"] == "price":
            t = g["type"][1]
            del t["scale"]
            t["connect.parameters"] = {"scale": None, "connect.decimal.precision": "10"}
    return bad, avro


def test_a_decimal_without_its_scale_is_refused_by_both(registry: OfflineRegistry):
    connect, avro = _null_scale(types_schema("precise"))
    payloads = [create(row(price=PRICE["precise"]))]
    want = decode(
        [json.dumps({"schema": connect, "payload": connect_json(connect, payloads[0])}).encode()],
        TYPES,
    )
    assert want.rejects.positions.tolist() == [0]
    assert "scale parameter" in want.rejects.reasons[0]
    sid = registry.register(avro, writable=False)
    good = registry.register(avro_schema(types_schema("precise")))
    body = registry.message(good, avro_datum(types_schema("precise"), payloads[0]))[5:]
    msg = b"\x00" + sid.to_bytes(4, "big") + body
    got = DebeziumAvroDecoder(registry_url=URL).decode_with_meta(pa.array([msg], binary), TYPES)
    assert got.rejects.positions.tolist() == [0]
    assert "scale" in got.rejects.reasons[0]
