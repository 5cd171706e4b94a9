"""Per-message budgets of the decoders (issue 38, findings 3 and 4).

A message is refused when what it declares (rowv2 column counts, JSON members and
nesting) is more than the table's schema can use, *before* anything is allocated in
proportion to the declared sizes, and with one reason string per refused message.

The memory checks read tracemalloc's peak over one decode: numpy reports every array it
allocates to tracemalloc, so an array sized by a declared count (what finding 3 was: a
slot array per declared column id; and finding 4's per-member reasons, Python strings)
shows up there, while the input batch (an Arrow array, allocated before) does not. The
bound, a fraction of the input's size, is far below what one such array would take.
"""

from __future__ import annotations

import struct
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from cdc_sink.formats import Decoded, FormatName, _jsonflat, _jsonmembers, _jsonscan, get_decoder
from cdc_sink.formats._arrays import binary_parts
from cdc_sink.formats._debezium_events import scan_budget as debezium_budget
from cdc_sink.formats._jsonscan import Budget
from cdc_sink.formats._jsonstrings import decode_string
from cdc_sink.formats.debezium import encode_debezium
from cdc_sink.formats.native_json import scan_budget as native_budget
from cdc_sink.formats.rowv2 import CODEC_VERSION, encode_event
from cdc_sink.schema import TableSchema
from tests.formats.support import ALL_TYPES

SCHEMA = ALL_TYPES


@pytest.fixture(params=["compiled", "numpy"])
def scan_mode(request: Any, monkeypatch: Any) -> Iterator[str]:
    """Both JSON scanners: the compiled pass and its numpy fallback."""
    if request.param == "numpy":
        monkeypatch.setattr(_jsonscan, "_cscan", None)
        monkeypatch.setattr(_jsonflat, "_cflat", None)
    else:
        assert _jsonscan._cscan is not None
    yield request.param


def _peak(decode: Callable[[], Decoded]) -> tuple[Decoded, int]:
    """The decode's result and tracemalloc's peak over it (bytes above the start)."""
    tracemalloc.start()
    try:
        start, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        out = decode()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return out, peak - start


def _values(msgs: list[bytes]) -> tuple[pa.Array, int]:
    return pa.array(msgs, pa.binary()), sum(len(m) for m in msgs)


# ====================================================================== rowv2 (finding 3)
def _declaring_row(i: int, n_null: int) -> bytes:
    """An upsert of key ``i`` whose header declares ``n_null`` null column ids (ids that
    differ from row to row, so every row is a layout of its own)."""
    ids = bytes((i + k) % 256 for k in range(n_null))
    head = struct.pack("<BBBHH", 1, CODEC_VERSION, 0, 1, n_null) + b"\x00"
    return head + ids + struct.pack("<H", 8) + struct.pack("<q", i)


def test_rowv2_rows_declaring_65535_null_ids_are_refused_without_expanding_them() -> None:
    """Finding 3: rows declaring 65,535 null column ids each took ~95x their size in
    memory before being refused; now their 7-byte headers refuse them, and nothing is
    allocated per declared id."""
    msgs = [_declaring_row(i, 65_535) for i in range(32)]
    values, size = _values(msgs)
    dec = get_decoder("rowv2")
    dec.decode_with_meta(values[:1], SCHEMA)  # caches (the schema's id table) out of the peak
    out, peak = _peak(lambda: dec.decode_with_meta(values, SCHEMA))
    assert len(out.batch) == 0 and len(out.rejects) == len(msgs)
    assert peak < size // 4, f"peak {peak} bytes for {size} bytes of rows"


def test_rowv2_declared_count_beyond_the_schema_is_one_shared_reason() -> None:
    n_cols = len(SCHEMA.columns)
    valid = encode_event({"op": "upsert", "key": {"id": 1}, "set": {"name": "x"}}, SCHEMA)
    msgs = [_declaring_row(i, n_cols) for i in range(3)] + [valid]
    out = get_decoder("rowv2").decode_with_meta(pa.array(msgs, pa.binary()), SCHEMA)
    assert out.batch.positions.tolist() == [3]
    reasons = out.rejects.reasons
    assert len(reasons) == 3
    assert reasons[0] == (f"the header declares more column ids than the schema's {n_cols} columns")
    assert len({id(r) for r in reasons}) == 1  # built once, shared


def test_rowv2_duplicated_ids_within_the_count_are_refused() -> None:
    qty = SCHEMA.column("i64").id
    head = struct.pack("<BBBHH", 1, CODEC_VERSION, 0, 1, 3)
    row = head + bytes([SCHEMA.column("id").id, qty, qty, qty]) + struct.pack("<H", 8)
    row += struct.pack("<q", 5)
    out = get_decoder("rowv2").decode_with_meta(pa.array([row], pa.binary()), SCHEMA)
    assert out.rejects.reasons == ["column ids are not sorted and unique"]


# ====================================================================== JSON (finding 4)
def _many_members(fmt: FormatName, count: int) -> bytes:
    """One event of ``fmt`` holding ``count`` unknown columns."""
    extra = ",".join(f'"u{j}":{j % 10}' for j in range(count))
    if fmt == "json":
        return ('{"op":"upsert","key":{"id":1},"set":{' + extra + "}}").encode()
    return ('{"op":"c","after":{"id":1,' + extra + "}}").encode()


@pytest.mark.parametrize("fmt", ["json", "debezium"])
def test_an_event_of_a_million_members_is_refused_at_a_cost_linear_in_its_size(
    fmt: FormatName, scan_mode: str
) -> None:
    """Finding 4: a reason was formatted (and kept in a list) for every unknown member
    of an event, of which one is kept; and the compiled scan sized its outputs by the
    event's bytes. Now the event is refused by the scan's member budget: the compiled
    pass records no more members than the budget, and no Python object is made per
    member on either path (the numpy scanner's working arrays, 8-byte positions of the
    event's tokens, take about ten bytes per input byte here)."""
    msg = _many_members(fmt, 250_000)
    values, size = _values([msg])
    dec = get_decoder(fmt)
    out, peak = _peak(lambda: dec.decode_with_meta(values, SCHEMA))
    assert len(out.batch) == 0
    budget = native_budget(SCHEMA) if fmt == "json" else debezium_budget(SCHEMA, False)
    assert out.rejects.reasons == [budget.members_reason]
    bound = size // 2 if scan_mode == "compiled" else 12 * size
    assert peak < bound, f"peak {peak} bytes for a {size}-byte event ({scan_mode})"


@pytest.mark.parametrize("fmt", ["json", "debezium"])
def test_unknown_members_within_the_budget_format_one_reason_per_event(
    fmt: FormatName, scan_mode: str, monkeypatch: Any
) -> None:
    """An event refused for its unknown columns gets the reason of its first one,
    formatted once (not once per unknown member)."""
    named: list[int] = []
    real = decode_string

    def counting(data: np.ndarray, start: int, end: int) -> str | None:
        named.append(start)
        return real(data, start, end)

    monkeypatch.setattr(_jsonmembers, "decode_string", counting)
    count = 40 if fmt == "json" else 400
    msgs = [_many_members(fmt, count)] * 3
    out = get_decoder(fmt).decode_with_meta(pa.array(msgs, pa.binary()), SCHEMA)
    assert out.rejects.reasons == ["unknown column 'u0'"] * 3
    assert len(named) == 3


def test_a_long_unknown_name_is_shortened_in_the_reason(scan_mode: str) -> None:
    name = "n" * 100_000
    msg = ('{"op":"upsert","key":{"id":1},"set":{"' + name + '":1}}').encode()
    out = get_decoder("json").decode_with_meta(pa.array([msg], pa.binary()), SCHEMA)
    (reason,) = out.rejects.reasons
    assert reason.startswith("unknown column 'nnnn") and reason.endswith("...'")
    assert len(reason) < 200


# ====================================================================== budgets, both scanners
def _deep(depth: int, where: str = "top") -> bytes:
    inner = "[" * depth + "]" * depth
    if where == "top":
        return ('{"op":"upsert","key":{"id":1},"meta":' + inner + "}").encode()
    return ('{"op":"upsert","key":{"id":1},"set":{"i64":' + inner + "}}").encode()


def _budget_messages(schema: TableSchema) -> tuple[list[bytes], Budget]:
    budget = native_budget(schema)
    over = _many_members("json", budget.members)  # op, key, set, id and the rest
    at = _many_members("json", budget.members - 4)
    return (
        [
            over,
            at,
            over[:-1] + b",}",  # over the budget, and a grammar error (checked after) after it
            over[:-2] + b'"x}}',  # an unterminated string after the budget: the structure's reason
            _deep(budget.depth - 1),
            _deep(budget.depth),
            _deep(300),  # deeper than the compiled pass once went
            _deep(100_000, "set"),
            _deep(budget.depth) + b"x",  # too deep and trailing data: not an object
            _many_members("json", 10 * budget.members)[:-2] + b"," + _deep(50)[1:-1] + b"}}",
        ],
        budget,
    )


def test_budget_reasons_are_the_same_with_and_without_the_compiled_pass(monkeypatch: Any) -> None:
    """Structure first, then depth, then members (then the grammar), on both scanners."""
    msgs, budget = _budget_messages(SCHEMA)
    values = pa.array(msgs, pa.binary())
    dec = get_decoder("json")
    fast = dec.decode_with_meta(values, SCHEMA).rejects.as_dict()
    with monkeypatch.context() as m:
        m.setattr(_jsonscan, "_cscan", None)
        m.setattr(_jsonflat, "_cflat", None)
        slow = dec.decode_with_meta(values, SCHEMA).rejects.as_dict()
    assert fast == slow
    assert fast[0] == budget.members_reason
    assert 1 not in fast or fast[1] != budget.members_reason  # at the budget: not over it
    assert fast[2] == budget.members_reason and fast[3] == "invalid JSON: unterminated string"
    assert 4 not in fast  # at the depth budget (the event is level 1)
    assert fast[5] == fast[6] == fast[7] == budget.depth_reason
    assert fast[8] != budget.depth_reason
    assert fast[9] == budget.depth_reason


def test_debezium_budget_admits_an_enveloped_event_of_every_column() -> None:
    """The budget of an enveloped Debezium event (its schema counted) leaves room."""
    row = {"id": 1, "name": "x", "i64": 3}
    msg = encode_debezium("c", None, row, SCHEMA, envelope=True)
    out = get_decoder("debezium").decode_with_meta(pa.array([msg], pa.binary()), SCHEMA)
    assert len(out.batch) == 1, out.rejects.reasons
    sc = _jsonscan.scan(binary_parts(pa.array([msg], pa.binary())), np.ones(1, bool), 4)
    budget = debezium_budget(SCHEMA, False)
    assert len(sc.members) < budget.members // 2
