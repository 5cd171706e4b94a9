"""Unit tests of cdc_sink.batch: building, validating, converting and splitting batches."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from cdc_sink.batch import (
    OP_DELETE,
    OP_INSERT,
    OP_TRUNCATE,
    OP_UPDATE,
    OP_UPSERT,
    SET_PREFIX,
    ChangeBatch,
    Rejects,
)
from cdc_sink.errors import SchemaMismatch
from cdc_sink.schema import TableSchema, type_to_str
from tests.fixtures import ID_V_SEQ
from tests.formats.support import ALL_TYPE_COLUMNS

UTC = dt.timezone.utc

# Every supported type as a value column; "name" is required (not nullable, no default).
ALL_TYPES = TableSchema.from_dict(
    {
        "columns": [
            {"name": "id", "type": "int64"},
            {"name": "name", "type": "string", "nullable": False},
            {"name": "status", "type": "string", "nullable": False, "default": "new"},
            # the shared all-types columns (tests/formats/support.py), less the wide decimal
            *(c for c in ALL_TYPE_COLUMNS[1:] if c["name"] != "big"),
        ],
        "primary_key": ["id"],
        "num_buckets": 4,
    }
)

SEQ = TableSchema.from_dict({**ID_V_SEQ, "num_buckets": 3})

SEQ32 = TableSchema.from_dict(
    {
        "columns": [
            {"name": "id", "type": "int64"},
            {"name": "seq", "type": "int32"},
        ],
        "primary_key": ["id"],
        "sequence_column": "seq",
    }
)

COMPOSITE = TableSchema.from_dict(
    {
        "columns": [
            {"name": "tenant", "type": "int32"},
            {"name": "sku", "type": "string"},
            {"name": "qty", "type": "int64"},
        ],
        "primary_key": ["tenant", "sku"],
        "num_buckets": 5,
    }
)


def build(
    events: list[Any], schema: TableSchema = ALL_TYPES, **kw: Any
) -> tuple[ChangeBatch, Rejects]:
    return ChangeBatch.from_events(events, schema, **kw)


def only_reason(events: list[Any], schema: TableSchema = ALL_TYPES) -> str:
    batch, rejects = build(events, schema)
    assert len(batch) == 0 and len(rejects) == 1
    assert rejects.positions.tolist() == [0]
    return rejects.reasons[0]


def col(batch: ChangeBatch, name: str) -> tuple[list[Any], list[bool]]:
    """(values, present) of a value column, as Python lists."""
    cid = batch.schema.column(name).id
    return batch.values[cid].to_pylist(), batch.present[cid].tolist()


# --------------------------------------------------------------------------- from_events
@pytest.mark.parametrize(
    ("op", "code"),
    [("insert", OP_INSERT), ("upsert", OP_UPSERT), ("update", OP_UPDATE), ("delete", OP_DELETE)],
)
def test_each_op_name_becomes_its_code(op: str, code: int):
    batch, rejects = build([{"op": op, "key": 7, "set": {"name": "x"}}])
    assert len(rejects) == 0
    assert batch.op.tolist() == [code] and batch.op.dtype == np.int8
    assert batch.keys[0].to_pylist() == [7]


def test_absent_column_is_not_present_and_null_is_a_present_update():
    batch, rejects = build(
        [
            {"op": "upsert", "key": 1, "set": {"f64": None}},
            {"op": "upsert", "key": 2, "set": {"f64": 2.5}},
            {"op": "upsert", "key": 3, "set": {"i8": 1}},
        ]
    )
    assert len(rejects) == 0
    values, present = col(batch, "f64")
    assert present == [True, True, False]
    assert values[:2] == [None, 2.5]
    assert col(batch, "i8")[1] == [False, False, True]


def test_columns_no_event_sets_are_left_out_of_the_batch():
    batch, _ = build([{"op": "upsert", "key": 1, "set": {"i32": 5}}])
    assert set(batch.values) == {ALL_TYPES.column("i32").id}
    assert set(batch.present) == set(batch.values)


def test_values_of_every_type_are_converted_from_json_friendly_forms():
    batch, rejects = build(
        [
            {
                "op": "upsert",
                "key": 1,
                "set": {
                    "i8": -128,
                    "i16": 32767,
                    "i32": -5,
                    "i64": 2**62,
                    "f32": 1.5,
                    "f64": 3,
                    "flag": False,
                    "blob": base64.b64encode(b"\x00\x01").decode(),
                    "day": "2024-02-29",
                    "at": "2024-01-02T03:04:05Z",
                    "amount": "12.34",
                    "name": "é日本",
                },
            },
            {
                "op": "upsert",
                "key": 2,
                "set": {
                    "blob": b"raw",
                    "day": dt.date(2020, 1, 1),
                    "at": dt.datetime(2020, 1, 1, tzinfo=UTC),
                    "amount": 7,
                    "f32": 2,
                },
            },
        ]
    )
    assert len(rejects) == 0
    assert col(batch, "i8")[0][0] == -128
    assert col(batch, "i64")[0][0] == 2**62
    assert col(batch, "f64")[0][0] == 3.0
    assert col(batch, "blob")[0] == [b"\x00\x01", b"raw"]
    assert col(batch, "day")[0] == [dt.date(2024, 2, 29), dt.date(2020, 1, 1)]
    assert col(batch, "at")[0] == [
        dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
        dt.datetime(2020, 1, 1, tzinfo=UTC),
    ]
    assert col(batch, "amount")[0] == [decimal.Decimal("12.34"), decimal.Decimal("7.00")]
    assert col(batch, "name")[0][0] == "é日本"
    for c in ALL_TYPES.value_columns:
        if c.id in batch.values:
            assert batch.values[c.id].type == c.type


def test_one_column_key_may_be_a_scalar_or_a_mapping():
    batch, rejects = build([{"op": "delete", "key": 5}, {"op": "delete", "key": {"id": 6}}])
    assert len(rejects) == 0
    assert batch.keys[0].to_pylist() == [5, 6]
    assert batch.keys[0].type == pa.int64()


def test_composite_key_keeps_one_array_per_key_column_in_key_order():
    batch, rejects = build(
        [
            {"op": "upsert", "key": {"sku": "a", "tenant": 1}, "set": {"qty": 3}},
            {"op": "delete", "key": {"tenant": 2, "sku": "b"}},
        ],
        COMPOSITE,
    )
    assert len(rejects) == 0
    assert [k.type for k in batch.keys] == [pa.int32(), pa.string()]
    assert batch.keys[0].to_pylist() == [1, 2]
    assert batch.keys[1].to_pylist() == ["a", "b"]


def test_composite_key_given_as_a_scalar_is_rejected():
    assert only_reason([{"op": "delete", "key": 1}], COMPOSITE) == "event has no 'key' object"


def test_composite_key_missing_one_column_is_rejected():
    reason = only_reason([{"op": "delete", "key": {"tenant": 1}}], COMPOSITE)
    assert reason == "key column 'sku' is missing or null"


def test_delete_sets_nothing_even_when_its_set_names_columns():
    batch, rejects = build(
        [
            {"op": "delete", "key": 1, "set": {"i32": 4, "name": None}},
            {"op": "upsert", "key": 2, "set": {"i32": 5}},
        ]
    )
    assert len(rejects) == 0
    assert col(batch, "i32")[1] == [False, True]
    name_id = ALL_TYPES.column("name").id
    assert not batch.present.get(name_id, np.zeros(2, bool)).any()


def test_delete_with_an_unknown_column_in_its_ignored_set_still_applies():
    batch, rejects = build([{"op": "delete", "key": 1, "set": {"bogus": 1}}])
    assert len(rejects) == 0 and len(batch) == 1


def test_delete_with_a_wrongly_typed_value_in_its_ignored_set_still_applies():
    batch, rejects = build([{"op": "delete", "key": 1, "set": {"i32": "x"}}])
    assert len(rejects) == 0 and len(batch) == 1


def test_positions_default_to_the_input_index_and_may_be_source_offsets():
    batch, _ = build([{"op": "delete", "key": i} for i in range(3)])
    assert batch.positions.tolist() == [0, 1, 2]
    batch, rejects = build(
        [{"op": "delete", "key": 1}, {"op": "nope", "key": 2}, {"op": "delete", "key": 3}],
        position=np.array([100, 101, 102]),
    )
    assert batch.positions.tolist() == [100, 102]
    assert rejects.as_dict() == {101: "unknown op 'nope'"}


def test_empty_event_list_gives_an_empty_batch():
    batch, rejects = build([])
    assert len(batch) == 0 and len(rejects) == 0
    assert batch.keys[0].type == pa.int64()


# --------------------------------------------------------------------------- rejects
_REJECTS: list[tuple[str, Any, str, TableSchema]] = [
    ("unknown_op", {"op": "merge", "key": 1}, "unknown op 'merge'", ALL_TYPES),
    ("missing_op", {"key": 1}, "unknown op None", ALL_TYPES),
    ("op_not_a_string", {"op": ["insert"], "key": 1}, "unknown op", ALL_TYPES),
    ("missing_key", {"op": "delete"}, "event has no 'key' object", ALL_TYPES),
    ("null_key", {"op": "delete", "key": None}, "event has no 'key' object", ALL_TYPES),
    (
        "null_key_column",
        {"op": "delete", "key": {"id": None}},
        "key column 'id' is missing or null",
        ALL_TYPES,
    ),
    ("empty_key", {"op": "delete", "key": {}}, "key column 'id' is missing or null", ALL_TYPES),
    (
        "unknown_key_column",
        {"op": "delete", "key": {"id": 1, "x": 2}},
        "unknown key column 'x'",
        ALL_TYPES,
    ),
    (
        "key_wrong_type",
        {"op": "delete", "key": "1"},
        "column 'id': '1' is not a valid int64",
        ALL_TYPES,
    ),
    (
        "composite_key_wrong_type",
        {"op": "delete", "key": {"tenant": "a", "sku": "b"}},
        "column 'tenant': 'a' is not a valid int32",
        COMPOSITE,
    ),
    (
        "key_column_inside_set",
        {"op": "upsert", "key": 1, "set": {"id": 1}},
        "key column 'id' inside 'set'",
        ALL_TYPES,
    ),
    (
        "composite_key_column_inside_set",
        {"op": "upsert", "key": {"tenant": 1, "sku": "a"}, "set": {"sku": "b"}},
        "key column 'sku' inside 'set'",
        COMPOSITE,
    ),
    (
        "unknown_column",
        {"op": "upsert", "key": 1, "set": {"colour": "red"}},
        "unknown column 'colour'",
        ALL_TYPES,
    ),
    (
        "set_not_an_object",
        {"op": "upsert", "key": 1, "set": ["i8", 1]},
        "'set' is not an object",
        ALL_TYPES,
    ),
    ("event_not_an_object", "upsert 1", "event is not an object: str", ALL_TYPES),
    (
        "null_in_non_nullable",
        {"op": "upsert", "key": 1, "set": {"name": None}},
        "null in non-nullable column 'name'",
        ALL_TYPES,
    ),
    (
        "null_in_non_nullable_with_default",
        {"op": "upsert", "key": 1, "set": {"status": None}},
        "null in non-nullable column 'status'",
        ALL_TYPES,
    ),
    (
        "insert_without_required",
        {"op": "insert", "key": 1, "set": {"i8": 1}},
        "insert does not set non-nullable column 'name' (it has no default)",
        ALL_TYPES,
    ),
    (
        "insert_without_set",
        {"op": "insert", "key": 1},
        "insert does not set non-nullable column 'name'",
        ALL_TYPES,
    ),
]


@pytest.mark.parametrize(
    ("event", "reason", "schema"), [r[1:] for r in _REJECTS], ids=[r[0] for r in _REJECTS]
)
def test_invalid_event_is_rejected_with_its_reason(event: Any, reason: str, schema: TableSchema):
    assert only_reason([event], schema).startswith(reason)


# (column, bad value) for every type; each must be refused with the column named.
_WRONG_TYPES = [
    ("i8", 300),
    ("i8", 1.5),
    ("i8", True),
    ("i8", "1"),
    ("i16", 40000),
    ("i32", 2**31),
    ("i64", 2**63),
    ("i64", 1.0),
    ("i64", False),
    ("f32", "1.5"),
    ("f32", True),
    ("f64", "x"),
    ("f64", [1.0]),
    ("flag", 1),
    ("flag", "true"),
    ("name", 5),
    ("name", b"bytes"),
    ("blob", 123),
    ("blob", "not base64!"),
    ("day", "2024-13-01"),
    ("day", "yesterday"),
    ("at", "nope"),
    ("at", "2024-01-01T25:00:00"),
    ("amount", "abc"),
    ("amount", "1.234"),
    ("amount", True),
    ("amount", "1e20"),
]


@pytest.mark.parametrize(
    ("column", "value"), _WRONG_TYPES, ids=[f"{c}-{v!r}" for c, v in _WRONG_TYPES]
)
def test_value_of_the_wrong_type_is_rejected_naming_the_column(column: str, value: Any):
    t = ALL_TYPES.column(column).type
    reason = only_reason([{"op": "upsert", "key": 1, "set": {column: value}}])
    assert reason.startswith(f"column {column!r}: {value!r} is not a valid")
    assert reason.endswith(type_to_str(t))


def test_rejects_are_reported_by_position_and_the_other_events_keep_their_order():
    events = [
        {"op": "upsert", "key": 0, "set": {"i32": 0}},
        {"op": "upsert", "key": 1, "set": {"i32": "one"}},
        {"op": "upsert", "key": 2, "set": {"i32": 2}},
        {"op": "rename", "key": 3},
        {"op": "delete", "key": 4},
        {"op": "insert", "key": 5},
        {"op": "update", "key": 6, "set": {"i32": 6, "f64": None}},
    ]
    batch, rejects = build(events)
    assert rejects.positions.tolist() == [1, 3, 5]
    assert rejects.reasons[0].startswith("column 'i32'")
    assert rejects.reasons[1] == "unknown op 'rename'"
    assert rejects.reasons[2].startswith("insert does not set")
    assert batch.keys[0].to_pylist() == [0, 2, 4, 6]
    assert batch.positions.tolist() == [0, 2, 4, 6]
    assert batch.op.tolist() == [OP_UPSERT, OP_UPSERT, OP_DELETE, OP_UPDATE]
    values, present = col(batch, "i32")
    assert present == [True, True, False, True]
    assert [v for v, p in zip(values, present, strict=True) if p] == [0, 2, 6]
    assert col(batch, "f64")[1] == [False, False, False, True]


def test_an_event_gets_only_its_first_reason():
    reason = only_reason([{"op": "insert", "key": {"id": None}, "set": {"name": None}}])
    assert reason == "key column 'id' is missing or null"


def test_insert_that_sets_the_required_column_or_an_upsert_without_it_is_accepted():
    batch, rejects = build(
        [
            {"op": "insert", "key": 1, "set": {"name": "a"}},
            {"op": "upsert", "key": 2, "set": {"i8": 1}},
            {"op": "update", "key": 3, "set": {"i8": 1}},
        ]
    )
    assert len(rejects) == 0 and len(batch) == 3


def test_rejects_extend_and_as_dict():
    r = Rejects(np.array([3], np.int64), ["a"])
    r.extend(Rejects(np.array([9], np.int64), ["b"]))
    assert len(r) == 2 and r.as_dict() == {3: "a", 9: "b"}


def test_unknown_op_reason_names_the_op_that_was_given():
    assert "3" in only_reason([{"op": 3, "key": 1}])


# --------------------------------------------------------------------------- sequence
def test_seq_is_carried_per_event_as_int64():
    batch, rejects = build(
        [
            {"op": "upsert", "key": 1, "set": {"v": "a"}, "seq": 10},
            {"op": "delete", "key": 2, "seq": -3},
        ],
        SEQ,
    )
    assert len(rejects) == 0
    assert batch.seq.dtype == np.int64 and batch.seq.tolist() == [10, -3]


def test_missing_seq_with_a_sequence_column_is_rejected():
    assert only_reason([{"op": "upsert", "key": 1, "set": {"v": "a"}}], SEQ) == "seq is missing"
    assert only_reason([{"op": "delete", "key": 1, "seq": None}], SEQ) == "seq is missing"


@pytest.mark.parametrize("seq", ["3", 1.0, True, 2**63, -(2**63) - 1])
def test_seq_that_is_not_a_64_bit_integer_is_rejected(seq: Any):
    reason = only_reason([{"op": "delete", "key": 1, "seq": seq}], SEQ)
    assert reason == f"seq {seq!r} is not a 64-bit integer"


def test_seq_may_be_given_through_the_sequence_column_in_set():
    batch, rejects = build([{"op": "upsert", "key": 1, "set": {"seq": 5, "v": "a"}}], SEQ)
    assert len(rejects) == 0
    assert batch.seq.tolist() == [5]
    # The tablet writes the sequence column from seq: it is not a value of the batch.
    assert SEQ.column("seq").id not in batch.values
    assert col(batch, "v") == (["a"], [True])


def test_seq_equal_to_the_sequence_column_in_set_is_accepted():
    batch, rejects = build([{"op": "upsert", "key": 1, "set": {"seq": 5}, "seq": 5}], SEQ)
    assert len(rejects) == 0 and batch.seq.tolist() == [5]
    assert SEQ.column("seq").id not in batch.values


def test_seq_differing_from_the_sequence_column_in_set_is_rejected():
    events = [
        {"op": "upsert", "key": 1, "set": {"seq": 5}, "seq": 5},
        {"op": "upsert", "key": 2, "set": {"seq": 5}, "seq": 6},
        {"op": "upsert", "key": 3, "set": {"seq": None}, "seq": 7},
    ]
    batch, rejects = build(events, SEQ)
    assert rejects.as_dict() == {
        1: "sequence column 'seq' in 'set' differs from seq",
        2: "sequence column 'seq' in 'set' differs from seq",
    }
    assert batch.keys[0].to_pylist() == [1]


def test_null_sequence_column_in_set_does_not_count_as_seq():
    assert only_reason([{"op": "upsert", "key": 1, "set": {"seq": None}}], SEQ) == "seq is missing"


def test_seq_outside_a_narrow_sequence_column_is_rejected():
    batch, rejects = build(
        [{"op": "delete", "key": 1, "seq": 2**31}, {"op": "delete", "key": 2, "seq": 2**31 - 1}],
        SEQ32,
    )
    assert rejects.as_dict() == {0: "seq out of range of int32"}
    assert batch.seq.tolist() == [2**31 - 1]


def test_seq_without_a_sequence_column_is_ignored():
    batch, rejects = build([{"op": "delete", "key": 1, "seq": 3}])
    assert len(rejects) == 0 and batch.seq is None


# --------------------------------------------------------------------------- wire form
def _mixed_batch() -> ChangeBatch:
    batch, rejects = build(
        [
            {"op": "insert", "key": 1, "set": {"name": "a", "f64": None, "i8": 3}},
            {
                "op": "upsert",
                "key": 2,
                "set": {
                    "f64": 1.5,
                    "day": "2024-01-02",
                    "at": "2024-01-02T03:04:05Z",
                    "amount": "1.25",
                    "blob": b"\x00\x01",
                    "flag": True,
                    "i16": None,
                },
            },
            {"op": "update", "key": 3, "set": {"f32": 2.5, "name": "é"}},
            {"op": "delete", "key": 4, "set": {"name": "ignored"}},
        ]
    )
    assert len(rejects) == 0
    return batch


def assert_same_batch(a: ChangeBatch, b: ChangeBatch) -> None:
    assert a.op.tolist() == b.op.tolist()
    assert [k.to_pylist() for k in a.keys] == [k.to_pylist() for k in b.keys]
    assert [k.type for k in a.keys] == [k.type for k in b.keys]
    assert a.positions.tolist() == b.positions.tolist()
    assert (a.seq is None) == (b.seq is None)
    if a.seq is not None:
        assert a.seq.tolist() == b.seq.tolist()
    assert set(a.present) == set(b.present)
    for cid, pres in a.present.items():
        assert pres.tolist() == b.present[cid].tolist(), cid
        assert a.values[cid].type == b.values[cid].type
        va, vb = a.values[cid].to_pylist(), b.values[cid].to_pylist()
        assert [v for v, p in zip(va, pres, strict=True) if p] == [
            v for v, p in zip(vb, pres, strict=True) if p
        ]


def test_to_arrow_lays_out_op_seq_keys_values_and_set_masks():
    batch, _ = build([{"op": "upsert", "key": 1, "set": {"v": "a"}, "seq": 4}], SEQ)
    t = batch.to_arrow()
    assert t.column_names == ["__op", "__seq", "id", "v", SET_PREFIX + "v"]
    assert t.schema.field("__op").type == pa.int8()
    assert t.schema.field("__seq").type == pa.int64()
    assert t.schema.field(SET_PREFIX + "v").type == pa.bool_()


def test_to_arrow_from_arrow_round_trips_ops_keys_values_presence():
    batch = _mixed_batch()
    back, rejects = ChangeBatch.from_arrow(batch.to_arrow(), ALL_TYPES)
    assert len(rejects) == 0
    assert_same_batch(batch, back)


def test_to_arrow_from_arrow_round_trips_seq_and_composite_keys():
    seq_batch, _ = build(
        [
            {"op": "upsert", "key": 1, "set": {"v": None}, "seq": 2},
            {"op": "delete", "key": 1, "seq": 3},
            {"op": "update", "key": 9, "set": {"v": "x"}, "seq": 1},
        ],
        SEQ,
    )
    back, rejects = ChangeBatch.from_arrow(seq_batch.to_arrow(), SEQ)
    assert len(rejects) == 0
    assert_same_batch(seq_batch, back)
    comp, _ = build(
        [
            {"op": "upsert", "key": {"tenant": 1, "sku": "a"}, "set": {"qty": 1}},
            {"op": "delete", "key": {"tenant": 1, "sku": "b"}},
        ],
        COMPOSITE,
    )
    back, rejects = ChangeBatch.from_arrow(comp.to_arrow(), COMPOSITE)
    assert len(rejects) == 0
    assert_same_batch(comp, back)


def test_from_arrow_accepts_a_record_batch():
    batch = _mixed_batch()
    rb = batch.to_arrow().to_batches()[0]
    back, _ = ChangeBatch.from_arrow(rb, ALL_TYPES)
    assert_same_batch(batch, back)


def test_from_arrow_accepts_a_table_of_several_chunks():
    batch = _mixed_batch()
    t = batch.to_arrow()
    chunked = pa.concat_tables([t.slice(0, 1), t.slice(1, 2), t.slice(3)])
    assert chunked.column("__op").num_chunks == 3
    back, rejects = ChangeBatch.from_arrow(chunked, ALL_TYPES)
    assert len(rejects) == 0
    assert_same_batch(batch, back)


def test_from_arrow_accepts_op_names_and_int_codes_and_rejects_unknown_ops():
    names = pa.table(
        {
            "__op": ["insert", "upsert", "merge", None, "delete"],
            "id": [1, 2, 3, 4, 5],
            "name": ["a", "b", "c", "d", "e"],
        }
    )
    batch, rejects = ChangeBatch.from_arrow(names, ALL_TYPES)
    assert batch.op.tolist() == [OP_INSERT, OP_UPSERT, OP_DELETE]
    assert rejects.as_dict() == {2: "unknown op 'merge'", 3: "unknown op None"}
    codes = pa.table(
        {"__op": pa.array([0, 1, 2, 3, 5, -1, 4], pa.int8()), "id": [1, 2, 3, 4, 5, 6, 7]}
    )
    batch, rejects = ChangeBatch.from_arrow(codes, ALL_TYPES)
    # The insert sets no 'name' (required): rejected like any other insert without it.
    assert batch.op.tolist() == [OP_UPSERT, OP_UPDATE, OP_DELETE, OP_TRUNCATE]
    assert rejects.as_dict()[4] == "unknown op 5"
    assert rejects.as_dict()[5] == "unknown op -1"
    assert rejects.as_dict()[0].startswith("insert does not set")


def test_from_arrow_without_set_mask_means_set_by_every_event_but_deletes():
    t = pa.table({"__op": ["upsert", "delete", "update"], "id": [1, 2, 3], "f64": [1.0, 2.0, None]})
    batch, rejects = ChangeBatch.from_arrow(t, ALL_TYPES)
    assert len(rejects) == 0
    values, present = col(batch, "f64")
    assert present == [True, False, True]
    assert values[0] == 1.0 and values[2] is None


def test_from_arrow_null_set_mask_means_not_set():
    t = pa.table(
        {
            "__op": ["upsert", "upsert"],
            "id": [1, 2],
            "f64": [1.0, 2.0],
            SET_PREFIX + "f64": pa.array([None, True], pa.bool_()),
        }
    )
    batch, _ = ChangeBatch.from_arrow(t, ALL_TYPES)
    assert col(batch, "f64")[1] == [False, True]


def test_from_arrow_casts_safe_types_to_the_schema():
    t = pa.table(
        {
            "__op": ["upsert"],
            "id": pa.array([1], pa.int32()),
            "i8": pa.array([5], pa.int64()),
            "f64": pa.array([None], pa.null()),
        }
    )
    batch, rejects = ChangeBatch.from_arrow(t, ALL_TYPES)
    assert len(rejects) == 0
    assert batch.keys[0].type == pa.int64()
    assert batch.values[ALL_TYPES.column("i8").id].type == pa.int8()
    assert col(batch, "f64") == ([None], [True])


def test_from_arrow_validates_events_like_from_events():
    t = pa.table(
        {
            "__op": ["upsert", "upsert", "upsert"],
            "id": pa.array([1, None, 3], pa.int64()),
            "name": pa.array(["a", "b", None]),
        }
    )
    batch, rejects = ChangeBatch.from_arrow(t, ALL_TYPES, position=np.array([10, 11, 12]))
    assert rejects.as_dict() == {
        11: "key column 'id' is missing or null",
        12: "null in non-nullable column 'name'",
    }
    assert batch.positions.tolist() == [10]


def test_from_arrow_with_a_sequence_column_needs_seq():
    t = pa.table(
        {"__op": ["upsert", "upsert"], "__seq": pa.array([5, None], pa.int64()), "id": [1, 2]}
    )
    batch, rejects = ChangeBatch.from_arrow(t, SEQ)
    assert batch.seq.tolist() == [5]
    assert rejects.as_dict() == {1: "seq is null"}
    batch, rejects = ChangeBatch.from_arrow(pa.table({"__op": ["delete"], "id": [1]}), SEQ)
    assert rejects.as_dict() == {0: "seq is missing"}


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            pa.table({"__op": ["upsert"], "id": [1], "colour": ["red"]}),
            r"unknown column\(s\) \['colour'\]",
        ),
        (pa.table({"__op": ["upsert"], "id": [1], SET_PREFIX + "id": [True]}), "unknown column"),
        (pa.table({"id": [1]}), "no '__op' column"),
        (pa.table({"__op": ["upsert"], "name": ["a"]}), "lacks key column 'id'"),
        (pa.table({"__op": ["upsert"], "id": ["x"]}), "column 'id': cannot cast string"),
        (pa.table({"__op": ["upsert"], "id": [1], "i8": [300]}), "column 'i8': cannot cast"),
        (pa.table({"__op": [1.5], "id": [1]}), "'__op' must be int8 codes or op names"),
        (pa.table({"__op": ["upsert"], "__seq": ["1"], "id": [1]}), "'__seq' must be an integer"),
    ],
    ids=[
        "unknown_column",
        "set_mask_of_key",
        "no_op",
        "no_key",
        "uncastable_key",
        "lossy_cast",
        "float_op",
        "string_seq",
    ],
)
def test_from_arrow_with_columns_that_do_not_fit_raises_schema_mismatch(
    table: pa.Table, message: str
):
    schema = SEQ if "__seq" in table.column_names else ALL_TYPES
    with pytest.raises(SchemaMismatch, match=message):
        ChangeBatch.from_arrow(table, schema)


# --------------------------------------------------------------------------- take / split
def test_take_selects_events_in_the_given_order_and_drops_unset_columns():
    batch = _mixed_batch()
    sub = batch.take(np.array([2, 0]))
    assert sub.op.tolist() == [OP_UPDATE, OP_INSERT]
    assert sub.keys[0].to_pylist() == [3, 1]
    assert sub.positions.tolist() == [2, 0]
    assert col(sub, "name") == (["é", "a"], [True, True])
    assert col(sub, "f32") == ([2.5, None], [True, False])
    # Columns only event 1 set are gone from the selection.
    assert ALL_TYPES.column("day").id not in sub.values
    assert ALL_TYPES.column("i16").id not in sub.values


def test_take_keeps_seq_and_the_cached_key_hash():
    batch, _ = build([{"op": "delete", "key": i, "seq": 10 + i} for i in range(5)], SEQ)
    h = batch.key_hash().copy()
    sub = batch.take(np.array([4, 1]))
    assert sub.seq.tolist() == [14, 11]
    assert sub.key_hash().tolist() == h[[4, 1]].tolist()


def test_key_hash_is_int64_per_event_and_equal_keys_hash_equal():
    batch, _ = build([{"op": "delete", "key": k} for k in [1, 2, 1]])
    h = batch.key_hash()
    assert h.dtype == np.int64 and len(h) == 3
    assert h[0] == h[2] and h[0] != h[1]


def test_bucket_ids_are_in_range():
    batch, _ = build([{"op": "delete", "key": k} for k in range(-50, 50)])
    b = batch.bucket_ids()
    assert b.min() >= 0 and b.max() < ALL_TYPES.num_buckets
    assert len(set(b.tolist())) == ALL_TYPES.num_buckets


@pytest.mark.parametrize("schema", [ALL_TYPES, COMPOSITE], ids=["int64", "composite"])
def test_split_by_bucket_puts_each_event_in_its_bucket_and_keeps_order_within_it(
    schema: TableSchema,
):
    rng = np.random.default_rng(7)
    events = []
    for i in range(300):
        k = int(rng.integers(0, 40))
        key: Any = k if schema is ALL_TYPES else {"tenant": k % 3, "sku": f"s{k}"}
        events.append(
            {"op": "upsert", "key": key, "set": {"i32": i} if schema is ALL_TYPES else {"qty": i}}
        )
    batch, rejects = build(events, schema)
    assert len(rejects) == 0
    buckets = batch.bucket_ids()
    parts = batch.split_by_bucket()
    assert sorted(parts) == sorted(set(buckets.tolist()))
    seen: list[int] = []
    for b, part in parts.items():
        pos = part.positions
        assert pos.tolist() == sorted(pos.tolist())  # order kept within the bucket
        assert (buckets[pos] == b).all()
        assert (part.bucket_ids() == b).all()
        # Values travel with their events.
        vcol = "i32" if schema is ALL_TYPES else "qty"
        assert col(part, vcol)[0] == pos.tolist()
        seen.extend(pos.tolist())
    assert sorted(seen) == list(range(300))


def test_split_of_an_empty_batch_is_empty():
    batch, _ = build([])
    assert batch.split_by_bucket() == {}


def test_a_one_bucket_table_gets_the_whole_batch_uncopied():
    one = TableSchema.from_dict({**ALL_TYPES.to_dict(), "num_buckets": 1})
    batch, _ = build(
        [{"op": "upsert", "key": k, "set": {"i32": k}} for k in range(50)]
        + [{"op": "truncate"}, {"op": "insert", "key": 3, "set": {"i32": 1}}],
        one,
    )
    parts = batch.split_by_bucket()
    assert list(parts) == [0] and parts[0] is batch
    assert build([], one)[0].split_by_bucket() == {}


# --------------------------------------------------------------------------- truncate
def test_truncate_needs_no_key_set_or_seq_and_its_key_columns_are_null():
    batch, rejects = build(
        [
            {"op": "insert", "key": 1, "set": {"name": "a"}},
            {"op": "truncate"},
            {"op": "truncate", "key": 5, "set": {"name": "x"}, "seq": 3},
        ]
    )
    assert len(rejects) == 0
    assert batch.op.tolist() == [OP_INSERT, OP_TRUNCATE, OP_TRUNCATE]
    assert batch.keys[0].to_pylist() == [1, None, None]
    assert col(batch, "name") == (["a", None, None], [True, False, False])
    assert batch.has_truncate


def test_truncate_on_a_sequence_table_needs_no_seq():
    batch, rejects = build([{"op": "truncate"}, {"op": "upsert", "key": 1, "set": {"v": "a"}}], SEQ)
    assert rejects.as_dict() == {1: "seq is missing"}
    assert batch.op.tolist() == [OP_TRUNCATE] and batch.seq is not None
    wire = pa.table(
        {
            "__op": ["truncate", "upsert"],
            "__seq": pa.array([None, 4], pa.int64()),
            "id": pa.array([None, 1], pa.int64()),
        }
    )
    batch, rejects = ChangeBatch.from_arrow(wire, SEQ)
    assert len(rejects) == 0 and batch.op.tolist() == [OP_TRUNCATE, OP_UPSERT]


def test_a_null_key_is_allowed_only_for_a_truncate():
    wire = pa.table(
        {
            "__op": ["truncate", "delete", "upsert"],
            "id": pa.array([None, None, None], pa.int64()),
            "name": ["a", "b", "c"],
        }
    )
    batch, rejects = ChangeBatch.from_arrow(wire, ALL_TYPES)
    assert batch.op.tolist() == [OP_TRUNCATE]
    assert rejects.as_dict() == {
        1: "key column 'id' is missing or null",
        2: "key column 'id' is missing or null",
    }


def test_truncate_round_trips_through_the_wire_form():
    batch, _ = build([{"op": "truncate"}, {"op": "upsert", "key": 2, "set": {"i8": 1}}])
    back, rejects = ChangeBatch.from_arrow(batch.to_arrow(), ALL_TYPES)
    assert len(rejects) == 0
    assert back.op.tolist() == [OP_TRUNCATE, OP_UPSERT]
    assert back.keys[0].to_pylist() == [None, 2]


def test_split_by_bucket_sends_a_truncate_to_every_bucket_at_its_position():
    events: list[Any] = [{"op": "upsert", "key": i, "set": {"i32": i}} for i in range(20)]
    events.insert(7, {"op": "truncate"})
    events.append({"op": "truncate"})
    batch, rejects = build(events)
    assert len(rejects) == 0
    parts = batch.split_by_bucket()
    assert sorted(parts) == list(range(ALL_TYPES.num_buckets))
    keyed_buckets = batch.bucket_ids()
    seen = []
    for b, part in parts.items():
        pos = part.positions.tolist()
        assert pos == sorted(pos)
        assert 7 in pos and 21 in pos  # both truncates, in event order
        keyed = [p for p in pos if p not in (7, 21)]
        assert (keyed_buckets[keyed] == b).all()
        seen.extend(keyed)
    assert sorted(seen) == [p for p in range(22) if p not in (7, 21)]


# --------------------------------------------------------------------------- value ranges
US = 1_000_000
TS_MAX = 253402300799 * US + 999_999  # 9999-12-31 23:59:59.999999
TS_MIN = -62135596800 * US  # 0001-01-01 00:00:00


def _ts(micros: list[int | None]) -> pa.Array:
    return pa.array(micros, pa.int64()).cast(pa.timestamp("us", tz="UTC"))


def test_timestamps_outside_year_1_to_9999_are_rejected_with_a_reason():
    wire = pa.table(
        {
            "__op": ["upsert"] * 5,
            "id": [1, 2, 3, 4, 5],
            "at": _ts([TS_MAX, TS_MAX + 1, TS_MIN, TS_MIN - 1, 2**63 - 1]),
        }
    )
    batch, rejects = ChangeBatch.from_arrow(wire, ALL_TYPES)
    reason = "column 'at': out of range 0001-01-01..9999-12-31"
    assert rejects.as_dict() == {1: reason, 3: reason, 4: reason}
    assert batch.keys[0].to_pylist() == [1, 3]
    assert col(batch, "at")[0] == [
        dt.datetime(9999, 12, 31, 23, 59, 59, 999999, UTC),
        dt.datetime(1, 1, 1, tzinfo=UTC),
    ]


def test_dates_outside_year_1_to_9999_are_rejected_with_a_reason():
    days = [2932896, 2932897, -719162, -719163, 2**31 - 1]
    wire = pa.table(
        {
            "__op": ["upsert"] * 5,
            "id": [1, 2, 3, 4, 5],
            "day": pa.array(days, pa.int32()).cast(pa.date32()),
        }
    )
    batch, rejects = ChangeBatch.from_arrow(wire, ALL_TYPES)
    reason = "column 'day': out of range 0001-01-01..9999-12-31"
    assert rejects.as_dict() == {1: reason, 3: reason, 4: reason}
    assert col(batch, "day")[0] == [dt.date(9999, 12, 31), dt.date(1, 1, 1)]


def test_a_timestamp_string_whose_utc_time_is_before_year_1_is_rejected():
    reason = only_reason([{"op": "upsert", "key": 1, "set": {"at": "0001-01-01T00:30:00+01:00"}}])
    assert reason == "column 'at': out of range 0001-01-01..9999-12-31"


def _unsafe_decimal(unscaled: list[int | None], precision: int, scale: int) -> pa.Array:
    """A decimal128(precision, scale) array holding any unscaled values (as Arrow may when
    built or cast unsafely)."""
    wide = pa.array(
        [None if u is None else decimal.Decimal(u) for u in unscaled], pa.decimal128(38, 0)
    )
    return pa.Array.from_buffers(pa.decimal128(precision, scale), len(wide), wide.buffers())


def test_decimals_beyond_their_precision_are_rejected_with_a_reason():
    top = 10**10 - 1
    wire = pa.table(
        {
            "__op": ["upsert"] * 6,
            "id": [1, 2, 3, 4, 5, 6],
            "amount": _unsafe_decimal([top, top + 1, -top, -top - 1, None, 10**37], 10, 2),
        }
    )
    batch, rejects = ChangeBatch.from_arrow(wire, ALL_TYPES)
    reason = "column 'amount': exceeds the precision of decimal128(10, 2) (at most 10 digits)"
    assert rejects.as_dict() == {1: reason, 3: reason, 5: reason}
    assert col(batch, "amount")[0] == [
        decimal.Decimal("99999999.99"),
        decimal.Decimal("-99999999.99"),
        None,
    ]


def test_an_out_of_range_value_in_a_column_the_event_does_not_set_is_not_a_reason():
    wire = pa.table(
        {
            "__op": ["upsert", "delete"],
            "id": [1, 2],
            "at": _ts([2**62, 2**62]),
            "__set__at": [False, True],
        }
    )
    batch, rejects = ChangeBatch.from_arrow(wire, ALL_TYPES)
    assert len(rejects) == 0 and len(batch) == 2


def test_an_out_of_range_key_is_rejected():
    schema = TableSchema.from_dict(
        {"columns": [{"name": "d", "type": "date32"}], "primary_key": ["d"]}
    )
    wire = pa.table(
        {"__op": ["upsert", "upsert"], "d": pa.array([0, 2**31 - 1], pa.int32()).cast(pa.date32())}
    )
    batch, rejects = ChangeBatch.from_arrow(wire, schema)
    assert rejects.as_dict() == {1: "key column 'd': out of range 0001-01-01..9999-12-31"}
    assert batch.keys[0].to_pylist() == [dt.date(1970, 1, 1)]
