"""The Debezium decoder on the events Debezium's own documentation shows.

Fixtures in ``tests/formats/debezium_docs/`` are copied from the documentation (see its
README). Every event is decoded as Kafka Connect's JsonConverter writes it with
``schemas.enable=true`` (``{"schema", "payload"}``) and with ``schemas.enable=false``
(the payload alone). Type events follow the PostgreSQL connector's "Data type mappings"
tables (literal type, semantic type and value encoding of each PostgreSQL type); their
values are written by hand from those tables, not by cdc_sink's encoder.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from cdc_sink.batch import OP_CODES, OP_DELETE, OP_UPSERT, ChangeBatch
from cdc_sink.errors import CdcSinkError, InvalidOption
from cdc_sink.formats import Decoded, get_decoder
from cdc_sink.formats.debezium import DebeziumDecoder
from cdc_sink.schema import TableSchema

DOCS = Path(__file__).parent / "debezium_docs"
UTC = dt.timezone.utc
OP_TRUNCATE = OP_CODES["truncate"]


def doc(name: str) -> Any:
    return json.loads((DOCS / name).read_text())


def value(payload: Any, schema: Any, envelope: bool) -> bytes:
    """A message value as JsonConverter writes it, with or without the schema.

    Without the schema, a TYPES row drops its millisecond and nanosecond timestamps
    (``ts3``, ``tsn``): only a schema can say their unit.
    """
    if (
        not envelope
        and isinstance(payload, dict)
        and isinstance(payload.get("after"), dict)
        and "tsn" in payload["after"]
        and schema is not None
    ):
        payload = dict(
            payload, after={k: v for k, v in payload["after"].items() if k not in ("ts3", "tsn")}
        )
    obj = {"schema": schema, "payload": payload} if envelope else payload
    return json.dumps(obj).encode()


def binary(values: list[bytes | None]) -> pa.Array:
    return pa.array(values, pa.binary())


def decode(
    values: list[bytes | None],
    schema: TableSchema,
    *,
    keys: list[bytes | None] | None = None,
    **options: Any,
) -> Decoded:
    return get_decoder("debezium", **options).decode_with_meta(
        binary(values), schema, keys=None if keys is None else binary(keys)
    )


def events(batch: ChangeBatch) -> list[tuple[int, dict[str, Any], dict[str, Any]]]:
    """(op, key, columns set) per event; an absent column is not in the dict."""
    out = []
    names = [c.name for c in batch.schema.key_columns]
    for i in range(len(batch)):
        key = {n: k[i].as_py() for n, k in zip(names, batch.keys, strict=True)}
        sets = {
            batch.schema.column_by_id(cid).name: batch.values[cid][i].as_py()
            for cid in batch.values
            if batch.present[cid][i]
        }
        out.append((int(batch.op[i]), key, sets))
    return out


ENVELOPES = pytest.mark.parametrize("envelope", [True, False], ids=["schema", "no-schema"])

# ============================================================ MySQL tutorial: customers
MYSQL_CUSTOMERS = TableSchema.from_dict(
    {
        "columns": [
            {"name": "id", "type": "int32"},
            {"name": "first_name", "type": "string", "nullable": False},
            {"name": "last_name", "type": "string", "nullable": False},
            {"name": "email", "type": "string", "nullable": False},
        ],
        "primary_key": ["id"],
    }
)
MYSQL_CREATE = doc("mysql_customers_create.json")
MYSQL_SCHEMA = MYSQL_CREATE["schema"]


def mysql_tutorial(envelope: bool) -> list[bytes | None]:
    """create (snapshot read), update, delete and the two tombstone forms."""
    return [
        value(MYSQL_CREATE["payload"], MYSQL_SCHEMA, envelope),
        value(doc("mysql_customers_update_payload.json"), MYSQL_SCHEMA, envelope),
        value(doc("mysql_customers_delete_payload.json"), MYSQL_SCHEMA, envelope),
        json.dumps(doc("mysql_customers_tombstone.json")).encode(),
        None,
    ]


@ENVELOPES
def test_mysql_tutorial_create_update_delete_and_tombstones(envelope: bool):
    out = decode(mysql_tutorial(envelope), MYSQL_CUSTOMERS)
    assert len(out.rejects) == 0, out.rejects.reasons
    assert events(out.batch) == [
        (
            OP_UPSERT,
            {"id": 1004},
            {"first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org"},
        ),
        (
            OP_UPSERT,
            {"id": 1004},
            {"first_name": "Anne Marie", "last_name": "Kretchmar", "email": "annek@noanswer.org"},
        ),
        (OP_DELETE, {"id": 1004}, {}),
    ]
    assert out.batch.positions.tolist() == [0, 1, 2]
    assert out.skipped == 2 and out.messages == 0  # both tombstones
    # payload ts_ms (the MySQL source of the tutorial has no ts_ms)
    assert out.ts_ms is not None
    assert out.ts_ms.tolist() == [1486500577691, 1486501486308, 1486501558315]


def test_mysql_binlog_position_is_the_sequence():
    """sequence_source="binlog": file mysql-bin.000003 -> 3 << 32, plus pos and row."""
    table = TableSchema.from_dict(
        {
            "columns": [
                *[c for c in MYSQL_CUSTOMERS.to_dict()["columns"]],
                {"name": "binlog_seq", "type": "int64"},
            ],
            "primary_key": ["id"],
            "sequence_column": "binlog_seq",
        }
    )
    for envelope in (True, False):
        out = decode(mysql_tutorial(envelope), table, sequence_source="binlog")
        assert len(out.rejects) == 0, out.rejects.reasons
        assert out.batch.seq is not None
        assert out.batch.seq.tolist() == [(3 << 32) + 154, (3 << 32) + 364, (3 << 32) + 725]
    # with the row's sequence column (the default) the documented events have none
    out = decode(mysql_tutorial(True), table)
    assert out.rejects.positions.tolist() == [0, 1, 2]
    assert all("seq is missing" in r for r in out.rejects.reasons)


# ============================================================ PostgreSQL: customers
PG_CUSTOMERS = MYSQL_CUSTOMERS  # the documentation's Postgres table has the same columns
PG_CREATE = doc("pg_customers_create.json")
PG_SCHEMA = PG_CREATE["schema"]


def pg_events(envelope: bool) -> list[bytes | None]:
    """create, update, delete (REPLICA IDENTITY DEFAULT), truncate, two messages."""
    return [
        value(PG_CREATE["payload"], PG_SCHEMA, envelope),
        value(doc("pg_customers_update_payload.json"), PG_SCHEMA, envelope),
        value(doc("pg_customers_delete_payload.json"), PG_SCHEMA, envelope),
        value(doc("pg_customers_truncate_payload.json"), PG_SCHEMA, envelope),
        value(doc("pg_message_transactional_payload.json"), PG_SCHEMA, envelope),
        value(doc("pg_message_nontransactional_payload.json"), PG_SCHEMA, envelope),
    ]


@ENVELOPES
def test_postgres_documented_events(envelope: bool):
    out = decode(pg_events(envelope), PG_CUSTOMERS)
    assert len(out.rejects) == 0, out.rejects.reasons
    assert events(out.batch) == [
        (
            OP_UPSERT,
            {"id": 1},
            {"first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org"},
        ),
        (
            OP_UPSERT,
            {"id": 1},
            {"first_name": "Anne Marie", "last_name": "Kretchmar", "email": "annek@noanswer.org"},
        ),
        (OP_DELETE, {"id": 1}, {}),  # DEFAULT: 'before' holds the key only
        (OP_TRUNCATE, {"id": None}, {}),  # a truncate names no key
    ]
    assert out.batch.positions.tolist() == [0, 1, 2, 3]
    # logical decoding messages are skipped and counted, not rejected
    assert out.skipped == 2 and out.messages == 2
    assert out.ts_ms is not None  # source.ts_ms: when the change happened in the database
    assert out.ts_ms.tolist() == [1559033904863] * 4


def test_truncate_may_be_rejected_instead():
    out = decode(pg_events(True), PG_CUSTOMERS, truncate="reject")
    assert out.rejects.positions.tolist() == [3]
    assert "truncate='reject'" in out.rejects.reasons[0]
    assert out.batch.op.tolist() == [OP_UPSERT, OP_UPSERT, OP_DELETE]


@ENVELOPES
def test_postgres_lsn_is_the_sequence_so_key_only_deletes_apply(envelope: bool):
    """REPLICA IDENTITY DEFAULT deletes carry only the key: with a sequence column their
    seq must come from the source position (source.lsn)."""
    table = TableSchema.from_dict(
        {
            "columns": [*PG_CUSTOMERS.to_dict()["columns"], {"name": "lsn", "type": "int64"}],
            "primary_key": ["id"],
            "sequence_column": "lsn",
        }
    )
    out = decode(pg_events(envelope), table, sequence_source="lsn")
    assert len(out.rejects) == 0, out.rejects.reasons
    assert out.batch.op.tolist() == [OP_UPSERT, OP_UPSERT, OP_DELETE, OP_TRUNCATE]
    assert out.batch.seq is not None
    assert out.batch.seq.tolist()[:3] == [24023128, 24023128, 46523128]
    out = decode(pg_events(envelope), table, sequence_source="ts_ms")
    assert out.batch.seq is not None and out.batch.seq.tolist()[:3] == [1559033904863] * 3
    # with the row's column (the default), the key-only delete has no seq: rejected
    out = decode(pg_events(envelope), table)
    assert out.rejects.positions.tolist() == [0, 1, 2]
    assert all("seq is missing" in r for r in out.rejects.reasons)


# ============================================================ REPLICA IDENTITY
PG_KEY_SCHEMA = {
    "type": "struct",
    "name": "PostgreSQL_server.public.customers.Key",
    "optional": False,
    "fields": [{"type": "int32", "optional": False, "field": "id"}],
}


def delete_payload(before: Any) -> dict[str, Any]:
    p = doc("pg_customers_delete_payload.json")
    p["before"] = before
    return p


@ENVELOPES
def test_replica_identity_full_default_and_nothing_deletes(envelope: bool):
    full = {
        "id": 1,
        "first_name": "Anne Marie",
        "last_name": "Kretchmar",
        "email": "annek@noanswer.org",
    }
    values = [
        value(delete_payload(full), PG_SCHEMA, envelope),  # FULL
        value(delete_payload({"id": 2}), PG_SCHEMA, envelope),  # DEFAULT
        value(delete_payload(None), PG_SCHEMA, envelope),
    ]  # NOTHING
    # Kafka message keys as JsonConverter writes them (the key schema, or none)
    keys = [value({"id": k}, PG_KEY_SCHEMA, envelope) for k in (1, 2, 3)]
    out = decode(values, PG_CUSTOMERS, keys=keys)
    assert len(out.rejects) == 0, out.rejects.reasons
    assert events(out.batch) == [
        (OP_DELETE, {"id": 1}, {}),
        (OP_DELETE, {"id": 2}, {}),
        (OP_DELETE, {"id": 3}, {}),
    ]
    # without the message keys, the NOTHING delete cannot name its row
    out = decode(values, PG_CUSTOMERS)
    assert out.rejects.positions.tolist() == [2]
    assert "without a message key" in out.rejects.reasons[0]
    # a null message key (a table without a primary key) does not help either
    out = decode(values, PG_CUSTOMERS, keys=[keys[0], keys[1], None])
    assert out.rejects.positions.tolist() == [2]
    assert "message key is null" in out.rejects.reasons[0]


def test_message_key_of_the_mysql_tutorial_keys_a_delete_without_before():
    payload = doc("mysql_customers_delete_payload.json")
    payload["before"] = None
    key = json.dumps(doc("mysql_customers_update_key.json")).encode()
    out = decode(
        [value(payload, MYSQL_SCHEMA, True), value(payload, MYSQL_SCHEMA, False)],
        MYSQL_CUSTOMERS,
        keys=[key, json.dumps({"id": 1004}).encode()],
    )
    assert len(out.rejects) == 0, out.rejects.reasons
    assert events(out.batch) == [(OP_DELETE, {"id": 1004}, {})] * 2


def test_a_bad_message_key_rejects_only_its_event():
    values = [value(delete_payload(None), PG_SCHEMA, False)] * 3
    keys = [b'{"id": 1}', b'{"id": "x"}', b'{"id": 1']
    out = decode(values, PG_CUSTOMERS, keys=keys)
    assert out.batch.positions.tolist() == [0]
    assert out.rejects.positions.tolist() == [1, 2]
    assert "column 'id'" in out.rejects.reasons[0]
    assert "message key" in out.rejects.reasons[1]


# ============================================================ PostgreSQL data types
TYPES = TableSchema.from_dict(
    {
        "columns": [
            {"name": "id", "type": "int32"},  # INTEGER -> INT32
            {"name": "small", "type": "int16"},  # SMALLINT -> INT16
            {"name": "big", "type": "int64"},  # BIGINT -> INT64
            {"name": "r", "type": "float32"},  # REAL -> FLOAT32
            {"name": "d", "type": "float64"},  # DOUBLE PRECISION -> FLOAT64
            {"name": "flag", "type": "bool"},  # BOOLEAN -> BOOLEAN
            {"name": "t", "type": "string"},  # TEXT/VARCHAR -> STRING
            {"name": "b", "type": "binary"},  # BYTEA -> BYTES (base64 in JSON)
            {"name": "day", "type": "date32"},  # DATE -> io.debezium.time.Date
            {"name": "ts", "type": "timestamp[us, UTC]"},  # TIMESTAMP -> MicroTimestamp
            {"name": "ts3", "type": "timestamp[us, UTC]"},  # TIMESTAMP(3) -> Timestamp (ms)
            {"name": "tsn", "type": "timestamp[us, UTC]"},  # nanoseconds mode -> NanoTimestamp
            {"name": "tz", "type": "timestamp[us, UTC]"},  # TIMESTAMPTZ -> ZonedTimestamp
            {"name": "price", "type": "decimal128(10, 2)"},  # NUMERIC(10,2) -> Decimal
            {"name": "n", "type": "decimal128(20, 4)"},  # NUMERIC -> VariableScaleDecimal
        ],
        "primary_key": ["id"],
    }
)


def _field(name: str, type_: str, semantic: str | None = None, **params: str) -> dict[str, Any]:
    f: dict[str, Any] = {"type": type_, "optional": name != "id", "field": name}
    if semantic:
        f.update(name=semantic, version=1)
    if params:
        f["parameters"] = params
    return f


def types_schema(decimal_mode: str) -> dict[str, Any]:
    """The envelope schema of the TYPES table per the data type mapping tables."""
    if decimal_mode == "precise":
        price = _field(
            "price",
            "bytes",
            "org.apache.kafka.connect.data.Decimal",
            scale="2",
            **{"connect.decimal.precision": "10"},
        )
    else:  # decimal.handling.mode=string -> STRING, double -> FLOAT64
        price = _field("price", "string" if decimal_mode == "string" else "double")
    numeric = {
        "type": "struct",
        "optional": True,
        "field": "n",
        "name": "io.debezium.data.VariableScaleDecimal",
        "version": 1,
        "fields": [
            {"type": "int32", "optional": False, "field": "scale"},
            {"type": "bytes", "optional": False, "field": "value"},
        ],
    }
    row = [
        _field("id", "int32"),
        _field("small", "int16"),
        _field("big", "int64"),
        _field("r", "float"),
        _field("d", "double"),
        _field("flag", "boolean"),
        _field("t", "string"),
        _field("b", "bytes"),
        _field("day", "int32", "io.debezium.time.Date"),
        _field("ts", "int64", "io.debezium.time.MicroTimestamp"),
        _field("ts3", "int64", "io.debezium.time.Timestamp"),
        _field("tsn", "int64", "io.debezium.time.NanoTimestamp"),
        _field("tz", "string", "io.debezium.time.ZonedTimestamp"),
        price,
        numeric,
    ]
    return {
        "type": "struct",
        "optional": False,
        "name": "pg.public.types.Envelope",
        "fields": [
            {
                "type": "struct",
                "optional": True,
                "field": "before",
                "name": "pg.public.types.Value",
                "fields": row,
            },
            {
                "type": "struct",
                "optional": True,
                "field": "after",
                "name": "pg.public.types.Value",
                "fields": row,
            },
            {"type": "string", "optional": False, "field": "op"},
        ],
    }


# The documentation's TIMESTAMP example: "2018-06-20 15:13:16.945104" is the
# MicroTimestamp 1529507596945104.
DOC_TS = dt.datetime(2018, 6, 20, 15, 13, 16, 945104, tzinfo=UTC)
PRICE = {
    "precise": "EtaH",  # unscaled 1234567 = 0x12D687 at scale 2
    "string": "12345.67",
    "double": 12345.67,
}


def row(**cols: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": 1,
        "small": 32767,
        "big": 9223372036854775807,
        "r": 3.5,
        "d": -2.25,
        "flag": True,
        "t": "hello",
        "b": "AQID",  # bytes 01 02 03
        "day": 19000,  # days since the epoch: 2022-01-08
        "ts": 1529507596945104,  # MicroTimestamp
        "ts3": 1529507596945,  # Timestamp (ms)
        "tsn": 1529507596945104789,  # NanoTimestamp: floored to the us
        "tz": "2018-06-20T15:13:16.945104Z",  # ZonedTimestamp (GMT)
        "n": {"scale": 3, "value": "MDk="},  # 12345 = 0x3039 at scale 3: 12.345
    }
    base.update(cols)
    return base


def create(after: dict[str, Any]) -> dict[str, Any]:
    return {"before": None, "after": after, "op": "c"}


EXPECTED_ROW = {
    "small": 32767,
    "big": 9223372036854775807,
    "r": 3.5,
    "d": -2.25,
    "flag": True,
    "t": "hello",
    "b": b"\x01\x02\x03",
    "day": dt.date(2022, 1, 8),
    "ts": DOC_TS,
    "ts3": DOC_TS.replace(microsecond=945000),
    "tsn": DOC_TS,
    "tz": DOC_TS,
    "price": decimal.Decimal("12345.67"),
    "n": decimal.Decimal("12.3450"),
}


@ENVELOPES
@pytest.mark.parametrize("decimal_mode", ["precise", "string", "double"])
def test_every_mapped_type_decodes(envelope: bool, decimal_mode: str):
    payload = create(row(price=PRICE[decimal_mode]))
    want = dict(EXPECTED_ROW)
    opts = {} if envelope else {"decimal_handling": decimal_mode}
    if not envelope:  # without the schema, integer timestamps are in timestamp_unit (us)
        for col in ("ts3", "tsn"):
            del payload["after"][col], want[col]
    out = decode([value(payload, types_schema(decimal_mode), envelope)], TYPES, **opts)
    assert len(out.rejects) == 0, out.rejects.reasons
    assert events(out.batch) == [(OP_UPSERT, {"id": 1}, want)]


@pytest.mark.parametrize(
    ("unit", "raw"), [("ms", 1529507596945), ("us", 1529507596945104), ("ns", 1529507596945104789)]
)
def test_without_the_schema_integer_timestamps_are_in_the_unit_option(unit: str, raw: int):
    out = decode([value(create({"id": 1, "ts": raw}), None, False)], TYPES, timestamp_unit=unit)
    want = DOC_TS.replace(microsecond=945000) if unit == "ms" else DOC_TS
    assert events(out.batch) == [(OP_UPSERT, {"id": 1}, {"ts": want})]


def test_the_envelope_schema_wins_over_the_decoder_defaults():
    """A string-mode decimal and a millisecond timestamp, described by the schema, decode
    right whatever the decoder's defaults say (and are misread without the schema)."""
    payload = create(row(price="12345.67"))
    schema = types_schema("string")
    for opts in ({}, {"decimal_handling": "precise", "timestamp_unit": "ns"}):
        out = decode([value(payload, schema, True)], TYPES, **opts)
        assert len(out.rejects) == 0, out.rejects.reasons
        assert events(out.batch)[0][2]["price"] == decimal.Decimal("12345.67")
    out = decode([value(payload, schema, False)], TYPES)  # precise default: not base64
    assert out.rejects.positions.tolist() == [0]
    assert "column 'price'" in out.rejects.reasons[0]


@ENVELOPES
def test_jsonconverter_nan_and_infinity_strings_are_floats(envelope: bool):
    payload = create(row(r="Infinity", d="NaN"))
    other = create(row(id=2, r="-Infinity", d="Infinity"))
    out = decode([value(p, types_schema("precise"), envelope) for p in (payload, other)], TYPES)
    assert len(out.rejects) == 0, out.rejects.reasons
    got = events(out.batch)
    assert got[0][2]["r"] == math.inf and math.isnan(got[0][2]["d"])
    assert got[1][2]["r"] == -math.inf and got[1][2]["d"] == math.inf
    bad = decode([value(create(row(d="nan")), types_schema("precise"), envelope)], TYPES)
    assert bad.rejects.positions.tolist() == [0]


@ENVELOPES
@pytest.mark.parametrize(
    ("tz", "want"),
    [
        ("2018-06-20T15:13:16.9451047Z", DOC_TS),  # 7 digits
        ("2018-06-20T15:13:16.94510478Z", DOC_TS),  # 8 digits
        ("2018-06-20T15:13:16.945104789Z", DOC_TS),  # 9 digits (SQL Server, Oracle)
        ("2018-06-20T17:13:16.945104999+02:00", DOC_TS),  # offset: same instant
        (
            "1969-12-31T23:59:59.999999999Z",  # before the epoch: floored too
            dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        ),
    ],
)
def test_nanosecond_zoned_timestamps_truncate_like_nano_timestamps(
    envelope: bool, tz: str, want: dt.datetime
):
    out = decode([value(create(row(tz=tz)), types_schema("precise"), envelope)], TYPES)
    assert len(out.rejects) == 0, out.rejects.reasons
    assert events(out.batch)[0][2]["tz"] == want
    nanos = int((want - dt.datetime(1970, 1, 1, tzinfo=UTC)) / dt.timedelta(microseconds=1))
    nanos = nanos * 1000 + 789  # the same instant as a NanoTimestamp, floored alike
    out = decode([value(create(row(tsn=nanos)), types_schema("precise"), True)], TYPES)
    assert events(out.batch)[0][2]["tsn"] == want


@ENVELOPES
@pytest.mark.parametrize(
    ("col", "raw", "why"),
    [
        # "TIMESTAMP type": +/-infinity are written as these MicroTimestamp values
        ("ts", 9223372036825200000, "PostgreSQL 'infinity'"),
        ("ts", -9223372036832400000, "PostgreSQL '-infinity'"),
        ("ts", 253402300800000000, "0001-01-01..9999-12-31"),  # 10000-01-01 in us
        ("tz", "10000-01-01T00:00:00Z", "timestamp"),
        ("day", 2932897, "0001-01-01..9999-12-31"),  # 10000-01-01 in days
        ("day", -719163, "0001-01-01..9999-12-31"),  # 0000-12-31
    ],
)
def test_temporal_values_the_table_cannot_hold_are_rejected(
    envelope: bool, col: str, raw: Any, why: str
):
    vals = [
        value(
            create(row(id=i, **({col: raw} if i == 2 else {}))), types_schema("precise"), envelope
        )
        for i in (1, 2, 3)
    ]
    out = decode(vals, TYPES)
    assert out.batch.positions.tolist() == [0, 2]  # the neighbours decode
    assert out.rejects.positions.tolist() == [1]
    assert f"column {col!r}" in out.rejects.reasons[0] and why in out.rejects.reasons[0]


@ENVELOPES
@pytest.mark.parametrize(
    ("mode", "price"),
    [
        ("precise", "WvMQekAA"),  # unscaled 10**14 at scale 2: 10**12 > 10 digits
        ("string", "1000000000000.00"),
        ("string", "99999999999999999999999999999999999999999.99"),  # would wrap in 128 bits
        ("double", 1.0e12),
        ("double", 1e400),  # beyond a double: Arrow would read inf
    ],
)
def test_decimals_beyond_their_precision_are_rejected_in_every_mode(
    envelope: bool, mode: str, price: Any
):
    text = value(create(row(price=0)), types_schema(mode), envelope).decode()
    # 1e400 is not a Python float: splice the number token into the JSON text
    token = json.dumps(price) if not isinstance(price, float) or price < 1e300 else "1e400"
    bad = text.replace('"price": 0', f'"price": {token}').encode()
    good = value(create(row(id=2, price=PRICE[mode])), types_schema(mode), envelope)
    opts = {} if envelope else {"decimal_handling": mode}
    out = decode([bad, good], TYPES, **opts)
    assert out.rejects.positions.tolist() == [0], out.rejects.reasons
    assert "column 'price'" in out.rejects.reasons[0]
    assert events(out.batch)[0][2]["price"] == decimal.Decimal("12345.67")


@pytest.mark.parametrize(
    ("n", "reason"),
    [
        ({"scale": 0, "value": "AWNFeF2KAAA="}, "out of range"),  # 10**17: > 20 digits at 4
        ({"scale": 5, "value": "MDk="}, "column 'n'"),  # 0.12345: not exact at 4
        ({"scale": 39, "value": "MDk="}, "column 'n'"),
        ({"scale": "x", "value": "MDk="}, "column 'n'"),
        ({"value": "MDk="}, "column 'n'"),
        ({"scale": 1}, "column 'n'"),
    ],
)
def test_variable_scale_decimals_fit_the_column_or_are_rejected(n: Any, reason: str):
    out = decode(
        [
            value(create(row(n=n)), types_schema("precise"), True),
            value(create(row(id=2)), types_schema("precise"), True),
        ],
        TYPES,
    )
    assert out.rejects.positions.tolist() == [0]
    assert reason in out.rejects.reasons[0]
    assert out.batch.positions.tolist() == [1]


# ============================================================ TOAST placeholder
PLACEHOLDER = "__debezium_unavailable_value"
PLACEHOLDER_B64 = "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="  # base64 of its bytes


@ENVELOPES
def test_unchanged_toasted_values_are_absent_not_written(envelope: bool):
    """REPLICA IDENTITY DEFAULT update of a row whose toasted text and bytea columns did
    not change: Debezium writes the placeholder (its base64 in a BYTES column)."""
    after = {"id": 1, "t": PLACEHOLDER, "b": PLACEHOLDER_B64, "small": 7}
    upd = {"before": None, "after": after, "op": "u"}
    hex_mode = {"before": None, "after": {"id": 2, "b": PLACEHOLDER}, "op": "u"}  # hex mode
    out = decode(
        [
            value(upd, types_schema("precise"), envelope),
            value(hex_mode, types_schema("precise"), envelope),
        ],
        TYPES,
    )
    assert len(out.rejects) == 0, out.rejects.reasons
    assert events(out.batch) == [(OP_UPSERT, {"id": 1}, {"small": 7}), (OP_UPSERT, {"id": 2}, {})]


def test_the_placeholder_is_a_decoder_option():
    after = {"id": 1, "t": PLACEHOLDER, "b": "dG9hc3Q="}  # base64 of b"toast"
    upd = value({"before": None, "after": after, "op": "u"}, None, False)
    out = decode([upd], TYPES, unavailable_value_placeholder="toast")
    assert events(out.batch) == [(OP_UPSERT, {"id": 1}, {"t": PLACEHOLDER})]
    out = decode([upd], TYPES, unavailable_value_placeholder="hex:746f617374")  # "toast"
    assert events(out.batch) == [(OP_UPSERT, {"id": 1}, {"t": PLACEHOLDER})]
    out = decode([upd], TYPES, unavailable_value_placeholder=None)
    assert events(out.batch) == [(OP_UPSERT, {"id": 1}, {"t": PLACEHOLDER, "b": b"toast"})]


# ============================================================ options
@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"decimal_handling": "base64"}, "decimal_handling"),
        ({"timestamp_unit": "s"}, "timestamp_unit"),
        ({"truncate": "ignore"}, "truncate"),
        ({"sequence_source": "gtid"}, "sequence_source"),
        ({"ignore_unknown_columns": "yes"}, "ignore_unknown_columns"),
        ({"strict": 1}, "strict"),
        ({"unavailable_value_placeholder": ""}, "unavailable_value_placeholder"),
        ({"unavailable_value_placeholder": "hex:zz"}, "unavailable_value_placeholder"),
        ({"unavailable_value_placeholder": 5}, "unavailable_value_placeholder"),
        ({"timestamp_units": "ms"}, "timestamp_units"),
    ],
)
def test_invalid_options_raise_a_typed_error_naming_the_option(options: dict[str, Any], name: str):
    with pytest.raises(InvalidOption) as info:
        get_decoder("debezium", **options)
    assert info.value.option == name and name in str(info.value)
    assert isinstance(info.value, CdcSinkError) and isinstance(info.value, ValueError)


def test_every_option_is_reachable_through_get_decoder():
    dec = get_decoder(
        "debezium",
        timestamp_unit="ms",
        decimal_handling="double",
        ignore_unknown_columns=True,
        strict=False,
        unavailable_value_placeholder="hex:00",
        truncate="reject",
        sequence_source="binlog",
    )
    assert isinstance(dec, DebeziumDecoder)
    assert (dec.timestamp_unit, dec.decimal_handling, dec.truncate, dec.sequence_source) == (
        "ms",
        "double",
        "reject",
        "binlog",
    )
    with pytest.raises(InvalidOption):
        get_decoder("json", truncate="apply")
    with pytest.raises(InvalidOption):
        get_decoder("avro")  # type: ignore[arg-type]


def test_keys_must_align_with_values():
    with pytest.raises(ValueError, match="one entry per value"):
        DebeziumDecoder().decode(binary([b"{}"]), PG_CUSTOMERS, keys=binary([]))
    assert np.array_equal(
        DebeziumDecoder().decode(binary([]), PG_CUSTOMERS, keys=binary([]))[0].op, []
    )


def test_a_decoder_with_options_survives_pickling():
    """Decoders are shipped to Spark executors."""
    import pickle

    dec = DebeziumDecoder(
        truncate="reject", sequence_source="lsn", unavailable_value_placeholder="toast"
    )
    back = pickle.loads(pickle.dumps(dec))
    upd = value({"before": None, "after": {"id": 1, "t": "toast"}, "op": "u"}, None, False)
    assert events(back.decode_with_meta(binary([upd]), TYPES).batch) == [(OP_UPSERT, {"id": 1}, {})]
    assert back.truncate == "reject" and back.sequence_source == "lsn"


def test_millisecond_timestamps_beyond_9999_are_rejected():
    """io.debezium.time.Timestamp (ms) values whose microseconds leave the range."""
    vals = [
        value(create(row(ts3=raw)), types_schema("precise"), True)
        for raw in (253402300799999, 253402300800000, -62135596800001, 2**62)
    ]
    out = decode(vals, TYPES)
    assert out.batch.positions.tolist() == [0]
    assert out.rejects.positions.tolist() == [1, 2, 3]
    assert all("0001-01-01..9999-12-31" in r for r in out.rejects.reasons)


def test_reject_reasons_fall_in_their_metrics_class():
    """The new reasons are classified (the ``reason`` label of the sink's metrics)."""
    from cdc_sink.metrics.reasons import classify_reason

    schema = types_schema("precise")
    bad_schema = dict(schema, fields=7)
    vals = [
        value(create(row(ts=9223372036825200000)), schema, True),
        value(create(row(price="WvMQekAA")), schema, True),
        value(create(row(small=32768)), schema, True),
        json.dumps({"schema": bad_schema, "payload": create(row())}).encode(),
        value(delete_payload(None), PG_SCHEMA, False),
        value(doc("pg_customers_truncate_payload.json"), PG_SCHEMA, False),
    ]
    out = decode(vals, TYPES, keys=[None, None, None, None, b"{", None], truncate="reject")
    got = {p: classify_reason(r) for p, r in out.rejects.as_dict().items()}
    assert got == {
        0: "out_of_range",
        1: "out_of_range",
        2: "out_of_range",
        3: "bad_envelope",
        4: "bad_json",
        5: "truncated_rejected",
    }, out.rejects.reasons


def test_date_and_time_of_day_fields_in_a_timestamp_column():
    """A DATE (io.debezium.time.Date, days) read into a timestamp column is its midnight
    UTC; a TIME (MicroTime: microseconds past midnight) is no timestamp: rejected."""
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
    out = decode(
        [
            value(create({"id": 1, "ts": 19000}), schema, True),
            value(create({"id": 2, "ts3": 45_000_000}), schema, True),
        ],
        TYPES,
    )
    assert events(out.batch) == [
        (OP_UPSERT, {"id": 1}, {"ts": dt.datetime(2022, 1, 8, tzinfo=UTC)})
    ]
    assert out.rejects.positions.tolist() == [1]
    assert "is not a valid timestamp" in out.rejects.reasons[0]
