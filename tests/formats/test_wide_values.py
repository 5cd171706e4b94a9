"""Values at and beyond the edges of their column types, in every format and decode path.

Each case is one value as a producer writes it and either the exact value the table
stores or a reject whose reason names the column. The decimal cases are the ones that
used to be stored wrong: Arrow's cast of decimal text with more digits than its type
holds wraps around (``2**256 + 5`` became ``5.000``, 256 nines ``-1.000``), so digits
are counted on the text before any cast (``cdc_sink/formats/_decimaltext.py``). The
integer, float, date and timestamp cases pin the rules that already held.

Paths: the decoders with the compiled passes (``_cscan``, ``_cflat``; declined events
decoded apart), without them (numpy), inside an executors decode task
(``cdc_sink.spark._tasks.decoded_batches``, no Spark needed), and ``Table.apply``'s
conversion of Python values (``ChangeBatch.from_events``, with ``json.loads``' values;
decimals parsed as ``Decimal``, as a caller of ``Table.apply`` passes them).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from cdc_sink.batch import ChangeBatch, Rejects
from cdc_sink.formats import _jsonflat, _jsonscan, get_decoder
from cdc_sink.formats._decimaltext import counted, decimal_text
from cdc_sink.formats._rowv2_encode import pack_row
from cdc_sink.formats.value_ranges import MAX_DAY, MAX_MICROS, MIN_DAY, MIN_MICROS
from cdc_sink.schema import TableSchema
from cdc_sink.spark._tasks import decoded_batches
from tests.formats.fuzz_decoders import ci_settings

UTC = dt.timezone.utc
D = decimal.Decimal
FLT_MAX = float(np.finfo(np.float32).max)
DBL_MAX = float(np.finfo(np.float64).max)
FIRST_DAY, LAST_DAY = dt.date(1, 1, 1), dt.date(9999, 12, 31)
FIRST_TS = dt.datetime(1, 1, 1, tzinfo=UTC)
LAST_TS = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)

SCHEMA = TableSchema.from_dict(
    {
        "columns": [
            {"name": "id", "type": "int64"},
            {"name": "i8", "type": "int8"},
            {"name": "i16", "type": "int16"},
            {"name": "i32", "type": "int32"},
            {"name": "i64", "type": "int64"},
            {"name": "f32", "type": "float32"},
            {"name": "f64", "type": "float64"},
            {"name": "day", "type": "date32"},
            {"name": "at", "type": "timestamp[us, UTC]"},
            {"name": "dec", "type": "decimal128(9, 3)"},
            {"name": "wide", "type": "decimal128(38, 0)"},
            {"name": "frac", "type": "decimal128(38, 38)"},
        ],
        "primary_key": ["id"],
    }
)


class _Reject:
    def __repr__(self) -> str:
        return "REJECT"


REJECT: Any = _Reject()
"""The expected outcome of a value that must be rejected (its reason naming the column)."""


@dataclass(frozen=True)
class Case:
    """One value of ``column`` as written (JSON text, or a rowv2 value's bytes), and
    the stored value it must give (or :data:`REJECT`).

    Attributes:
        apply: Whether ``Table.apply`` of ``json.loads``' value must give the same: not
            for a float literal that Python reads as ``inf`` (``1e400``), which is an
            infinity by the time ``Table.apply`` sees it, nor for text Python's
            ``Decimal`` reads more loosely than the decoders (blanks, ``_``).
        options: Decoder options (Debezium).
    """

    column: str
    text: str | bytes
    want: Any
    apply: bool = True
    options: Mapping[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        text = self.text if isinstance(self.text, str) else self.text.hex()
        return f"{self.column}={text[:24]}{'...' if len(text) > 24 else ''}->{self.want}"


def _cases(column: str, rows: list[tuple[Any, ...]]) -> list[Case]:
    return [Case(column, *row) for row in rows]


# ---------------------------------------------------------------------- JSON values
DECIMAL_TEXT = [  # decimal128(9, 3); what wrapped before: 2**256 + 5, 2**128 + 5, 9s
    *_cases(
        "dec",
        [
            (str(2**256 + 5), REJECT),
            (f'"{2**256 + 5}"', REJECT),
            (str(2**128 + 5), REJECT),
            (f'"{2**128 + 5}"', REJECT),
            ("9" * 256, REJECT),
            ("-" + "9" * 256, REJECT),
            (f'"{"9" * 256}"', REJECT),
            ("9" * 77, REJECT),
            ("1e400", REJECT),
            ("-1E400", REJECT),
            ('"1e400"', REJECT),
            ("1E-500", REJECT),
            ("0e-400", D("0.000")),
            ('"0E+400"', D("0.000")),
            ("1.5" + "0" * 300, D("1.500")),
            ('"' + "0" * 300 + '1.5"', D("1.500")),
            ('"1.5' + "0" * 300 + '"', D("1.500")),
            ("0." + "0" * 100 + "1", REJECT),
            ("999999.999", D("999999.999")),
            ("-999999.999", D("-999999.999")),
            ("1000000", REJECT),
            ("-1000000", REJECT),
            ("999999.9995", REJECT),
            ("1.2345", REJECT),
            ("1e5", D("100000.000")),
            ("1e6", REJECT),
            ("12345e-3", D("12.345")),
            ("123456789e-3", D("123456.789")),
            ("1234567890e-3", REJECT),
            ("1000000000e-4", D("100000.000")),
            ('"-.5"', D("-0.500")),
            ('"+1."', D("1.000")),
            ("-0", D("0.000")),
            ('""', REJECT),
            ('"1_0"', REJECT, False),
            ('" 1"', REJECT, False),
            ('"0x10"', REJECT),
            ('"NaN"', REJECT),
            ('"Infinity"', REJECT),
            ('"1e"', REJECT),
            ('"."', REJECT),
            ('"1.2.3"', REJECT),
            ('"1e5e5"', REJECT),
        ],
    ),
    *_cases(
        "wide",  # decimal128(38, 0): the most digits there are
        [
            ("9" * 38, D("9" * 38)),
            ("-" + "9" * 38, D("-" + "9" * 38)),
            ("1" + "0" * 38, REJECT),
            (str(2**127), REJECT),
            (str(-(2**127) - 1), REJECT),
            ("9" * 38 + ".000", D("9" * 38)),
            ("1e37", D("1" + "0" * 37)),
            ("1e38", REJECT),
            ("0.5", REJECT),
        ],
    ),
    *_cases(
        "frac",  # decimal128(38, 38): every digit after the point
        [
            ("0." + "9" * 38, D("0." + "9" * 38)),
            ("-0." + "9" * 38, D("-0." + "9" * 38)),
            ("1e-38", D("1e-38")),
            ("0.5e-37", D("5e-38")),
            ("1e-39", REJECT),
            ("1", REJECT),
            ("0." + "9" * 39, REJECT),
        ],
    ),
]

INTEGERS = [
    *_cases("i8", [("127", 127), ("-128", -128), ("128", REJECT), ("-129", REJECT)]),
    *_cases("i16", [("32767", 32767), ("32768", REJECT), ("-32769", REJECT)]),
    *_cases(
        "i32",
        [(str(2**31 - 1), 2**31 - 1), (str(2**31), REJECT), (str(-(2**31) - 1), REJECT)],
    ),
    *_cases(
        "i64",
        [
            (str(2**63 - 1), 2**63 - 1),
            (str(-(2**63)), -(2**63)),
            (str(2**63), REJECT),
            (str(-(2**63) - 1), REJECT),
            (str(2**64 + 1), REJECT),
            (str(-(2**64) - 1), REJECT),
            ("1" + "0" * 400, REJECT),
            ("-0", 0),
            ("1e2", REJECT),
            ("9223372036854775807.0", REJECT),
        ],
    ),
]

FLOATS = [
    *_cases(
        "f64",
        [
            ("1e400", REJECT, False),
            ("-1e400", REJECT, False),
            ("1.8e308", REJECT, False),
            ("1" + "0" * 400, REJECT),
            (repr(DBL_MAX), DBL_MAX),
            ("1e-500", 0.0),
        ],
    ),
    *_cases(
        "f32",
        [
            (repr(FLT_MAX), FLT_MAX),
            ("3.5e38", REJECT),
            ("-1e39", REJECT),
            ("1e400", REJECT, False),
            ("1" + "0" * 60, REJECT),
            ("1e-50", 0.0),
        ],
    ),
]

TEMPORAL = [
    *_cases(
        "day",
        [
            ('"0001-01-01"', FIRST_DAY),
            ('"9999-12-31"', LAST_DAY),
            ('"0000-12-31"', REJECT),
            ('"10000-01-01"', REJECT),
            (str(MIN_DAY), FIRST_DAY),
            (str(MAX_DAY), LAST_DAY),
            (str(MIN_DAY - 1), REJECT),
            (str(MAX_DAY + 1), REJECT),
            (str(2**31), REJECT),
            (str(2**63), REJECT),
            (str(-(2**64)), REJECT),
        ],
    ),
    *_cases(
        "at",
        [
            ('"0001-01-01T00:00:00Z"', FIRST_TS),
            ('"9999-12-31T23:59:59.999999Z"', LAST_TS),
            ('"9999-12-31T23:59:59.999999-00:01"', REJECT),
            ('"0001-01-01T00:00:00+00:01"', REJECT),
            (str(MIN_MICROS), FIRST_TS),
            (str(MAX_MICROS), LAST_TS),
            (str(MIN_MICROS - 1), REJECT),
            (str(MAX_MICROS + 1), REJECT),
            ("9223372036825200000", REJECT),  # PostgreSQL infinity, as Debezium writes it
            (str(2**63), REJECT),
            (str(-(2**63)), REJECT),
        ],
    ),
]

JSON_CASES = DECIMAL_TEXT + INTEGERS + FLOATS + TEMPORAL


# ---------------------------------------------------------------------- Debezium only
def _b64(unscaled: int, pad: bytes = b"") -> str:
    size = max(1, (unscaled.bit_length() + 8) // 8)
    return base64.b64encode(pad + unscaled.to_bytes(size, "big", signed=True)).decode()


def _vsd(scale: int, unscaled: int) -> str:
    return json.dumps({"scale": scale, "value": _b64(unscaled)})


PRECISE = {"decimal_handling": "precise"}
DEBEZIUM_CASES = [
    *[
        Case("dec", json.dumps(b64), want, options=PRECISE)
        for b64, want in [
            (_b64(999_999_999), D("999999.999")),
            (_b64(-999_999_999), D("-999999.999")),
            (_b64(10**9), REJECT),
            (_b64(-(10**9)), REJECT),
            (_b64(2**127 - 1), REJECT),
            (_b64(2**128 + 5), REJECT),
            (_b64(2**256 + 5), REJECT),
            (_b64(5, b"\x00" * 20), D("0.005")),  # redundant sign bytes
            (_b64(-5, b"\xff" * 20), D("-0.005")),
            (_b64(2**127 - 1, b"\x00" * 4), REJECT),
            (_b64(10**38 - 1), REJECT),
        ]
    ],
    Case("wide", json.dumps(_b64(10**38 - 1)), D(10**38 - 1), options=PRECISE),
    Case("wide", json.dumps(_b64(10**38)), REJECT, options=PRECISE),
    Case("wide", json.dumps(_b64(-(10**38))), REJECT, options=PRECISE),
    *_cases(
        "dec",  # VariableScaleDecimal
        [
            (_vsd(3, 1500), D("1.500")),
            (_vsd(5, 150000), D("1.500")),
            (_vsd(0, 999_999), D("999999.000")),
            (_vsd(5, 150001), REJECT),
            (_vsd(3, 10**9), REJECT),
            (_vsd(0, 2**256 + 5), REJECT),
            (_vsd(39, 1), REJECT),
        ],
    ),
    *[
        Case("at", text, want, options={"timestamp_unit": unit})
        for unit, text, want in [
            ("ms", str(MAX_MICROS // 1000), LAST_TS.replace(microsecond=999000)),
            ("ms", str(MAX_MICROS // 1000 + 1), REJECT),
            ("ms", str(MIN_MICROS // 1000 - 1), REJECT),
            ("ms", str(2**62), REJECT),
            ("ms", str(-(2**63)), REJECT),
            ("ns", str(2**63 - 1), dt.datetime(2262, 4, 11, 23, 47, 16, 854775, tzinfo=UTC)),
            ("ns", str(2**63), REJECT),
        ]
    ],
]

# An envelope with the field's own scale: 5 digits after the point, column scale 3.
ENVELOPE_CASES = [
    Case("dec", json.dumps(_b64(150000)), D("1.500")),
    Case("dec", json.dumps(_b64(150001)), REJECT),
    Case("dec", json.dumps(_b64(10**14)), REJECT),
    Case("dec", json.dumps(_b64(2**256 + 5)), REJECT),
]


def _envelope(column: str, text: str) -> bytes:
    field_schema = {
        "field": column,
        "type": "bytes",
        "name": "org.apache.kafka.connect.data.Decimal",
        "parameters": {"scale": "5"},
    }
    row = {"type": "struct", "fields": [{"field": "id", "type": "int64"}, field_schema]}
    schema = {"type": "struct", "fields": [{"field": "after", **row}]}
    return b'{"schema":%s,"payload":{"op":"c","after":{"id":1,"%s":%s}}}' % (
        json.dumps(schema).encode(),
        column.encode(),
        text.encode(),
    )


# ---------------------------------------------------------------------- rowv2 values
def _le(v: int, width: int) -> bytes:
    return v.to_bytes(width, "little", signed=True)


def _f64(v: float) -> bytes:
    return struct.pack("<d", v)


ROWV2_CASES = [
    *_cases(
        "i8",
        [(_le(127, 1), 127), (_le(128, 2), REJECT), (_le(-129, 8), REJECT), (b"\0" * 3, REJECT)],
    ),
    *_cases("i16", [(_le(32768, 4), REJECT)]),
    *_cases("i32", [(_le(2**31, 8), REJECT), (_le(-(2**31), 4), -(2**31))]),
    *_cases("i64", [(_le(2**63 - 1, 8), 2**63 - 1), (_le(-(2**63), 8), -(2**63))]),
    *_cases("f32", [(_f64(FLT_MAX), FLT_MAX), (_f64(3.5e38), REJECT), (_f64(-1e300), REJECT)]),
    *_cases("f64", [(_f64(DBL_MAX), DBL_MAX), (_f64(float("inf")), float("inf"))]),
    *_cases(
        "day",
        [
            (_le(MIN_DAY, 4), FIRST_DAY),
            (_le(MAX_DAY, 4), LAST_DAY),
            (_le(MIN_DAY - 1, 4), REJECT),
            (_le(MAX_DAY + 1, 4), REJECT),
            (_le(2**40, 8), REJECT),
        ],
    ),
    *_cases(
        "at",
        [
            (_le(MAX_MICROS, 8), LAST_TS),
            (_le(MIN_MICROS, 8), FIRST_TS),
            (_le(MAX_MICROS + 1, 8), REJECT),
            (_le(-(2**63), 8), REJECT),
        ],
    ),
    *_cases(
        "dec",
        [
            (_le(999_999_999, 16), D("999999.999")),
            (_le(-999_999_999, 16), D("-999999.999")),
            (_le(10**9, 16), REJECT),
            (_le(-(10**9), 16), REJECT),
            (_le(2**127 - 1, 16), REJECT),
            (_le(5, 17), REJECT),
            (_le(5, 8), REJECT),
        ],
    ),
    *_cases("wide", [(_le(10**38 - 1, 16), D(10**38 - 1)), (_le(-(10**38), 16), REJECT)]),
]


# ---------------------------------------------------------------------- decoding
FILLER = {"json": b'{"op":"upsert","key":{"id":0},"set":{"i8":1}}'}


def _json_event(c: Case) -> bytes:
    return b'{"op":"upsert","key":{"id":1},"set":{"%s":%s}}' % (c.column.encode(), _text(c))


def _debezium_event(c: Case) -> bytes:
    return b'{"op":"c","after":{"id":1,"%s":%s}}' % (c.column.encode(), _text(c))


def _rowv2_event(c: Case) -> bytes:
    col = SCHEMA.column(c.column)
    assert isinstance(c.text, bytes)
    return pack_row(1, {SCHEMA.column("id").id: _le(1, 8), col.id: c.text})


def _text(c: Case) -> bytes:
    return c.text.encode() if isinstance(c.text, str) else c.text


def _filler(fmt: str) -> bytes:
    if fmt == "debezium":
        return b'{"op":"c","after":{"id":0,"i8":1}}'
    if fmt == "rowv2":
        return pack_row(1, {SCHEMA.column("id").id: _le(0, 8), SCHEMA.column("i8").id: b"\1"})
    return FILLER["json"]


def _decode(
    fmt: str, msg: bytes, path: str, options: Mapping[str, Any], monkeypatch: Any
) -> tuple[ChangeBatch, Rejects]:
    """``[filler, msg]`` decoded by ``path``: ``compiled`` (declined events decoded apart
    and merged back), ``numpy`` (no compiled pass), ``executors`` (a decode task)."""
    if path == "numpy":
        monkeypatch.setattr(_jsonscan, "_cscan", None)
        monkeypatch.setattr(_jsonflat, "_cflat", None)
    else:
        assert _jsonscan._cscan is not None and _jsonflat._cflat is not None
        monkeypatch.setattr(_jsonflat, "MAX_GENERAL_SHARE", 1.0)
    values = pa.array([_filler(fmt), msg], pa.binary())
    if path == "executors":
        rb = pa.record_batch(
            {
                "value": values,
                "topic": pa.array(["t", "t"]),
                "partition": pa.array([0, 0], pa.int32()),
                "offset": pa.array([0, 1], pa.int64()),
                "ts_ms": pa.array([0, 0], pa.int64()),
            }
        )
        batch, rejects, _ = next(decoded_batches(iter([rb]), fmt, SCHEMA, dict(options)))  # type: ignore[arg-type]
        return batch, rejects
    return get_decoder(fmt, **options).decode(values, SCHEMA)  # type: ignore[arg-type]


def _apply(c: Case) -> tuple[ChangeBatch, Rejects]:
    """What ``Table.apply`` makes of the event as ``json.loads`` reads it."""
    decimals = c.column in ("dec", "wide", "frac")
    parse_float = decimal.Decimal if decimals else float
    events = [json.loads(m, parse_float=parse_float) for m in (FILLER["json"], _json_event(c))]
    return ChangeBatch.from_events(events, SCHEMA)


def _check(batch: ChangeBatch, rejects: Rejects, c: Case) -> None:
    """Event 1 is rejected naming the column, or stores exactly the wanted value; the
    filler (event 0) always decodes."""
    reasons = rejects.as_dict()
    assert 0 not in reasons, reasons
    positions = batch.positions.tolist()
    if c.want is REJECT:
        assert 1 in reasons, f"accepted: {_stored(batch, c, positions)!r}"
        assert f"'{c.column}'" in reasons[1], reasons[1]
        assert 1 not in positions
        return
    assert 1 not in reasons, reasons[1]
    got = _stored(batch, c, positions)
    assert got == c.want and type(got) is type(c.want), got
    if isinstance(got, D):
        assert got.as_tuple().exponent == -SCHEMA.column(c.column).type.scale


def _stored(batch: ChangeBatch, c: Case, positions: list[int]) -> Any:
    cid = SCHEMA.column(c.column).id
    i = positions.index(1)
    assert batch.present[cid][i]
    return batch.values[cid][i].as_py()


JSON_PATHS = ("compiled", "numpy", "executors")


@pytest.mark.parametrize("path", [*JSON_PATHS, "apply"])
@pytest.mark.parametrize("case", JSON_CASES, ids=str)
def test_native_json(case: Case, path: str, monkeypatch: Any) -> None:
    if path == "apply":
        if not case.apply:
            pytest.skip("json.loads reads this value as another (an infinity, loose text)")
        _check(*_apply(case), case)
        return
    _check(*_decode("json", _json_event(case), path, {}, monkeypatch), case)


def _debezium_mode(case: Case) -> dict[str, Any]:
    """Decimal numbers are Debezium's ``double`` mode, decimal strings ``string``."""
    if case.column in ("dec", "wide", "frac"):
        quoted = isinstance(case.text, str) and case.text.startswith('"')
        return {"decimal_handling": "string" if quoted else "double"}
    return {}


@pytest.mark.parametrize("path", JSON_PATHS)
@pytest.mark.parametrize("case", JSON_CASES + DEBEZIUM_CASES, ids=str)
def test_debezium(case: Case, path: str, monkeypatch: Any) -> None:
    options = {**_debezium_mode(case), **case.options}
    _check(*_decode("debezium", _debezium_event(case), path, options, monkeypatch), case)


@pytest.mark.parametrize("path", JSON_PATHS)
@pytest.mark.parametrize("case", ENVELOPE_CASES, ids=str)
def test_debezium_envelope_scale(case: Case, path: str, monkeypatch: Any) -> None:
    assert isinstance(case.text, str)
    msg = _envelope(case.column, case.text)
    _check(*_decode("debezium", msg, path, {}, monkeypatch), case)


@pytest.mark.parametrize("path", ("compiled", "executors"))
@pytest.mark.parametrize("case", ROWV2_CASES, ids=str)
def test_rowv2(case: Case, path: str, monkeypatch: Any) -> None:
    _check(*_decode("rowv2", _rowv2_event(case), path, {}, monkeypatch), case)


# ---------------------------------------------------------------------- decimal text
DECIMAL_TYPES = [pa.decimal128(p, s) for p, s in ((9, 3), (38, 0), (38, 38), (1, 0), (20, 10))]
_GRAMMAR = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?(?:[eE]([+-]?[0-9]+))?")
_NUMBER = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")
DECIMAL_TEXTS = st.one_of(
    st.from_regex(
        r"[+-]?0{0,40}[0-9]{0,45}(\.[0-9]{0,45}0{0,40})?([eE][+-]?0?[0-9]{1,3})?", fullmatch=True
    ),
    st.text(alphabet="0123456789+-.eE x", max_size=40),
)


def _exact(text: str, t: pa.DataType) -> tuple[D | None, bool, bool]:
    """The value, bad and out-of-range flags of decimal text in ``t``, with Python's
    integers: the digits without leading and trailing zeros, and their exponent."""
    if not _NUMBER.fullmatch(text):
        return None, True, False
    m = _GRAMMAR.fullmatch(text)
    assert m is not None
    sign, whole, frac, exp = m.group(1), m.group(2), m.group(3) or "", m.group(4) or "0"
    digits = (whole + frac).lstrip("0")
    quantum = D(1).scaleb(-t.scale)
    if not digits:
        return D(0).quantize(quantum), False, False
    kept = digits.rstrip("0")
    e = int(exp) - len(frac) + len(digits) - len(kept)
    if len(kept) + e > t.precision - t.scale:
        return None, True, True
    if e < -t.scale:
        return None, True, False
    value = D(f"{sign}{kept}E{e}").quantize(quantum, context=decimal.Context(prec=80))
    return value, False, False


@ci_settings(300)
@given(texts=st.lists(DECIMAL_TEXTS, max_size=20), t=st.sampled_from(DECIMAL_TYPES))
def test_decimal_text_is_exact_or_refused(texts: list[str], t: pa.DataType) -> None:
    """Every decimal text, by Arrow's casts (plain values) or by counting digits, gives
    the exact value or a refusal of the right kind; counting alone gives the same."""
    arr = pa.array(texts, pa.string())
    got, bad, oor = decimal_text(arr, t)
    raw, cbad, coor = counted(arr, t)
    alone = pa.Array.from_buffers(t, len(texts), [None, pa.py_buffer(raw)]).to_pylist()
    for i, text in enumerate(texts):
        want, wbad, woor = _exact(text, t)
        assert (got[i].as_py(), bool(bad[i]), bool(oor[i])) == (want, wbad, woor), text
        assert (bool(cbad[i]), bool(coor[i])) == (wbad, woor), text
        if not wbad:
            assert alone[i] == want, text


def _java_double(x: float) -> str:
    """Java's ``Double.toString`` (what Debezium's ``double`` decimal mode writes): the
    shortest digits that read back as ``x``, plain from 1e-3 to 1e7, else ``d.ddd...E<n>``."""
    if x == 0 or not 1e-3 <= abs(x) < 1e7:
        digits, exp = f"{x:.16e}".split("e")
        mant = repr(float(f"{digits}e{exp}"))  # shortest digits of x
        sig = D(mant).normalize()
        head, *rest = format(abs(sig).scaleb(-sig.adjusted()), "f").split(".")
        sign = "-" if x < 0 else ""
        return f"{sign}{head}.{(rest[0] if rest else '') or '0'}E{sig.adjusted()}"
    return repr(x)


EXPONENT_TEXTS = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(_java_double),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.from_regex(r"[+-]?0{0,3}[0-9]{1,20}(\.[0-9]{0,20})?[eE][+-]?0?[0-9]{1,4}", fullmatch=True),
)


@ci_settings(300)
@given(texts=st.lists(EXPONENT_TEXTS, max_size=20), t=st.sampled_from(DECIMAL_TYPES))
@example(  # Arrow's rescale divides wrong beyond 10**76: this became 0.000
    texts=["5.397555239464236e-180", "1.5e-77", "-2e-75", "7E-73", "1e-74"],
    t=pa.decimal128(9, 3),
)
def test_decimal_text_with_an_exponent_is_exact_or_refused(
    texts: list[str], t: pa.DataType
) -> None:
    """Values written with an exponent (doubles as Java and Python write them, and any
    short mantissa with an exponent of up to five digits), which the casts take when
    their shift cannot wrap either way: the exact value or a refusal of the right kind,
    as Python's decimal arithmetic says."""
    got, bad, oor = decimal_text(pa.array(texts, pa.string()), t)
    for i, text in enumerate(texts):
        want, wbad, woor = _exact(text, t)
        assert (got[i].as_py(), bool(bad[i]), bool(oor[i])) == (want, wbad, woor), text


def test_debezium_doubles_are_converted_without_counting_digits(monkeypatch: Any) -> None:
    """Debezium's ``double`` mode writes decimals of 1e7 and more with an exponent
    (``1.2345E7``): they take the vectorized casts, not the digit counting (which is
    exact too, but reads every byte several times)."""
    from cdc_sink.formats import _decimaltext

    def no_counting(*_: Any) -> Any:
        raise AssertionError("counted() called")

    monkeypatch.setattr(_decimaltext, "counted", no_counting)
    rng = np.random.default_rng(7)
    cents = rng.integers(10**9, 10**14, 2000).tolist()
    texts = [_java_double(c / 100) for c in cents] + ["-1.5E7", "1.0E-2", "9.9999999E7"]
    t = pa.decimal128(20, 2)
    got, bad, oor = decimal_text(pa.array(texts, pa.string()), t)
    assert "E" in texts[0]
    assert not bad.any() and not oor.any()
    quantum = D(1).scaleb(-2)
    want = [D(x).quantize(quantum) for x in texts]
    assert got.to_pylist() == want
