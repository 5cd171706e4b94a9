"""The native JSON format: exact presence, every type, malformed events as rejects."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_sink.formats import TS_MISSING, get_decoder
from cdc_sink.formats.native_json import JsonDecoder, encode_json
from cdc_sink.schema import TableSchema
from tests.formats.support import (
    ALL_TYPES,
    COMPOSITE,
    SEQ,
    UTC,
    assert_same_batch,
    assert_same_rejects,
    binary,
    expected,
    full_row_events,
)
from tests.strategies import events as event_lists
from tests.strategies import key_pool, schemas

DEC = JsonDecoder()


def decode(values: list[bytes | None], schema: TableSchema = ALL_TYPES, **kw: Any):
    return DEC.decode(binary(values), schema, **kw)


def raw(text: str) -> bytes:
    return text.encode("utf-8")


def values_of(batch: Any, name: str) -> tuple[list[Any], list[bool]]:
    c = batch.schema.column(name).id
    n = len(batch)
    return (
        batch.values[c].to_pylist() if c in batch.values else [None] * n,
        batch.present.get(c, np.zeros(n, bool)).tolist(),
    )


GOOD = raw('{"op": "upsert", "key": {"id": 1}, "set": {"i32": 5}}')


def one_bad(value: bytes | None, schema: TableSchema = ALL_TYPES, **kw: Any) -> str:
    """Decodes [good, value, good]: the middle one must be the only reject."""
    dec = JsonDecoder(**kw)
    batch, rejects = dec.decode(
        binary([GOOD, value, GOOD]), schema, position=np.array([100, 101, 102])
    )
    assert batch.positions.tolist() == [100, 102]
    assert rejects.positions.tolist() == [101], rejects.reasons
    return rejects.reasons[0]


# --------------------------------------------------------------------------- round trips
def test_every_type_op_null_and_absent_column_round_trips():
    events = full_row_events()
    batch, rejects = decode([encode_json(e) for e in events])
    want, want_rejects = expected(events, ALL_TYPES)
    assert len(rejects) == 0 and len(want_rejects) == 0
    assert_same_batch(batch, want)


def test_null_sets_the_column_and_a_missing_member_leaves_it_absent():
    batch, rejects = decode(
        [
            raw('{"op":"upsert","key":{"id":1},"set":{"i8":null}}'),
            raw('{"op":"upsert","key":{"id":2},"set":{"i16":7}}'),
            raw('{"op":"upsert","key":{"id":3}}'),
            raw('{"op":"upsert","key":{"id":4},"set":null}'),
        ]
    )
    assert len(rejects) == 0
    assert values_of(batch, "i8") == ([None, None, None, None], [True, False, False, False])
    assert values_of(batch, "i16")[1] == [False, True, False, False]


def test_presence_ignores_column_names_inside_strings_and_other_objects():
    text = (
        '{"op": "upsert", "meta": {"i8": null, "set": {"i16": 1}}, "key": {"id": 1},'
        ' "set": {"name": "\\"i8\\": null, \\"i16\\": 3", "f64": null},'
        ' "note": "\\"set\\": {\\"i32\\": null}"}'
    )
    assert json.loads(text)["set"]["name"] == '"i8": null, "i16": 3'
    batch, rejects = decode([raw(text)])
    assert len(rejects) == 0
    assert values_of(batch, "name") == (['"i8": null, "i16": 3'], [True])
    assert values_of(batch, "f64") == ([None], [True])
    for name in ("i8", "i16", "i32"):
        assert values_of(batch, name)[1] == [False]


def test_member_names_with_escapes_and_pretty_printed_events_decode():
    pretty = json.dumps(
        {"op": "update", "key": {"id": 5}, "set": {"i32": 1, "i8": None}}, indent=2
    ).encode()
    escaped = raw('{"\\u006fp":"upsert","key":{"id":6},"s\\u0065t":{"i\\u0033\\u0032":2}}')
    batch, rejects = decode([pretty, escaped])
    assert len(rejects) == 0
    assert values_of(batch, "i32") == ([1, 2], [True, True])
    assert values_of(batch, "i8")[1] == [True, False]


def test_string_escapes_are_decoded():
    s = 'quote " backslash \\ slash / tab \t nl \n unicode é \u2603 \U0001f600 nul \x00'
    batch, rejects = decode(
        [
            encode_json({"op": "upsert", "key": 1, "set": {"name": s}}),
            raw('{"op":"upsert","key":2,"set":{"name":"\\ud83d\\ude00\\/"}}'),
        ]
    )
    assert len(rejects) == 0
    assert values_of(batch, "name")[0] == [s, "\U0001f600/"]


def test_values_accept_their_alternative_json_forms():
    batch, rejects = decode(
        [
            raw(
                '{"op":"upsert","key":{"id":1},"set":{"day":19000,"at":1700000000000000,'
                '"amount":12.5,"big":"-1e3","f64":3,"f32":1e3}}'
            ),
            raw(
                '{"op":"upsert","key":{"id":2},"set":{"day":"2024-02-29","at":"2024-01-01T10:00:00+02:00",'
                '"amount":"7","f64":NaN}}'
            ),
            raw(
                '{"op":"upsert","key":{"id":3},'
                '"set":{"at":"2024-01-01 10:00:00.5","f64":-Infinity}}'
            ),
        ]
    )
    assert len(rejects) == 0, rejects.reasons
    assert values_of(batch, "day")[0][:2] == [
        dt.date(1970, 1, 1) + dt.timedelta(days=19000),
        dt.date(2024, 2, 29),
    ]
    assert values_of(batch, "at")[0] == [
        dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC),
        dt.datetime(2024, 1, 1, 8, 0, tzinfo=UTC),
        dt.datetime(2024, 1, 1, 10, 0, 0, 500000, tzinfo=UTC),
    ]
    assert values_of(batch, "amount")[0][:2] == [decimal.Decimal("12.50"), decimal.Decimal("7.00")]
    assert values_of(batch, "big")[0][0] == decimal.Decimal("-1000.0000")
    f64 = values_of(batch, "f64")[0]
    assert f64[0] == 3.0 and np.isnan(f64[1]) and f64[2] == -np.inf


def test_composite_key_and_scalar_key_of_a_one_column_key():
    events = [
        {"op": "upsert", "key": {"tenant": 1, "sku": "a", "day": "2024-01-01"}, "set": {"qty": 2}},
        {"op": "delete", "key": {"day": dt.date(2024, 1, 2), "tenant": 2, "sku": "é"}},
    ]
    batch, rejects = decode([encode_json(e) for e in events], COMPOSITE)
    assert len(rejects) == 0
    assert_same_batch(batch, expected(events, COMPOSITE)[0])
    batch, rejects = decode([raw('{"op": "delete", "key": 42}')])
    assert len(rejects) == 0 and batch.keys[0].to_pylist() == [42]


def test_seq_comes_from_seq_or_from_the_sequence_column_in_set():
    batch, rejects = decode(
        [
            raw('{"op":"upsert","key":{"id":1},"set":{"v":"a"},"seq":5}'),
            raw('{"op":"upsert","key":{"id":1},"set":{"v":"b","seq":6}}'),
            raw('{"op":"delete","key":{"id":1},"seq":7}'),
            raw('{"op":"upsert","key":{"id":2},"set":{"v":"c"}}'),
            raw('{"op":"upsert","key":{"id":2},"set":{"seq":8},"seq":9}'),
            raw('{"op":"upsert","key":{"id":2},"seq":"9"}'),
        ],
        SEQ,
    )
    assert batch.seq is not None and batch.seq.tolist() == [5, 6, 7]
    assert rejects.positions.tolist() == [3, 4, 5]
    assert rejects.reasons[0] == "seq is missing"
    assert "differs from seq" in rejects.reasons[1]
    assert rejects.reasons[2] == 'seq "9" is not a 64-bit integer'


def test_ts_ms_is_exposed_with_the_batch():
    out = DEC.decode_with_meta(
        binary(
            [
                raw('{"op":"upsert","key":{"id":1},"set":{"i8":1},"ts_ms":1700000000123}'),
                raw('{"op":"upsert","key":{"id":1},"set":{"i8":"x"},"ts_ms":5}'),
                raw('{"op":"upsert","key":{"id":2},"set":{"i8":2}}'),
            ]
        ),
        ALL_TYPES,
    )
    assert out.ts_ms is not None
    assert out.ts_ms.tolist() == [1700000000123, TS_MISSING]
    assert len(out.rejects) == 1
    assert DEC.decode_with_meta(binary([GOOD]), ALL_TYPES).ts_ms is None


def test_delete_ignores_its_set_entirely():
    batch, rejects = decode(
        [
            raw('{"op":"delete","key":{"id":1},"set":{"bogus":1,"i8":"x"}}'),
            raw('{"op":"delete","key":{"id":2},"set":7}'),
        ]
    )
    assert len(rejects) == 0 and len(batch) == 2


def test_unknown_top_level_members_are_ignored():
    batch, rejects = decode(
        [
            raw(
                '{"op":"upsert","key":{"id":1},"set":{"i8":1},'
                '"source":{"db":"x","set":{"zz":1}},"tags":[1,{"a":null}]}'
            )
        ]
    )
    assert len(rejects) == 0 and len(batch) == 1


def test_string_input_and_get_decoder():
    assert isinstance(get_decoder("json"), JsonDecoder)
    batch, rejects = DEC.decode(pa.array([GOOD.decode()]), ALL_TYPES)
    assert len(batch) == 1 and len(rejects) == 0


# --------------------------------------------------------------------------- malformed events
@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "null message value"),
        (b"", "empty message value"),
        (b"   ", "not a JSON object"),
        (b"42", "not a JSON object"),
        (b'"text"', "not a JSON object"),
        (b"[1, 2]", "not a single JSON object"),
        (b'{"op": "upsert", "key": {"id": 1}', "not a single JSON object"),
        (b'{"op": "upsert"}{"key": 1}', "not a single JSON object"),
        (b'{"op": "upsert", "key": {"id": 1}} x', "not a single JSON object"),
        (b'{"op": "upsert", "key": {"id": "1}}', "unterminated string"),
        (b'{"op": "upsert", "key": {"id": 1}, "set": {"name": "a\nb"}}', "raw line break"),
        (b'{"op": "upsert" "key": {"id": 1}}', "invalid JSON"),
        (b'{"op": "upsert", "key": {"id": 1}, "x": tru}', "invalid JSON"),
        (b'{"op": "upsert", "key": {"id": 1}, "set": {"i8": tru}}', "column 'i8': tru is not"),
        (b'{"op": "upsert", "key": {"id": 1}, "x": [1,,2]}', "invalid JSON"),
        (b'{"op": "upsert", "key": {"id": 1}, "set": {"name": "\\q"}}', "is not a valid string"),
        (b'{"op": "upsert", "key": {"id": 1}, "x": "\\q"}', "invalid JSON"),
        (b'{"op": "merge", "key": {"id": 1}}', 'unknown op "merge"'),
        (b'{"op": 1, "key": {"id": 1}}', "unknown op 1"),
        (b'{"key": {"id": 1}}', "unknown op None"),
        (b'{"op": "upsert"}', "event has no 'key' object"),
        (b'{"op": "upsert", "key": null}', "event has no 'key' object"),
        (b'{"op": "upsert", "key": {"id": null}}', "key column 'id' is missing or null"),
        (b'{"op": "upsert", "key": {"id": 1, "x": 2}}', "unknown key column 'x'"),
        (b'{"op": "upsert", "key": {"id": 1}, "set": [1]}', "'set' is not an object"),
        (b'{"op": "upsert", "key": {"id": 1}, "set": {"nope": 1}}', "unknown column 'nope'"),
        (b'{"op": "upsert", "key": {"id": 1}, "set": {"id": 2}}', "key column 'id' inside 'set'"),
        (b'{"op": "upsert", "op": "upsert", "key": {"id": 1}}', "duplicate member 'op'"),
        (b'{"op": "upsert", "key": {"id": 1}, "set": {"i8": 1, "i8": 2}}', "duplicate column 'i8'"),
        (
            b'{"op": "upsert", "key": {"id": 1}, "set": {"i8": 128}}',
            "column 'i8': value out of range of int8: 128",
        ),
        (b'{"op": "upsert", "key": {"id": 1}, "set": {"i64": 1.0}}', "is not a valid int64"),
        (
            b'{"op": "upsert", "key": {"id": 1}, "set": {"i64": 9223372036854775808}}',
            "value out of range of int64: 9223372036854775808",
        ),
        (b'{"op": "upsert", "key": {"id": 1}, "set": {"i32": "5"}}', "is not a valid int32"),
        (b'{"op": "upsert", "key": {"id": 1}, "set": {"f64": "1.5"}}', "is not a valid float64"),
        (
            b'{"op": "upsert", "key": {"id": 1}, "set": {"f32": 1e300}}',
            "value out of range of float32: 1e300",
        ),
        (b'{"op": "upsert", "key": {"id": 1}, "set": {"flag": 1}}', "is not a valid bool"),
        (b'{"op": "upsert", "key": {"id": 1}, "set": {"name": 5}}', "is not a valid string"),
        (b'{"op": "upsert", "key": {"id": 1}, "set": {"name": "\xff"}}', "is not a valid string"),
        (b'{"op": "upsert", "key": {"id": 1}, "set": {"blob": "abc"}}', "is not a valid binary"),
        (b'{"op": "upsert", "key": {"id": 1}, "set": {"blob": "ab=c"}}', "is not a valid binary"),
        (b'{"op": "upsert", "key": {"id": 1}, "set": {"day": "2024-02-30"}}', "valid date32"),
        (b'{"op": "upsert", "key": {"id": 1}, "set": {"at": "yesterday"}}', "valid timestamp"),
        (b'{"op": "upsert", "key": {"id": 1}, "set": {"amount": "1.234"}}', "valid decimal128"),
        (
            b'{"op": "upsert", "key": {"id": 1}, "set": {"amount": 123456789012}}',
            "value out of range of decimal128(10, 2) (at most 10 digits, 2 after the point): "
            "123456789012",
        ),
        (b'{"op": "upsert", "key": {"id": 1}, "set": {"i8": {"v": 1}}}', "is not a valid int8"),
        (
            b'{"op": "upsert", "key": {"id": 1}, "set": {"i8": 1}, "ts_ms": "now"}',
            'ts_ms "now" is not an integer',
        ),
        (
            b'{"op": "upsert", "key": {"id": 1}, "set": {"name": null}}',
            "null in non-nullable column 'name'",
        ),
        (
            b'{"op": "insert", "key": {"id": 1}, "set": {"i8": 1}}',
            "insert does not set non-nullable column 'name'",
        ),
    ],
)
def test_malformed_event_is_rejected_with_its_position_and_reason(value: bytes | None, reason: str):
    assert reason in one_bad(value)


def test_structural_errors_are_rejected_without_the_grammar_check():
    assert "not a single JSON object" in one_bad(b'{"op": "upsert"', strict=False)
    assert "unterminated string" in one_bad(b'{"op": "upsert}', strict=False)


def test_a_batch_with_many_bad_events_keeps_every_good_one():
    values = []
    for i in range(200):
        if i % 3 == 0:
            values.append(raw(f'{{"op": "upsert", "key": {{"id": {i}}}, "set": {{"i32": {i}}}}}'))
        elif i % 3 == 1:
            values.append(raw(f'{{"op": "upsert", "key": {{"id": {i}}} "set": {{}}}}'))
        else:
            values.append(raw(f'{{"op": "upsert", "key": {{"id": {i}}}, "set": {{"i8": "x"}}}}'))
    batch, rejects = decode(values)
    assert batch.keys[0].to_pylist() == list(range(0, 200, 3))
    assert len(rejects) == 200 - len(batch)


# --------------------------------------------------------------------------- property
@st.composite
def schema_and_events(draw: st.DrawFn) -> tuple[TableSchema, list[dict[str, Any]]]:
    schema = draw(schemas())
    return schema, draw(event_lists(schema, draw(key_pool(schema))))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema_and_events(), st.booleans())
def test_decode_of_encoded_events_equals_from_events(case: tuple[TableSchema, list[Any]], ts: bool):
    schema, events = case
    if ts:
        events = [dict(e, ts_ms=i) for i, e in enumerate(events)]
    batch, rejects = decode([encode_json(e) for e in events], schema)
    want, want_rejects = expected(events, schema)
    assert_same_rejects(rejects, want_rejects)
    assert_same_batch(batch, want)


# --------------------------------------------------------------------------- differential fuzz
def _mutations(seed: int, count: int) -> list[bytes]:
    rnd = np.random.default_rng(seed)
    base = [
        encode_json(e)
        for e in [
            {
                "op": "upsert",
                "key": {"id": 1},
                "set": {
                    "name": 'a:b,{c}[d]"e\\',
                    "i8": None,
                    "i64": -5,
                    "flag": True,
                    "amount": "1.5",
                },
            },
            {
                "op": "update",
                "key": {"id": 2},
                "set": {"i32": 7, "i16": -300},
                "x": [1, {"set": {"i8": 1}}],
            },
            {"op": "delete", "key": {"id": 3}, "set": None},
        ]
    ]
    alphabet = np.frombuffer(b'{}[]:,"\\ \nnul0123456789.eE-truefalse', np.uint8)
    out = []
    for _ in range(count):
        b = bytearray(base[int(rnd.integers(len(base)))])
        for _ in range(int(rnd.integers(1, 4))):
            i = int(rnd.integers(len(b)))
            k = rnd.random()
            if k < 0.35:
                del b[i]
            elif k < 0.7:
                b.insert(i, int(rnd.choice(alphabet)))
            else:
                b[i] = int(rnd.choice(alphabet))
        out.append(bytes(b))
    return out


def _strict_object(value: bytes) -> Any:
    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        if len({k for k, _ in pairs}) != len(pairs):
            raise ValueError("duplicate member")
        return dict(pairs)

    try:
        return json.loads(value, object_pairs_hook=no_duplicates)
    except (ValueError, RecursionError):
        return None


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_mutated_events_decode_exactly_like_python_json_and_from_events(seed: int):
    values = _mutations(seed, 1500)
    batch, rejects = decode(values)
    refused = rejects.as_dict()
    at = {p: i for i, p in enumerate(batch.positions.tolist())}
    for i, v in enumerate(values):
        obj = _strict_object(v)
        if not isinstance(obj, dict):
            assert i in refused, v  # not one JSON object: refused
            continue
        want, want_rejects = expected([obj], ALL_TYPES)
        if len(want_rejects):
            assert i in refused, (v, want_rejects.reasons)
            continue
        assert i not in refused, (v, refused.get(i))
        got = batch.take(np.array([at[i]]))
        got.position = np.array([0])
        assert_same_batch(got, want)


# --------------------------------------------------------------------------- hostile input
@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (
            b'{"op": "upsert", "key": {"id": 1}, "set": {"name": '
            + b"[" * 100000
            + b"]" * 100000
            + b"}}",
            "nested deeper than 16 levels",  # the scan's budget (issue 38)
        ),
        (
            b'{"op": "upsert", "key": {"id": 1}, "set": {"name": '
            + b'{"a":' * 50000
            + b"1"
            + b"}" * 50000
            + b"}}",
            "nested deeper than 16 levels",
        ),
        (b'{"op": "upsert", "key": {"id": ' + b"9" * 5000 + b"}}", "value out of range of int64"),
        (
            b'{"op": "upsert", "key": {"id": 1}, "set": {"f64": 1' + b"0" * 400 + b"}}",
            "value out of range of float64",
        ),
        (
            b'{"op": "upsert", "key": {"id": 1}, "set": {"f64": -1e309}}',
            "value out of range of float64",
        ),
        (
            b'{"op": "upsert", "key": {"id": 1}, "set": {"big": '
            b'"99999999999999999999999999999999999.9999"}}',
            "value out of range of decimal128(38, 4)",
        ),
        (
            b'{"op": "upsert", "key": {"id": 1}, "set": {"big": -9' + b"9" * 80 + b"}}",
            "column 'big'",
        ),
        (b'{"op": "upsert", "key": {"id": 1}, "set": {"day": "0000-12-31"}}', "column 'day'"),
        (b'{"op": "upsert", "key": {"id": 1}, "set": {"day": -719163}}', "0001-01-01..9999-12-31"),
        (
            b'{"op": "upsert", "key": {"id": 1}, "set": {"at": 253402300800000000}}',
            "0001-01-01..9999-12-31",
        ),
        (
            b'{"op": "upsert", "key": {"id": 1}, "set": {"at": "10000-01-01T00:00:00Z"}}',
            "column 'at'",
        ),
        (b'{"op": "upsert", "key": {"id": 1}, "set": {"f64": "NaN"}}', "column 'f64'"),
    ],
)
def test_hostile_values_reject_their_event_only(value: bytes, reason: str):
    assert reason in one_bad(value)


def test_nanosecond_iso_timestamps_are_floored_to_microseconds():
    values = binary(
        [
            b'{"op": "upsert", "key": {"id": 1}, "set": {"at": "2024-02-29T23:59:59.999999999Z"}}',
            b'{"op": "upsert", "key": {"id": 2}, "set": {"at": '
            b'"1969-12-31T23:59:59.0000001+00:00"}}',
        ]
    )
    batch, rejects = DEC.decode(values, ALL_TYPES)
    assert len(rejects) == 0, rejects.reasons
    at = batch.values[ALL_TYPES.column("at").id].to_pylist()
    assert at == [
        dt.datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=UTC),
        dt.datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC),
    ]


def test_truncate_names_no_key():
    values = binary(
        [
            b'{"op": "upsert", "key": {"id": 1}, "set": {"name": "a"}}',
            b'{"op": "truncate"}',
            b'{"op": "truncate", "key": {"nope": 1}, "set": 5, "seq": "x"}',
        ]
    )
    batch, rejects = JsonDecoder(allow_truncate=True).decode(values, ALL_TYPES)
    assert len(rejects) == 0, rejects.reasons
    assert batch.op.tolist() == [1, 4, 4]


def test_an_unexpected_error_rejects_only_the_messages_that_raise(monkeypatch):
    from cdc_sink.formats import native_json

    real = native_json.scan

    def explode(parts: Any, active: Any, max_level: int, **kw: Any) -> Any:
        if (parts.lengths[active] == 3).any():
            raise RecursionError("deep")
        return real(parts, active, max_level, **kw)

    monkeypatch.setattr(native_json, "scan", explode)
    good = b'{"op": "upsert", "key": {"id": 1}, "set": {"name": "a"}}'
    batch, rejects = DEC.decode(binary([good, b"{ }", good]), ALL_TYPES)
    assert batch.positions.tolist() == [0, 2]
    assert rejects.as_dict() == {1: "undecodable message (RecursionError: deep)"}


def test_options_are_checked():
    from cdc_sink.errors import InvalidOption

    with pytest.raises(InvalidOption, match="strict"):
        get_decoder("json", strict="no")
    with pytest.raises(InvalidOption, match="decimal_handling"):
        get_decoder("json", decimal_handling="string")
