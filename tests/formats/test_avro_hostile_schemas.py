"""Hostile Avro schemas and messages: the reader's work follows the bytes it reads.

Issue 49, findings 5 and 6: a "billion laughs" schema (named types reused at each level)
passed the depth and recursion checks and the reader walked its whole expansion on every
message, branches no record takes included; arrays were skipped item by item, so
zero-byte items in many blocks cost quadratic time and the event was applied. Here a
schema that expands too far is refused when it is loaded (its messages rejected with the
reason), the reader visits only the types the records hold (counted by wrapping
:meth:`Reader.read`), arrays of fixed-width items are skipped a block at once (read
exactly as fastavro reads what follows them), and a record with more array blocks than
its bytes warrant is refused.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pytest

from cdc_sink.formats._arrays import new_reasons
from cdc_sink.formats._avro_read import MAX_BLOCKS, Reader, Val, padded
from cdc_sink.formats._avro_schema import MAX_EXPANDED, BadAvroSchema, parse_schema
from cdc_sink.formats.debezium_avro import DebeziumAvroDecoder
from cdc_sink.schema import TableSchema
from tests.avro.offline import URL, OfflineRegistry, header, zigzag
from tests.formats.hostile import laughs

TABLE = TableSchema.from_dict({"columns": [{"name": "id", "type": "int64"}], "primary_key": ["id"]})


def envelope(extra: Any) -> dict[str, Any]:
    """A Debezium-like envelope whose ``after`` row also holds a field of type ``extra``."""
    return {
        "type": "record",
        "name": "Envelope",
        "fields": [
            {"name": "before", "type": ["null", "string"], "default": None},
            {
                "name": "after",
                "type": [
                    "null",
                    {
                        "type": "record",
                        "name": "Value",
                        "fields": [{"name": "id", "type": "long"}, {"name": "x", "type": extra}],
                    },
                ],
                "default": None,
            },
            {"name": "op", "type": "string"},
        ],
    }


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> OfflineRegistry:
    reg = OfflineRegistry()
    reg.install(monkeypatch)
    return reg


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many types the reader visits (calls of Reader.read)."""
    count = [0]
    real = Reader.read

    def counted(self: Reader, node: Any, rows: np.ndarray) -> Val:
        count[0] += 1
        return real(self, node, rows)

    monkeypatch.setattr(Reader, "read", counted)
    yield count


def test_a_billion_laughs_schema_is_refused_when_loaded():
    for levels in (6, 9):
        with pytest.raises(BadAvroSchema, match="expands to more than"):
            parse_schema(json.dumps(envelope(laughs(levels))))
    node = parse_schema(json.dumps(envelope(laughs(3))))  # a thousand: fine
    assert node.expanded < MAX_EXPANDED


def test_messages_of_a_refused_schema_are_rejected_with_the_reason(registry: OfflineRegistry):
    sid = registry.register(envelope(laughs(6)), writable=False)
    # no before, after a Value of id i (its x takes no bytes), op "c": 18 bytes each
    msgs = [header(sid) + b"\x00\x02" + zigzag(i) + b"\x02c" for i in range(51)]
    out = DebeziumAvroDecoder(registry_url=URL).decode_with_meta(pa.array(msgs, pa.binary()), TABLE)
    assert len(out.batch) == 0 and len(out.rejects) == 51
    assert all("expands to more than" in r for r in out.rejects.reasons)
    assert registry.loads == 1  # parsed once for the batch


def _read(schema: Any, blobs: list[bytes]) -> tuple[Val, np.ndarray]:
    data = np.frombuffer(b"".join(blobs), np.uint8)
    ends = np.cumsum([len(b) for b in blobs])
    reasons = new_reasons(len(blobs))
    val = Reader(padded(data), ends - [len(b) for b in blobs], ends, reasons).read_record(
        parse_schema(json.dumps(schema))
    )
    return val, reasons


def _write(schema: Any, records: list[Any]) -> list[bytes]:
    parsed = fastavro.parse_schema(schema)
    out = []
    for r in records:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, r)
        out.append(buf.getvalue())
    return out


def test_the_reader_visits_no_branch_no_record_takes(reads: list[int]):
    big = laughs(2, width=20)  # thousands of types, all in a branch no record takes
    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "a", "type": ["null", big]}, {"name": "n", "type": "long"}],
    }
    blobs = _write(schema, [{"a": None, "n": i} for i in range(5)])
    val, reasons = _read(schema, blobs)
    assert (reasons == None).all()  # noqa: E711
    assert val.children["n"].ints.tolist() == list(range(5))  # type: ignore[union-attr]
    assert reads[0] < 10


def test_types_of_no_bytes_are_not_walked(reads: list[int]):
    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "z", "type": laughs(2, width=20)}, {"name": "n", "type": "long"}],
    }
    val, reasons = _read(schema, [zigzag(7), zigzag(-3)])
    assert (reasons == None).all()  # noqa: E711
    assert val.children["n"].ints.tolist() == [7, -3]  # type: ignore[union-attr]
    z = val.children["z"]
    assert z.children["f3"].children["f0"].node.name == "L0"  # made when asked for
    assert reads[0] < 10


FIXED_ITEMS = {
    "null": None,
    "double": 2.5,
    "boolean": True,
    "pair": {"a": 1.5, "b": False},
    "three": b"abc",
}


def _item_type(name: str) -> Any:
    if name == "pair":
        return {
            "type": "record",
            "name": "Pair",
            "fields": [{"name": "a", "type": "float"}, {"name": "b", "type": "boolean"}],
        }
    if name == "three":
        return {"type": "fixed", "name": "Three", "size": 3}
    return name


@pytest.mark.parametrize("item", list(FIXED_ITEMS))
def test_arrays_of_fixed_width_items_are_skipped_a_block_at_once(item: str, reads: list[int]):
    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "xs", "type": {"type": "array", "items": _item_type(item)}},
            {"name": "n", "type": "long"},
        ],
    }
    counts = [0, 1, 2, 1000]
    records = [{"xs": [FIXED_ITEMS[item]] * k, "n": k * 7} for k in counts]
    blobs = _write(schema, records)
    want = [
        fastavro.schemaless_reader(io.BytesIO(b), fastavro.parse_schema(schema), None)
        for b in blobs
    ]
    # the same arrays split in blocks, one of them with its byte size (a negative count)
    width = {"null": 0, "double": 8, "boolean": 1, "pair": 5, "three": 3}[item]
    one = blobs[2][1 : 1 + 2 * width] if width else b""
    split = zigzag(1) + one[:width] + zigzag(-1) + zigzag(width) + one[width:] + b"\x00"
    blobs.append(split + zigzag(99))
    val, reasons = _read(schema, blobs)
    assert (reasons == None).all(), reasons  # noqa: E711
    assert val.children["n"].ints.tolist() == [w["n"] for w in want] + [99]  # type: ignore[union-attr]
    assert reads[0] <= 3  # the record, the array, the long: no item read one by one


def test_many_blocks_of_zero_byte_items_refuse_their_record():
    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "xs", "type": {"type": "array", "items": "null"}}],
    }
    # 2,000 blocks of one null each (a byte each), then the end of the array
    hostile = zigzag(1) * 2000 + b"\x00"
    fine = zigzag(1) * (MAX_BLOCKS - 1) + b"\x00"  # the end is a block too
    _, reasons = _read(schema, [hostile, fine])
    assert reasons[0] is not None and "more blocks" in reasons[0]
    assert reasons[1] is None


VARINT_ITEMS: dict[str, tuple[Any, Any]] = {
    "long": ("long", lambda r: r.randrange(-(2**63), 2**63)),
    "nullable long": (
        ["null", "long"],
        lambda r: None if r.random() < 0.3 else r.randrange(-999, 10**12),
    ),
    "enum": ({"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}, lambda r: r.choice("ABC")),
    "record": (
        {
            "type": "record",
            "name": "Item",
            "fields": [
                {"name": "a", "type": "int"},
                {"name": "b", "type": ["null", "boolean"]},
                {"name": "c", "type": "double"},
            ],
        },
        lambda r: {
            "a": r.randrange(-(2**31), 2**31),
            "b": r.choice([None, True, False]),
            "c": r.random(),
        },
    ),
    "nullable fixed": (
        ["null", {"type": "fixed", "name": "F3", "size": 3}],
        lambda r: None if r.random() < 0.5 else r.randbytes(3),
    ),
}


@pytest.mark.parametrize("item", list(VARINT_ITEMS))
def test_arrays_of_varint_items_are_skipped_as_fastavro_reads_them(item: str, reads: list[int]):
    import random

    rnd = random.Random(49)
    item_type, make = VARINT_ITEMS[item]
    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "xs", "type": {"type": "array", "items": item_type}},
            {"name": "n", "type": "long"},
        ],
    }
    counts = [0, 1, 2, 3, 7, 8, 9, 63, 64, 65, 5000] + [rnd.randrange(40) for _ in range(40)]
    records = [{"xs": [make(rnd) for _ in range(k)], "n": rnd.randrange(-9, 9)} for k in counts]
    blobs = _write(schema, records)
    # a record's array split in two blocks, the second with its byte size
    first = _write(schema, [{"xs": records[4]["xs"][:3], "n": 0}])[0]
    rest = _write(schema, [{"xs": records[4]["xs"][3:], "n": 0}])[0]
    body1, body2 = first[1:-2], rest[1:-2]  # items only (counts of one byte, end, n)
    blobs.append(zigzag(3) + body1 + zigzag(-4) + zigzag(len(body2)) + body2 + b"\x00" + zigzag(5))
    val, reasons = _read(schema, blobs)
    assert (reasons == None).all(), reasons  # noqa: E711
    assert val.children["n"].ints.tolist() == [r["n"] for r in records] + [5]  # type: ignore[union-attr]
    assert reads[0] <= 3


def test_an_item_that_is_not_of_its_type_refuses_its_record_only():
    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "xs", "type": {"type": "array", "items": ["null", "long"]}},
            {"name": "n", "type": "long"},
        ],
    }
    items = b"\x02" + zigzag(5) + b"\x00" + b"\x02" + zigzag(-7)  # 5, null, -7
    good = zigzag(3) + items + b"\x00" + zigzag(1)
    branch = zigzag(3) + b"\x02" + zigzag(5) + b"\x0a" + b"\x02" + zigzag(-7) + b"\x00" + zigzag(1)
    endless = zigzag(2) + b"\x02" + b"\xff" * 11 + b"\x01" + b"\x00" + b"\x00" + zigzag(1)
    short = zigzag(4) + items + b"\x00" + zigzag(1)  # says 4 items, holds 3 then 0, 1
    truncated = zigzag(3) + items[:-1]
    _, reasons = _read(schema, [good, branch, good, endless, short, truncated, good])
    assert [r is None for r in reasons] == [True, False, True, False, False, False, True]


BLOB_ITEMS: dict[str, tuple[Any, Any]] = {
    "string": ({"type": "array", "items": "string"}, lambda r, big: "é" * (big or r.randrange(9))),
    "nullable bytes": (
        {"type": "array", "items": ["null", "bytes"]},
        lambda r, big: None if r.random() < 0.3 else r.randbytes(big or r.randrange(200)),
    ),
    "map of longs": ({"type": "map", "values": "long"}, None),
    "map of records": (
        {
            "type": "map",
            "values": {
                "type": "record",
                "name": "V",
                "fields": [{"name": "s", "type": "string"}, {"name": "n", "type": "int"}],
            },
        },
        None,
    ),
}


def _blob_items(name: str, rnd: Any, k: int, big: int) -> Any:
    kind, make = BLOB_ITEMS[name]
    if make is not None:
        return [make(rnd, big if i == k // 2 else 0) for i in range(k)]
    if kind["values"] == "long":
        return {
            f"k{i}" + "x" * (big if i == k // 2 else 0): rnd.randrange(-(2**40), 2**40)
            for i in range(k)
        }
    return {f"k{i}": {"s": "y" * (big if i == k // 2 else i % 7), "n": i} for i in range(k)}


@pytest.mark.parametrize("item", list(BLOB_ITEMS))
def test_arrays_and_maps_with_strings_are_skipped_as_fastavro_reads_them(
    item: str, reads: list[int]
):
    import random

    rnd = random.Random(7)
    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "xs", "type": BLOB_ITEMS[item][0]}, {"name": "n", "type": "long"}],
    }
    counts = [0, 1, 2, 3, 63, 64, 65, 3000] + [rnd.randrange(30) for _ in range(30)]
    bigs = [0] * len(counts)
    bigs[1] = bigs[6] = 70_000  # an item larger than the tables hold
    records = [
        {"xs": _blob_items(item, rnd, k, big), "n": rnd.randrange(-9, 9)}
        for k, big in zip(counts, bigs, strict=True)
    ]
    val, reasons = _read(schema, _write(schema, records))
    assert (reasons == None).all(), reasons  # noqa: E711
    assert val.children["n"].ints.tolist() == [r["n"] for r in records]  # type: ignore[union-attr]
    assert reads[0] <= 3


def test_a_map_of_a_million_empty_keys_is_skipped_at_once(reads: list[int]):
    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "m", "type": {"type": "map", "values": "null"}}],
    }
    blob = zigzag(1 << 20) + b"\x00" * (1 << 20) + b"\x00"  # a block of 2**20 "" keys
    _, reasons = _read(schema, [blob, blob[:-2]])
    assert reasons[0] is None and reasons[1] is not None
    assert reads[0] <= 2
