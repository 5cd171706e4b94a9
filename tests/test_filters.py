"""Unit tests of cdc_sink.filters: parsing, row evaluation and page skipping."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_sink.filters import PageStats, Predicate, evaluate, may_match, page_stats, parse_filter

NAMES = ["k", "x", "s"]


def rows(**cols: Any) -> pa.Table:
    return pa.table(cols)


# --------------------------------------------------------------------------- parse_filter
def test_no_filter_is_no_predicate():
    assert parse_filter(None, NAMES) == []
    assert parse_filter([], NAMES) == []


def test_one_tuple_or_a_list_of_tuples_is_a_conjunction():
    assert parse_filter(("x", "<", 3), NAMES) == [Predicate("x", "<", 3)]
    assert parse_filter([("x", ">=", 1), ["s", "=", "a"]], NAMES) == [
        Predicate("x", ">=", 1),
        Predicate("s", "=", "a"),
    ]


def test_op_is_normalized_to_lower_case_and_double_equals_to_equals():
    assert parse_filter([("x", " IN ", [1]), ("x", "==", 2), ("s", "IS NULL")], NAMES) == [
        Predicate("x", "in", [1]),
        Predicate("x", "=", 2),
        Predicate("s", "is null"),
    ]


def test_predicate_objects_pass_through():
    p = Predicate("x", "is not null")
    assert parse_filter(p, NAMES) == [p]
    assert parse_filter([p], NAMES) == [p]


@pytest.mark.parametrize(
    ("flt", "message"),
    [
        (("x", "~", 1), "filter op '~' is not one of"),
        (("x", "like", "a%"), "filter op 'like'"),
        (("nope", "=", 1), "unknown column 'nope'"),
        ([("x", "=", 1), ("nope", "is null")], "unknown column 'nope'"),
        (("x",), "must be \\(column, op, value\\)"),
        (("x", "=", 1, 2), "must be \\(column, op, value\\)"),
        (["x", "=", 1], "must be \\(column, op, value\\)"),
        ([{"x": 1}], "must be \\(column, op, value\\)"),
        (("x", "in", 3), "needs a list of values"),
        (("x", "not in", None), "needs a list of values"),
        ([Predicate("x", "between", (1, 2))], "filter op 'between'"),
    ],
    ids=[
        "bad_op",
        "like",
        "unknown_column",
        "unknown_column_later",
        "one_item",
        "four_items",
        "flat_list",
        "dict",
        "in_scalar",
        "not_in_none",
        "predicate_bad_op",
    ],
)
def test_malformed_filter_raises_value_error(flt: Any, message: str):
    with pytest.raises(ValueError, match=message):
        parse_filter(flt, NAMES)


def test_predicate_object_with_double_equals_evaluates_like_equals():
    preds = parse_filter([Predicate("x", "==", 1)], NAMES)
    assert evaluate(rows(x=[1, 2]), preds).tolist() == [True, False]


def test_comparison_without_a_value_is_rejected():
    with pytest.raises(ValueError):
        parse_filter(("x", "<"), NAMES)


def test_in_with_a_string_instead_of_a_list_is_rejected():
    with pytest.raises(ValueError, match="needs a list of values"):
        parse_filter(("s", "in", "ab"), NAMES)


# --------------------------------------------------------------------------- evaluate
INTS = rows(x=pa.array([1, 2, None, 4, 5], pa.int64()))


@pytest.mark.parametrize(
    ("pred", "expected"),
    [
        (("x", "=", 2), [False, True, False, False, False]),
        (("x", "!=", 2), [True, False, False, True, True]),
        (("x", "<", 4), [True, True, False, False, False]),
        (("x", "<=", 4), [True, True, False, True, False]),
        (("x", ">", 4), [False, False, False, False, True]),
        (("x", ">=", 4), [False, False, False, True, True]),
        (("x", "in", [1, 5, 9]), [True, False, False, False, True]),
        (("x", "in", []), [False] * 5),
        (("x", "not in", [1, 5]), [False, True, False, True, False]),
        (("x", "in", [None, 1]), [True, False, False, False, False]),
        (("x", "not in", [None, 1]), [False, True, False, True, True]),
        (("x", "is null"), [False, False, True, False, False]),
        (("x", "is not null"), [True, True, False, True, True]),
        (("x", "=", None), [False] * 5),
        (("x", "!=", None), [False] * 5),
    ],
    ids=lambda v: repr(v) if isinstance(v, tuple) else "",
)
def test_evaluate_every_op_and_null_never_satisfies_a_comparison(
    pred: tuple[Any, ...], expected: list[bool]
):
    mask = evaluate(INTS, parse_filter(pred, ["x"]))
    assert mask.dtype == np.bool_
    assert mask.tolist() == expected


def test_evaluate_ands_the_predicates():
    t = rows(x=[1, 2, 3, 4], s=["a", "b", "a", None])
    mask = evaluate(t, parse_filter([("x", ">", 1), ("s", "=", "a")], ["x", "s"]))
    assert mask.tolist() == [False, False, True, False]


def test_evaluate_without_predicates_keeps_every_row():
    assert evaluate(INTS, []).tolist() == [True] * 5


@pytest.mark.parametrize(
    ("arr", "pred", "expected"),
    [
        (pa.array(["b", "a", None, "é"]), ("v", ">=", "b"), [True, False, False, True]),
        (pa.array([b"\x00", b"\x01"]), ("v", "=", b"\x01"), [False, True]),
        (pa.array([True, False, None]), ("v", "=", True), [True, False, False]),
        (pa.array([1.5, float("nan"), -0.0]), ("v", "<", 1.0), [False, False, True]),
        (
            pa.array([dt.date(2024, 1, 1), dt.date(2024, 6, 1)]),
            ("v", ">", dt.date(2024, 3, 1)),
            [False, True],
        ),
        (
            pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)], pa.timestamp("us", "UTC")),
            ("v", "=", dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)),
            [True],
        ),
        (
            pa.array([decimal.Decimal("1.50"), decimal.Decimal("2.25")], pa.decimal128(6, 2)),
            ("v", "in", [decimal.Decimal("2.25")]),
            [False, True],
        ),
    ],
    ids=["string", "binary", "bool", "float", "date", "timestamp", "decimal"],
)
def test_evaluate_on_every_column_type(arr: pa.Array, pred: tuple[Any, ...], expected: list[bool]):
    assert evaluate(rows(v=arr), parse_filter(pred, ["v"])).tolist() == expected


def test_evaluate_accepts_a_record_batch():
    rb = INTS.to_batches()[0]
    assert evaluate(rb, parse_filter(("x", ">", 2), ["x"])).tolist() == [
        False,
        False,
        False,
        True,
        True,
    ]


# --------------------------------------------------------------------------- page stats
def test_page_stats_are_min_max_over_non_null_values():
    assert page_stats(pa.array([3, None, -1, 7])) == PageStats(-1, 7, 1, 4)
    assert page_stats(pa.array(["b", "a", None])) == PageStats("a", "b", 1, 3)


def test_page_stats_of_an_all_null_or_empty_page():
    assert page_stats(pa.array([None, None], pa.int64())) == PageStats(None, None, 2, 2)
    assert page_stats(pa.array([], pa.int64())) == PageStats(None, None, 0, 0)


@pytest.mark.parametrize(
    ("stats", "pred", "expected"),
    [
        (PageStats(1, 5, 0, 10), Predicate("x", "=", 6), False),
        (PageStats(1, 5, 0, 10), Predicate("x", "=", 0), False),
        (PageStats(1, 5, 0, 10), Predicate("x", "=", 3), True),
        (PageStats(1, 5, 0, 10), Predicate("x", "<", 1), False),
        (PageStats(1, 5, 0, 10), Predicate("x", "<=", 1), True),
        (PageStats(1, 5, 0, 10), Predicate("x", ">", 5), False),
        (PageStats(1, 5, 0, 10), Predicate("x", ">=", 5), True),
        (PageStats(1, 5, 0, 10), Predicate("x", "in", [0, 9]), False),
        (PageStats(1, 5, 0, 10), Predicate("x", "in", [0, 4]), True),
        (PageStats(1, 5, 0, 10), Predicate("x", "not in", [1, 2, 3, 4, 5]), True),
        (PageStats(3, 3, 0, 10), Predicate("x", "!=", 3), False),
        (PageStats(3, 3, 2, 10), Predicate("x", "!=", 4), True),
        (PageStats(1, 5, 0, 10), Predicate("x", "is null"), False),
        (PageStats(1, 5, 1, 10), Predicate("x", "is null"), True),
        (PageStats(None, None, 10, 10), Predicate("x", "is not null"), False),
        (PageStats(None, None, 10, 10), Predicate("x", "=", 1), False),
        (PageStats(None, None, 10, 10), Predicate("x", "!=", 1), False),
        (PageStats("a", "c", 0, 3), Predicate("x", "=", 1), True),  # incomparable: keep
        (PageStats(1, 5, 0, 10), Predicate("x", "=", None), True),
    ],
)
def test_may_match_skips_a_page_only_when_the_stats_prove_no_row_matches(
    stats: PageStats, pred: Predicate, expected: bool
):
    assert may_match(stats, pred) is expected


def test_may_match_keeps_a_float_page_whose_nan_row_satisfies_not_equal():
    page = pa.array([1.0, float("nan")])
    pred = Predicate("x", "!=", 1.0)
    assert evaluate(rows(x=page), [pred]).any()
    assert may_match(page_stats(page), pred)


# --------------------------------------------------------------------------- property
_COMPARE_OPS = ["=", "!=", "<", "<=", ">", ">="]
_values = st.integers(-20, 20)
_pages = st.lists(st.one_of(_values, _values, _values, st.none()), min_size=1, max_size=40)
_preds = st.one_of(
    st.builds(lambda op, v: ("x", op, v), st.sampled_from(_COMPARE_OPS), _values),
    st.builds(
        lambda op, vs: ("x", op, vs),
        st.sampled_from(["in", "not in"]),
        st.lists(st.one_of(_values, st.none()), max_size=5),
    ),
    st.builds(lambda op: ("x", op), st.sampled_from(["is null", "is not null"])),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(page=_pages, pred=_preds, wide=st.booleans())
def test_may_match_is_never_false_when_a_row_of_the_page_matches(
    page: list[Any], pred: tuple[Any, ...], wide: bool
):
    arr = pa.array(page, pa.int64() if wide else pa.int16())
    preds = parse_filter(pred, ["x"])
    if evaluate(rows(x=arr), preds).any():
        assert may_match(page_stats(arr), preds[0])


@settings(max_examples=200, deadline=None)
@given(
    page=st.lists(
        st.one_of(st.sampled_from(["", "a", "ab", "b", "é", "z"]), st.none()),
        min_size=1,
        max_size=20,
    ),
    op=st.sampled_from([*_COMPARE_OPS, "in"]),
    value=st.sampled_from(["", "a", "aa", "b", "c", "é", "zz"]),
)
def test_may_match_is_never_false_when_a_string_row_matches(page: list[Any], op: str, value: str):
    arr = pa.array(page, pa.string())
    preds = parse_filter(("x", op, [value] if op == "in" else value), ["x"])
    if evaluate(rows(x=arr), preds).any():
        assert may_match(page_stats(arr), preds[0])


@settings(max_examples=200, deadline=None)
@given(
    page=st.lists(
        st.one_of(st.sampled_from([-1.5, -0.0, 0.0, 0.5, 2.0, float("inf")]), st.none()),
        min_size=1,
        max_size=20,
    ),
    op=st.sampled_from([*_COMPARE_OPS, "in", "not in"]),
    value=st.sampled_from([-1.5, -0.0, 0.0, 0.5, 1, 2.0, float("inf")]),
)
def test_may_match_is_never_false_when_a_float_row_without_nan_matches(
    page: list[Any], op: str, value: float
):
    arr = pa.array(page, pa.float64())
    preds = parse_filter(("x", op, [value] if op in ("in", "not in") else value), ["x"])
    if evaluate(rows(x=arr), preds).any():
        assert may_match(page_stats(arr), preds[0])
