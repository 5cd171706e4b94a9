"""The compiled pass over flat native JSON events (``cdc_sink/formats/_cflat.c``) against
the general decoder.

The pass is trusted for one thing: an event it accepts decodes to exactly what the
general path (structural index, per-column conversions, Arrow's grammar check) gives it;
every other event is decoded the general way. So each test decodes the same messages
with and without the pass and asserts the same batch (ops, keys, values, presence, seq,
positions), the same rejects with the same reasons, and the same ``ts_ms``, while
counting that the pass really accepted and really declined events (the checks are not
vacuous). Messages: valid events of every op over schemas of every type the pass decodes
(with and without a sequence column, one-column and composite keys), every mutation of
the decoder fuzz tests, hand-written edge cases, and random numbers and strings.
"""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdc_sink.formats import _jsonflat, get_decoder
from cdc_sink.formats._arrays import binary_parts
from cdc_sink.formats._base import Decoded
from cdc_sink.formats.native_json import json_value
from cdc_sink.schema import TableSchema
from tests.formats.fuzz_decoders import (
    ID_KEY,
    TENANT_SKU_KEY,
    ci_settings,
    events,
    keyed_schema,
    mutations,
)
from tests.formats.support import ALL_TYPE_COLUMNS

SETTINGS = ci_settings(25)

_FLAT_TYPES = ("int8", "int16", "int32", "int64", "float32", "float64", "bool", "string")
_FLAT_VALUES: list[dict[str, Any]] = [
    *(c for c in ALL_TYPE_COLUMNS if c["type"] in _FLAT_TYPES),  # "name": a required string
    {"name": "s", "type": "string"},
]
ONE_KEY = keyed_schema(
    ID_KEY,
    [*_FLAT_VALUES, {"name": "day", "type": "date32"}],  # a date: the general way
)
"""Flat value columns and a date, an int64 key, no sequence column."""
COMPOSITE = keyed_schema(TENANT_SKU_KEY, _FLAT_VALUES, sequenced=True)
"""Flat value columns, a composite key of int32 and string, a sequence column."""
SCHEMAS = (ONE_KEY, COMPOSITE)


class Tally:
    """Events the pass accepted and declined, over a whole test."""

    def __init__(self) -> None:
        self.accepted = self.declined = 0


def _accepted(values: pa.BinaryArray, schema: TableSchema) -> np.ndarray:
    parts = binary_parts(values)
    plan = _jsonflat._plan(schema)
    assert plan is not None
    return _jsonflat._compiled(parts, plan, schema)[1]


def _same(got: Decoded, want: Decoded) -> None:
    g_table, w_table = got.batch.to_arrow(), want.batch.to_arrow()
    assert g_table.schema == w_table.schema
    for name in w_table.column_names:
        g, w = g_table[name], w_table[name]
        if pa.types.is_floating(w.type):  # bit for bit: -0.0 and 0.0 differ, NaN = NaN
            assert g.is_null().equals(w.is_null()), name
            gb = np.asarray(g.fill_null(0).to_numpy()).view(np.uint8)
            wb = np.asarray(w.fill_null(0).to_numpy()).view(np.uint8)
            assert gb.tolist() == wb.tolist(), name
        else:
            assert g.equals(w), name
    assert got.rejects.positions.tolist() == want.rejects.positions.tolist()
    assert got.rejects.reasons == want.rejects.reasons
    assert (got.ts_ms is None) == (want.ts_ms is None)
    if got.ts_ms is not None and want.ts_ms is not None:
        assert got.ts_ms.tolist() == want.ts_ms.tolist()


def decode_both(
    msgs: list[bytes], schema: TableSchema, monkeypatch: Any, tally: Tally | None = None, **kw: Any
) -> Decoded:
    """Decodes ``msgs`` with and without the pass, asserts the same result, returns it."""
    values = pa.array(msgs, pa.binary())
    decoder = get_decoder("json", **kw)
    fast = decoder.decode_with_meta(values, schema)
    with monkeypatch.context() as m:
        m.setattr(_jsonflat, "_cflat", None)
        slow = decoder.decode_with_meta(values, schema)
    _same(fast, slow)
    if tally is not None:
        ok = _accepted(values, schema)
        tally.accepted += int(ok.sum())
        tally.declined += int((~ok).sum())
    return fast


def test_the_flat_pass_is_built() -> None:
    """The dev install builds it; without it every event takes the general path."""
    assert _jsonflat._cflat is not None


@pytest.mark.parametrize("share", [_jsonflat.MAX_GENERAL_SHARE, 1.0])
def test_valid_and_mutated_events_decode_as_the_general_path(
    share: float, monkeypatch: Any
) -> None:
    """Valid events and every mutation family of the fuzz tests; with ``share=1.0`` the
    declined events of a run are always decoded apart and merged back (never the whole
    run the general way)."""
    monkeypatch.setattr(_jsonflat, "MAX_GENERAL_SHARE", share)
    tally = Tally()

    @SETTINGS
    @given(
        schema=st.sampled_from(SCHEMAS),
        data=st.data(),
        seed=st.integers(0, 2**32),
        strict=st.booleans(),
    )
    def run(schema: TableSchema, data: st.DataObject, seed: int, strict: bool) -> None:
        evs = data.draw(events(schema, max_size=8))
        ascii_ = data.draw(st.booleans())
        msgs = [json.dumps(json_value(e), ensure_ascii=ascii_).encode() for e in evs]
        decode_both(msgs, schema, monkeypatch, tally, strict=strict)
        rng = random.Random(seed)
        fuzzed = msgs + [m for msg in msgs for m in mutations("json", msg, rng, 6)]
        rng.shuffle(fuzzed)
        decode_both(fuzzed, schema, monkeypatch, tally, strict=strict)

    run()
    assert tally.accepted > 100 and tally.declined > 100, vars(tally)


ACCEPTED = [
    b'{"op":"upsert","key":{"id":1},"set":{"i8":-128,"i16":32767,"s":"caf\xc3\xa9"}}',
    b' {\t"key" : 7 , "op":"insert" ,"set":{"f64":-0.0,"f32":1.5e3,"flag":true}}\r\n',
    b'{"op":"update","key":{"id":-0},"set":{"f64":1e22,"i64":-9223372036854775808}}',
    b'{"op":"update","key":{"id":9223372036854775807},"set":{"i64":1234567890123456789}}',
    b'{"op":"delete","key":{"id":3},"set":{"i8":5}}',  # a delete's set is ignored
    b'{"op":"upsert","key":{"id":4},"set":null,"ts_ms":1718000000000,"seq":5}',
    b'{"op":"upsert","key":{"id":4},"set":false}',
    b'{"op":"upsert","key":{"id":4}}',
    b'{"op":"upsert","key":{"id":5},"set":{"s":null,"i32":null,"flag":false}}',
    b'{"op":"upsert","key":{"id":6},"set":{"f64":0.1,"f32":3.4028234663852886e38}}',
    b'{"op":"upsert","key":{"id":6},"set":{"f64":123456789012345678901234567890}}',
    b'{"op":"upsert","key":{"id":6},"set":{"f64":2.2250738585072014e-308,"s":""}}',
    b'{"op":"upsert","key":{"id":7},"set":{"s":"\xf0\x9f\x99\x82 \xe6\x97\xa5"}}',
]
DECLINED = [
    b'{"op":"upsert","key":{"id":1},"set":{"s":"a\\"b"}}',  # an escape
    b'{"op":"upsert","key":{"id":1},"set":{"day":"2024-01-01"}}',  # a date column
    b'{"op":"upsert","key":{"id":1},"set":{"i8":128}}',  # out of range
    b'{"op":"upsert","key":{"id":1},"set":{"i64":1.0}}',
    b'{"op":"upsert","key":{"id":1},"set":{"i64":9223372036854775808}}',  # 2^63
    b'{"op":"upsert","key":{"id":1},"set":{"i64":-9223372036854775809}}',
    b'{"op":"upsert","key":{"id":1},"set":{"i64":12345678901234567890}}',  # 20 digits
    b'{"op":"upsert","key":{"id":1},"set":{"i64":01}}',
    b'{"op":"upsert","key":{"id":1},"set":{"f64":1e400}}',
    b'{"op":"upsert","key":{"id":1},"set":{"f64":1e-400}}',
    b'{"op":"upsert","key":{"id":1},"set":{"f32":1e39}}',
    b'{"op":"upsert","key":{"id":1},"set":{"f64":NaN}}',
    b'{"op":"upsert","key":{"id":1},"set":{"flag":1}}',
    b'{"op":"upsert","key":{"id":1},"set":{"s":5}}',
    b'{"op":"upsert","key":{"id":1},"set":{"s":"\x01"}}',
    b'{"op":"upsert","key":{"id":1},"set":{"s":"\xff"}}',
    b'{"op":"upsert","key":{"id":1},"set":{"s":"\xed\xa0\x80"}}',
    b'{"op":"upsert","key":{"id":1},"set":{"i8":1,"i8":2}}',  # a repeated column
    b'{"op":"upsert","key":{"id":1},"set":{"id":2}}',  # the key inside set
    b'{"op":"upsert","key":{"id":1},"set":{"nope":2}}',
    b'{"op":"upsert","key":{"id":1},"set":{"i8":[1]}}',
    b'{"op":"upsert","key":{"id":1},"set":true}',
    b'{"op":"upsert","key":{"id":1},"set":{"i8":1,}}',
    b'{"op":"upsert","key":{"id":1},"set":{"i8":1}} x',
    b'{"op":"upsert","key":{"id":1},"op":"upsert"}',
    b'{"op":"upsert","key":{"id":1},"extra":1}',  # other members: the general path
    b'{"op":"truncate"}',
    b'{"op":"merge","key":{"id":1}}',
    b'{"op":"upsert","key":{"id":null}}',
    b'{"op":"upsert","key":{}}',
    b'{"op":"upsert","key":{"id":1,"id":1}}',
    b'{"op":"upsert","key":[1]}',
    b'{"op":"upsert"}',
    b'{"key":{"id":1}}',
    b'{"op":"upsert","key":{"id":1},"seq":1.5}',
    b'{"op":"upsert","key":{"id":1},"ts_ms":null}',
    b'{"op":"upsert","key":{"id":1}',
    b"",
    b"[]",
]


def test_hand_written_events(monkeypatch: Any) -> None:
    msgs = ACCEPTED + DECLINED
    ok = _accepted(pa.array(msgs, pa.binary()), ONE_KEY)
    assert ok[: len(ACCEPTED)].all(), [m for m, o in zip(ACCEPTED, ok, strict=False) if not o]
    assert not ok[len(ACCEPTED) :].any(), [
        m for m, o in zip(DECLINED, ok[len(ACCEPTED) :], strict=True) if o
    ]
    monkeypatch.setattr(_jsonflat, "MAX_GENERAL_SHARE", 1.0)
    decode_both(msgs, ONE_KEY, monkeypatch)
    for msg in msgs:
        decode_both([msg], ONE_KEY, monkeypatch)


def test_a_missing_seq_goes_to_the_general_path(monkeypatch: Any) -> None:
    """With a sequence column, an event without ``seq`` takes it from the sequence column
    it sets, or is refused ("seq is missing") by the general path."""
    msgs = [
        b'{"op":"upsert","key":{"tenant":1,"sku":"a"},"seq":3}',
        b'{"op":"upsert","key":{"tenant":1,"sku":"a"},"set":{"seq":4}}',
        b'{"op":"upsert","key":{"tenant":1,"sku":"a"},"set":{"i8":1}}',
    ]
    got = decode_both(msgs, COMPOSITE, monkeypatch)
    assert got.rejects.positions.tolist() == [2]
    assert got.batch.seq is not None and got.batch.seq.tolist() == [3, 4]


_NUMBER = st.from_regex(r"\A-?(0|[1-9][0-9]{0,25})(\.[0-9]{1,25})?([eE][+-]?[0-9]{1,3})?\Z")


@SETTINGS
@given(
    floats=st.lists(
        st.one_of(
            st.floats(allow_nan=False, allow_infinity=False).map(repr),
            st.floats(allow_nan=False, allow_infinity=False).map(lambda f: f"{f:.17e}"),
            st.floats(allow_nan=False, allow_infinity=False, width=32).map(repr),
            _NUMBER,
        ),
        min_size=1,
        max_size=20,
    )
)
def test_numbers_convert_as_arrow_does(floats: list[str]) -> None:
    """Every JSON number in float64 and float32 columns (Clinger's exact fast path and
    ``strtod_l`` against Arrow's cast), and in integer columns."""
    mp = pytest.MonkeyPatch()
    try:
        msgs = [
            f'{{"op":"upsert","key":{{"id":{i}}},"set":{{"f64":{x},"f32":{x}}}}}'.encode()
            for i, x in enumerate(floats)
        ] + [
            f'{{"op":"upsert","key":{{"id":{i}}},"set":{{"i64":{x},"i8":{x}}}}}'.encode()
            for i, x in enumerate(floats)
        ]
        mp.setattr(_jsonflat, "MAX_GENERAL_SHARE", 1.0)
        decode_both(msgs, ONE_KEY, mp)
    finally:
        mp.undo()


@SETTINGS
@given(texts=st.lists(st.text(max_size=12), min_size=1, max_size=20), ascii_=st.booleans())
def test_strings_decode_as_the_general_path(texts: list[str], ascii_: bool) -> None:
    """Any text, as ``json.dumps`` writes it (escapes and raw UTF-8), in a string key
    and a string column."""
    mp = pytest.MonkeyPatch()
    try:
        msgs = [
            json.dumps(
                {"op": "upsert", "key": {"tenant": i, "sku": t}, "seq": i, "set": {"s": t}},
                ensure_ascii=ascii_,
            ).encode()
            for i, t in enumerate(texts)
        ]
        mp.setattr(_jsonflat, "MAX_GENERAL_SHARE", 1.0)
        decode_both(msgs, COMPOSITE, mp)
    finally:
        mp.undo()


def test_bad_arguments_raise() -> None:
    cflat = _jsonflat._cflat
    data = np.frombuffer(b"abc", np.uint8)
    with pytest.raises(ValueError, match="out of the data's bounds"):
        cflat.strings(data, np.array([2], np.int64), np.array([5], np.int64), np.empty(5, np.uint8))
    with pytest.raises(ValueError, match="sum of the lengths"):
        cflat.strings(data, np.array([0], np.int64), np.array([2], np.int64), np.empty(3, np.uint8))
