"""Hostile inputs for every decoder, and what decoding them costs (issue 38).

Shared by the CI test (``tests/formats/test_resource_fuzz.py``) and the report
(``benchmarks/hostile_input.py``).

- :data:`CASES` are seeded generators of adversarial batches, a few MB each, for every
  format: rowv2 rows declaring 65,535 column ids (null, not-null, 4-byte, duplicated),
  huge offsets and truncated headers; JSON events (native, Debezium with and without
  the envelope) with hundreds of thousands of members (unknown, repeated, ignored at the
  top level), deep nesting, numbers of a million digits, long strings (plain, escaped,
  invalid UTF-8), long member names, long base64 values, and many events on one key.
  Each message carries its *intent*: what it says (the event a decoder must produce if
  it accepts it) and whether it must be rejected.
- :func:`measure` decodes one case in a child process and returns the bytes in, the
  peak memory, the CPU time and every accepted value that differs from the intent.

How memory is measured: each case runs in a child forked from a fork server that has
already imported numpy, pyarrow and cdc_sink (one fork per case: no allocator state
left over from another case). The child builds its input, decodes a few valid messages
(so lazily created Arrow kernels and caches are not counted), then resets the kernel's
peak resident set size (``/proc/self/clear_refs`` ← ``5``), reads its resident size,
decodes, and reads the peak (``VmHWM`` of ``/proc/self/status``). Peak minus the size
before is what the decode took: every page touched by numpy, Arrow's memory pool
(jemalloc/mimalloc, outside tracemalloc), the C extensions' buffers and Python objects
alike. Pages reserved but never written (``np.empty`` of a bound never reached) do not
count, as they cost no memory. CPU is the child's process time (every thread).
"""

from __future__ import annotations

import base64
import decimal
import gc
import json
import multiprocessing as mp
import random
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from cdc_sink.batch import OP_NAMES
from cdc_sink.formats import FormatName, get_decoder
from cdc_sink.formats.debezium import encode_debezium
from cdc_sink.formats.native_json import encode_json
from cdc_sink.formats.rowv2 import CODEC_VERSION, FLAG_BIG, encode_event
from cdc_sink.schema import TableSchema
from tests.avro.offline import URL as OFFLINE_URL
from tests.avro.offline import OfflineRegistry, header, zigzag

SCHEMA = TableSchema.from_dict(
    {
        "columns": [
            {"name": "id", "type": "int64"},
            {"name": "name", "type": "string"},
            {"name": "qty", "type": "int64"},
            {"name": "price", "type": "decimal128(12, 2)"},
            {"name": "ratio", "type": "float64"},
            {"name": "flag", "type": "bool"},
            {"name": "blob", "type": "binary"},
        ],
        "primary_key": ["id"],
    }
)
"""The table every case decodes into (one int64 key and six value columns)."""

TARGET_BYTES = 3 << 20
"""About how many bytes of input each case builds."""

MUST_REJECT = "reject"
EITHER = "either"
MUST_ACCEPT = "accept"


@dataclass
class Intent:
    """What one message says: the event (``op``, ``key``, ``set``; Python values) and
    whether a decoder must reject it, must accept it, or may do either (a decoder that
    accepts it must produce exactly ``event``)."""

    verdict: str
    event: dict[str, Any] | None = None


@dataclass(frozen=True)
class HostileCase:
    """One adversarial batch: its format, decoder options and generator."""

    name: str
    fmt: FormatName
    build: Callable[[random.Random, int], tuple[list[bytes], list[Intent]]]
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``format[/envelope]:name``."""
        env = "+envelope" if self.options.get("_envelope") else ""
        return f"{self.fmt}{env}:{self.name}"


# ====================================================================== JSON messages
def _one_key_events(rng: random.Random) -> list[dict[str, Any]]:
    """Events of one key (a pool that many events of a batch repeat)."""
    return [
        _event(
            7,
            {
                "qty": rng.randrange(-(2**63), 2**63),
                "name": f"n{i}",
                "price": decimal.Decimal(rng.randrange(-(10**11), 10**11)).scaleb(-2),
                "flag": bool(i % 2),
            },
        )
        for i in range(1000)
    ]


def _event(key: int, sets: dict[str, Any], op: str = "upsert") -> dict[str, Any]:
    return {"op": op, "key": {"id": key}, "set": sets}


def _json_message(
    fmt: FormatName, envelope: bool, ev: dict[str, Any], row_extra: str = "", top_extra: str = ""
) -> bytes:
    """The message of event ``ev`` in ``fmt``, with raw JSON member text inserted first
    in its row object (``set``/``after``) and at its top level."""
    if fmt == "json":
        text = encode_json(ev).decode("utf-8")
        row_at = '"set": {'
    else:
        row = {**ev["key"], **ev["set"]}
        text = encode_debezium(
            "c", None, row, SCHEMA, envelope=envelope, decimal_handling="string"
        ).decode("utf-8")
        row_at = '"after":{'
    if row_extra:
        at = text.index(row_at) + len(row_at)
        sep = "" if text[at] == "}" else ","
        text = text[:at] + row_extra + sep + text[at:]
    if top_extra:
        text = "{" + top_extra + "," + text[1:]
    return text.encode("utf-8")


def _members(count: int, make: Callable[[int], str]) -> str:
    return ",".join(make(i) for i in range(count))


def _fill(
    size: int, one: Callable[[int], tuple[bytes, Intent]]
) -> tuple[list[bytes], list[Intent]]:
    """Messages ``one(0)``, ``one(1)``... until they take ``size`` bytes, and their intents."""
    msgs: list[bytes] = []
    intents: list[Intent] = []
    total = 0
    while total < size:
        m, it = one(len(msgs))
        msgs.append(m)
        intents.append(it)
        total += len(m)
    return msgs, intents


class _JsonCases:
    """The hostile JSON batches of one JSON format, one generator method each."""

    def __init__(self, fmt: FormatName, envelope: bool) -> None:
        self.fmt, self.envelope = fmt, envelope

    def msg(self, ev: dict[str, Any], row_extra: str = "", top_extra: str = "") -> bytes:
        """The message of ``ev`` (see :func:`_json_message`)."""
        return _json_message(self.fmt, self.envelope, ev, row_extra, top_extra)

    def unknown_members(self, rng: random.Random, size: int) -> tuple[list[bytes], list[Intent]]:
        # a quarter of a million unknown columns in one event (the rest of the batch
        # is one more event of the same kind)
        def one(i: int) -> tuple[bytes, Intent]:
            extra = _members(size // 24, lambda j: f'"u{j}":{j % 10}')
            return self.msg(_event(i, {"qty": 1}), extra), Intent(MUST_REJECT)

        return _fill(size, one)

    def repeated_column(self, rng: random.Random, size: int) -> tuple[list[bytes], list[Intent]]:
        def one(i: int) -> tuple[bytes, Intent]:
            extra = _members(size // 40, lambda j: f'"qty":{j}')
            return self.msg(_event(i, {"name": "x"}), extra), Intent(MUST_REJECT)

        return _fill(size, one)

    def ignored_top(self, rng: random.Random, size: int) -> tuple[list[bytes], list[Intent]]:
        def one(i: int) -> tuple[bytes, Intent]:
            ev = _event(i, {"qty": i})
            extra = _members(size // 40, lambda j: f'"x{j}":[{j}]')
            return self.msg(ev, top_extra=extra), Intent(EITHER, ev)

        return _fill(size, one)

    def deep_nesting(self, rng: random.Random, size: int) -> tuple[list[bytes], list[Intent]]:
        def one(i: int) -> tuple[bytes, Intent]:
            ev = _event(i, {"qty": i})
            depth = size // 8
            if i % 2:  # in an ignored top-level member
                opener = rng.choice(["[", '{"a":'])
                closer = "]" if opener == "[" else "}"
                return self.msg(ev, top_extra='"deep":' + opener * depth + "1" + closer * depth), (
                    Intent(EITHER, ev)
                )
            # as a column's value
            return self.msg(ev, '"ratio":' + "[" * depth + "]" * depth), Intent(MUST_REJECT)

        return _fill(size, one)

    def huge_numbers(self, rng: random.Random, size: int) -> tuple[list[bytes], list[Intent]]:
        digits = size // 6

        def one(i: int) -> tuple[bytes, Intent]:
            kind = i % 5
            ev = _event(i, {})
            if kind == 0:  # an integer column
                return self.msg(ev, '"qty":' + "9" * digits), Intent(MUST_REJECT)
            if kind == 1:  # a decimal column, as a number and as a string
                return self.msg(ev, '"price":' + "1" * digits + ".5"), Intent(MUST_REJECT)
            if kind == 2:
                return self.msg(ev, '"price":"' + "7" * digits + '"'), Intent(MUST_REJECT)
            if kind == 3:  # a float too big for a double
                return self.msg(ev, '"ratio":' + "8" * digits + "e5"), Intent(MUST_REJECT)
            # a float of a million digits that is a small double: either way
            text = "0." + "0" * 20 + "3" * digits
            return self.msg(ev, '"ratio":' + text), Intent(
                EITHER, _event(i, {"ratio": float(text)})
            )

        return _fill(size, one)

    def long_strings(self, rng: random.Random, size: int) -> tuple[list[bytes], list[Intent]]:
        length = size // 6

        def one(i: int) -> tuple[bytes, Intent]:
            kind = i % 4
            if kind == 0:  # plain, valid: accepted as it is
                s = "".join(rng.choices("abcdéü€😀 ", k=length // 2))
                ev = _event(i, {"name": s})
                return self.msg(ev), Intent(MUST_ACCEPT, ev)
            if kind == 1:  # escapes all along
                s = "".join(rng.choices('é"\\\n\t\x01/', k=length // 6))
                ev = _event(i, {"name": s})
                return json_ascii(self.msg, ev), Intent(MUST_ACCEPT, ev)
            if kind == 2:  # invalid UTF-8 at the end of a long string
                m = self.msg(_event(i, {"name": "PLACEHOLDER"}))
                return m.replace(b"PLACEHOLDER", b"a" * length + b"\xff\xfe"), Intent(MUST_REJECT)
            # a member name of a million bytes
            return self.msg(_event(i, {}), '"' + "n" * length + '":1'), Intent(MUST_REJECT)

        return _fill(size, one)

    def long_base64(self, rng: random.Random, size: int) -> tuple[list[bytes], list[Intent]]:
        def one(i: int) -> tuple[bytes, Intent]:
            raw = rng.randbytes(size // 8)
            ev = _event(i, {"blob": raw})
            if i % 2:
                return self.msg(ev), Intent(MUST_ACCEPT, ev)
            bad = base64.b64encode(raw).decode("ascii")[:-3] + "!=="
            return self.msg(_event(i, {}), f'"blob":"{bad}"'), Intent(MUST_REJECT)

        return _fill(size, one)

    def one_key(self, rng: random.Random, size: int) -> tuple[list[bytes], list[Intent]]:
        pool = [(self.msg(ev), Intent(MUST_ACCEPT, ev)) for ev in _one_key_events(rng)]
        return _fill(size, lambda i: rng.choice(pool))


def _json_cases(fmt: FormatName, envelope: bool) -> list[HostileCase]:
    """The hostile JSON batches of one JSON format."""
    opts: dict[str, Any] = {"_envelope": True} if envelope else {}
    if fmt == "debezium":
        opts["decimal_handling"] = "string"
    g = _JsonCases(fmt, envelope)
    cases = [
        ("unknown_members", g.unknown_members),
        ("repeated_column", g.repeated_column),
        ("ignored_top_members", g.ignored_top),
        ("deep_nesting", g.deep_nesting),
        ("huge_numbers", g.huge_numbers),
        ("long_strings", g.long_strings),
        ("long_base64", g.long_base64),
        ("many_events_one_key", g.one_key),
    ]
    return [HostileCase(name, fmt, build, dict(opts)) for name, build in cases]


def json_ascii(msg: Callable[[dict[str, Any]], bytes], ev: dict[str, Any]) -> bytes:
    """The message of ``ev`` with every non-ASCII character of its strings escaped."""
    plain = msg(ev)
    return json.dumps(json.loads(plain), ensure_ascii=True).encode("ascii")


# ====================================================================== rowv2 messages
def _row(op: int, nn_ids: list[int], nl_ids: list[int], values: list[bytes], big: bool) -> bytes:
    idf, off = ("<I", "<I") if big else ("<B", "<H")
    ends = []
    total = 0
    for v in values:
        total += len(v)
        ends.append(total)
    out = bytearray(struct.pack("<BBBHH", op, CODEC_VERSION, FLAG_BIG if big else 0, 0, 0))
    struct.pack_into("<HH", out, 3, len(nn_ids), len(nl_ids))
    for i in [*nn_ids, *nl_ids]:
        out += struct.pack(idf, i)
    for e in ends:
        out += struct.pack(off, e)
    for v in values:
        out += v
    return bytes(out)


class _RowCases:
    """The hostile rowv2 batches, one generator method each."""

    def __init__(self) -> None:
        self.ids = {c.name: c.id for c in SCHEMA.columns}

    def declared_null_ids(self, rng: random.Random, size: int) -> tuple[list[bytes], list[Intent]]:
        # issue 38, finding 3: rows declaring 65,535 null column ids (each a new layout)
        def one(i: int) -> tuple[bytes, Intent]:
            nl = list(rng.randbytes(65_535))
            return _row(1, [self.ids["id"]], nl, [struct.pack("<q", i)], False), Intent(MUST_REJECT)

        return _fill(size, one)

    def declared_not_null_ids(
        self, rng: random.Random, size: int
    ) -> tuple[list[bytes], list[Intent]]:
        def one(i: int) -> tuple[bytes, Intent]:
            nn = sorted(rng.sample(range(256), 200)) + [255] * (65_535 - 200)
            vals = [b"\x01"] * 65_535
            return _row(1, nn, [], vals, False), Intent(MUST_REJECT)

        return _fill(size, one)

    def big_ids(self, rng: random.Random, size: int) -> tuple[list[bytes], list[Intent]]:
        def one(i: int) -> tuple[bytes, Intent]:
            nl = list(range(1_000_000, 1_000_000 + 65_535))
            return _row(1, [self.ids["id"]], nl, [struct.pack("<q", i)], True), Intent(MUST_REJECT)

        return _fill(size, one)

    def duplicate_ids(self, rng: random.Random, size: int) -> tuple[list[bytes], list[Intent]]:
        def one(i: int) -> tuple[bytes, Intent]:
            k = rng.randrange(2, 7)
            nl = [self.ids["qty"]] * k
            return _row(1, [self.ids["id"]], nl, [struct.pack("<q", i)], False), Intent(MUST_REJECT)

        return _fill(size, one)

    def truncated_headers(self, rng: random.Random, size: int) -> tuple[list[bytes], list[Intent]]:
        def one(i: int) -> tuple[bytes, Intent]:
            head = struct.pack("<BBBHH", 1, CODEC_VERSION, rng.choice([0, 1]), 65_535, 65_535)
            return head + rng.randbytes(rng.randrange(0, 2000)), Intent(MUST_REJECT)

        return _fill(size, one)

    def huge_offsets(self, rng: random.Random, size: int) -> tuple[list[bytes], list[Intent]]:
        def one(i: int) -> tuple[bytes, Intent]:
            row = bytearray(
                _row(1, [self.ids["id"], self.ids["name"]], [], [b"\0" * 8, b"x" * 1000], True)
            )
            struct.pack_into("<I", row, 7 + 8 + 4, 0xFFFFFFF0)  # the name's end offset
            return bytes(row), Intent(MUST_REJECT)

        return _fill(size, one)

    def long_values(self, rng: random.Random, size: int) -> tuple[list[bytes], list[Intent]]:
        length = size // 6

        def one(i: int) -> tuple[bytes, Intent]:
            if i % 2 == 0:
                s = "".join(rng.choices("abcdéü€😀 ", k=length // 2))
                ev = _event(i, {"name": s, "blob": rng.randbytes(length // 4)})
                return encode_event(ev, SCHEMA), Intent(MUST_ACCEPT, ev)
            bad = b"a" * length + b"\xc3"
            row = _row(1, [self.ids["id"], self.ids["name"]], [], [struct.pack("<q", i), bad], True)
            return row, Intent(MUST_REJECT)

        return _fill(size, one)

    def one_key(self, rng: random.Random, size: int) -> tuple[list[bytes], list[Intent]]:
        pool = [(encode_event(ev, SCHEMA), Intent(MUST_ACCEPT, ev)) for ev in _one_key_events(rng)]
        return _fill(size, lambda i: rng.choice(pool))

    def many_layouts(self, rng: random.Random, size: int) -> tuple[list[bytes], list[Intent]]:
        # every subset of null and absent value columns (2**6 layouts of null ids),
        # each row of its own key
        cols = [c.name for c in SCHEMA.value_columns]
        pool = []
        for k in range(512):
            sets: dict[str, Any] = {c: None for c in cols if rng.random() < 0.5}
            if rng.random() < 0.5:
                sets["qty"] = rng.randrange(-1000, 1000)
            pool.append(_event(k, sets))
        rows = [encode_event(ev, SCHEMA) for ev in pool]

        def one(i: int) -> tuple[bytes, Intent]:
            k = rng.randrange(len(pool))
            return rows[k], Intent(MUST_ACCEPT, pool[k])

        return _fill(size, one)


def _rowv2_cases() -> list[HostileCase]:
    """The hostile rowv2 batches."""
    g = _RowCases()
    cases = [
        ("declared_null_ids", g.declared_null_ids),
        ("declared_not_null_ids", g.declared_not_null_ids),
        ("big_ids", g.big_ids),
        ("duplicate_ids", g.duplicate_ids),
        ("truncated_headers", g.truncated_headers),
        ("huge_offsets", g.huge_offsets),
        ("long_values", g.long_values),
        ("many_events_one_key", g.one_key),
        ("many_layouts", g.many_layouts),
    ]
    return [HostileCase(name, "rowv2", build) for name, build in cases]


# ====================================================================== Avro messages
_DECIMAL = {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}
_VALUE = {
    "type": "record",
    "name": "Value",
    "namespace": "hostile",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": ["null", "string"], "default": None},
        {"name": "qty", "type": ["null", "long"], "default": None},
        {"name": "price", "type": ["null", _DECIMAL], "default": None},
        {"name": "ratio", "type": ["null", "double"], "default": None},
        {"name": "flag", "type": ["null", "boolean"], "default": None},
        {"name": "blob", "type": ["null", "bytes"], "default": None},
    ],
}


def _avro_envelope(extra: Any = "null") -> dict[str, Any]:
    """The envelope of :data:`SCHEMA`'s rows, with an ignored field ``junk`` of type
    ``extra`` after ``op`` (hostile types go there)."""
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": "hostile",
        "fields": [
            {"name": "before", "type": ["null", _VALUE], "default": None},
            {"name": "after", "type": ["null", "hostile.Value"], "default": None},
            {"name": "op", "type": "string"},
            {"name": "junk", "type": extra},
        ],
    }


def laughs(levels: int, width: int = 10) -> dict[str, Any]:
    """Records of ``width`` fields of the previous record, ``levels`` deep (the first of
    ``width`` nulls): a schema of a few hundred bytes that expands to width**levels."""
    t: Any = {
        "type": "record",
        "name": "L0",
        "fields": [{"name": f"f{i}", "type": "null"} for i in range(width)],
    }
    for k in range(1, levels + 1):
        fields = [{"name": "f0", "type": t}]
        fields += [{"name": f"f{i}", "type": f"L{k - 1}"} for i in range(1, width)]
        t = {"type": "record", "name": f"L{k}", "fields": fields}
    return t


AVRO = OfflineRegistry()
"""The schemas of the Avro cases (registered at import, so a child has the same ids)."""
_PLAIN = AVRO.register(_avro_envelope())
_LAUGHS = AVRO.register(_avro_envelope(laughs(9, 10)), writable=False)
_WIDE = AVRO.register(_avro_envelope(["null", laughs(2, 20)]))
_NULLS = AVRO.register(_avro_envelope({"type": "array", "items": "null"}))
_INTS = AVRO.register(_avro_envelope({"type": "array", "items": ["null", "long"]}))
_MAP = AVRO.register(_avro_envelope({"type": "map", "values": "null"}))


def _full(ev: dict[str, Any]) -> dict[str, Any]:
    """``ev`` with every column set (an Avro row holds them all; null where not given)."""
    return {**ev, "set": {c.name: ev["set"].get(c.name) for c in SCHEMA.value_columns}}


def _avro_row(ev: dict[str, Any]) -> dict[str, Any]:
    return {"id": ev["key"]["id"], **ev["set"]}


class _AvroCases:
    """The hostile Avro batches: hostile schemas, and hostile bytes in valid ones."""

    def msg(self, sid: int, ev: dict[str, Any], junk: Any = None) -> bytes:
        datum = {"before": None, "after": _avro_row(ev), "op": "c", "junk": junk}
        return AVRO.message(sid, datum)

    def billion_laughs(self, rng: random.Random, size: int) -> tuple[list[bytes], list[Intent]]:
        # a schema of a few hundred bytes expanding to 10**9 types: refused at load,
        # each of its 18-byte messages rejected with the reason
        def one(i: int) -> tuple[bytes, Intent]:
            body = b"\x00\x02" + zigzag(i) + b"\x00" * 6 + b"\x02c"
            return header(_LAUGHS) + body, Intent(MUST_REJECT)

        return _fill(size, one)

    def untaken_branches(self, rng: random.Random, size: int) -> tuple[list[bytes], list[Intent]]:
        # thousands of types in a union branch no message takes
        def one(i: int) -> tuple[bytes, Intent]:
            ev = _full(_event(i, {"qty": i, "name": f"n{i}"}))
            return self.msg(_WIDE, ev), Intent(MUST_ACCEPT, ev)

        return _fill(size, one)

    def zero_byte_blocks(self, rng: random.Random, size: int) -> tuple[list[bytes], list[Intent]]:
        # arrays of nulls in blocks of one item each: a few blocks are fine, thousands
        # refuse their message
        def one(i: int) -> tuple[bytes, Intent]:
            ev = _full(_event(i, {"qty": i}))
            blocks = rng.choice([1, 4, 2000, 20_000])
            m = self.msg(_NULLS, ev, [])
            m = m[:-1] + zigzag(1) * blocks + b"\x00"
            return m, Intent(MUST_ACCEPT, ev) if blocks < 16 else Intent(MUST_REJECT)

        return _fill(size, one)

    def int_arrays(self, rng: random.Random, size: int) -> tuple[list[bytes], list[Intent]]:
        # Debezium's int[]: array<["null", "long"]> of a quarter of a million items
        def one(i: int) -> tuple[bytes, Intent]:
            ev = _full(_event(i, {"qty": i}))
            xs = [
                None if rng.random() < 0.2 else rng.randrange(-(2**40), 2**40)
                for _ in range(size // 16)
            ]
            return self.msg(_INTS, ev, xs), Intent(MUST_ACCEPT, ev)

        return _fill(size, one)

    def empty_keys(self, rng: random.Random, size: int) -> tuple[list[bytes], list[Intent]]:
        # a map of a quarter of a million entries of one byte each (an empty key, a null)
        def one(i: int) -> tuple[bytes, Intent]:
            ev = _full(_event(i, {"qty": i}))
            n = size // 8
            m = self.msg(_MAP, ev, {})[:-1] + zigzag(n) + b"\x00" * n + b"\x00"
            return m, Intent(MUST_ACCEPT, ev)

        return _fill(size, one)

    def bad_bytes(self, rng: random.Random, size: int) -> tuple[list[bytes], list[Intent]]:
        # endless varints, lengths past the end, truncations, invalid UTF-8
        good = [self.msg(_PLAIN, _full(_event(k, {"name": "x" * 40, "qty": k}))) for k in range(50)]

        def one(i: int) -> tuple[bytes, Intent]:
            kind = i % 4
            m = rng.choice(good)
            if kind == 0:
                return m[:5] + b"\x02" + b"\xff" * 2000, Intent(MUST_REJECT)
            if kind == 1:
                return m[:5] + b"\x02\x02\x02" + b"\xfe\xff\xff\xff\x0f" + b"a" * 100, Intent(
                    MUST_REJECT
                )
            if kind == 2:
                return m[: rng.randrange(5, len(m) - 1)], Intent(MUST_REJECT)
            ev = _full(_event(i, {"name": "PLACEHOLDER" * 1000}))
            bad = self.msg(_PLAIN, ev).replace(b"PLACEHOLDER" * 1000, b"a" * 10_999 + b"\xff")
            return bad, Intent(MUST_REJECT)

        return _fill(size, one)

    def long_values(self, rng: random.Random, size: int) -> tuple[list[bytes], list[Intent]]:
        def one(i: int) -> tuple[bytes, Intent]:
            s = "".join(rng.choices("abcdéü€😀 ", k=size // 12))
            ev = _full(_event(i, {"name": s, "blob": rng.randbytes(size // 12)}))
            return self.msg(_PLAIN, ev), Intent(MUST_ACCEPT, ev)

        return _fill(size, one)

    def one_key(self, rng: random.Random, size: int) -> tuple[list[bytes], list[Intent]]:
        pool = []
        for ev in _one_key_events(rng):
            full = _full(ev)
            pool.append((self.msg(_PLAIN, full), Intent(MUST_ACCEPT, full)))
        return _fill(size, lambda i: rng.choice(pool))


def _avro_cases() -> list[HostileCase]:
    """The hostile Avro batches."""
    g = _AvroCases()
    cases = [
        ("billion_laughs", g.billion_laughs),
        ("untaken_branches", g.untaken_branches),
        ("zero_byte_blocks", g.zero_byte_blocks),
        ("int_arrays", g.int_arrays),
        ("map_of_empty_keys", g.empty_keys),
        ("bad_bytes", g.bad_bytes),
        ("long_values", g.long_values),
        ("many_events_one_key", g.one_key),
    ]
    opts = {"registry_url": OFFLINE_URL}
    return [HostileCase(name, "debezium-avro", build, dict(opts)) for name, build in cases]


CASES: tuple[HostileCase, ...] = (
    *_rowv2_cases(),
    *_json_cases("json", False),
    *_json_cases("debezium", False),
    *_json_cases("debezium", True),
    *_avro_cases(),
)
"""Every hostile batch, for every format."""


MEMORY_RATIO = 10.0
"""Peak memory of a decode, at most, per byte of input (issue 38), for every case and
path: no allowance per message (the smallest messages, 17-byte rowv2 rows, decode to a
row of every column of about 64 bytes, and stay within it) and no exception."""
CPU_PER_MB = 1.0
"""CPU seconds of a decode, at most, per MB (2**20 bytes) of input."""


def memory_limit(bytes_in: int) -> int:
    """The most a decode of ``bytes_in`` bytes may take: :data:`MEMORY_RATIO` per byte."""
    return int(MEMORY_RATIO * bytes_in)


def modes(case: HostileCase) -> tuple[str, ...]:
    """The decoder paths of a case: the JSON formats' compiled passes and their numpy
    fallbacks (rowv2 and Avro have one path)."""
    return ("compiled", "numpy") if case.fmt in ("json", "debezium") else ("compiled",)


# ====================================================================== checking
def check_intents(case: HostileCase, intents: list[Intent], out: Any) -> list[str]:
    """The differences between the decode ``out`` of a case and the intents of its
    messages: a must-reject message accepted, a must-accept one rejected, an accepted
    event whose op, key or columns differ from what its message says."""
    problems: list[str] = []
    batch = out.batch
    accepted = set(batch.positions.tolist())
    for p, it in enumerate(intents):
        if it.verdict == MUST_REJECT and p in accepted:
            problems.append(f"message {p} accepted, must be rejected")
        if it.verdict == MUST_ACCEPT and p not in accepted:
            problems.append(f"message {p} rejected: {out.rejects.as_dict().get(p)}")
    if not len(batch):
        return problems
    keys = batch.keys[0].to_pylist()
    values = {
        c.id: batch.values[c.id].to_pylist() for c in SCHEMA.value_columns if c.id in batch.values
    }
    for i, p in enumerate(batch.positions.tolist()):
        ev = intents[p].event
        if ev is None:
            continue
        if OP_NAMES[int(batch.op[i])] != ev["op"]:  # every case's events are upserts
            problems.append(f"message {p}: op {OP_NAMES[int(batch.op[i])]}")
        if keys[i] != ev["key"]["id"]:
            problems.append(f"message {p}: key {keys[i]!r}, the message says {ev['key']['id']!r}")
        for c in SCHEMA.value_columns:
            present = c.id in batch.present and bool(batch.present[c.id][i])
            if present != (c.name in ev["set"]):
                problems.append(f"message {p}: presence of {c.name} is {present}")
            elif present and values[c.id][i] != ev["set"][c.name]:
                got = repr(values[c.id][i])[:60]
                problems.append(f"message {p}: {c.name} decoded as {got}")
    return problems[:20]


# ====================================================================== measuring
@dataclass
class Cost:
    """What decoding one case cost, and what it decoded."""

    label: str
    mode: str
    bytes_in: int
    messages: int
    peak_bytes: int
    cpu_s: float
    accepted: int
    rejected: int
    problems: list[str]

    @property
    def memory_ratio(self) -> float:
        """Peak memory of the decode per byte of input."""
        return self.peak_bytes / self.bytes_in

    @property
    def cpu_per_mb(self) -> float:
        """CPU seconds per MB (2**20 bytes) of input."""
        return self.cpu_s / (self.bytes_in / 2**20)


def _status_kb(field_name: str) -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field_name} in /proc/self/status")


def _set_mode(mode: str) -> None:
    """``compiled``: the C extensions as built; ``numpy``: their numpy fallbacks."""
    if mode == "numpy":
        from cdc_sink.formats import _jsonflat, _jsonscan

        _jsonscan._cscan = None  # type: ignore[assignment]
        _jsonflat._cflat = None  # type: ignore[assignment]


def _run_case(label: str, mode: str, seed: int, size: int) -> Cost:
    """In the child: builds, warms up, measures and checks one case."""
    case = next(c for c in CASES if c.label == label)
    _set_mode(mode)
    if case.fmt == "debezium-avro":
        AVRO.install()  # the schemas from this process, not a registry
    options = {k: v for k, v in case.options.items() if not k.startswith("_")}
    decoder = get_decoder(case.fmt, **options)
    msgs, intents = case.build(random.Random(seed), size)
    values = pa.array(msgs, pa.binary())
    bytes_in = sum(len(m) for m in msgs)
    del msgs
    warm, _ = _CASE_BY_NAME[(case.fmt, case.options.get("_envelope", False))].build(
        random.Random(0), 4096
    )
    decoder.decode_with_meta(pa.array(warm, pa.binary()), SCHEMA)
    gc.collect()
    with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
        fh.write("5")
    before = _status_kb("VmRSS")
    t0 = time.process_time()
    out = decoder.decode_with_meta(values, SCHEMA)
    cpu = time.process_time() - t0
    peak = _status_kb("VmHWM") - before
    problems = check_intents(case, intents, out)
    return Cost(
        label=label,
        mode=mode,
        bytes_in=bytes_in,
        messages=len(values),
        peak_bytes=max(peak, 0),
        cpu_s=cpu,
        accepted=len(out.batch),
        rejected=len(out.rejects),
        problems=problems,
    )


_CASE_BY_NAME = {
    (c.fmt, c.options.get("_envelope", False)): c for c in CASES if c.name == "many_events_one_key"
}

_POOL: Any = None


def measure(label: str, mode: str = "compiled", seed: int = 38, size: int = TARGET_BYTES) -> Cost:
    """Decodes case ``label`` (``format[+envelope]:name``) in a fresh child process
    (see the module docstring) and returns its cost and the differences from intent.

    Args:
        label: The case's :attr:`HostileCase.label`.
        mode: ``compiled`` (the C extensions) or ``numpy`` (their fallbacks).
        seed: Seed of the case's generator.
        size: About how many bytes of input to build.
    """
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    proc_result = ctx.Queue()
    p = ctx.Process(target=_child, args=(proc_result, label, mode, seed, size))
    p.start()
    result = proc_result.get(timeout=600)
    p.join()
    if isinstance(result, BaseException):
        raise result
    cost: Cost = result
    return cost


def _child(q: Any, label: str, mode: str, seed: int, size: int) -> None:
    try:
        q.put(_run_case(label, mode, seed, size))
    except BaseException as exc:  # reported to the parent
        q.put(RuntimeError(f"{label} ({mode}): {exc!r}"))
