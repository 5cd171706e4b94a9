"""Fuzz of the ``debezium-avro`` decoder: hostile and damaged messages.

Valid messages (Debezium's documented events in Avro, written through the real registry)
are truncated at every length, mutated byte by byte, given a wrong magic byte or a schema
id the registry does not know, and crafted with lengths and counts past the end and
varints that never end. Every input must come back as an event, a reject with a reason,
or a skipped tombstone; nothing may raise; and the memory the decode takes is bounded by
the input's size.
"""

from __future__ import annotations

import tracemalloc
import uuid

import numpy as np
import pyarrow as pa
import pytest

from cdc_sink.formats import Decoded
from cdc_sink.formats.avro_wire import cache_clear
from cdc_sink.formats.debezium_avro import DebeziumAvroDecoder
from cdc_sink.schema import TableSchema
from cdc_sink_testkit.registry import LocalRegistry
from tests.avro.connect import avro_datum, avro_schema
from tests.avro.produce import AvroWriter
from tests.formats.test_debezium_docs import (
    MYSQL_CREATE,
    MYSQL_CUSTOMERS,
    MYSQL_SCHEMA,
    PRICE,
    TYPES,
    create,
    row,
    types_schema,
)

UNKNOWN_ID = (1 << 31) - 7  # no registry has assigned it


@pytest.fixture(scope="module")
def messages(schema_registry: LocalRegistry) -> dict[str, tuple[bytes, TableSchema]]:
    topic = f"fuzz-{uuid.uuid4().hex[:8]}"
    mysql = AvroWriter(schema_registry.url, topic + "-m", avro_schema(MYSQL_SCHEMA))
    types = AvroWriter(schema_registry.url, topic + "-t", avro_schema(types_schema("precise")))
    return {
        "mysql": (mysql(avro_datum(MYSQL_SCHEMA, MYSQL_CREATE["payload"])), MYSQL_CUSTOMERS),
        "types": (
            types(avro_datum(types_schema("precise"), create(row(price=PRICE["precise"])))),
            TYPES,
        ),
    }


def decode(registry: LocalRegistry, values: list[bytes | None], table: TableSchema) -> Decoded:
    dec = DebeziumAvroDecoder(registry_url=registry.url)
    out = dec.decode_with_meta(pa.array(values, pa.binary()), table)
    accounted = len(out.batch) + len(out.rejects) + out.skipped
    assert accounted == len(values)
    seen = set(out.batch.positions.tolist()) | set(out.rejects.positions.tolist())
    assert len(seen) == len(out.batch) + len(out.rejects)
    assert all(isinstance(r, str) and r for r in out.rejects.reasons)
    return out


@pytest.mark.parametrize("name", ["mysql", "types"])
def test_every_truncation_is_a_reject_with_a_reason(schema_registry, messages, name):
    msg, table = messages[name]
    values = [msg[:k] for k in range(1, len(msg))]
    out = decode(schema_registry, [*values, msg], table)
    assert out.batch.positions.tolist() == [len(values)]  # only the whole message decodes
    assert out.rejects.positions.tolist() == list(range(len(values)))
    assert all(r.startswith("malformed event") for r in out.rejects.reasons)
    assert any("past the end" in r for r in out.rejects.reasons)
    assert any("shorter than the 5-byte header" in r for r in out.rejects.reasons)


@pytest.mark.parametrize("name", ["mysql", "types"])
def test_mutated_messages_never_raise(schema_registry, messages, name):
    msg, table = messages[name]
    rng = np.random.default_rng(42)
    values = []
    for _ in range(3000):
        b = bytearray(msg)
        for _ in range(int(rng.integers(1, 4))):
            i = int(rng.integers(5, len(b)))  # the body: the header is fuzzed below
            k = rng.random()
            if k < 0.3:
                del b[i]
            elif k < 0.6:
                b.insert(i, int(rng.integers(256)))
            else:
                b[i] = int(rng.integers(256))
        values.append(bytes(b))
    out = decode(schema_registry, values, table)
    assert len(out.rejects) > 0 and len(out.batch) > 0


def test_wrong_magic_and_unknown_schema_ids_are_rejects(schema_registry, messages):
    msg, table = messages["mysql"]
    cache_clear()
    wrong_magic = b"\x01" + msg[1:]
    json_value = b'{"op": "c"}'
    unknown = b"\x00" + UNKNOWN_ID.to_bytes(4, "big") + msg[5:]
    out = decode(schema_registry, [wrong_magic, json_value, unknown, msg, None, b""], table)
    assert out.batch.positions.tolist() == [3]
    assert out.skipped == 2  # a null and an empty value: tombstones
    reasons = out.rejects.as_dict()
    assert "magic byte 0x01" in reasons[0] and "magic byte 0x7b" in reasons[1]
    assert f"unknown schema id {UNKNOWN_ID}" in reasons[2]


def _hostile(msg: bytes) -> list[bytes]:
    head = msg[:5]
    varint_forever = head + b"\x02" + b"\xff" * 200  # a union branch, then an endless varint
    long_string = head + b"\x02" + b"\x08" + b"\x80\x80\x80\x80\x80\x80\x80\x80\x40" + b"ab"
    negative_len = head + b"\x02\x08\x03"  # a union branch, id 4, then length -2
    overflow = head + b"\x02" + b"\xff" * 9 + b"\x7f"  # ten bytes, more than 64 bits
    branch = head + b"\x7e"  # union branch 63 of a two-branch union
    trailing = msg + b"\x00\x00"
    return [varint_forever, long_string, negative_len, overflow, branch, trailing]


def test_lengths_past_the_end_and_endless_varints_are_rejects(schema_registry, messages):
    msg, table = messages["mysql"]
    values = _hostile(msg)
    out = decode(schema_registry, values, table)
    assert len(out.batch) == 0 and out.rejects.positions.tolist() == list(range(len(values)))
    reasons = out.rejects.reasons
    assert "varint longer than 10 bytes" in reasons[0]
    assert "length runs past the end" in reasons[1]
    assert "negative length" in reasons[2]
    assert "overflows 64 bits" in reasons[3]
    assert "union branch out of range" in reasons[4]
    assert "trailing bytes" in reasons[5]


def test_memory_is_bounded_by_the_input(schema_registry, messages):
    """Hostile messages that claim huge lengths cost memory in proportion to their bytes."""
    msg, table = messages["mysql"]
    values = _hostile(msg) * 2000
    size = sum(len(v) for v in values)
    decode(schema_registry, values[:10], table)  # schemas cached, code warmed
    tracemalloc.start()
    try:
        decode(schema_registry, values, table)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 200 * size + (8 << 20), (peak, size)
