"""The Debezium format: envelopes, op mapping, tombstones, Debezium value encodings."""

from __future__ import annotations

import base64
import copy
import datetime as dt
import decimal
import json
from typing import Any

import numpy as np
import pytest

from cdc_sink.formats import TS_MISSING, get_decoder
from cdc_sink.formats.debezium import DebeziumDecoder, encode_debezium
from cdc_sink.schema import TableSchema
from tests.formats.support import (
    ALL_TYPES,
    COMPOSITE,
    FULL_ROW,
    SEQ,
    UTC,
    assert_same_batch,
    binary,
    expected,
)

DEC = DebeziumDecoder()

CUSTOMERS = TableSchema.from_dict(
    {
        "columns": [
            {"name": "id", "type": "int32"},
            {"name": "email", "type": "string"},
            {"name": "created_at", "type": "timestamp[us, UTC]"},
            {"name": "balance", "type": "decimal128(10, 2)"},
            {"name": "birthday", "type": "date32"},
            {"name": "updated_at", "type": "timestamp[us, UTC]"},
        ],
        "primary_key": ["id"],
    }
)


def _row_schema(field: str) -> dict[str, Any]:
    return {
        "type": "struct",
        "optional": True,
        "field": field,
        "name": "dbserver1.inventory.customers.Value",
        "fields": [
            {"type": "int32", "optional": False, "field": "id"},
            {"type": "string", "optional": True, "field": "email"},
            {
                "type": "int64",
                "optional": True,
                "name": "io.debezium.time.MicroTimestamp",
                "version": 1,
                "field": "created_at",
            },
            {
                "type": "bytes",
                "optional": True,
                "name": "org.apache.kafka.connect.data.Decimal",
                "version": 1,
                "parameters": {"scale": "2", "connect.decimal.precision": "10"},
                "field": "balance",
            },
            {
                "type": "int32",
                "optional": True,
                "name": "io.debezium.time.Date",
                "version": 1,
                "field": "birthday",
            },
            {
                "type": "string",
                "optional": True,
                "name": "io.debezium.time.ZonedTimestamp",
                "version": 1,
                "field": "updated_at",
            },
        ],
    }


# A PostgreSQL connector event as Debezium 2.x writes it with the JSON converter.
SAMPLE_SCHEMA = {
    "type": "struct",
    "optional": False,
    "name": "dbserver1.inventory.customers.Envelope",
    "version": 1,
    "fields": [
        _row_schema("before"),
        _row_schema("after"),
        {
            "type": "struct",
            "optional": False,
            "field": "source",
            "name": "io.debezium.connector.postgresql.Source",
            "fields": [
                {"type": "string", "optional": False, "field": "version"},
                {"type": "string", "optional": False, "field": "connector"},
                {"type": "int64", "optional": False, "field": "ts_ms"},
                {"type": "int64", "optional": True, "field": "lsn"},
            ],
        },
        {"type": "string", "optional": False, "field": "op"},
        {"type": "int64", "optional": True, "field": "ts_ms"},
        {
            "type": "struct",
            "optional": True,
            "field": "transaction",
            "fields": [{"type": "string", "optional": False, "field": "id"}],
        },
    ],
}
SAMPLE_PAYLOAD = {
    "before": None,
    "after": {
        "id": 1004,
        "email": "annek@noanswer.org",
        "created_at": 1718000000123456,
        "balance": "ATk=",
        "birthday": 19000,
        "updated_at": "2024-06-10T06:13:20.123456Z",
    },
    "source": {
        "version": "2.7.0.Final",
        "connector": "postgresql",
        "name": "dbserver1",
        "ts_ms": 1718000000200,
        "snapshot": "false",
        "db": "postgres",
        "sequence": '["24023128","24023128"]',
        "schema": "inventory",
        "table": "customers",
        "txId": 555,
        "lsn": 24023128,
        "xmin": None,
    },
    "op": "c",
    "ts_ms": 1718000000300,
    "transaction": None,
}
SAMPLE_ROW = {
    "id": 1004,
    "email": "annek@noanswer.org",
    "created_at": dt.datetime(2024, 6, 10, 6, 13, 20, 123456, tzinfo=UTC),
    "balance": decimal.Decimal("3.13"),
    "birthday": dt.date(1970, 1, 1) + dt.timedelta(days=19000),
    "updated_at": dt.datetime(2024, 6, 10, 6, 13, 20, 123456, tzinfo=UTC),
}


def sample(envelope: bool, **changes: Any) -> bytes:
    payload = copy.deepcopy(SAMPLE_PAYLOAD)
    payload.update(changes)
    doc = {"schema": SAMPLE_SCHEMA, "payload": payload} if envelope else payload
    return json.dumps(doc).encode()


def rows_of(batch: Any) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in r.items() if not k.startswith("__")} for r in batch.to_arrow().to_pylist()
    ]


# --------------------------------------------------------------------------- samples
@pytest.mark.parametrize("envelope", [True, False])
def test_postgres_create_event_decodes_with_and_without_envelope(envelope: bool):
    out = DEC.decode_with_meta(binary([sample(envelope)]), CUSTOMERS)
    assert len(out.rejects) == 0
    assert out.batch.op.tolist() == [1]  # upsert
    assert rows_of(out.batch) == [SAMPLE_ROW]
    assert out.ts_ms is not None and out.ts_ms.tolist() == [1718000000200]  # source.ts_ms


def test_update_and_delete_events_map_to_upsert_and_delete_of_the_key():
    before = dict(SAMPLE_PAYLOAD["after"])
    after = dict(before, email=None)
    values = binary(
        [
            sample(True, op="u", before=before, after=after),
            sample(False, op="d", before=before, after=None),
            sample(True, op="r"),
        ]
    )
    batch, rejects = DEC.decode(values, CUSTOMERS)
    assert len(rejects) == 0
    assert batch.op.tolist() == [1, 3, 1]
    email = CUSTOMERS.column("email").id
    assert batch.present[email].tolist() == [True, False, True]
    assert batch.values[email].to_pylist()[0] is None  # a real null
    assert batch.keys[0].to_pylist() == [1004, 1004, 1004]


def test_ts_ms_falls_back_to_the_payload_ts_ms():
    src = dict(SAMPLE_PAYLOAD["source"])
    del src["ts_ms"]
    out = DEC.decode_with_meta(
        binary([sample(False, source=src), sample(False, ts_ms=None, source={})]), CUSTOMERS
    )
    assert out.ts_ms is not None and out.ts_ms.tolist() == [1718000000300, TS_MISSING]


def test_tombstones_are_skipped_and_counted_not_rejected():
    values = binary(
        [
            None,
            sample(True),
            b"",
            b"null",
            b'{"schema": null, "payload": null}',
            sample(False, op="d", before=SAMPLE_PAYLOAD["after"], after=None),
        ]
    )
    out = DEC.decode_with_meta(values, CUSTOMERS, position=np.arange(50, 56))
    assert out.skipped == 4
    assert len(out.rejects) == 0
    assert out.batch.positions.tolist() == [51, 55]
    assert out.batch.op.tolist() == [1, 3]


def test_decoder_is_registered_as_debezium_with_options():
    dec = get_decoder("debezium", timestamp_unit="ms")
    assert isinstance(dec, DebeziumDecoder) and dec.timestamp_unit == "ms"
    with pytest.raises(ValueError, match="timestamp_unit"):
        DebeziumDecoder(timestamp_unit="s")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- value encodings
@pytest.mark.parametrize(
    ("name", "raw", "want"),
    [
        ("io.debezium.time.Timestamp", 1718000000123, dt.datetime(2024, 6, 10, 6, 13, 20, 123000)),
        ("org.apache.kafka.connect.data.Timestamp", 0, dt.datetime(1970, 1, 1)),
        ("io.debezium.time.MicroTimestamp", -1, dt.datetime(1969, 12, 31, 23, 59, 59, 999999)),
        (
            "io.debezium.time.NanoTimestamp",
            1718000000123456789,
            dt.datetime(2024, 6, 10, 6, 13, 20, 123456),
        ),
    ],
)
def test_integer_timestamps_use_the_unit_of_their_field_schema(
    name: str, raw: int, want: dt.datetime
):
    schema = copy.deepcopy(SAMPLE_SCHEMA)
    for row in schema["fields"][:2]:
        row["fields"][2]["name"] = name
    after = dict(SAMPLE_PAYLOAD["after"], created_at=raw)
    doc = {"schema": schema, "payload": dict(SAMPLE_PAYLOAD, after=after)}
    batch, rejects = DEC.decode(binary([json.dumps(doc).encode()]), CUSTOMERS)
    assert len(rejects) == 0
    assert rows_of(batch)[0]["created_at"] == want.replace(tzinfo=UTC)


def test_without_envelope_integer_timestamps_use_the_decoder_unit():
    value = sample(False, after=dict(SAMPLE_PAYLOAD["after"], created_at=1718000000123))
    batch, _ = DebeziumDecoder(timestamp_unit="ms").decode(binary([value]), CUSTOMERS)
    assert rows_of(batch)[0]["created_at"] == dt.datetime(
        2024, 6, 10, 6, 13, 20, 123000, tzinfo=UTC
    )


def test_decimals_as_base64_bytes_strings_or_numbers():
    schema = copy.deepcopy(SAMPLE_SCHEMA)
    for row in schema["fields"][:2]:
        row["fields"][3] = {"type": "string", "optional": True, "field": "balance"}
    as_string = {
        "schema": schema,
        "payload": dict(SAMPLE_PAYLOAD, after=dict(SAMPLE_PAYLOAD["after"], balance="-12.5")),
    }
    as_number = sample(False, after=dict(SAMPLE_PAYLOAD["after"], balance=7.25))
    negative = sample(
        True, after=dict(SAMPLE_PAYLOAD["after"], balance=base64.b64encode(b"\xff\x38").decode())
    )
    scaled = copy.deepcopy(SAMPLE_SCHEMA)
    for row in scaled["fields"][:2]:
        row["fields"][3]["parameters"]["scale"] = "1"
    rescaled = {"schema": scaled, "payload": SAMPLE_PAYLOAD}  # 313 at scale 1 = 31.3
    values = binary(
        [json.dumps(as_string).encode(), as_number, negative, json.dumps(rescaled).encode()]
    )
    batch, rejects = DEC.decode(values, CUSTOMERS)
    assert len(rejects) == 0, rejects.reasons
    assert [r["balance"] for r in rows_of(batch)] == [
        decimal.Decimal("-12.50"),
        decimal.Decimal("7.25"),
        decimal.Decimal("-2.00"),
        decimal.Decimal("31.30"),
    ]
    text = sample(False, after=dict(SAMPLE_PAYLOAD["after"], balance="0.5"))
    batch, rejects = DebeziumDecoder(decimal_handling="string").decode(binary([text]), CUSTOMERS)
    assert len(rejects) == 0 and rows_of(batch)[0]["balance"] == decimal.Decimal("0.50")


def test_dates_and_timestamps_may_be_iso_strings():
    after = dict(
        SAMPLE_PAYLOAD["after"], birthday="2001-02-03", created_at="2024-01-01T00:00:00+01:00"
    )
    batch, rejects = DEC.decode(binary([sample(False, after=after)]), CUSTOMERS)
    assert len(rejects) == 0
    row = rows_of(batch)[0]
    assert row["birthday"] == dt.date(2001, 2, 3)
    assert row["created_at"] == dt.datetime(2023, 12, 31, 23, 0, tzinfo=UTC)


def test_two_schemas_in_one_batch_are_each_honoured():
    millis = copy.deepcopy(SAMPLE_SCHEMA)
    for row in millis["fields"][:2]:
        row["fields"][2]["name"] = "io.debezium.time.Timestamp"
    a = {
        "schema": millis,
        "payload": dict(SAMPLE_PAYLOAD, after=dict(SAMPLE_PAYLOAD["after"], created_at=1000)),
    }
    b = {
        "schema": SAMPLE_SCHEMA,
        "payload": dict(SAMPLE_PAYLOAD, after=dict(SAMPLE_PAYLOAD["after"], created_at=1000)),
    }
    values = binary([json.dumps(d).encode() for d in (a, b, a, b)])
    batch, _ = DEC.decode(values, CUSTOMERS)
    epoch = dt.datetime(1970, 1, 1, tzinfo=UTC)
    assert [r["created_at"] - epoch for r in rows_of(batch)] == [
        dt.timedelta(seconds=1),
        dt.timedelta(microseconds=1000),
    ] * 2


# --------------------------------------------------------------------------- round trips
def _as_native(
    op: str, before: dict[str, Any] | None, after: dict[str, Any] | None, schema: TableSchema
) -> dict[str, Any]:
    if op == "d":
        assert before is not None
        return {"op": "delete", "key": {k: before[k] for k in schema.primary_key}}
    assert after is not None
    return {
        "op": "upsert",
        "key": {k: after[k] for k in schema.primary_key},
        "set": {k: v for k, v in after.items() if k not in schema.primary_key},
    }


@pytest.mark.parametrize("envelope", [True, False])
@pytest.mark.parametrize("decimal_handling", ["precise", "string"])
def test_encoded_events_of_every_type_and_op_decode_like_native_events(
    envelope: bool, decimal_handling: Any
):
    full = {"id": 1, **FULL_ROW}
    changes: list[tuple[str, Any, Any]] = [
        ("c", None, full),
        ("r", None, dict(full, id=2, i8=None, blob=None)),
        ("u", full, dict(full, name="x", f32=None, at=None, day=None, amount=None)),
        ("d", full, None),
        ("c", None, {"id": 3, "name": "only"}),
    ]
    values = binary(
        [
            encode_debezium(
                op, b, a, ALL_TYPES, envelope=envelope, decimal_handling=decimal_handling
            )
            for op, b, a in changes
        ]
    )
    dec = DebeziumDecoder(decimal_handling=decimal_handling)
    batch, rejects = dec.decode(values, ALL_TYPES)
    assert len(rejects) == 0, rejects.reasons
    want, _ = expected([_as_native(op, b, a, ALL_TYPES) for op, b, a in changes], ALL_TYPES)
    assert_same_batch(batch, want)


def test_composite_keys_come_from_after_and_from_before_for_deletes():
    row = {"tenant": 4, "sku": "a", "day": dt.date(2024, 5, 6), "qty": 1, "note": None}
    values = binary(
        [
            encode_debezium("c", None, row, COMPOSITE, envelope=True),
            encode_debezium("d", row, None, COMPOSITE, envelope=False),
        ]
    )
    batch, rejects = DEC.decode(values, COMPOSITE)
    assert len(rejects) == 0
    assert [k.to_pylist() for k in batch.keys] == [[4, 4], ["a", "a"], [dt.date(2024, 5, 6)] * 2]


def test_seq_is_the_sequence_column_of_after_or_of_before_for_deletes():
    values = binary(
        [
            encode_debezium("c", None, {"id": 1, "v": "a", "seq": 3}, SEQ, envelope=True),
            encode_debezium("d", {"id": 1, "v": "a", "seq": 4}, None, SEQ, envelope=False),
            encode_debezium("u", None, {"id": 1, "v": "b"}, SEQ, envelope=False),
        ]
    )
    batch, rejects = DEC.decode(values, SEQ)
    assert batch.seq is not None and batch.seq.tolist() == [3, 4]
    assert rejects.positions.tolist() == [2] and "seq is missing" in rejects.reasons[0]


# --------------------------------------------------------------------------- rejects
@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b'{"op": "x", "after": {"id": 1}}', 'unknown Debezium op "x"'),
        (b'{"after": {"id": 1}}', "event has no 'op'"),
        (
            b'{"op": "d", "before": null, "after": null}',
            "delete without a 'before' row and without a message key",
        ),
        (b'{"op": "d", "before": 5, "after": null}', "'before' is not an object"),
        (b'{"op": "u", "before": {"id": 1}, "after": null}', "'after' is missing or not an object"),
        (b'{"schema": {}, "payload": 5}', "'payload' is not an object"),
        (
            b'{"schema": [1], "payload": {"op": "c", "after": {"id": 1}}}',
            "'schema' is not an object",
        ),
        (
            b'{"op": "c", "after": {"id": 1, "created_at": "2024-01-01T00:00:00.1234567891Z"}}',
            "is not a valid timestamp",
        ),  # ten fraction digits: more than nanoseconds
        (b'{"op": "c", "after": {"id": 1, "nope": 2}}', "unknown column 'nope'"),
        (
            b'{"op": "c", "after": {"id": 1, "balance": "%%%%"}}',
            "column 'balance': \"%%%%\" is not a valid decimal128(10, 2)",
        ),
        (b'{"op": "c", "after": {"id": 1, "email": 5}}', "column 'email': 5 is not a valid string"),
        (b'{"op": "c", "after": {"id": 1}', "not a single JSON object"),
        (b'{"op": "c" "after": {"id": 1}}', "invalid JSON"),
        (b'{"op": "c", "after": {"id": null}}', "key column 'id' is missing or null"),
    ],
)
def test_bad_event_is_rejected_with_its_position_and_reason(value: bytes, reason: str):
    good = sample(False)
    batch, rejects = DEC.decode(
        binary([good, value, good]), CUSTOMERS, position=np.array([7, 8, 9])
    )
    assert batch.positions.tolist() == [7, 9]
    assert rejects.positions.tolist() == [8], rejects.reasons
    assert reason in rejects.reasons[0]


def test_unknown_columns_may_be_ignored():
    value = b'{"op": "c", "after": {"id": 1, "nope": 2, "email": "e"}}'
    batch, rejects = DebeziumDecoder(ignore_unknown_columns=True).decode(binary([value]), CUSTOMERS)
    assert len(rejects) == 0 and rows_of(batch)[0]["email"] == "e"


def test_events_sharing_the_envelope_schema_decode_like_each_alone():
    """A batch cuts the schema repeated by its events; the result must not change."""
    other = copy.deepcopy(SAMPLE_SCHEMA)
    other["fields"][1]["fields"][2]["name"] = "io.debezium.time.Timestamp"
    compact = json.dumps(
        {"schema": SAMPLE_SCHEMA, "payload": SAMPLE_PAYLOAD}, separators=(",", ":")
    ).encode()
    spaced = sample(True)
    head = spaced[: spaced.index(b'"payload"')]
    values = [
        spaced,
        compact,
        sample(True, op="d", before=SAMPLE_PAYLOAD["after"], after=None),
        json.dumps({"schema": other, "payload": SAMPLE_PAYLOAD}).encode(),
        head + b'"payload": {"op": "c", "after": {"id": 1}} x}',  # trailing garbage
        head + b'"payload": {"op": "c" "after": {"id": 2}}}',  # missing comma
        head + b'"payload": {"op": "c", "after": {"id": 3, "email": 4}}}',  # bad value
        head + b'"payload": null}',  # tombstone in envelope form
        head + b'"payload": {"op": "c", "after": {"id": 5}}, "extra": 1}',
        spaced + b" ",
        sample(False),
        spaced,
    ]
    batch = DEC.decode_with_meta(binary(values), CUSTOMERS)
    alone = [DEC.decode_with_meta(binary([v]), CUSTOMERS) for v in values]
    assert batch.skipped == sum(a.skipped for a in alone) == 1
    assert (
        batch.rejects.positions.tolist()
        == [i for i, a in enumerate(alone) if len(a.rejects)]
        == [4, 5, 6]
    )
    assert batch.rejects.reasons == [a.rejects.reasons[0] for a in alone if len(a.rejects)]
    decoded = [i for i, a in enumerate(alone) if len(a.batch)]
    assert batch.batch.positions.tolist() == decoded
    for k, i in enumerate(decoded):
        got = batch.batch.take(np.array([k]))
        got.position = alone[i].batch.position = np.array([0])
        assert_same_batch(got, alone[i].batch)
    assert batch.ts_ms is not None
    assert batch.ts_ms.tolist() == [
        int(alone[i].ts_ms[0]) if alone[i].ts_ms is not None else TS_MISSING for i in decoded
    ]


# --------------------------------------------------------------------------- malformed
def _env(after_fields: Any) -> bytes:
    return json.dumps(
        {
            "schema": {
                "type": "struct",
                "fields": [{"type": "struct", "field": "after", "fields": after_fields}],
            },
            "payload": {"op": "c", "after": {"id": 1, "balance": "ATk="}},
        }
    ).encode()


def _balance(**extra: Any) -> list[dict[str, Any]]:
    return [
        {
            "type": "bytes",
            "field": "balance",
            "name": "org.apache.kafka.connect.data.Decimal",
            **extra,
        }
    ]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (
            b'{"schema": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5000 + b', "payload": '
            b'{"op": "c", "after": {"id": 1}}}',
            "nested deeper than",
        ),
        (
            b'{"schema": ' + b'{"fields": [' * 40 + b"]}" * 40 + b', "payload": '
            b'{"op": "c", "after": {"id": 1}}}',
            "nested deeper than",
        ),
        (_env(_balance(parameters={"scale": "1e400"})), "decimal scale '1e400'"),
        (_env(_balance(parameters={"scale": 10**30})), "is not an integer in 0..38"),
        (_env(_balance(parameters={"scale": -1})), "is not an integer in 0..38"),
        (_env(_balance(parameters={"scale": True})), "is not an integer in 0..38"),
        (
            _env(_balance(parameters={"scale": None, "x": 1})).replace(b"null", b"1e999"),
            "is not an integer in 0..38",
        ),
        (_env(_balance(parameters=[2])), "parameters is not an object"),
        (_env(_balance(parameters="2")), "parameters is not an object"),
        (_env(_balance(name=["x"])), "name is not a string"),
        (_env(_balance(name={"x": 1})), "name is not a string"),
        (_env(_balance(type=5)), "type is not a string"),
        (_env({"balance": {}}), "fields is not an array"),
        (_env("fields"), "fields is not an array"),
        (_env(5), "fields is not an array"),
        (_env([5]), "holds a non-object"),
        (
            json.dumps(
                {
                    "schema": {"type": "struct", "fields": 7},
                    "payload": {"op": "c", "after": {"id": 1}},
                }
            ).encode(),
            "fields is not an array",
        ),
    ],
)
def test_malformed_envelope_schemas_reject_their_event_only(value: bytes, reason: str):
    """Decoding never raises on message content: a schema of the wrong shape (which once
    raised RecursionError, OverflowError, AttributeError, TypeError) rejects its event
    with a reason, and the neighbours decode (also events sharing no schema)."""
    good = sample(True)
    batch, rejects = DEC.decode(binary([good, value, sample(False), value, good]), CUSTOMERS)
    assert batch.positions.tolist() == [0, 2, 4]
    assert rejects.positions.tolist() == [1, 3]
    assert all(reason in r and "invalid envelope schema" in r for r in rejects.reasons), (
        rejects.reasons
    )


@pytest.mark.parametrize(
    "value",
    [
        b'{"op": "c", "after": {"id": 1, "email": ' + b"[" * 100000 + b"]" * 100000 + b"}}",
        b'{"op": "c", "after": {"id": 1, "email": '
        + b'{"a":' * 50000
        + b"1"
        + b"}" * 50000
        + b"}}",
        b'{"op": "c", "after": {"id": 1, "balance": {"scale": 2, "value": '
        + b'{"a":' * 3000
        + b"1"
        + b"}" * 3000
        + b"}}}",
        b'{"op": "c", "after": {"id": 1e999999999999}}',
        b'{"op": "c", "after": {"id": ' + b"9" * 5000 + b"}}",
        b'{"op": "c", "after": {"id": 1, "birthday": -' + b"9" * 400 + b"}}",
        b'{"op": "c", "after": {"id": 1, "created_at": "' + b"9" * 400 + b'"}}',
        b'{"op": "c", "after": {"id": 1, "created_at": 99999999999999999999}}',
        b'{"op": "c", "after": {"id": 1, "balance": {"scale": 99999999999999999999, '
        b'"value": "AQ=="}}}',
        b'{"op": "\xff\xfe", "after": {"id": 1}}',
        b'{"op": "c", "after": {"id": 1, "email": "\xc3"}}',
        b'{"op": "c", "source": {"ts_ms": [1]}, "after": {"id": 1}}',
        b'{"op": "c", "ts_ms": 1e400, "after": {"id": 1}}',
    ],
)
def test_hostile_payloads_reject_their_event_only(value: bytes):
    good = sample(False)
    out = DEC.decode_with_meta(binary([good, value, good]), CUSTOMERS)
    assert out.batch.positions.tolist() == [0, 2]
    assert out.rejects.positions.tolist() == [1] and out.rejects.reasons[0]


def test_an_unexpected_error_rejects_only_the_messages_that_raise(monkeypatch):
    """The last resort: an exception escaping the vectorized decode is isolated by
    bisection to the messages that raise, rejected with the exception class named."""
    from cdc_sink.formats import debezium

    real = debezium._is_null_literal

    def explode(parts: Any) -> Any:
        lengths = parts.lengths[parts.valid]
        if (lengths == 3).any():  # the poisoned message is 3 bytes long
            raise OverflowError("boom")
        return real(parts)

    monkeypatch.setattr(debezium, "_is_null_literal", explode)
    good = sample(False)
    out = DEC.decode_with_meta(binary([good, good, b"{ }", good, good]), CUSTOMERS)
    assert out.batch.positions.tolist() == [0, 1, 3, 4]
    assert out.rejects.as_dict() == {2: "undecodable message (OverflowError: boom)"}
