"""Fuzzing every decoder: no fuzzed message raises, is lost, is counted twice, lets an
out-of-range value in, or changes how its valid neighbours decode.

The oracle and the mutations are in :mod:`tests.formats.fuzz_decoders`; this is the
bounded, deterministic CI run (``derandomize=True``, fixed seeds). The long run is
``benchmarks/fuzz_decoders.py``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import random
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdc_sink.formats import FORMATS as ALL_FORMATS
from cdc_sink.formats import FormatName, get_decoder
from cdc_sink.formats.rowv2 import _GROUP_MIN, encode_event
from tests.formats.fuzz_decoders import (
    PLAIN,
    SCHEMA_VALUES,
    SCHEMAS,
    SEQUENCED,
    WIDE_IDS,
    WRONG_VALUES,
    Case,
    FuzzFailure,
    Stats,
    check,
    ci_settings,
    copy_json,
    dump_json,
    encode_dbz,
    encode_native,
    encode_rowv2,
    fuzz_case,
    json_paths,
    parse_json,
    path_names,
    rowv2_mutations,
    set_at,
    truncations,
    valid_cases,
)

# debezium-avro needs a schema registry: its own tests are tests/formats/test_avro_*.py
FORMATS = tuple(f for f in ALL_FORMATS if f != "debezium-avro")

CI = ci_settings(12)
MUTATIONS_PER_FAMILY = 25

FULL: dict[str, Any] = {
    "op": "insert",
    "set": {
        "name": 'n\u00e9\\"\x00',
        "i8": -128,
        "i16": 32767,
        "i32": -(2**31),
        "i64": 2**63 - 1,
        "f32": -3.4028234663852886e38,
        "f64": 5e-324,
        "flag": True,
        "blob": b"\x00\xff",
        "day": dt.date(9999, 12, 31),
        "at": dt.datetime(1, 1, 1, tzinfo=dt.timezone.utc),
        "amount": decimal.Decimal("-99999999.99"),
        "big": decimal.Decimal("9" * 34 + ".9999"),
        "tiny": decimal.Decimal("0.999"),
        "whole": None,
    },
    "ts_ms": 1_718_000_000_000,
}


def full_event(schema: Any) -> dict[str, Any]:
    """An insert setting every column to an extreme value (keys included)."""
    e = dict(FULL)
    if schema is SEQUENCED:
        e["key"] = {"tenant": -(2**31), "sku": "\u65e5\u672c", "kday": dt.date(1, 1, 1)}
        e["seq"] = -(2**63)
    else:
        e["key"] = {"id": 2**63 - 1}
    return e


def full_cases(fmt: FormatName) -> list[Case]:
    """One case per schema (and Debezium form) holding :func:`full_event` and a delete."""
    cases = []
    for schema in SCHEMAS:
        e = full_event(schema)
        delete = {**e, "op": "delete", "set": {}}
        if fmt == "json":
            cases.append(
                Case(
                    fmt,
                    schema,
                    get_decoder(fmt),
                    [encode_native(e, schema), encode_native(delete, schema)],
                )
            )
        elif fmt == "rowv2":
            cases.append(
                Case(
                    fmt,
                    schema,
                    get_decoder(fmt),
                    [encode_rowv2(e, schema), encode_rowv2(delete, schema)],
                )
            )
        else:
            for envelope in (False, True):
                for mode in ("precise", "string"):
                    msgs = [
                        encode_dbz(x, schema, envelope=envelope, decimal_handling=mode)
                        for x in (e, delete)
                    ]
                    cases.append(
                        Case(
                            fmt,
                            schema,
                            get_decoder(fmt, decimal_handling=mode),
                            msgs,
                            {"decimal_handling": mode},
                        )
                    )
    return cases


# --------------------------------------------------------------------------- property
@pytest.mark.parametrize("fmt", FORMATS)
def test_fuzzed_messages_are_rejected_or_decoded_in_range_without_disturbing_neighbours(
    fmt: FormatName,
) -> None:
    stats = Stats()

    @CI
    @given(case=valid_cases(fmt), seed=st.integers(0, 2**32 - 1))
    def run(case: Case, seed: int) -> None:
        fuzz_case(
            case,
            seed,
            MUTATIONS_PER_FAMILY,
            stats=stats,
            rowv2_matrix=fmt == "rowv2" and seed % 2 == 0,
        )

    run()
    assert stats.inputs > 1000
    assert stats.rejected > 0


# --------------------------------------------------------------------------- exhaustive
def small_cases(fmt: FormatName) -> list[Case]:
    """The :func:`full_cases` whose messages are short (no Debezium envelope)."""
    return [c for c in full_cases(fmt) if max(len(m) for m in c.messages) < 1000]


def enveloped_cases() -> list[Case]:
    """Two Debezium cases with the schema envelope (one per decimal mode)."""
    return [
        c
        for c in full_cases("debezium")
        if c.messages[0].startswith(b'{"schema"') and c.schema is not WIDE_IDS
    ][::3]


@pytest.mark.parametrize("fmt", FORMATS)
def test_truncation_at_every_offset(fmt: FormatName) -> None:
    rng = random.Random(0)
    for case in small_cases(fmt):
        fuzzed: list[bytes | None] = []
        for msg in case.messages:
            fuzzed += truncations(msg, rng, limit=10**6)
        check(case, fuzzed)


def test_truncation_of_enveloped_debezium_events() -> None:
    """Every offset in the payload and around the schema/payload boundary, a sample of
    the rest of the (long) schema."""
    rng = random.Random(0)
    for case in enveloped_cases():
        fuzzed: list[bytes | None] = []
        for msg in case.messages:
            cut = msg.index(b'"payload"')
            offsets = set(range(cut - 50, len(msg))) | set(rng.sample(range(cut), 200))
            fuzzed += [msg[:k] for k in sorted(offsets)]
        check(case, fuzzed)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_byte_replaced_by_special_values(fmt: FormatName) -> None:
    specials = (0x00, 0x7F, 0x80, 0xFF, ord('"'), ord("}"), ord("\\"))
    for case in small_cases(fmt)[: 3 if fmt == "rowv2" else 1]:
        msg = case.messages[0]
        fuzzed: list[bytes | None] = []
        for i in range(len(msg)):
            for b in specials if fmt == "rowv2" else specials[i % 2 :: 2]:
                if msg[i] != b:
                    fuzzed.append(msg[:i] + bytes([b]) + msg[i + 1 :])
        check(case, fuzzed)


@pytest.mark.parametrize("fmt", ["json", "debezium"])
def test_every_member_replaced_by_every_hostile_value(fmt: FormatName) -> None:
    """Wrong JSON types, 1e400, 10**40, -10**30, NaN/Infinity, edge dates, bad base64,
    lone surrogates, 10k-level nesting: at every member of the event, and at every 10th
    node of an envelope schema (deep nests only near the top, to keep the batch small).
    """
    cases = small_cases(fmt)[:3] + (enveloped_cases() if fmt == "debezium" else [])
    for case in cases:
        doc = parse_json(case.messages[0])
        fuzzed: list[bytes | None] = []
        for k, path in enumerate(json_paths(doc)[1:]):
            in_schema = path_names(doc, path)[:1] == ["schema"]
            if in_schema and k % 10:
                continue  # every 10th node of the (long) envelope schema
            for v in SCHEMA_VALUES + WRONG_VALUES[:6] if in_schema else WRONG_VALUES:
                if len(str(v)) > 1000 and len(path) > (4 if in_schema else 2):
                    continue
                fuzzed.append(
                    dump_json(set_at(copy_json(doc), path, copy_json(v))).encode(
                        "utf-8", "surrogatepass"
                    )
                )
        check(case, fuzzed)


def test_rowv2_header_fields() -> None:
    rng = random.Random(1)
    for case in full_cases("rowv2"):
        fuzzed: list[bytes | None] = []
        for msg in case.messages:
            fuzzed += rowv2_mutations(msg, rng, 300)
        check(case, fuzzed)
        check(case, fuzzed, repeat_valid=_GROUP_MIN)  # the matrix path too


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(
    "message",
    [
        None,
        b"",
        b"\x00",
        b"null",
        b" ",
        b"{}",
        b"[]",
        b"\xff\xfe",
        b"\x00" * 64,
        b"{" * 10_000,
        b"[" * 10_000 + b"]" * 10_000,
        b'"\\',
    ],
)
def test_degenerate_messages(fmt: FormatName, message: bytes | None) -> None:
    for case in small_cases(fmt)[:2] + (enveloped_cases() if fmt == "debezium" else []):
        check(case, [message])


# --------------------------------------------------------------------------- regressions
def test_the_oracle_catches_a_decoder_that_corrupts_neighbours(monkeypatch: Any) -> None:
    """The harness itself: a decoder that mixes up its neighbours' ops is reported."""
    case = full_cases("rowv2")[0]
    real = case.decoder.decode_with_meta

    def corrupting(values: pa.Array, schema: Any, **kw: Any) -> Any:
        d = real(values, schema, **kw)
        if len(values) > 2 * len(case.messages):
            d.batch.op = np.roll(d.batch.op, 1)
        return d

    monkeypatch.setattr(case.decoder, "decode_with_meta", corrupting)
    with pytest.raises(FuzzFailure, match="ops differ"):
        check(case, [b"", b"x"])


def test_rowv2_string_values_of_rows_of_several_frequent_layouts() -> None:
    """Regression: with every row setting a string column, rows grouped by layout came
    back in layout order, so strings were written to other rows' keys (``scatter`` took
    a permutation starting at 0 and ending at n-1 for the identity)."""
    rows = []
    for i in range(2 * _GROUP_MIN + 10):
        key = {"tenant": i, "sku": f"s{i}", "kday": 0}
        sets = {"name": f"n{i}"} if i % 2 else {"name": f"n{i}", "i8": 1}
        rows.append(encode_event({"op": "upsert", "key": key, "set": sets, "seq": i}, SEQUENCED))
    batch, rejects = get_decoder("rowv2").decode(pa.array(rows, pa.binary()), SEQUENCED)
    assert len(rejects) == 0
    n = len(rows)
    assert batch.keys[0].to_pylist() == list(range(n))
    assert batch.keys[1].to_pylist() == [f"s{i}" for i in range(n)]
    name = SEQUENCED.column("name").id
    assert batch.values[name].to_pylist() == [f"n{i}" for i in range(n)]


@pytest.mark.parametrize("schema", [PLAIN, WIDE_IDS])
def test_full_events_decode_alone(schema: Any) -> None:
    """The exhaustive tests' valid messages decode without a reject in every format."""
    for fmt in FORMATS:
        for case in full_cases(fmt):
            if case.schema is schema:
                d = case.decoder.decode_with_meta(pa.array(case.messages, pa.binary()), case.schema)
                assert len(d.rejects) == 0, (fmt, d.rejects.reasons)
                assert len(d.batch) == 2


@pytest.mark.parametrize("fmt", ["json", "debezium"])
def test_invalid_utf8_in_an_ignored_member_is_rejected(fmt: FormatName) -> None:
    """Regression (found by the differential check of accepted JSON): Arrow's parser
    skips the bytes of members the decoder ignores, so invalid UTF-8 there was accepted
    although the message is not JSON."""
    case = small_cases(fmt)[0]
    good = case.messages[0]
    at = good.index(b'"op"')
    bad_name = good[:at] + b'"ig\x80nored": 1, ' + good[at:]
    bad_value = good[:at] + b'"ignored": "\xc3(", ' + good[at:]
    d = case.decoder.decode_with_meta(
        pa.array([good, bad_name, bad_value], pa.binary()), case.schema
    )
    assert d.batch.positions.tolist() == [0]
    assert d.rejects.positions.tolist() == [1, 2]
    assert all("UTF-8" in r for r in d.rejects.reasons)
    check(case, [bad_name, bad_value])
