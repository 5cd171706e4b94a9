"""Shared schemas and comparisons of the format tests."""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from cdc_sink.batch import ChangeBatch, Rejects
from cdc_sink.schema import TableSchema
from tests.fixtures import ID_V_SEQ

UTC = dt.timezone.utc

# Every supported type as a value column; "name" is required (not nullable, no default).
ALL_TYPE_COLUMNS: list[dict[str, Any]] = [
    {"name": "name", "type": "string", "nullable": False},
    {"name": "i8", "type": "int8"},
    {"name": "i16", "type": "int16"},
    {"name": "i32", "type": "int32"},
    {"name": "i64", "type": "int64"},
    {"name": "f32", "type": "float32"},
    {"name": "f64", "type": "float64"},
    {"name": "flag", "type": "bool"},
    {"name": "blob", "type": "binary"},
    {"name": "day", "type": "date32"},
    {"name": "at", "type": "timestamp[us, UTC]"},
    {"name": "amount", "type": "decimal128(10, 2)"},
    {"name": "big", "type": "decimal128(38, 4)"},
]

ALL_TYPES = TableSchema.from_dict(
    {
        "columns": [{"name": "id", "type": "int64"}, *ALL_TYPE_COLUMNS],
        "primary_key": ["id"],
        "num_buckets": 4,
    }
)

SEQ = TableSchema.from_dict(ID_V_SEQ)

COMPOSITE = TableSchema.from_dict(
    {
        "columns": [
            {"name": "tenant", "type": "int32"},
            {"name": "sku", "type": "string"},
            {"name": "day", "type": "date32"},
            {"name": "qty", "type": "int64"},
            {"name": "note", "type": "string"},
        ],
        "primary_key": ["tenant", "sku", "day"],
        "num_buckets": 3,
    }
)

# Column ids above 255 force rowv2's "big" layout.
BIG_IDS = TableSchema.from_dict(
    {
        "columns": [
            {"id": 0, "name": "id", "type": "int64"},
            {"id": 7, "name": "small", "type": "int32"},
            {"id": 300, "name": "wide", "type": "string"},
            {"id": 70000, "name": "huge", "type": "float64"},
        ],
        "primary_key": ["id"],
    }
)

FULL_ROW: dict[str, Any] = {
    "name": 'é日本 "quoted" \\ back\nslash',
    "i8": -128,
    "i16": 32767,
    "i32": -(2**31),
    "i64": 2**63 - 1,
    "f32": 1.5,
    "f64": -2.25e-300,
    "flag": True,
    "blob": b"\x00\xff\x10",
    "day": dt.date(1969, 12, 31),
    "at": dt.datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=UTC),
    "amount": decimal.Decimal("-12345678.90"),
    "big": decimal.Decimal("1234567890123456789012345678901234.5678"),
}


def full_row_events() -> list[dict[str, Any]]:
    """Events over ALL_TYPES: every op, every type, nulls and absent columns."""
    return [
        {"op": "insert", "key": {"id": 1}, "set": dict(FULL_ROW)},
        {"op": "upsert", "key": {"id": -2}, "set": {"name": "n", "i8": None, "blob": b""}},
        {
            "op": "update",
            "key": {"id": 3},
            "set": {
                "f32": None,
                "day": dt.date(2100, 1, 1),
                "at": dt.datetime(1970, 1, 1, tzinfo=UTC),
            },
        },
        {"op": "delete", "key": {"id": 4}},
        {
            "op": "upsert",
            "key": {"id": 2**62},
            "set": {"amount": decimal.Decimal("0.01"), "i64": -(2**63), "flag": False},
        },
        {"op": "update", "key": {"id": 6}, "set": {}},
    ]


def _zeros(n: int) -> np.ndarray:
    return np.zeros(n, dtype=bool)


def assert_same_batch(got: ChangeBatch, want: ChangeBatch) -> None:
    """Same events: ops, keys, present masks, values where present, seq and positions."""
    assert got.op.tolist() == want.op.tolist()
    assert got.positions.tolist() == want.positions.tolist()
    assert len(got.keys) == len(want.keys)
    for g, w in zip(got.keys, want.keys, strict=True):
        assert g.type == w.type
        assert g.to_pylist() == w.to_pylist()
    assert (got.seq is None) == (want.seq is None)
    if got.seq is not None and want.seq is not None:
        assert got.seq.tolist() == want.seq.tolist()
    n = len(want)
    for cid in set(got.values) | set(want.values):
        gp = got.present.get(cid, _zeros(n))
        wp = want.present.get(cid, _zeros(n))
        name = want.schema.column_by_id(cid).name
        assert gp.tolist() == wp.tolist(), name
        if wp.any():
            gv = got.values[cid].filter(pa.array(gp)).to_pylist()
            wv = want.values[cid].filter(pa.array(wp)).to_pylist()
            assert got.values[cid].type == want.values[cid].type, name
            assert gv == wv, name


def assert_same_rejects(got: Rejects, want: Rejects) -> None:
    """Same rejected positions (reasons may be worded differently)."""
    assert got.positions.tolist() == want.positions.tolist(), (got.reasons, want.reasons)


def reasons_by_position(rejects: Rejects) -> dict[int, str]:
    return rejects.as_dict()


def binary(values: Sequence[bytes | None]) -> pa.BinaryArray:
    return pa.array(list(values), pa.binary())


def expected(
    events: Sequence[Mapping[str, Any]],
    schema: TableSchema,
) -> tuple[ChangeBatch, Rejects]:
    return ChangeBatch.from_events(list(events), schema)
