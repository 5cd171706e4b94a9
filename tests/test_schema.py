"""Unit tests of cdc_sink.schema: type names, the dictionary form, validation, evolution."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_sink.errors import CdcSinkError, SchemaError
from cdc_sink.schema import (
    Column,
    TableSchema,
    coerce,
    may_exceed_bounds,
    out_of_bounds,
    parse_date,
    parse_timestamp,
    parse_type,
    type_to_str,
)

UTC = dt.timezone.utc


def _schema(*extra: dict[str, Any], **top: Any) -> dict[str, Any]:
    """A minimal valid schema dict (key ``k`` int64) with extra columns/fields."""
    d: dict[str, Any] = {
        "columns": [{"name": "k", "type": "int64"}, *extra],
        "primary_key": ["k"],
    }
    d.update(top)
    return d


# --------------------------------------------------------------------------- type names
SUPPORTED = [
    ("int8", pa.int8()),
    ("int16", pa.int16()),
    ("int32", pa.int32()),
    ("int64", pa.int64()),
    ("float32", pa.float32()),
    ("float64", pa.float64()),
    ("bool", pa.bool_()),
    ("string", pa.string()),
    ("binary", pa.binary()),
    ("date32", pa.date32()),
    ("timestamp[us, UTC]", pa.timestamp("us", tz="UTC")),
    ("decimal128(10, 2)", pa.decimal128(10, 2)),
    ("decimal128(38, 0)", pa.decimal128(38, 0)),
    ("decimal128(1, 1)", pa.decimal128(1, 1)),
]


@pytest.mark.parametrize(("name", "expected"), SUPPORTED, ids=[s[0] for s in SUPPORTED])
def test_every_supported_type_name_parses_to_its_arrow_type(name: str, expected: pa.DataType):
    assert parse_type(name) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("INT64", pa.int64()),
        ("  string ", pa.string()),
        ("timestamp[us,utc]", pa.timestamp("us", tz="UTC")),
        ("Timestamp[ us , tz=UTC ]", pa.timestamp("us", tz="UTC")),
        ("Decimal128( 12 , 4 )", pa.decimal128(12, 4)),
    ],
)
def test_type_names_ignore_case_and_spaces(name: str, expected: pa.DataType):
    assert parse_type(name) == expected


@pytest.mark.parametrize(
    "name",
    [
        "int128",
        "uint8",
        "varchar",
        "timestamp[ns, UTC]",
        "timestamp[us, Europe/Paris]",
        "decimal128(10)",
        "list<int64>",
        "",
    ],
)
def test_unknown_type_name_raises_schema_error_naming_the_type(name: str):
    with pytest.raises(SchemaError, match="unsupported column type"):
        parse_type(name)


@pytest.mark.parametrize("name", ["decimal128(0, 0)", "decimal128(39, 2)", "decimal128(5, 6)"])
def test_decimal_outside_precision_1_to_38_or_scale_above_precision_is_rejected(name: str):
    with pytest.raises(SchemaError, match=r"1 <= p <= 38"):
        parse_type(name)


def test_non_string_type_is_rejected():
    with pytest.raises(SchemaError, match="must be a string"):
        parse_type(64)  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "t"), SUPPORTED, ids=[s[0] for s in SUPPORTED])
def test_type_to_str_is_the_inverse_of_parse_type(name: str, t: pa.DataType):
    assert type_to_str(t) == name
    assert parse_type(type_to_str(t)) == t


def test_schema_error_derives_from_the_root_error():
    assert issubclass(SchemaError, CdcSinkError)


# --------------------------------------------------------------------------- dict form
def test_from_dict_assigns_ids_in_list_order_and_nullable_defaults_to_true_for_values():
    s = TableSchema.from_dict(
        _schema({"name": "a", "type": "string"}, {"name": "b", "type": "float64"})
    )
    assert [(c.id, c.name) for c in s.columns] == [(0, "k"), (1, "a"), (2, "b")]
    assert s.column("a").nullable and s.column("b").nullable
    assert not s.column("k").nullable  # key columns default to not nullable
    assert s.num_buckets == 1 and s.sequence_column is None
    assert s.schema_id == 0 and s.next_column_id == 3


def test_from_dict_honours_explicit_ids_and_auto_ids_skip_them():
    s = TableSchema.from_dict(
        {
            "columns": [
                {"name": "k", "type": "int64", "id": 1},
                {"name": "a", "type": "string"},
                {"name": "b", "type": "string", "id": 7},
                {"name": "c", "type": "string"},
            ],
            "primary_key": ["k"],
        }
    )
    assert [c.id for c in s.columns] == [1, 0, 7, 2]
    assert s.next_column_id == 8


def test_primary_key_may_be_given_as_a_single_string():
    s = TableSchema.from_dict({"columns": [{"name": "k", "type": "int64"}], "primary_key": "k"})
    assert s.primary_key == ("k",)


def test_design_example_schema_parses():
    s = TableSchema.from_dict(
        {
            "columns": [
                {"name": "order_id", "type": "int64", "nullable": False},
                {"name": "status", "type": "string", "default": "new"},
                {"name": "amount", "type": "float64"},
                {"name": "seq", "type": "int64"},
            ],
            "primary_key": ["order_id"],
            "num_buckets": 4,
            "sequence_column": "seq",
        }
    )
    assert s.names == ["order_id", "status", "amount", "seq"]
    assert [c.name for c in s.key_columns] == ["order_id"]
    assert [c.name for c in s.value_columns] == ["status", "amount", "seq"]
    assert s.column("status").default.as_py() == "new"
    assert s.column("status").has_default and not s.column("amount").has_default
    assert not s.column("amount").default.is_valid


# (type, default given in the dict, default as Arrow Python value, JSON form in to_dict)
_DEFAULTS = [
    ("int8", -5, -5, -5),
    ("int16", 300, 300, 300),
    ("int32", 7, 7, 7),
    ("int64", 2**40, 2**40, 2**40),
    ("float32", 1.5, 1.5, 1.5),
    ("float64", 2, 2.0, 2.0),
    ("bool", True, True, True),
    ("string", "new", "new", "new"),
    (
        "binary",
        base64.b64encode(b"\x00\xffab").decode(),
        b"\x00\xffab",
        base64.b64encode(b"\x00\xffab").decode(),
    ),
    ("date32", "2024-02-29", dt.date(2024, 2, 29), "2024-02-29"),
    (
        "timestamp[us, UTC]",
        "2024-01-02T03:04:05.123456Z",
        dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC),
        "2024-01-02T03:04:05.123456+00:00",
    ),
    ("decimal128(10, 2)", "12.34", decimal.Decimal("12.34"), "12.34"),
]


@pytest.mark.parametrize(
    ("type_name", "given", "value", "json_form"), _DEFAULTS, ids=[c[0] for c in _DEFAULTS]
)
def test_default_of_every_type_parses_and_serializes_to_its_json_form(
    type_name: str, given: Any, value: Any, json_form: Any
):
    s = TableSchema.from_dict(_schema({"name": "c", "type": type_name, "default": given}))
    c = s.column("c")
    assert c.default.type == parse_type(type_name)
    assert c.default.as_py() == value
    assert c.to_dict()["default"] == json_form


@pytest.mark.parametrize(
    ("type_name", "given", "value", "json_form"), _DEFAULTS, ids=[c[0] for c in _DEFAULTS]
)
def test_from_dict_to_dict_round_trips_with_a_default_of_every_type(
    type_name: str, given: Any, value: Any, json_form: Any
):
    s = TableSchema.from_dict(
        _schema(
            {"name": "c", "type": type_name, "default": given, "nullable": False},
            {"name": "n", "type": type_name},
            {"name": "seq", "type": "int32"},
            num_buckets=8,
            sequence_column="seq",
        )
    )
    d = s.to_dict()
    back = TableSchema.from_dict(d)
    assert back == s
    assert back.to_dict() == d
    assert back.column("c").default.as_py() == value
    assert "default" not in d["columns"][2]  # no default declared: not written


def test_round_trip_keeps_schema_id_and_next_column_id_after_a_drop():
    s = TableSchema.from_dict(
        _schema({"name": "a", "type": "string"}, {"name": "b", "type": "int32"})
    )
    s2 = s.drop_column("b")
    back = TableSchema.from_dict(s2.to_dict())
    assert back == s2
    assert back.schema_id == 1 and back.next_column_id == 3
    assert back.add_column("c", "string").column("c").id == 3


def test_timestamp_default_with_offset_is_converted_to_utc_and_naive_means_utc():
    s = TableSchema.from_dict(
        _schema(
            {"name": "a", "type": "timestamp[us, UTC]", "default": "2024-01-01T05:00:00+05:00"},
            {"name": "b", "type": "timestamp[us, UTC]", "default": "2024-01-01T00:00:00"},
        )
    )
    expected = dt.datetime(2024, 1, 1, tzinfo=UTC)
    assert s.column("a").default.as_py() == expected
    assert s.column("b").default.as_py() == expected


def test_decimal_default_may_be_an_int_or_float():
    s = TableSchema.from_dict(
        _schema(
            {"name": "a", "type": "decimal128(6, 2)", "default": 3},
            {"name": "b", "type": "decimal128(6, 2)", "default": 0.5},
        )
    )
    assert s.column("a").default.as_py() == decimal.Decimal("3.00")
    assert s.column("b").default.as_py() == decimal.Decimal("0.50")


# --------------------------------------------------------------------------- validation
_INVALID = [
    ("unknown_type", _schema({"name": "a", "type": "uint64"}), "unsupported column type 'uint64'"),
    ("missing_type", _schema({"name": "a"}), "'type' is missing"),
    (
        "duplicate_name",
        _schema({"name": "a", "type": "int8"}, {"name": "a", "type": "int8"}),
        "duplicate column name 'a'",
    ),
    (
        "duplicate_id",
        {
            "columns": [
                {"name": "k", "type": "int64", "id": 0},
                {"name": "a", "type": "int8", "id": 0},
            ],
            "primary_key": ["k"],
        },
        "used twice",
    ),
    (
        "negative_id",
        {"columns": [{"name": "k", "type": "int64", "id": -1}], "primary_key": ["k"]},
        "negative",
    ),
    (
        "id_not_int",
        {"columns": [{"name": "k", "type": "int64", "id": "0"}], "primary_key": ["k"]},
        "id must be an integer",
    ),
    ("no_columns", {"columns": [], "primary_key": ["k"]}, "at least one column"),
    ("columns_not_list", {"columns": "k", "primary_key": ["k"]}, "must be a list"),
    ("column_not_object", {"columns": ["k"], "primary_key": ["k"]}, "must be an object"),
    ("name_not_string", _schema({"name": 5, "type": "int8"}), "'name' must be a string"),
    ("empty_name", _schema({"name": "", "type": "int8"}), "non-empty string"),
    (
        "missing_pk_column",
        _schema(primary_key=["nope"]),
        "primary key column 'nope' is not a column",
    ),
    ("no_primary_key", {"columns": [{"name": "k", "type": "int64"}]}, "primary_key"),
    ("empty_primary_key", _schema(primary_key=[]), "at least one column"),
    ("pk_twice", _schema(primary_key=["k", "k"]), "names a column twice"),
    (
        "nullable_key",
        {"columns": [{"name": "k", "type": "int64", "nullable": True}], "primary_key": ["k"]},
        "primary key column 'k' must not be nullable",
    ),
    (
        "float_key",
        {"columns": [{"name": "k", "type": "float64"}], "primary_key": ["k"]},
        "floating-point keys are not allowed",
    ),
    (
        "float32_key",
        {"columns": [{"name": "k", "type": "float32"}], "primary_key": ["k"]},
        "floating-point keys are not allowed",
    ),
    (
        "nullable_not_bool",
        _schema({"name": "a", "type": "int8", "nullable": "yes"}),
        "'nullable' must be true or false",
    ),
    ("zero_buckets", _schema(num_buckets=0), r"num_buckets must be an integer in \[1, 65536\]"),
    ("too_many_buckets", _schema(num_buckets=65537), "num_buckets"),
    ("string_buckets", _schema(num_buckets="4"), "num_buckets"),
    ("bool_buckets", _schema(num_buckets=True), "num_buckets"),
    ("float_buckets", _schema(num_buckets=4.0), "num_buckets"),
    (
        "sequence_not_integer",
        _schema({"name": "s", "type": "float64"}, sequence_column="s"),
        "sequence_column 's' must be an integer column, not float64",
    ),
    (
        "sequence_string",
        _schema({"name": "s", "type": "string"}, sequence_column="s"),
        "must be an integer column",
    ),
    ("sequence_is_key", _schema(sequence_column="k"), "cannot be a primary key column"),
    ("sequence_missing", _schema(sequence_column="s"), "sequence_column 's' is not a column"),
    (
        "default_wrong_type_int",
        _schema({"name": "a", "type": "int32", "default": "5"}),
        "default '5' of column 'a' is not a valid int32",
    ),
    (
        "default_float_for_int",
        _schema({"name": "a", "type": "int64", "default": 1.0}),
        "not a valid int64",
    ),
    (
        "default_bool_for_int",
        _schema({"name": "a", "type": "int64", "default": True}),
        "not a valid int64",
    ),
    (
        "default_int_out_of_int8",
        _schema({"name": "a", "type": "int8", "default": 300}),
        "not a valid int8",
    ),
    (
        "default_int_for_bool",
        _schema({"name": "a", "type": "bool", "default": 1}),
        "not a valid bool",
    ),
    (
        "default_int_for_string",
        _schema({"name": "a", "type": "string", "default": 5}),
        "not a valid string",
    ),
    (
        "default_text_for_float",
        _schema({"name": "a", "type": "float64", "default": "x"}),
        "not a valid float64",
    ),
    (
        "default_bad_date",
        _schema({"name": "a", "type": "date32", "default": "2024-13-01"}),
        "of column 'a' is not a valid",
    ),
    (
        "default_bad_timestamp",
        _schema({"name": "a", "type": "timestamp[us, UTC]", "default": "yesterday"}),
        "of column 'a' is not a valid",
    ),
    (
        "default_decimal_too_precise",
        _schema({"name": "a", "type": "decimal128(5, 2)", "default": "1.234"}),
        r"not a valid decimal128\(5, 2\)",
    ),
    (
        "default_bad_decimal",
        _schema({"name": "a", "type": "decimal128(5, 2)", "default": "abc"}),
        r"not a valid decimal128\(5, 2\)",
    ),
    (
        "default_bad_base64_padding",
        _schema({"name": "a", "type": "binary", "default": "abc"}),
        "not a valid binary",
    ),
    (
        "non_nullable_default_null",
        _schema({"name": "a", "type": "int8", "nullable": False, "default": None}),
        "non-nullable column cannot default to null",
    ),
    ("unknown_schema_field", _schema(partitions=3), r"unknown schema field\(s\): \['partitions'\]"),
    (
        "unknown_column_field",
        _schema({"name": "a", "type": "int8", "comment": "x"}),
        r"column #1: unknown field\(s\) \['comment'\]",
    ),
    (
        "reserved_name",
        _schema({"name": "__op", "type": "int8"}),
        "names starting with '__' are reserved",
    ),
    (
        "reserved_key_name",
        {"columns": [{"name": "__k", "type": "int64"}], "primary_key": ["__k"]},
        "reserved",
    ),
    ("not_a_mapping", ["k"], "schema must be a mapping"),
]


@pytest.mark.parametrize(("d", "message"), [c[1:] for c in _INVALID], ids=[c[0] for c in _INVALID])
def test_invalid_schema_raises_schema_error_naming_the_problem(d: Any, message: str):
    with pytest.raises(SchemaError, match=message):
        TableSchema.from_dict(d)


def test_non_nullable_column_without_default_is_allowed_and_required():
    s = TableSchema.from_dict(
        _schema(
            {"name": "a", "type": "string", "nullable": False},
            {"name": "b", "type": "string", "nullable": False, "default": "x"},
            {"name": "s", "type": "int64", "nullable": False},
            {"name": "c", "type": "string"},
            sequence_column="s",
        )
    )
    assert [c.name for c in s.required_columns] == ["a"]


def test_int_default_beyond_64_bits_raises_schema_error():
    with pytest.raises(SchemaError, match="not a valid int64"):
        TableSchema.from_dict(_schema({"name": "a", "type": "int64", "default": 2**70}))


def test_binary_default_that_is_not_base64_raises_schema_error():
    with pytest.raises(SchemaError, match="not a valid binary"):
        TableSchema.from_dict(_schema({"name": "a", "type": "binary", "default": "!!!"}))


def test_schema_constructed_directly_is_validated_too():
    with pytest.raises(SchemaError, match="duplicate column name"):
        TableSchema(
            columns=(Column(0, "k", pa.int64(), nullable=False), Column(1, "k", pa.int64())),
            primary_key=("k",),
        )
    with pytest.raises(SchemaError, match="next_column_id"):
        TableSchema(
            columns=(Column(5, "k", pa.int64(), nullable=False),),
            primary_key=("k",),
            next_column_id=3,
        )


# --------------------------------------------------------------------------- evolution
@pytest.fixture
def base() -> TableSchema:
    return TableSchema.from_dict(
        _schema(
            {"name": "a", "type": "string"},
            {"name": "b", "type": "int32"},
            {"name": "seq", "type": "int64"},
            sequence_column="seq",
            num_buckets=4,
        )
    )


def test_add_column_appends_with_the_next_id_and_increments_schema_id(base: TableSchema):
    s = base.add_column("c", "float64", default=1.5)
    assert s.names == ["k", "a", "b", "seq", "c"]
    assert s.column("c").id == 4 and s.next_column_id == 5
    assert s.column("c").default.as_py() == 1.5
    assert s.schema_id == base.schema_id + 1
    assert base.names == ["k", "a", "b", "seq"]  # the old schema is unchanged
    assert [c.id for c in s.columns[:4]] == [c.id for c in base.columns]


def test_add_column_accepts_an_arrow_type(base: TableSchema):
    s = base.add_column("c", pa.decimal128(8, 3), default="1.5")
    assert s.column("c").type == pa.decimal128(8, 3)


@pytest.mark.parametrize("t", ["date32", pa.date32()], ids=["name", "arrow"])
def test_add_column_accepts_a_date32_column(base: TableSchema, t: str | pa.DataType):
    s = base.add_column("d", t)
    assert s.column("d").type == pa.date32()


@pytest.mark.parametrize(
    "t", [pa.timestamp("ns", tz="UTC"), pa.timestamp("us"), pa.decimal256(10, 2)], ids=str
)
def test_add_column_rejects_an_unsupported_arrow_type(base: TableSchema, t: pa.DataType):
    with pytest.raises(SchemaError):
        base.add_column("c", t)


def test_add_column_rejects_unsupported_arrow_type_with_no_supported_name(base: TableSchema):
    with pytest.raises(SchemaError, match="unsupported column type"):
        base.add_column("c", pa.uint8())


def test_add_non_nullable_column_needs_a_default(base: TableSchema):
    with pytest.raises(SchemaError, match="not nullable and needs a default"):
        base.add_column("c", "int64", nullable=False)
    s = base.add_column("c", "int64", nullable=False, default=0)
    assert not s.column("c").nullable and s.column("c").default.as_py() == 0


@pytest.mark.parametrize(
    ("name", "message"), [("a", "duplicate column name 'a'"), ("__c", "reserved")]
)
def test_add_column_with_a_taken_or_reserved_name_is_rejected(
    base: TableSchema, name: str, message: str
):
    with pytest.raises(SchemaError, match=message):
        base.add_column(name, "int64")


def test_add_column_with_a_default_of_the_wrong_type_is_rejected(base: TableSchema):
    with pytest.raises(SchemaError, match="not a valid int64"):
        base.add_column("c", "int64", default="zero")


def test_drop_column_keeps_other_ids_and_never_reuses_the_dropped_id(base: TableSchema):
    s = base.drop_column("a")
    assert s.names == ["k", "b", "seq"]
    assert [c.id for c in s.columns] == [0, 2, 3]
    assert s.schema_id == 1 and s.next_column_id == 4
    s2 = s.add_column("a", "string")
    assert s2.column("a").id == 4  # a new column, not the dropped one
    assert s2.schema_id == 2


@pytest.mark.parametrize("name", ["k", "seq"])
def test_key_and_sequence_columns_cannot_be_dropped(base: TableSchema, name: str):
    with pytest.raises(SchemaError, match="key or the sequence column"):
        base.drop_column(name)


def test_dropping_a_missing_column_is_rejected(base: TableSchema):
    with pytest.raises(SchemaError, match="no such column"):
        base.drop_column("zz")


def test_rename_keeps_the_id_and_follows_key_and_sequence_references(base: TableSchema):
    s = base.rename_column("a", "alpha")
    assert s.column("alpha").id == base.column("a").id
    assert not s.has_column("a") and s.schema_id == 1
    s = s.rename_column("k", "key").rename_column("seq", "version")
    assert s.primary_key == ("key",) and s.column("key").id == 0
    assert s.sequence_column == "version" and s.column("version").id == 3
    assert s.schema_id == 3 and s.next_column_id == base.next_column_id


def test_rename_to_a_taken_name_or_from_a_missing_one_is_rejected(base: TableSchema):
    with pytest.raises(SchemaError, match="name taken"):
        base.rename_column("a", "b")
    with pytest.raises(SchemaError, match="no such column"):
        base.rename_column("zz", "y")
    with pytest.raises(SchemaError, match="reserved"):
        base.rename_column("a", "__a")


def test_column_lookup_by_name_and_id(base: TableSchema):
    assert base.column_by_id(2).name == "b"
    assert base.has_column("b") and not base.has_column("B")
    with pytest.raises(KeyError, match="no column 'zz'"):
        base.column("zz")


# --------------------------------------------------------------------------- arrow schema
def test_arrow_schema_carries_types_and_nullability_in_table_order(base: TableSchema):
    s = base.add_column("c", "float32", nullable=False, default=0.0)
    a = s.arrow_schema()
    assert a.names == ["k", "a", "b", "seq", "c"]
    assert [f.nullable for f in a] == [False, True, True, True, False]
    assert a.field("k").type == pa.int64() and a.field("c").type == pa.float32()


def test_arrow_schema_of_selected_columns_follows_the_requested_order(base: TableSchema):
    a = base.arrow_schema(["b", "k"])
    assert a.names == ["b", "k"]
    assert [f.nullable for f in a] == [True, False]


# --------------------------------------------------------------------------- value coercion
def test_iso_timestamps_take_z_and_default_to_utc_dates_are_plain():
    assert parse_timestamp("2026-11-24T05:16:43Z") == dt.datetime(
        2026, 11, 24, 5, 16, 43, tzinfo=UTC
    )
    assert parse_timestamp("2026-11-24T05:16:43").tzinfo is not None
    assert parse_timestamp("2026-11-24T06:16:43+01:00") == parse_timestamp("2026-11-24T05:16:43")
    assert parse_date("2026-11-24") == dt.date(2026, 11, 24)
    with pytest.raises(ValueError):
        parse_timestamp("yesterday")
    with pytest.raises(ValueError):
        parse_date("2026-13-01")


@pytest.mark.parametrize(
    ("type_name", "value", "lenient", "strict"),
    [
        ("int8", 5, 5, 5),
        ("float64", 2, 2, 2.0),
        ("decimal128(10, 2)", "1.5", decimal.Decimal("1.5"), decimal.Decimal("1.50")),
        # more digits than decimal's default context (28): the type's precision decides
        ("decimal128(38, 0)", "9" * 38, decimal.Decimal("9" * 38), decimal.Decimal("9" * 38)),
        (
            "decimal128(38, 10)",
            "-" + "9" * 28 + ".5",
            decimal.Decimal("-" + "9" * 28 + ".5"),
            decimal.Decimal("-" + "9" * 28 + ".5000000000"),
        ),
        ("date32", "2026-11-24", dt.date(2026, 11, 24), dt.date(2026, 11, 24)),
        (
            "timestamp[us, UTC]",
            "2026-11-24T05:00:00Z",
            dt.datetime(2026, 11, 24, 5, tzinfo=UTC),
            dt.datetime(2026, 11, 24, 5, tzinfo=UTC),
        ),
        ("binary", base64.b64encode(b"\x00\x01").decode(), b"\x00\x01", b"\x00\x01"),
        ("string", "x", "x", "x"),
        ("bool", True, True, True),
        ("int64", None, None, None),
    ],
)
def test_coerce_parses_text_forms_and_strict_gives_the_canonical_value(
    type_name: str, value: Any, lenient: Any, strict: Any
):
    t = parse_type(type_name)
    assert coerce(value, t) == lenient
    got = coerce(value, t, strict=True)
    assert got == strict and type(got) is type(strict)


@pytest.mark.parametrize(
    ("type_name", "value", "error"),
    [
        ("int32", True, TypeError),
        ("int32", "1", TypeError),
        ("float64", "1.5", TypeError),
        ("bool", 1, TypeError),
        ("string", 5, TypeError),
        ("binary", "not base64!", ValueError),
        ("date32", "24.11.2026", ValueError),
    ],
)
def test_coerce_refuses_values_of_another_kind_in_both_modes(
    type_name: str, value: Any, error: type[Exception]
):
    t = parse_type(type_name)
    for strict in (False, True):
        with pytest.raises(error):
            coerce(value, t, strict=strict)


@pytest.mark.parametrize(
    ("type_name", "value", "error"),
    [
        ("int8", 128, ValueError),
        ("decimal128(5, 1)", "1.25", ValueError),
        ("decimal128(5, 1)", "123456", ValueError),
        ("decimal128(38, 0)", "1" * 39, ValueError),
        ("decimal128(38, 0)", "1E+100", ValueError),
        ("date32", 5, TypeError),
        ("date32", dt.datetime(2026, 1, 1), TypeError),
        ("timestamp[us, UTC]", 5, TypeError),
    ],
)
def test_strict_coercion_checks_what_lenient_leaves_to_arrow(
    type_name: str, value: Any, error: type[Exception]
):
    t = parse_type(type_name)
    assert coerce(value, t) is not None  # pyarrow decides later
    with pytest.raises(error):
        coerce(value, t, strict=True)


_BOUNDED = [pa.date32(), pa.timestamp("s"), pa.timestamp("ms"), pa.timestamp("us", "UTC")]


@settings(max_examples=200, deadline=None)
@given(
    t=st.sampled_from([*_BOUNDED, pa.int64(), pa.float64(), pa.string()]),
    chunks=st.lists(
        st.lists(st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)), max_size=6),
        min_size=1,
        max_size=3,
    ),
    scale=st.sampled_from([1, 10**3, 10**6, 4 * 10**9]),
)
def test_may_exceed_bounds_is_false_only_where_no_value_is_out_of_bounds(
    t: pa.DataType, chunks: list[list[int | None]], scale: int
) -> None:
    """The one-pass check that lets a batch skip the mask: never False where
    ``out_of_bounds`` finds a value (dates and timestamps: exact; chunked arrays too)."""
    if pa.types.is_date32(t):  # days: int32, the integers as they are
        width = pa.int32()
        raw = chunks
    else:
        width = pa.int64()
        raw = [[None if v is None else v * scale for v in c] for c in chunks]
    if pa.types.is_string(t):
        arr: pa.ChunkedArray = pa.chunked_array([pa.array([str(v) for v in c], t) for c in raw], t)
    elif pa.types.is_floating(t):
        arr = pa.chunked_array(
            [pa.array([None if v is None else float(v) for v in c], t) for c in raw], t
        )
    else:
        arr = pa.chunked_array([pa.array(c, width).view(t) for c in raw], t)
    mask = out_of_bounds(arr)
    if t in _BOUNDED:
        assert may_exceed_bounds(arr) == bool(mask.any())
    else:
        assert not may_exceed_bounds(arr) and not mask.any()
    if arr.num_chunks == 1:
        assert may_exceed_bounds(arr.chunk(0)) == may_exceed_bounds(arr)
