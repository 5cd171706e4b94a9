"""Hypothesis strategies for random schemas and event streams."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

from hypothesis import strategies as st

from cdc_sink.schema import TableSchema

VALUE_TYPES = [
    "int8",
    "int16",
    "int32",
    "int64",
    "float32",
    "float64",
    "bool",
    "string",
    "binary",
    "date32",
    "timestamp[us, UTC]",
    "decimal128(10, 2)",
]
#: The types a value column of each of VALUE_TYPES (and of the types it widens to) may be
#: widened to (TableSchema.widen_column).
WIDER = {
    "int8": ("int16", "int32", "int64"),
    "int16": ("int32", "int64"),
    "int32": ("int64",),
    "float32": ("float64",),
    "decimal128(10, 2)": ("decimal128(12, 2)",),
    "decimal128(12, 2)": ("decimal128(20, 2)",),
}
KEY_SHAPES = [["int64"], ["int32"], ["string"], ["int32", "string"], ["date32", "int64"]]


def values_of(type_name: str) -> st.SearchStrategy[Any]:
    """Valid Python values of a schema type."""
    if type_name.startswith("int"):
        bits = int(type_name[3:])
        return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if type_name == "float32":
        return st.floats(width=32, allow_nan=False)
    if type_name == "float64":
        return st.floats(allow_nan=False)
    if type_name == "bool":
        return st.booleans()
    if type_name == "string":
        return st.text(max_size=6)
    if type_name == "binary":
        return st.binary(max_size=6)
    if type_name == "date32":
        return st.dates(dt.date(1970, 1, 1), dt.date(2100, 1, 1))
    if type_name.startswith("timestamp"):
        return st.datetimes(dt.datetime(1970, 1, 1), dt.datetime(2100, 1, 1)).map(
            lambda d: d.replace(tzinfo=dt.timezone.utc)
        )
    if type_name.startswith("decimal"):
        return st.decimals(
            min_value=-(10**7), max_value=10**7, places=2, allow_nan=False, allow_infinity=False
        ).map(lambda d: d.quantize(decimal.Decimal("0.01")))
    raise AssertionError(type_name)


@st.composite
def schemas(draw: st.DrawFn) -> TableSchema:
    """Random table schemas: key shape, 1..5 value columns, maybe a sequence column."""
    key_types = draw(st.sampled_from(KEY_SHAPES))
    cols: list[dict[str, Any]] = [
        {"name": f"k{i}", "type": t, "nullable": False} for i, t in enumerate(key_types)
    ]
    for i in range(draw(st.integers(1, 5))):
        t = draw(st.sampled_from(VALUE_TYPES))
        col: dict[str, Any] = {"name": f"c{i}", "type": t, "nullable": draw(st.booleans())}
        if draw(st.booleans()):
            v = draw(values_of(t))
            col["default"] = _json_default(v)
        cols.append(col)
    with_seq = draw(st.booleans())
    if with_seq:
        cols.append({"name": "seq", "type": "int64"})
    return TableSchema.from_dict(
        {
            "columns": cols,
            "primary_key": [f"k{i}" for i in range(len(key_types))],
            "num_buckets": draw(st.integers(1, 4)),
            **({"sequence_column": "seq"} if with_seq else {}),
        }
    )


def _json_default(v: Any) -> Any:
    import base64

    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    if isinstance(v, (dt.date, dt.datetime)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    return v


def type_name(schema: TableSchema, name: str) -> str:
    from cdc_sink.schema import type_to_str

    return type_to_str(schema.column(name).type).replace("decimal128(10, 2)", "decimal128(10, 2)")


@st.composite
def key_pool(draw: st.DrawFn, schema: TableSchema) -> list[dict[str, Any]]:
    """A small pool of distinct keys, so batches repeat keys."""
    keys = []
    seen = set()
    for _ in range(draw(st.integers(1, 12))):
        k = {n: draw(values_of(type_name(schema, n))) for n in schema.primary_key}
        t = tuple(k.values())
        if t not in seen:
            seen.add(t)
            keys.append(k)
    return keys


@st.composite
def events(
    draw: st.DrawFn,
    schema: TableSchema,
    keys: list[dict[str, Any]],
    max_size: int = 25,
    truncates: bool = False,
) -> list[dict[str, Any]]:
    """A batch of events over ``keys``: all ops, absent/null columns, random seqs, a few
    invalid events and, with ``truncates``, a few ``{"op": "truncate"}``."""
    out: list[dict[str, Any]] = []
    value_cols = [c for c in schema.value_columns if c.name != schema.sequence_column]
    for _ in range(draw(st.integers(0, max_size))):
        if truncates and draw(st.integers(0, 30)) == 0:
            out.append({"op": "truncate"})
            continue
        op = draw(
            st.sampled_from(["insert", "upsert", "update", "delete", "insert", "upsert", "update"])
        )
        e: dict[str, Any] = {"op": op, "key": dict(draw(st.sampled_from(keys)))}
        sets = {}
        for c in value_cols:
            choice = draw(st.integers(0, 3))
            if choice == 0:
                continue  # absent
            if choice == 1 and (c.nullable or draw(st.integers(0, 9)) == 0):
                sets[c.name] = None
            else:
                sets[c.name] = draw(values_of(type_name(schema, c.name)))
        if op != "delete" or draw(st.booleans()):
            e["set"] = sets
        if schema.sequence_column is not None and draw(st.integers(0, 30)) != 0:
            e["seq"] = draw(st.integers(0, 8))
        if draw(st.integers(0, 40)) == 0:
            e["op"] = "merge"  # invalid op
        out.append(e)
    return out
