"""The columnar Avro reader against fastavro, and the decimal conversion's edges.

Records of a schema with every Avro type the Debezium envelopes use (and arrays, maps and
enums, which the reader skips or reads) are written by fastavro; the reader, decoding all
of them at once field by field, must read exactly what fastavro's ``schemaless_reader``
reads record by record.
"""

from __future__ import annotations

import io
import json
import random

import fastavro
import numpy as np
import pyarrow as pa
import pytest

from cdc_sink.formats._arrays import new_reasons
from cdc_sink.formats._avro_read import Reader, Val, padded
from cdc_sink.formats._avro_schema import BadAvroSchema, parse_schema
from cdc_sink.formats._avro_values import unscaled_decimals

SCHEMA = {
    "type": "record",
    "name": "R",
    "namespace": "t",
    "fields": [
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "b", "type": "boolean"},
        {"name": "s", "type": ["null", "string"], "default": None},
        {"name": "y", "type": "bytes"},
        {"name": "x", "type": {"type": "fixed", "name": "F", "size": 3}},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
        {"name": "a", "type": {"type": "array", "items": ["null", "long"]}},
        {"name": "m", "type": {"type": "map", "values": "string"}},
        {
            "name": "r",
            "type": [
                "null",
                {"type": "record", "name": "In", "fields": [{"name": "v", "type": "long"}]},
            ],
            "default": None,
        },
        {"name": "r2", "type": ["null", "In"], "default": None},
    ],
}


def _record(rnd: random.Random) -> dict[str, object]:
    return {
        "i": rnd.randrange(-(2**31), 2**31),
        "l": rnd.choice([0, -1, 2**63 - 1, -(2**63), rnd.randrange(-(2**40), 2**40)]),
        "f": rnd.uniform(-1e6, 1e6),
        "d": rnd.uniform(-1e300, 1e300),
        "b": rnd.random() < 0.5,
        "s": None if rnd.random() < 0.3 else "é" * rnd.randrange(0, 5),
        "y": bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 6))),
        "x": bytes(rnd.randrange(256) for _ in range(3)),
        "e": rnd.choice("ABC"),
        "a": [
            None if rnd.random() < 0.2 else rnd.randrange(-9, 9) for _ in range(rnd.randrange(4))
        ],
        "m": {f"k{j}": "v" * j for j in range(rnd.randrange(3))},
        "r": None if rnd.random() < 0.5 else {"v": rnd.randrange(-(2**62), 2**62)},
        "r2": None if rnd.random() < 0.5 else {"v": rnd.randrange(100)},
    }


def _spans(v: Val, data: np.ndarray) -> list[bytes]:
    assert v.starts is not None and v.ends is not None
    return [data[a:b].tobytes() for a, b in zip(v.starts.tolist(), v.ends.tolist(), strict=True)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_columnar_reader_reads_what_fastavro_reads(seed: int):
    rnd = random.Random(seed)
    parsed = fastavro.parse_schema(SCHEMA)
    recs = [_record(rnd) for _ in range(300)]
    blobs = []
    for r in recs:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, r)
        blobs.append(buf.getvalue())
    want = [fastavro.schemaless_reader(io.BytesIO(b), parsed, None) for b in blobs]
    data = np.frombuffer(b"".join(blobs), np.uint8)
    ends = np.cumsum([len(b) for b in blobs])
    reasons = new_reasons(len(blobs))
    val = Reader(padded(data), ends - [len(b) for b in blobs], ends, reasons).read_record(
        parse_schema(json.dumps(SCHEMA))
    )
    assert (reasons == None).all()  # noqa: E711
    c = val.children
    assert c["i"].ints.tolist() == [w["i"] for w in want]  # type: ignore[union-attr]
    assert c["l"].ints.tolist() == [w["l"] for w in want]  # type: ignore[union-attr]
    assert c["f"].floats.tolist() == [w["f"] for w in want]  # type: ignore[union-attr]
    assert c["d"].floats.tolist() == [w["d"] for w in want]  # type: ignore[union-attr]
    assert c["b"].bools.tolist() == [w["b"] for w in want]  # type: ignore[union-attr]
    assert _spans(c["y"], data) == [w["y"] for w in want]
    assert _spans(c["x"], data) == [w["x"] for w in want]
    assert [SCHEMA["fields"][8]["type"]["symbols"][k] for k in c["e"].ints.tolist()] == [  # type: ignore
        w["e"] for w in want
    ]
    s, nulls = c["s"].nonnull()
    got_s: list[object] = [None] * len(want)
    for row, text in zip(s.rows.tolist(), _spans(s, data), strict=True):
        got_s[row] = text.decode()
    assert got_s == [w["s"] for w in want] and len(nulls) == sum(w["s"] is None for w in want)
    for name in ("r", "r2"):
        rec, _ = c[name].nonnull()
        got_r: list[object] = [None] * len(want)
        for row, v in zip(rec.rows.tolist(), rec.children["v"].ints.tolist(), strict=True):  # type: ignore[union-attr]
            got_r[row] = {"v": v}
        assert got_r == [w[name] for w in want]


def test_schemas_the_reader_cannot_take_are_refused():
    for bad, why in (
        ("{", "not JSON"),
        (
            json.dumps({"type": "record", "name": "A", "fields": [{"name": "a", "type": "A"}]}),
            "recursive",
        ),
        (
            json.dumps({"type": "record", "name": "A", "fields": [{"name": "a", "type": "Nope"}]}),
            "unknown type",
        ),
        (json.dumps(["int", "int"]), "repeats"),
        ("[" * 200 + "]" * 200, "nested deeper"),
        (json.dumps({"type": "bytes", "logicalType": "decimal", "scale": 99}), "scale"),
    ):
        with pytest.raises(BadAvroSchema, match=why):
            parse_schema(bad)


def test_decimals_wider_than_16_bytes_are_exact_when_only_sign_extended():
    vals = [
        b"\x00" * 10 + (12345).to_bytes(16, "big", signed=True),
        b"\xff" * 5 + (-5).to_bytes(16, "big", signed=True),
        b"\x01" + b"\x00" * 16,  # 2**128: beyond 128 bits
        (1234567).to_bytes(3, "big", signed=True),
        b"",
    ]
    arr, bad, oor = unscaled_decimals(
        pa.array(vals, pa.binary()), np.full(5, 2), pa.decimal128(10, 2)
    )
    import decimal

    assert arr.to_pylist() == [
        decimal.Decimal("123.45"),
        decimal.Decimal("-0.05"),
        None,
        decimal.Decimal("12345.67"),
        None,
    ]
    assert bad.tolist() == [False, False, True, False, True]
    assert oor.tolist() == [False, False, True, False, False]
