"""Tables holding the extreme values of every supported type snapshot, compact, reopen and
filter correctly; values a table cannot hold are rejected and never reach a tablet.

Property: random batches over a schema with one column per type (several decimal
precisions/scales), whose values are drawn mostly from each type's extremes (integer
min/max, ±inf, NaN, -0.0, denormals, empty and huge strings/binaries, 0001-01-01 and
9999-12-31 23:59:59.999999, ±(10^p - 1) decimals, nulls), are applied with compactions and
snapshots in between (tiny pages); the table, reopened, equals the reference model at every
retained version, and a pushed-down predicate on each column (page skipping by min/max)
selects exactly the model's rows.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_sink.batch import OP_UPSERT
from cdc_sink.schema import TableSchema
from cdc_sink.storage.framing import read_records
from cdc_sink.storage.snapshot import SNAPSHOT_MAGIC
from cdc_sink.table import Table, TableOptions, create_table, open_table
from tests.fixtures import count_skipped_pages
from tests.model import RefModel, model_rows, table_to_rows

UTC = dt.timezone.utc
D = decimal.Decimal
DECIMALS = [(1, 0), (10, 2), (18, 4), (19, 0), (38, 0), (38, 10), (38, 38)]
HUGE = 70_000  # far above one page's statistics prefix


def _dec_name(p: int, s: int) -> str:
    return f"dec_{p}_{s}"


COLUMNS: list[tuple[str, str]] = [
    ("i8", "int8"),
    ("i16", "int16"),
    ("i32", "int32"),
    ("i64", "int64"),
    ("f32", "float32"),
    ("f64", "float64"),
    ("flag", "bool"),
    ("s", "string"),
    ("bin", "binary"),
    ("day", "date32"),
    ("at", "timestamp[us, UTC]"),
    *[(_dec_name(p, s), f"decimal128({p}, {s})") for p, s in DECIMALS],
]
SCHEMA = TableSchema.from_dict(
    {
        "columns": [{"name": "id", "type": "int64"}, *[{"name": n, "type": t} for n, t in COLUMNS]],
        "primary_key": ["id"],
        "num_buckets": 2,
    }
)


def _f32(x: float) -> float:
    return float(np.float32(x))


def _decimal_extremes(p: int, s: int) -> list[D]:
    top = 10**p - 1  # exact: from strings, not through the 28-digit decimal context
    q = D(f"1E-{s}")
    return [D(f"{top}E-{s}"), D(f"-{top}E-{s}"), D(0), q, -q]


def _int_extremes(bits: int) -> list[int]:
    return [-(2 ** (bits - 1)), 2 ** (bits - 1) - 1, 0, -1, 1]


F32_MAX = float(np.finfo(np.float32).max)
F32_TINY = float(np.finfo(np.float32).smallest_subnormal)
EXTREMES: dict[str, list[Any]] = {
    "i8": _int_extremes(8),
    "i16": _int_extremes(16),
    "i32": _int_extremes(32),
    "i64": _int_extremes(64),
    "f32": [
        float("inf"),
        float("-inf"),
        float("nan"),
        -0.0,
        0.0,
        F32_TINY,
        -F32_TINY,
        F32_MAX,
        -F32_MAX,
        _f32(1.5),
    ],
    "f64": [
        float("inf"),
        float("-inf"),
        float("nan"),
        -0.0,
        0.0,
        5e-324,
        -5e-324,
        1.7976931348623157e308,
        -1.7976931348623157e308,
        2.2250738585072014e-308,
    ],
    "flag": [True, False],
    "s": ["", "a", "é\U0010ffff", "\x00", "z" * HUGE, "a" * HUGE + "b", "\U0010ffff" * 20],
    "bin": [b"", b"\x00", b"\xff" * 100, b"\x00" * HUGE, b"\xff" * HUGE],
    "day": [dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(1970, 1, 1), dt.date(1969, 12, 31)],
    "at": [
        dt.datetime(1, 1, 1, tzinfo=UTC),
        dt.datetime(9999, 12, 31, 23, 59, 59, 999999, UTC),
        dt.datetime(1970, 1, 1, tzinfo=UTC),
        dt.datetime(1969, 12, 31, 23, 59, 59, 999999, UTC),
    ],
    **{_dec_name(p, s): _decimal_extremes(p, s) for p, s in DECIMALS},
}
KEYS = [-(2**63), 2**63 - 1, 0, -1, *range(1, 12)]


def values(name: str) -> st.SearchStrategy[Any]:
    """Mostly extremes, sometimes null."""
    return st.one_of(st.sampled_from(EXTREMES[name]), st.sampled_from(EXTREMES[name]), st.none())


@st.composite
def event(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.integers(0, 40)) == 0:
        return {"op": "truncate"}
    op = draw(st.sampled_from(["insert", "upsert", "upsert", "update", "delete"]))
    e: dict[str, Any] = {"op": op, "key": {"id": draw(st.sampled_from(KEYS))}}
    if op != "delete":
        names = draw(
            st.lists(st.sampled_from([n for n, _ in COLUMNS]), unique=True, max_size=len(COLUMNS))
        )
        e["set"] = {n: draw(values(n)) for n in names}
    return e


batches = st.lists(st.lists(event(), min_size=1, max_size=30), min_size=1, max_size=5)


# ---------------------------------------------------------------------- predicates
def _matches(v: Any, op: str, x: Any) -> bool:
    """Python's (IEEE) semantics of a predicate on one value; null matches nothing."""
    if op == "is null":
        return v is None
    if op == "is not null":
        return v is not None
    if v is None:
        return False
    if op == "in":
        return any(v == y for y in x)
    if op == "not in":
        return not any(v == y for y in x)
    return bool({"=": v == x, "!=": v != x, "<": v < x, "<=": v <= x, ">": v > x, ">=": v >= x}[op])


@st.composite
def predicate(draw: st.DrawFn, name: str) -> tuple[Any, ...]:
    op = draw(
        st.sampled_from(["=", "!=", "<", "<=", ">", ">=", "in", "not in", "is null", "is not null"])
    )
    if op in ("is null", "is not null"):
        return (name, op)
    pool = EXTREMES[name]
    if op in ("in", "not in"):  # NaN never equals itself: keep it out of value lists
        pool = [v for v in pool if not (isinstance(v, float) and v != v)]
        return (name, op, draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3)))
    return (name, op, draw(st.sampled_from(pool)))


def _expected_filtered(
    rows: dict[Any, dict[str, Any]], pred: tuple[Any, ...]
) -> dict[Any, dict[str, Any]]:
    name, op = pred[0], pred[1]
    x = pred[2] if len(pred) == 3 else None
    kept = {k: r for k, r in rows.items() if _matches(r[name], op, x)}
    return model_rows(kept, SCHEMA)


# ---------------------------------------------------------------------- the property
@pytest.fixture
def scratch() -> Iterator[Path]:
    d = tempfile.mkdtemp(
        prefix="cdc_extreme_", dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    )
    try:
        yield Path(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _check_versions(t: Table, model: RefModel, versions: list[int]) -> None:
    for v in versions:
        got = t.read(version=v)
        assert got.schema == SCHEMA.arrow_schema()
        assert table_to_rows(got, ["id"]) == model_rows(model.versions[v], SCHEMA), f"version {v}"


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(evs=batches, compact_after=st.lists(st.booleans(), min_size=5, max_size=5), data=st.data())
def test_extreme_values_survive_snapshots_reopen_and_page_skipping_filters(
    scratch: Path, evs: list[list[dict[str, Any]]], compact_after: list[bool], data: st.DataObject
) -> None:
    root = scratch / f"t{len(os.listdir(scratch))}"
    opts = TableOptions.for_tests()
    t = create_table(root, SCHEMA, options=opts)
    model = RefModel(SCHEMA)
    for i, batch in enumerate(evs):
        res = t.apply(batch)
        expected = model.apply(batch)
        assert expected.pop("invalid") == 0
        assert res.counts == expected and len(res.rejects) == expected["rejected"]
        model.commit(res.version)
        if compact_after[i]:
            model.commit(t.compact())  # page statistics of every column are computed here
    model.commit(t.compact())
    retained = list(range(t.oldest_version, t.version + 1))
    _check_versions(t, model, retained)
    again = open_table(root, options=opts)
    _check_versions(again, model, retained)
    latest = model.versions[t.version]
    for name, _ in COLUMNS:
        pred = data.draw(predicate(name), label=f"predicate on {name}")
        got = table_to_rows(again.read(filter=[pred]), ["id"])
        assert got == _expected_filtered(latest, pred), pred
    again.compact()  # maintenance never fails on what was accepted


def test_pages_of_extreme_values_are_skipped_by_their_statistics(
    scratch: Path, monkeypatch: Any
) -> None:
    """Page skipping really happens on the physical statistics of dates, timestamps and
    decimals at both ends of their ranges (counted through the tablet's may_match)."""
    t = create_table(scratch / "t", SCHEMA, options=TableOptions.for_tests())
    lo_day, hi_day = dt.date(1, 1, 1), dt.date(9999, 12, 31)
    lo_at = dt.datetime(1, 1, 1, tzinfo=UTC)
    hi_at = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, UTC)
    top, bottom = D(10**38 - 1), D(-(10**38 - 1))  # (not -top: 28-digit context)
    res = t.apply(
        [
            {
                "op": "insert",
                "key": i,
                "set": {
                    "day": lo_day if i < 32 else hi_day,
                    "at": lo_at if i < 32 else hi_at,
                    "dec_38_0": bottom if i < 32 else top,
                },
            }
            for i in range(64)
        ]
    )
    assert len(res.rejects) == 0
    t.compact()
    t = open_table(scratch / "t")
    skipped = count_skipped_pages(monkeypatch)
    for pred in [
        ("day", "=", hi_day),
        ("at", ">", dt.datetime(2000, 1, 1, tzinfo=UTC)),
        ("dec_38_0", ">=", top),
    ]:
        skipped.count = 0
        got = sorted(t.read(filter=[pred]).column("id").to_pylist())
        assert got == list(range(32, 64)), pred
        assert skipped.count > 0, pred


# ---------------------------------------------------------------------- rejects
TS_HI = 253402300799_999999  # 9999-12-31 23:59:59.999999 in µs
TS_LO = -62135596800_000000  # 0001-01-01
DAY_HI, DAY_LO = 2932896, -719162


def _unsafe_decimal(unscaled: list[int], p: int, s: int) -> pa.Array:
    wide = pa.array([D(u) for u in unscaled], pa.decimal128(38, 0))
    return pa.Array.from_buffers(pa.decimal128(p, s), len(wide), wide.buffers())


@st.composite
def wire_rows(draw: st.DrawFn) -> tuple[pa.Table, dict[int, str]]:
    """A wire-form table of upserts, some holding a value the table cannot hold; and the
    expected reject reason of each bad row."""
    n = draw(st.integers(1, 30))
    at, day, dec = [], [], []
    bad: dict[int, str] = {}
    for i in range(n):
        kind = draw(st.sampled_from(["ok", "ok", "at", "day", "dec"]))
        at.append(draw(st.sampled_from([TS_LO, TS_HI, 0])))
        day.append(draw(st.sampled_from([DAY_LO, DAY_HI, 0])))
        dec.append(draw(st.sampled_from([10**10 - 1, -(10**10 - 1), 0])))
        if kind == "at":
            at[-1] = draw(st.sampled_from([TS_HI + 1, TS_LO - 1, 2**63 - 1, -(2**63)]))
            bad[i] = "column 'at': out of range 0001-01-01..9999-12-31"
        elif kind == "day":
            day[-1] = draw(st.sampled_from([DAY_HI + 1, DAY_LO - 1, 2**31 - 1, -(2**31)]))
            bad[i] = "column 'day': out of range 0001-01-01..9999-12-31"
        elif kind == "dec":
            dec[-1] = draw(st.sampled_from([10**10, -(10**10), 10**38 - 1, -(10**37)]))
            bad[i] = (
                "column 'dec_10_2': exceeds the precision of decimal128(10, 2) (at most 10 digits)"
            )
    table = pa.table(
        {
            "__op": pa.array([OP_UPSERT] * n, pa.int8()),
            "id": pa.array(range(n), pa.int64()),
            "at": pa.array(at, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            "day": pa.array(day, pa.int32()).cast(pa.date32()),
            "dec_10_2": _unsafe_decimal(dec, 10, 2),
        }
    )
    return table, bad


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(rows=wire_rows())
def test_values_a_table_cannot_hold_are_rejected_and_never_reach_a_tablet(
    scratch: Path, rows: tuple[pa.Table, dict[int, str]]
) -> None:
    table, bad = rows
    root = scratch / f"t{len(os.listdir(scratch))}"
    t = create_table(root, SCHEMA, options=TableOptions.for_tests())
    res = t.apply(table)
    assert res.rejects.as_dict() == bad
    good = [i for i in range(table.num_rows) if i not in bad]
    assert sorted(t.read().column("id").to_pylist()) == good
    t.compact()
    again = open_table(root)
    got = again.read(columns=["id", "at", "day", "dec_10_2"]).sort_by("id")
    want = table.take(pa.array(good, pa.int64())).select(["id", "at", "day", "dec_10_2"])
    assert got.to_pylist() == want.to_pylist()  # in range: converts to Python
    again.compact()


# ---------------------------------------------------------------------- format 1 manifests
def _manifests(root: Path) -> list[dict[str, Any]]:
    out = []
    for p in sorted((root / "_snapshots").rglob("*.manifest")):
        recs = read_records(
            p.read_bytes(), path=str(p), magic=SNAPSHOT_MAGIC, allow_torn_tail=False
        ).records
        out.append(json.loads(recs[0]))
    return out


def _strict(token: str) -> Any:
    raise AssertionError(f"a manifest holds the non-JSON token {token}")


def test_statistics_of_infinite_floats_are_unknown_in_strict_json(scratch: Path) -> None:
    """A float page holding an infinity gets null statistics in its manifest (RFC 8259
    has no token for it: docs/format.md §1); filters on it still select exactly."""
    schema = TableSchema.from_dict(
        {
            "columns": [{"name": "id", "type": "int64"}, {"name": "x", "type": "float64"}],
            "primary_key": ["id"],
            "num_buckets": 1,
        }
    )
    t = create_table(str(scratch), schema)
    xs = [1.0, float("inf"), -float("inf"), 2.5]
    ids = pa.array(range(4), pa.int64())
    t.apply(pa.table({"__op": pa.array([OP_UPSERT] * 4, pa.int8()), "id": ids, "x": pa.array(xs)}))
    t.compact()
    manifests = [
        json.loads(
            read_records(
                p.read_bytes(), path=str(p), magic=SNAPSHOT_MAGIC, allow_torn_tail=False
            ).records[0],
            parse_constant=_strict,
        )
        for p in sorted((scratch / "_snapshots").rglob("*.manifest"))
    ]
    assert manifests and all(m["columns"] for m in manifests)
    got = open_table(str(scratch)).read(filter=[("x", ">", 2.0)])
    assert sorted(got.column("id").to_pylist()) == [1, 3]


def test_snapshots_written_with_format_1_statistics_still_open_and_filter(
    scratch: Path, monkeypatch: Any
) -> None:
    """A manifest of the previous format (statistics as ISO/decimal strings, no
    ``stats_format``) loads; its statistics are converted, filters skip pages correctly,
    and the next incremental snapshot, which reuses its page locations, is format 2."""
    import cdc_sink.storage.pages as pages
    import cdc_sink.storage.snapshot as snapshot
    import cdc_sink.tablet.column as column
    from cdc_sink.filters import PageStats

    def old_page_stats(arr: pa.Array) -> PageStats:
        mm = pa.compute.min_max(arr)
        return PageStats(mm["min"].as_py(), mm["max"].as_py(), arr.null_count, len(arr))

    def old_json_stat(v: Any) -> Any:
        if isinstance(v, dt.datetime):
            return {"ts": v.isoformat()}
        if isinstance(v, dt.date):
            return {"date": v.isoformat()}
        if isinstance(v, D):
            return {"dec": str(v)}
        return v

    def old_to_json(self: Any) -> bytes:
        doc = json.loads(real_to_json(self))
        del doc["stats_format"]
        return json.dumps(doc).encode()

    real_to_json = snapshot.SnapshotManifest.to_json
    root = scratch / "t"
    opts = TableOptions(page_rows=8)
    t = create_table(root, SCHEMA, options=opts)
    days = [dt.date(2000, 1, 1) + dt.timedelta(days=i) for i in range(32)]
    t.apply(
        [
            {
                "op": "insert",
                "key": i,
                "set": {
                    "day": days[i],
                    "at": dt.datetime(2001, 1, 1, tzinfo=UTC) + dt.timedelta(hours=i),
                    "dec_10_2": D(i) / 4,
                },
            }
            for i in range(32)
        ]
    )
    with monkeypatch.context() as m:
        m.setattr(column, "page_stats", old_page_stats)
        m.setattr(pages, "json_stat", old_json_stat)
        m.setattr(snapshot.SnapshotManifest, "to_json", old_to_json)
        t.compact()
    old = _manifests(root)
    assert old and all("stats_format" not in m for m in old)
    stats = [loc[5] for m in old for loc in m["columns"][str(SCHEMA.column("day").id)]]
    assert all(isinstance(s, dict) and "date" in s for s in stats)

    again = open_table(root, options=opts)
    for pred, want in [
        (("day", ">=", days[20]), range(20, 32)),
        (("at", "<", dt.datetime(2001, 1, 1, 3, tzinfo=UTC)), range(0, 3)),
        (("dec_10_2", "=", D("1.25")), [5]),
    ]:
        assert sorted(again.read(filter=[pred]).column("id").to_pylist()) == list(want)
    again.apply([{"op": "update", "key": 0, "set": {"s": "x"}}])
    again.compact()
    new = [m for m in _manifests(root) if m.get("stats_format") == 2]
    assert new
    for m in new:
        for loc in m["columns"][str(SCHEMA.column("day").id)]:
            assert isinstance(loc[5], int) and isinstance(loc[6], int)  # days since epoch
    third = open_table(root, options=opts)
    assert sorted(third.read(filter=[("day", ">=", days[20])]).column("id").to_pylist()) == list(
        range(20, 32)
    )


# ---------------------------------------------------------------------- statistics
def test_page_statistics_are_physical_and_never_go_through_python_datetime() -> None:
    from cdc_sink.filters import page_stats

    far = pa.array([2**63 - 1, None, -(2**63)], pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    s = page_stats(far)  # Python's datetime cannot hold these: no OverflowError here
    assert (s.min, s.max, s.null_count, s.num_rows) == (-(2**63), 2**63 - 1, 1, 3)
    days = pa.array([2**31 - 1, -(2**31)], pa.int32()).cast(pa.date32())
    assert (page_stats(days).min, page_stats(days).max) == (-(2**31), 2**31 - 1)
    dec = pa.array(
        [D("-0.99999999999999999999999999999999999999"), D("1E-38")], pa.decimal128(38, 38)
    )
    assert (page_stats(dec).min, page_stats(dec).max) == (-(10**38 - 1), 1)


def test_long_strings_bound_a_page_by_a_prefix_below_and_not_at_all_above() -> None:
    from cdc_sink.filters import STATS_PREFIX_BYTES, Predicate, may_match, page_stats

    page = pa.array(["b" * HUGE, "c" * HUGE])
    s = page_stats(page)
    assert s.min == "b" * STATS_PREFIX_BYTES and s.max is None
    assert not may_match(s, Predicate("x", "<", "b"))
    assert may_match(s, Predicate("x", ">", "c" * (HUGE + 1)))  # no upper bound kept
    cut = page_stats(pa.array(["é" * HUGE])).min  # a cut never splits a character
    assert cut == "é" * (STATS_PREFIX_BYTES // 2)


def test_a_predicate_value_that_does_not_fit_the_column_skips_no_page() -> None:
    from cdc_sink.filters import Predicate, physical_predicate

    ts = pa.timestamp("us", tz="UTC")
    assert physical_predicate(Predicate("x", "=", "not a time"), ts) is None
    got = physical_predicate(Predicate("x", "in", [dt.date(1970, 1, 2)]), pa.date32())
    assert got == Predicate("x", "in", [1])
    got = physical_predicate(Predicate("x", "<", D("-1.5")), pa.decimal128(5, 2))
    assert got == Predicate("x", "<", -150)
