"""Fuzzing of the event decoders: valid messages, their mutations and the oracle.

Shared by the bounded CI run (``tests/formats/test_fuzz_decoders.py``) and the long run
(``benchmarks/fuzz_decoders.py``).

- :func:`valid_batches` is a Hypothesis strategy of valid message values of one format
  over a schema holding every supported type (with and without a sequence column);
- the ``mutate_*`` functions turn one valid message into many fuzzed ones (byte flips,
  truncation at every offset, structural JSON mutations, rowv2 header fields);
- :func:`check` decodes the fuzzed messages between untouched valid ones and checks the
  oracle: nothing raises, every message is accepted, rejected or skipped exactly once,
  every accepted value is in range for its type, every reject has a reason, and the
  valid neighbours decode exactly as they do alone.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import random
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from cdc_sink.batch import OP_DELETE, OP_NAMES, ChangeBatch
from cdc_sink.formats import Decoded, Decoder, FormatName, get_decoder
from cdc_sink.formats._arrays import decimal_fits
from cdc_sink.formats.debezium import encode_debezium
from cdc_sink.formats.native_json import encode_json
from cdc_sink.formats.rowv2 import CODEC_VERSION, encode_event
from cdc_sink.schema import Column, TableSchema, type_to_str
from tests.formats.support import ALL_TYPE_COLUMNS

UTC = dt.timezone.utc


def ci_settings(max_examples: int) -> settings:
    """The bounded, deterministic profile of the CI fuzz runs: fixed examples
    (``derandomize``), no deadline, no example database, and no shrinking (a failure
    report already names the culprit message, isolated by bisection)."""
    return settings(
        max_examples=max_examples,
        derandomize=True,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


_VALUE_COLUMNS: list[dict[str, Any]] = [
    *ALL_TYPE_COLUMNS,  # every type, plus decimals at the edges of scale
    {"name": "tiny", "type": "decimal128(3, 3)"},
    {"name": "whole", "type": "decimal128(5, 0)"},
]

ID_KEY: list[dict[str, Any]] = [{"name": "id", "type": "int64"}]
"""One int64 key column."""
TENANT_SKU_KEY: list[dict[str, Any]] = [
    {"name": "tenant", "type": "int32"},
    {"name": "sku", "type": "string"},
]
"""A composite key of int32 and string."""


def keyed_schema(
    keys: list[dict[str, Any]], values: list[dict[str, Any]], *, sequenced: bool = False
) -> TableSchema:
    """A table of ``keys`` (the primary key, in order) and ``values``; ``sequenced``
    adds an int64 ``seq`` column as the sequence column."""
    seq = [{"name": "seq", "type": "int64"}] if sequenced else []
    spec: dict[str, Any] = {
        "columns": [*keys, *values, *seq],
        "primary_key": [k["name"] for k in keys],
    }
    if sequenced:
        spec["sequence_column"] = "seq"
    return TableSchema.from_dict(spec)


PLAIN = keyed_schema(ID_KEY, _VALUE_COLUMNS)
"""Every supported type; one int64 key; no sequence column."""

SEQUENCED = keyed_schema(
    [*TENANT_SKU_KEY, {"name": "kday", "type": "date32"}], _VALUE_COLUMNS, sequenced=True
)
"""Every supported type; a composite key of int32, string and date32; a sequence column."""

WIDE_IDS = TableSchema.from_dict(
    {
        "columns": [
            {"id": 0, "name": "id", "type": "int64"},
            *({**c, "id": 256 + 65_536 * i} for i, c in enumerate(_VALUE_COLUMNS)),
        ],
        "primary_key": ["id"],
    }
)
"""As :data:`PLAIN` with column ids above 255 (rowv2's 4-byte "big" layout)."""

SCHEMAS = (PLAIN, SEQUENCED, WIDE_IDS)

# Bounds of what a table can hold: 0001-01-01 .. 9999-12-31 (Python's datetime range).
DAY_MIN = (dt.date(1, 1, 1) - dt.date(1970, 1, 1)).days
DAY_MAX = (dt.date(9999, 12, 31) - dt.date(1970, 1, 1)).days
US_MIN = DAY_MIN * 86_400_000_000
US_MAX = (DAY_MAX + 1) * 86_400_000_000 - 1


# ====================================================================== valid messages
def _decimal_values(t: pa.Decimal128Type) -> st.SearchStrategy[decimal.Decimal]:
    top = 10**t.precision - 1
    return st.one_of(
        st.integers(-top, top),
        st.sampled_from([0, 1, -1, top, -top]),
    ).map(lambda i: decimal.Decimal(f"{i}E-{t.scale}"))


def values_of(c: Column) -> st.SearchStrategy[Any]:
    """Valid non-null values of a column, over the whole range of its type."""
    t = c.type
    if pa.types.is_boolean(t):
        return st.booleans()
    if pa.types.is_integer(t):
        info = np.iinfo(t.to_pandas_dtype())
        lo, hi = int(info.min), int(info.max)
        return st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, 0, -1]))
    if t == pa.float32():
        return st.floats(width=32, allow_nan=False, allow_infinity=False)
    if pa.types.is_floating(t):
        return st.floats(allow_nan=False, allow_infinity=False)
    if pa.types.is_string(t):
        return st.text(st.characters(exclude_categories=("Cs",)), max_size=8)
    if pa.types.is_binary(t):
        return st.binary(max_size=8)
    if pa.types.is_date32(t):
        return st.dates()
    if pa.types.is_timestamp(t):
        return st.datetimes(timezones=st.just(UTC))
    if pa.types.is_decimal(t):
        return _decimal_values(t)
    raise AssertionError(t)


@st.composite
def events(draw: st.DrawFn, schema: TableSchema, max_size: int = 4) -> list[dict[str, Any]]:
    """Valid native events (``{"op", "key", "set", "seq"?, "ts_ms"?}``) over ``schema``:
    every op, null and absent columns; each one decodes without a reject."""
    out = []
    seq_name = schema.sequence_column
    settable = [c for c in schema.value_columns if c.name != seq_name]
    for _ in range(draw(st.integers(1, max_size))):
        op = draw(st.sampled_from(["insert", "upsert", "update", "delete"]))
        key = {c.name: draw(values_of(c)) for c in schema.key_columns}
        sets: dict[str, Any] = {}
        for c in settable:
            mode = draw(st.integers(0, 3))
            if mode == 0 and not (op == "insert" and not c.nullable):
                continue  # absent
            if mode == 1 and c.nullable:
                sets[c.name] = None
            else:
                sets[c.name] = draw(values_of(c))
        e: dict[str, Any] = {"op": op, "key": key, "set": {} if op == "delete" else sets}
        if seq_name is not None:
            e["seq"] = draw(values_of(schema.column(seq_name)))
        if draw(st.booleans()):
            e["ts_ms"] = draw(st.integers(0, 2**53))
        out.append(e)
    return out


def encode_native(e: dict[str, Any], schema: TableSchema) -> bytes:
    """One event in the native ``json`` format."""
    return encode_json(e)


def encode_rowv2(e: dict[str, Any], schema: TableSchema) -> bytes:
    """One event in the ``rowv2`` format."""
    return encode_event({k: v for k, v in e.items() if k != "ts_ms"}, schema)


def encode_dbz(
    e: dict[str, Any], schema: TableSchema, *, envelope: bool, decimal_handling: str
) -> bytes:
    """One event as Debezium JSON (upserts as ``c``/``u``/``r``, deletes as ``d``)."""
    row = dict(e["key"])
    if schema.sequence_column is not None:
        row[schema.sequence_column] = e["seq"]
    if e["op"] == "delete":
        return encode_debezium(
            "d",
            row,
            None,
            schema,
            envelope=envelope,
            ts_ms=e.get("ts_ms"),
            decimal_handling=decimal_handling,
            source_ts_ms=e.get("ts_ms"),
        )  # type: ignore[arg-type]
    op = {"insert": "c", "upsert": "r", "update": "u"}[e["op"]]
    return encode_debezium(
        op,
        None,
        {**row, **e["set"]},
        schema,
        envelope=envelope,
        ts_ms=e.get("ts_ms"),
        decimal_handling=decimal_handling,
    )  # type: ignore[arg-type]


@dataclass
class Case:
    """Valid messages of one format, and the decoder to read them."""

    fmt: FormatName
    schema: TableSchema
    decoder: Decoder
    messages: list[bytes]
    options: dict[str, Any] = field(default_factory=dict)


@st.composite
def valid_cases(draw: st.DrawFn, fmt: FormatName) -> Case:
    """Valid messages of format ``fmt`` over one of :data:`SCHEMAS`."""
    schema = draw(st.sampled_from(SCHEMAS))
    evs = draw(events(schema))
    options: dict[str, Any] = {}
    if fmt != "rowv2" and draw(st.integers(0, 3)) == 0:
        options["strict"] = False  # no grammar check by Arrow: the index alone
    if fmt == "json":
        msgs = [encode_native(e, schema) for e in evs]
    elif fmt == "rowv2":
        msgs = [encode_rowv2(e, schema) for e in evs]
    else:
        mode = draw(st.sampled_from(["precise", "string"]))
        options["decimal_handling"] = mode
        msgs = [
            encode_dbz(e, schema, envelope=draw(st.booleans()), decimal_handling=mode) for e in evs
        ]
    return Case(fmt, schema, get_decoder(fmt, **options), msgs, options)


# ====================================================================== byte mutations
_SPECIAL = b'\x00\xff\x80\x7f"\\{}[]:,0-9eE.nul \n\t\x01'
_BAD_UTF8 = (
    b"\xff",
    b"\xfe\xfe",
    b"\xc3",
    b"\xc0\xaf",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\xe2\x82",
)


def truncations(msg: bytes, rng: random.Random, limit: int = 400) -> list[bytes]:
    """``msg`` cut at every offset (a sample of ``limit`` offsets for long messages)."""
    cuts = list(range(len(msg)))
    if len(cuts) > limit:
        cuts = sorted(rng.sample(cuts, limit))
    return [msg[:k] for k in cuts]


def byte_mutations(msg: bytes, rng: random.Random, count: int) -> list[bytes]:
    """``count`` random byte-level mutations of ``msg``: bit flips, special bytes, invalid
    UTF-8 and NUL bytes, deletions, duplications and insertions of byte ranges."""
    out: list[bytes] = [b"", b"\x00", b"null", b" ", b"\xff" * 3]
    n = len(msg)
    for _ in range(count):
        b = bytearray(msg)
        for _ in range(rng.choice([1, 1, 1, 2, 3, 8])):
            n = len(b)
            kind = rng.randrange(7)
            at = rng.randrange(n + 1) if n else 0
            if kind == 0 and n:
                b[min(at, n - 1)] ^= 1 << rng.randrange(8)
            elif kind == 1 and n:
                b[min(at, n - 1)] = rng.choice(_SPECIAL)
            elif kind == 2:
                b[at:at] = rng.choice(_BAD_UTF8)
            elif kind == 3:
                b[at:at] = b"\x00" * rng.choice([1, 2, 5])
            elif kind == 4 and n:
                b[at : at + rng.randrange(1, 9)] = b""
            elif kind == 5 and n:
                lo = rng.randrange(n)
                b[at:at] = b[lo : lo + rng.randrange(1, 17)]
            else:
                b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 5)))
        out.append(bytes(b))
    return out


# ====================================================================== JSON mutations
class _Obj(list):  # type: ignore[type-arg]
    """A JSON object as a list of (name, value) pairs: names may repeat."""


class _Raw(str):
    """JSON text written as is (literals JSON has not: ``NaN``, ``1e400``, deep nests)."""


def parse_json(msg: bytes) -> Any:
    """Parses a JSON message keeping member order (objects as :class:`_Obj`)."""
    return json.loads(msg, object_pairs_hook=_Obj, parse_constant=_Raw)


def dump_json(v: Any) -> str:
    """Writes a value of :func:`parse_json` back as JSON text (raw parts as they are)."""
    if isinstance(v, _Raw):
        return str(v)
    if isinstance(v, _Obj):
        return "{" + ",".join(json.dumps(k) + ":" + dump_json(x) for k, x in v) + "}"
    if isinstance(v, list):
        return "[" + ",".join(dump_json(x) for x in v) + "]"
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")
    return json.dumps(v, ensure_ascii=False)


_DEEP_ARRAY = _Raw("[" * 10_000 + "]" * 10_000)
_DEEP_OBJECT = _Raw('{"a":' * 10_000 + "1" + "}" * 10_000)
_DEEP_SCHEMA = _Raw('{"type":"struct","fields":[' * 3_000 + "]}" * 3_000)

WRONG_VALUES: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    -1,
    1,
    1.5,
    -0.0,
    "",
    "x",
    [],
    _Obj(),
    [1, "a", None],
    _Obj([("a", 1)]),
    _Raw("1e400"),
    _Raw("-1e400"),
    _Raw("1e-400"),
    10**40,
    -(10**30),
    2**63,
    -(2**63) - 1,
    2**64,
    2**31,
    2**15,
    128,
    _Raw("NaN"),
    _Raw("Infinity"),
    _Raw("-Infinity"),
    "NaN",
    "Infinity",
    "-Infinity",
    "inf",
    "1e400",
    "-1e400",
    str(10**40),
    str(-(10**30)),
    "99999999999999999999.99",
    "0.0001",
    "12.345",
    "0001-01-01",
    "9999-12-31",
    "10000-01-01",
    "0000-12-31",
    "-0001-01-01",
    "9999-12-31T23:59:59.999999Z",
    "10000-01-01T00:00:00Z",
    "0001-01-01T00:00:00Z",
    "2024-02-30",
    "2024-01-01T25:00:00Z",
    "2024-01-01T00:00:00.123456789Z",
    "AAAAAAAAAAAAAAAAAAAAAAAA",
    "/////////////////////w==",
    "gAAAAAAAAAAAAAAAAAAAAAA=",
    "AQ==",
    "A",
    "====",
    "\u0000",
    "\ud800",
    "é",
    "__debezium_unavailable_value",
    253402300800000000,
    -62135596800000001,
    253402300800000,
    2932897,
    -719163,
    9223372036854775807,
    -9223372036854775808,
    86_400_000_000_000_000_000,
    _Raw("12345678901234567890123456789012345678901234567890"),
    _Raw("0.1e-5"),
    _Raw("-0"),
    _Raw("1E+2"),
    _Raw("00"),
    _Raw("+1"),
    _Raw(".5"),
    _Raw("1."),
    _Raw("--1"),
    _Raw("tru"),
    _Raw("nul"),
    _Raw('"unterminated'),
    _DEEP_ARRAY,
    _DEEP_OBJECT,
)
"""Replacement values: wrong JSON types, huge numbers, non-finite numbers, edge dates,
bad base64, lone surrogates, deep nesting and malformed literals."""

SCHEMA_VALUES: tuple[Any, ...] = (
    "abc",
    10**40,
    -5,
    39,
    _Raw("1e400"),
    "1e400",
    None,
    [],
    _Obj(),
    2**63,
    "-1",
    _Obj([("scale", "abc")]),
    _Obj([("scale", 10**40)]),
    _Obj([("scale", -3)]),
    _Obj([("scale", _Obj())]),
    [_Obj([("field", "x")])],
    "io.debezium.time.NanoTimestamp",
    "io.debezium.time.Timestamp",
    "org.apache.kafka.connect.data.Decimal",
    "bytes",
    "string",
    _DEEP_SCHEMA,
)


def json_paths(v: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``v`` (object member index or array index)."""
    out = [path]
    if isinstance(v, _Obj):
        for i, (_, x) in enumerate(v):
            out += json_paths(x, (*path, i))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            out += json_paths(x, (*path, i))
    return out


def _at(v: Any, path: tuple[Any, ...]) -> Any:
    for i in path:
        v = v[i][1] if isinstance(v, _Obj) else v[i]
    return v


def copy_json(v: Any) -> Any:
    """A deep copy of a value of :func:`parse_json`."""
    if isinstance(v, _Obj):
        return _Obj([(k, copy_json(x)) for k, x in v])
    if isinstance(v, list):
        return [copy_json(x) for x in v]
    return v


def set_at(v: Any, path: tuple[Any, ...], new: Any) -> Any:
    """Replaces the value at ``path`` in ``v`` (in place); returns the document."""
    if not path:
        return new
    parent = _at(v, path[:-1])
    i = path[-1]
    if isinstance(parent, _Obj):
        parent[i] = (parent[i][0], new)
    else:
        parent[i] = new
    return v


def _names(v: Any) -> list[str]:
    out: list[str] = []
    if isinstance(v, _Obj):
        for k, x in v:
            out.append(k)
            out += _names(x)
    elif isinstance(v, list):
        for x in v:
            out += _names(x)
    return out


def json_mutations(msg: bytes, rng: random.Random, count: int) -> list[bytes]:
    """``count`` structural mutations of a JSON message: members dropped, duplicated,
    renamed or reordered, values replaced by :data:`WRONG_VALUES` (in an envelope
    schema also by odd ``scale``/``parameters``/``fields``), deep nesting."""
    doc = parse_json(msg)
    out: list[bytes] = [b"[]", b"{}", b'"x"', b"1e400", _DEEP_OBJECT.encode(), _DEEP_ARRAY.encode()]
    names = [
        *sorted(set(_names(doc))),
        "",
        "__op",
        "op",
        "key",
        "set",
        "payload",
        "schema",
        "after",
        "before",
    ]
    for _ in range(count):
        d = copy_json(doc)
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            paths = json_paths(d)
            path = rng.choice(paths)
            target = _at(d, path)
            kind = rng.randrange(6)
            if kind == 0 or not path:  # replace a value
                pool = SCHEMA_VALUES if "schema" in path_names(d, path) else WRONG_VALUES
                if rng.random() < 0.3:
                    pool = SCHEMA_VALUES + WRONG_VALUES
                d = set_at(d, path, copy_json(rng.choice(pool)))
            elif kind == 1 and isinstance(target, (_Obj, list)) and target:
                del target[rng.randrange(len(target))]  # drop a member
            elif kind == 2 and isinstance(target, (_Obj, list)) and target:
                i = rng.randrange(len(target))  # duplicate a member
                target.insert(rng.randrange(len(target) + 1), copy_json(target[i]))
            elif kind == 3 and isinstance(target, (_Obj, list)):
                rng.shuffle(target)  # reorder
            elif kind == 4 and isinstance(target, _Obj) and target:
                i = rng.randrange(len(target))  # rename
                target[i] = (rng.choice(names), target[i][1])
            elif kind == 5 and isinstance(target, _Obj):  # add a member
                target.insert(
                    rng.randrange(len(target) + 1),
                    (rng.choice(names), copy_json(rng.choice(WRONG_VALUES))),
                )
            else:
                d = set_at(d, path, copy_json(rng.choice(WRONG_VALUES)))
        out.append(dump_json(d).encode("utf-8", "surrogatepass"))
    return out


def path_names(d: Any, path: tuple[Any, ...]) -> list[str]:
    """The member names along ``path``."""
    names = []
    v = d
    for i in path:
        if isinstance(v, _Obj):
            names.append(v[i][0])
            v = v[i][1]
        else:
            v = v[i]
    return names


# ====================================================================== rowv2 mutations
def rowv2_mutations(msg: bytes, rng: random.Random, count: int) -> list[bytes]:
    """``count`` mutations of the header fields of a rowv2 row: op, codec and flags
    bytes, the column counts, column ids, value offsets (out of order, out of range),
    and values of other widths."""
    big = msg[2] & 1
    nn, nl = struct.unpack_from("<HH", msg, 3)
    idw, offw = (4, 4) if big else (1, 2)
    ids_at = 7
    offs_at = ids_at + (nn + nl) * idw
    vals_at = offs_at + nn * offw
    out: list[bytes] = [
        msg[:1] + bytes([CODEC_VERSION ^ 1]) + msg[2:],
        msg[:2] + b"\x02" + msg[3:],
        msg[:2] + bytes([msg[2] ^ 1]) + msg[3:],
        bytes([4]) + msg[1:],
        bytes([255]) + msg[1:],
        msg + b"\x00",
        msg[:7],
        msg[:vals_at],
        msg[:offs_at],
    ]
    for _ in range(count):
        b = bytearray(msg)
        kind = rng.randrange(9)
        if kind == 0:  # counts
            at = rng.choice([3, 5])
            v = rng.choice([0, 1, nn + 1, max(nn - 1, 0), nl + 1, 0xFFFF, 0x8000, 255, 256])
            b[at : at + 2] = struct.pack("<H", v)
        elif kind == 1 and nn + nl:  # a column id
            k = rng.randrange(nn + nl)
            v = rng.choice([0, 1, 2, 255, 2**31, 2**32 - 1, rng.randrange(40), rng.randrange(256)])
            if idw == 1:
                b[ids_at + k] = v & 0xFF
            else:
                b[ids_at + 4 * k : ids_at + 4 * k + 4] = struct.pack("<I", v & 0xFFFFFFFF)
        elif kind == 2 and nn:  # a value offset
            k = rng.randrange(nn)
            at = offs_at + offw * k
            old = int.from_bytes(b[at : at + offw], "little")
            v = rng.choice(
                [
                    0,
                    old + 1,
                    max(old - 1, 0),
                    old + 8,
                    2 ** (8 * offw) - 1,
                    2 ** (8 * offw - 1),
                    len(msg),
                    rng.randrange(len(msg) + 1),
                ]
            )
            b[at : at + offw] = (v % 2 ** (8 * offw)).to_bytes(offw, "little")
        elif kind == 3 and nn > 1:  # swap two offsets
            i, j = rng.sample(range(nn), 2)
            ai, aj = offs_at + offw * i, offs_at + offw * j
            b[ai : ai + offw], b[aj : aj + offw] = b[aj : aj + offw], b[ai : ai + offw]
        elif kind == 4 and nn + nl > 1:  # swap two ids
            i, j = rng.sample(range(nn + nl), 2)
            ai, aj = ids_at + idw * i, ids_at + idw * j
            b[ai : ai + idw], b[aj : aj + idw] = b[aj : aj + idw], b[ai : ai + idw]
        elif kind == 5 and len(b) > vals_at:  # value bytes
            at = rng.randrange(vals_at, len(b))
            b[at] = rng.choice([0x00, 0xFF, 0x7F, 0x80, 0xF0, 0xC3, rng.randrange(256)])
        elif kind == 6 and nn:  # move a null id into the not-null array and back
            k = rng.randrange(nn + nl)
            at = rng.choice([3, 5])
            b[at : at + 2] = struct.pack(
                "<H", max(struct.unpack_from("<H", b, at)[0] + rng.choice([-1, 1]), 0)
            )
            del b[ids_at + idw * k : ids_at + idw * (k + 1)]
        elif kind == 7:  # the op byte
            b[0] = rng.choice([0, 1, 2, 3, 4, 127, 255])
        else:  # a value of another width: insert or remove bytes inside the values
            at = rng.randrange(vals_at, len(b) + 1)
            if rng.random() < 0.5:
                b[at:at] = bytes(rng.randrange(256) for _ in range(rng.choice([1, 2, 4, 8])))
            else:
                del b[at : at + rng.choice([1, 2, 4, 8])]
        out.append(bytes(b))
    return out


_DEEP_KEY_SCHEMA = b'{"schema": ' + _DEEP_SCHEMA.encode() + b', "payload": {"id": 1}}'

MESSAGE_KEYS: tuple[bytes | None, ...] = (
    None,
    b"",
    b"null",
    b"[1]",
    b"\xff\xfe",
    b'{"id": 7}',
    b'{"id": 1e400}',
    b'{"id": "x"}',
    b'{"id": 100000000000000000000000}',
    b'{"id": null}',
    b'{"id": 1, "id": 2}',
    b'{"tenant": 1, "sku": "a", "kday": 0}',
    b'{"tenant": 1, "sku": "a", "kday": 2932897}',
    b'{"tenant": 1e400, "sku": "\x80", "kday": "0000-01-01"}',
    b'{"payload": null}',
    b'{"schema": 5, "payload": {"id": 1}}',
    b'{"payload": {"id": -1}}',
    b'{"schema": {"type": "struct", "fields": [{"field": "id", "type": "int64"}]},'
    b' "payload": {"id": 5}}',
    b'{"schema": {"type": "struct", "fields": [{"field": "kday", "type": "int32",'
    b' "name": "io.debezium.time.Date"}]}, "payload": {"tenant": 1, "sku": "s",'
    b' "kday": -719163}}',
    b'{"schema": {"type": "struct", "fields": [{"field": "id", "type": "bytes",'
    b' "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "x"}}]},'
    b' "payload": {"id": "AQ=="}}',
    _DEEP_OBJECT.encode(),
    _DEEP_KEY_SCHEMA,
)
"""Kafka message keys given with fuzzed Debezium messages (the decoder reads the key of
a delete without a ``before`` image from it)."""


def _without_before(msg: bytes) -> list[bytes]:
    """A Debezium event with its ``before`` image null and dropped (key-only deletes)."""
    doc = parse_json(msg)
    body = dict(doc).get("payload", doc)
    if not isinstance(body, _Obj):
        return []
    out = []
    for drop in (False, True):
        b = _Obj(
            [(k, None if k == "before" else v) for k, v in body if not (drop and k == "before")]
        )
        whole = _Obj([(k, b if k == "payload" else v) for k, v in doc]) if body is not doc else b
        out.append(dump_json(whole).encode("utf-8", "surrogatepass"))
    return out


def mutations(fmt: FormatName, msg: bytes, rng: random.Random, count: int) -> list[bytes]:
    """Every mutation family for one valid message of ``fmt``."""
    out = truncations(msg, rng) + byte_mutations(msg, rng, count)
    if fmt == "rowv2":
        out += rowv2_mutations(msg, rng, count)
    else:
        out += json_mutations(msg, rng, count)
    if fmt == "debezium":
        out += _without_before(msg)
    return out


# ====================================================================== oracle
@dataclass
class Stats:
    """What a fuzz run tried."""

    inputs: int = 0
    batches: int = 0
    accepted: int = 0
    rejected: int = 0
    skipped: int = 0


class FuzzFailure(AssertionError):
    """The oracle failed for one fuzzed message (``message``)."""

    def __init__(
        self, fmt: str, message: bytes | None, problem: str, group: Sequence[bytes | None] = ()
    ) -> None:
        shown = message if message is None or len(message) <= 400 else message[:400] + b"..."
        super().__init__(f"{fmt}: {problem}\nmessage: {shown!r}")
        self.message = message
        self.group = list(group)


def _positions(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.int64) * 3 + 1000


def _float_inf_ok(fmt: FormatName, msg: bytes) -> bool:
    if fmt == "rowv2":
        return any(inf in msg for inf in (b"\0\0\0\0\0\0\xf0\x7f", b"\0\0\0\0\0\0\xf0\xff"))
    return b"inf" in msg.lower()


def check_ranges(fmt: FormatName, batch: ChangeBatch, messages: dict[int, bytes | None]) -> None:
    """Every accepted value is valid Arrow and in range for its column type."""
    schema = batch.schema
    arrays: list[tuple[Column, pa.Array, np.ndarray]] = []
    for c, arr in zip(schema.key_columns, batch.keys, strict=True):
        assert arr.type == c.type, (c.name, arr.type)
        arrays.append((c, arr, np.ones(len(batch), dtype=bool)))
    for cid, arr in batch.values.items():
        c = schema.column_by_id(cid)
        assert arr.type == c.type, (c.name, arr.type)
        assert len(arr) == len(batch)
        arrays.append((c, arr, batch.present[cid]))
    pos = batch.positions
    for c, arr, present in arrays:
        arr.validate(full=True)
        valid = np.asarray(arr.is_valid(), dtype=bool) & present
        t = c.type
        where = f"column {c.name!r} ({type_to_str(t)})"
        if pa.types.is_date32(t):
            v = np.asarray(arr.cast(pa.int32()).fill_null(0), dtype=np.int64)
            bad = valid & ((v < DAY_MIN) | (v > DAY_MAX))
            assert not bad.any(), f"{where}: day {v[bad][0]} out of 0001..9999 at {pos[bad][0]}"
        elif pa.types.is_timestamp(t):
            v = np.asarray(arr.cast(pa.int64()).fill_null(0), dtype=np.int64)
            bad = valid & ((v < US_MIN) | (v > US_MAX))
            assert not bad.any(), f"{where}: {v[bad][0]} us out of 0001..9999 at {pos[bad][0]}"
        elif pa.types.is_decimal(t):
            raw = np.frombuffer(arr.buffers()[1], dtype=np.uint8)[
                arr.offset * 16 : (arr.offset + len(arr)) * 16
            ].reshape(len(arr), 16)
            bad = valid & ~decimal_fits(raw, t.precision)
            assert not bad.any(), f"{where}: value beyond the precision at {pos[bad][0]}"
        elif pa.types.is_floating(t):
            v = np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.float64)
            for i in np.flatnonzero(valid & np.isinf(v)).tolist():
                msg = messages[int(pos[i])]
                assert msg is not None and _float_inf_ok(fmt, msg), (
                    f"{where}: infinity accepted from a message without one at {pos[i]}"
                )
    if batch.seq is not None:
        assert batch.seq.dtype == np.int64 and len(batch.seq) == len(batch)


def _restrict(
    d: Decoded, keep: np.ndarray
) -> tuple[ChangeBatch, list[tuple[int, str]], list[int] | None]:
    """The events, rejects and timestamps of ``d`` at the positions ``keep``."""
    pos = d.batch.positions
    idx = np.flatnonzero(np.isin(pos, keep))
    rej = [
        (int(p), r)
        for p, r in zip(d.rejects.positions.tolist(), d.rejects.reasons, strict=True)
        if p in set(keep.tolist())
    ]
    ts = None if d.ts_ms is None else d.ts_ms[idx].tolist()
    return d.batch.take(idx), rej, ts


def _same_events(got: ChangeBatch, want: ChangeBatch) -> None:
    assert got.op.tolist() == want.op.tolist(), "ops differ"
    assert got.positions.tolist() == want.positions.tolist(), "positions differ"
    for g, w in zip(got.keys, want.keys, strict=True):
        assert g.equals(w), "keys differ"
    assert (got.seq is None) == (want.seq is None)
    if got.seq is not None and want.seq is not None:
        assert got.seq.tolist() == want.seq.tolist(), "seqs differ"
    n = len(want)
    for cid in set(got.values) | set(want.values):
        gp = got.present.get(cid, np.zeros(n, bool))
        wp = want.present.get(cid, np.zeros(n, bool))
        assert gp.tolist() == wp.tolist(), f"presence of column {cid} differs"
        if wp.any():
            m = pa.array(wp)
            assert got.values[cid].filter(m).equals(want.values[cid].filter(m)), (
                f"values of column {cid} differ"
            )


def _decode_checked(
    case: Case,
    messages: Sequence[bytes | None],
    valid_at: np.ndarray,
    alone: Decoded | None,
    keys: pa.Array | None = None,
) -> Decoded:
    """Decodes ``messages`` and checks the oracle; ``valid_at`` are the positions of the
    untouched valid messages, ``alone`` their decoding without the fuzzed ones."""
    n = len(messages)
    pos = _positions(n)
    arr = pa.array(list(messages), pa.binary())
    if keys is None:
        d = case.decoder.decode_with_meta(arr, case.schema, position=pos)
    else:
        d = case.decoder.decode_with_meta(arr, case.schema, position=pos, keys=keys)
    got_b = d.batch.positions.tolist()
    got_r = d.rejects.positions.tolist()
    assert len(set(got_b)) == len(got_b), "a message decoded twice"
    assert len(set(got_r)) == len(got_r), "a message rejected twice"
    assert not set(got_b) & set(got_r), "a message both decoded and rejected"
    assert set(got_b) | set(got_r) <= set(pos.tolist()), "unknown positions"
    assert len(got_b) + len(got_r) + d.skipped == n, (
        f"{n} messages, {len(got_b)} decoded + {len(got_r)} rejected + {d.skipped} skipped"
    )
    assert d.skipped >= 0
    for r in d.rejects.reasons:
        assert isinstance(r, str) and r.strip(), f"empty reject reason {r!r}"
        # The decoders' last resort turns an exception into such a reject: still a bug.
        assert not r.startswith("undecodable message ("), f"exception inside the decoder: {r}"
    if d.ts_ms is not None:
        assert len(d.ts_ms) == len(d.batch)
    by_pos = dict(zip(pos.tolist(), messages, strict=True))
    check_ranges(case.fmt, d.batch, by_pos)
    if alone is not None:
        gb, gr, gt = _restrict(d, valid_at)
        wb, wr, wt = _restrict(alone, valid_at)
        _same_events(gb, wb)
        assert gr == wr, f"valid neighbours rejected differently: {gr} != {wr}"
        assert gt == wt, "valid neighbours' ts_ms differ"
    return d


def _message_keys(case: Case, mask: np.ndarray) -> pa.Array | None:
    """Kafka message keys for a Debezium batch: none for the valid messages, one of
    :data:`MESSAGE_KEYS` for each fuzzed one."""
    if case.fmt != "debezium":
        return None
    keys: list[bytes | None] = [None] * len(mask)
    for j, i in enumerate(np.flatnonzero(~mask).tolist()):
        keys[i] = MESSAGE_KEYS[j % len(MESSAGE_KEYS)]
    return pa.array(keys, pa.binary())


def _layout(
    valid: list[bytes], fuzzed: Sequence[bytes | None]
) -> tuple[list[bytes | None], np.ndarray]:
    """Each fuzzed message after a valid one, then every valid message once more."""
    k = len(valid)
    layout: list[bytes | None] = []
    is_valid: list[bool] = []
    for i, f in enumerate(fuzzed):
        layout += [valid[i % k], f]
        is_valid += [True, False]
    layout += valid
    is_valid += [True] * k
    return layout, np.array(is_valid)


def _check_once(case: Case, fuzzed: Sequence[bytes | None], repeat_valid: int) -> Decoded:
    layout, mask = _layout(case.messages * repeat_valid, fuzzed)
    valid_at = _positions(len(layout))[mask]
    only = [m for m, v in zip(layout, mask.tolist(), strict=True) if v]
    alone = _alone(case, only, valid_at)
    d = _decode_checked(case, layout, valid_at, alone, _message_keys(case, mask))
    # what became of the fuzzed messages alone: drop the valid ones from the counts
    d.skipped -= alone.skipped
    fuzzed_at = _positions(len(layout))[~mask]
    d.batch = d.batch.take(np.flatnonzero(np.isin(d.batch.positions, fuzzed_at)))
    by_pos = dict(zip(_positions(len(layout)).tolist(), layout, strict=True))
    if case.fmt == "json" and case.options.get("strict", True):
        _check_accepted_json(d.batch, by_pos)
    if case.fmt == "rowv2":
        _check_accepted_rowv2(d.batch, by_pos)
    return d


def _rowv2_value(raw: bytes, c: Column) -> Any:
    """One rowv2 value read the slow, obvious way (reference for the differential)."""
    t = c.type
    if pa.types.is_string(t):
        return raw.decode("utf-8")
    if pa.types.is_binary(t):
        return raw
    if pa.types.is_floating(t):
        f = struct.unpack("<d", raw)[0]
        return float(np.float32(f)) if t == pa.float32() else f
    if pa.types.is_decimal(t):
        with decimal.localcontext(decimal.Context(prec=80)):
            return decimal.Decimal(int.from_bytes(raw, "little", signed=True)).scaleb(-t.scale)
    v = int.from_bytes(raw, "little", signed=True)
    if pa.types.is_boolean(t):
        return bool(v)
    if pa.types.is_date32(t):
        return dt.date(1970, 1, 1) + dt.timedelta(days=v)
    if pa.types.is_timestamp(t):
        return dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=v)
    return v


def _rowv2_reference(msg: bytes, schema: TableSchema) -> tuple[int, dict[str, Any]]:
    """Op and column values (``None``: null) of a well-formed rowv2 row."""
    big = msg[2] & 1
    nn, nl = struct.unpack_from("<HH", msg, 3)
    idw, offw = (4, 4) if big else (1, 2)
    ids = [int.from_bytes(msg[7 + idw * k : 7 + idw * (k + 1)], "little") for k in range(nn + nl)]
    offs_at = 7 + idw * (nn + nl)
    vals_at = offs_at + offw * nn
    by_id = {c.id: c for c in schema.columns}
    out: dict[str, Any] = {}
    start = 0
    for k in range(nn):
        end = int.from_bytes(msg[offs_at + offw * k : offs_at + offw * (k + 1)], "little")
        c = by_id[ids[k]]
        out[c.name] = _rowv2_value(msg[vals_at + start : vals_at + end], c)
        start = end
    for k in range(nn, nn + nl):
        out[by_id[ids[k]].name] = None
    return msg[0], out


def _same_value(got: Any, want: Any) -> bool:
    if isinstance(got, float) and isinstance(want, float) and got != got:
        return want != want
    return bool(got == want)


def _check_accepted_rowv2(batch: ChangeBatch, messages: dict[int, bytes | None]) -> None:
    """Differential check of accepted fuzzed rowv2 rows against a plain Python reading."""
    schema = batch.schema
    for i, p in enumerate(batch.positions.tolist()):
        msg = messages[p]
        assert msg is not None
        op, cols = _rowv2_reference(msg, schema)
        assert int(batch.op[i]) == op, "accepted with another op"
        for c, arr in zip(schema.key_columns, batch.keys, strict=True):
            assert _same_value(arr[i].as_py(), cols[c.name]), f"key {c.name} differs"
        if batch.seq is not None:
            assert int(batch.seq[i]) == cols[schema.sequence_column or ""], "seq differs"
        for c in schema.value_columns:
            if c.name == schema.sequence_column:
                continue
            present = c.id in batch.present and bool(batch.present[c.id][i])
            assert present == (c.name in cols and op != OP_DELETE), f"presence of {c.name} differs"
            if present:
                got = batch.values[c.id][i].as_py()
                assert _same_value(got, cols[c.name]), (
                    f"column {c.name}: decoded {got!r}, the row holds {cols[c.name]!r}"
                )


def _check_accepted_json(batch: ChangeBatch, messages: dict[int, bytes | None]) -> None:
    """Differential check of accepted fuzzed native JSON events: each is one JSON object
    (Python's parser agrees), with the op and the key that the parser reads."""
    for i, p in enumerate(batch.positions.tolist()):
        msg = messages[p]
        assert msg is not None
        try:
            obj = json.loads(msg, strict=False)
        except RecursionError:
            continue  # nested deeper than Python's parser goes: nothing to compare with
        except ValueError as exc:
            raise AssertionError(f"accepted a message that is not JSON ({exc})") from exc
        assert isinstance(obj, dict), "accepted a message that is not an object"
        assert obj.get("op") == OP_NAMES[int(batch.op[i])], "accepted with another op"
        key = obj.get("key")
        for c, arr in zip(batch.schema.key_columns, batch.keys, strict=True):
            want = key.get(c.name) if isinstance(key, dict) else key
            got = arr[i].as_py()
            if pa.types.is_integer(c.type) or pa.types.is_string(c.type):
                assert got == want, f"accepted with key {c.name}={got!r}, JSON says {want!r}"


def check(
    case: Case, fuzzed: Sequence[bytes | None], *, repeat_valid: int = 1, stats: Stats | None = None
) -> None:
    """Decodes every fuzzed message between valid ones (one batch) and checks the oracle.

    On a failure the culprit is isolated by bisection and reported with its bytes (or
    the smallest failing group of messages, when only a group fails).

    Raises:
        FuzzFailure: The oracle failed.
    """
    try:
        d = _check_once(case, fuzzed, repeat_valid)
    except Exception as exc:
        group, problem = _isolate(case, list(fuzzed), repeat_valid, exc)
        culprit = group[0] if len(group) == 1 else None
        if len(group) > 1:
            problem += f" (only together: {len(group)} messages)"
        raise FuzzFailure(case.fmt, culprit, problem, group) from exc
    if stats is not None:
        stats.inputs += len(fuzzed)
        stats.batches += 1
        stats.accepted += len(d.batch)
        stats.skipped += d.skipped
        stats.rejected += len(fuzzed) - len(d.batch) - d.skipped


def _alone(case: Case, only: list[bytes | None], at: np.ndarray) -> Decoded:
    """Decodes the valid messages alone, at the positions they have in the mixed batch;
    they must all decode."""
    arr = pa.array(only, pa.binary())
    d = case.decoder.decode_with_meta(arr, case.schema, position=at)
    assert len(d.rejects) == 0, f"valid messages rejected: {d.rejects.reasons[:3]}"
    assert d.skipped == 0
    return d


def _isolate(
    case: Case, fuzzed: list[bytes | None], repeat_valid: int, exc: BaseException
) -> tuple[list[bytes | None], str]:
    """The smallest failing group of fuzzed messages found by bisection, and how."""
    problem = f"{type(exc).__name__}: {exc}"
    while len(fuzzed) > 1:
        mid = len(fuzzed) // 2
        for half in (fuzzed[:mid], fuzzed[mid:]):
            try:
                _check_once(case, half, repeat_valid)
            except Exception as e:
                fuzzed, problem = half, f"{type(e).__name__}: {e}"
                break
        else:
            return fuzzed, problem
    return fuzzed, problem


MutationFn = Callable[[FormatName, bytes, random.Random, int], list[bytes]]


def fuzz_case(
    case: Case, seed: int, count: int, *, stats: Stats | None = None, rowv2_matrix: bool = False
) -> None:
    """Mutates each valid message of ``case`` (``count`` of each kind) and checks them.

    Args:
        case: The valid messages.
        seed: Seed of the mutations.
        count: Mutations of each family per message (truncations: every offset).
        stats: Counters to update.
        rowv2_matrix: Repeat the valid messages past the rowv2 decoder's matrix threshold
            so that the fuzzed rows sharing their layout take the matrix path.
    """
    rng = random.Random(seed)
    fuzzed: list[bytes | None] = [None]
    for msg in case.messages:
        fuzzed += mutations(case.fmt, msg, rng, count)
    repeat = 1
    if rowv2_matrix:
        from cdc_sink.formats.rowv2 import _GROUP_MIN

        repeat = _GROUP_MIN // len(case.messages) + 1
    check(case, fuzzed, repeat_valid=repeat, stats=stats)
