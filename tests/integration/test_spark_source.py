"""``spark.read.format("cdc_sink")`` against a live local Spark.

One table holds every supported column type (nulls, NaN, -0.0, infinities, extreme
integers, unicode, binary, dates, timestamps, two decimals), 4 buckets, tiny pages
(``TableOptions.for_tests``: 8 rows a page, a snapshot every 3 versions), and several
versions: inserts, partial updates (some columns set to null), deletes, upserts. Every
Spark read is compared with ``Table.read`` of the same version; every filter with a
plain-Python evaluation of Spark's SQL semantics (null is not true; NaN equals NaN and
is above every number; -0.0 = 0.0) and with what Spark itself selects (the filter's
expression evaluated as a column of an unfiltered read), and the plan must show that
Spark left the filters the source keeps to the source.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import io
import math
import random
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import cdc_sink
import cdc_sink.spark
from cdc_sink import Table, TableOptions
from cdc_sink.spark.source import (
    FORMAT,
    PYTHON_FORMAT,
    BucketPartition,
    CdcSinkDataSource,
    translate_filter,
)
from tests.fixtures import count_skipped_pages

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PUSHDOWN = "spark.sql.python.filterPushdown.enabled"
SOURCE = FORMAT  # the Python source's name in the session (the cdc_spark fixture)
UTC = dt.timezone.utc
D = decimal.Decimal
NUM_BUCKETS = 4
N_ROWS = 240

SCHEMA = {
    "columns": [
        {"name": "id", "type": "int64", "nullable": False},
        {"name": "i8", "type": "int8"},
        {"name": "i16", "type": "int16"},
        {"name": "i32", "type": "int32"},
        {"name": "i64", "type": "int64"},
        {"name": "f32", "type": "float32"},
        {"name": "f64", "type": "float64"},
        {"name": "flag", "type": "bool"},
        {"name": "s", "type": "string"},
        {"name": "b", "type": "binary"},
        {"name": "d", "type": "date32"},
        {"name": "ts", "type": "timestamp[us, UTC]"},
        {"name": "dec10", "type": "decimal128(10, 2)"},
        {"name": "dec38", "type": "decimal128(38, 6)"},
        {"name": "status", "type": "string", "nullable": False, "default": "new"},
    ],
    "primary_key": ["id"],
    "num_buckets": NUM_BUCKETS,
}
VALUE_COLUMNS = [c["name"] for c in SCHEMA["columns"] if c["name"] not in ("id", "status")]
STRINGS = ["", "a", "abc", "m", "zz", "é", "日本", "abc ", "Z"]
BINARIES = [b"", b"\x00", b"\x00\x01", b"\xff", b"abc", b"\x80\x00"]
FLOATS = [0.0, -0.0, math.nan, math.inf, -math.inf, 0.5, 2.5, -1.25, 1e30, -3.0]


_VALUES: dict[str, Callable[[random.Random], Any]] = {  # column -> a random value of it
    "i8": lambda rng: rng.choice([-128, 127, 0, rng.randint(-128, 127)]),
    "i16": lambda rng: rng.randint(-300, 300),
    "i32": lambda rng: rng.choice(
        [-(2**31), 2**31 - 1, rng.randint(-20, 20), rng.randint(0, 10**6)]
    ),
    "i64": lambda rng: rng.choice([-(2**63), 2**63 - 1, rng.randint(-(10**12), 10**12)]),
    "f32": lambda rng: rng.choice([*FLOATS, rng.uniform(-10, 10)]),
    "f64": lambda rng: rng.choice([*FLOATS, rng.uniform(-10, 10)]),
    "flag": lambda rng: rng.random() < 0.5,
    "s": lambda rng: rng.choice(STRINGS),
    "b": lambda rng: rng.choice(BINARIES),
    "d": lambda rng: dt.date(2019, 12, 1) + dt.timedelta(days=rng.randint(0, 90)),
    "ts": lambda rng: (
        dt.datetime(2020, 1, 1, tzinfo=UTC)
        + dt.timedelta(microseconds=rng.randint(-(10**12), 10**12))
    ),
    "dec10": lambda rng: rng.choice(
        [D("12.34"), D("-0.01"), D(rng.randint(-(10**8) + 1, 10**8 - 1)) / 100]
    ),
    "dec38": lambda rng: D(rng.randint(-(10**37) + 1, 10**37 - 1)).scaleb(-6),
}


def _value(col: str, rng: random.Random) -> Any:
    """A random value of column ``col`` (null one time in eight)."""
    if rng.random() < 0.125:
        return None
    return _VALUES[col](rng)


def _insert(key: int, rng: random.Random) -> dict[str, Any]:
    return {"op": "insert", "key": {"id": key}, "set": {c: _value(c, rng) for c in VALUE_COLUMNS}}


def _update(key: int, rng: random.Random, op: str = "update") -> dict[str, Any]:
    cols = rng.sample(VALUE_COLUMNS, rng.randint(1, 4))
    set_ = {c: _value(c, rng) for c in cols}
    if rng.random() < 0.3:
        set_["status"] = rng.choice(["paid", "shipped"])
    return {"op": op, "key": {"id": key}, "set": set_}


def _build_versions(table: Table, rng: random.Random) -> None:
    """v1 inserts, v2 partial updates, v3 deletes, v4 upserts (new + re-inserted), v5
    updates, v6 inserts that replace live rows, v7 deletes and updates."""
    ids = list(range(N_ROWS))
    table.apply([_insert(i, rng) for i in ids])
    table.apply([_update(i, rng) for i in rng.sample(ids, 90)])
    deleted = rng.sample(ids, 40)
    table.apply([{"op": "delete", "key": {"id": i}} for i in deleted])
    table.apply(
        [_update(i, rng, "upsert") for i in range(N_ROWS, N_ROWS + 40)]
        + [_insert(i, rng) for i in deleted[:10]]
    )
    live = sorted(set(ids) - set(deleted[10:]))
    table.apply([_update(i, rng) for i in rng.sample(live, 60)])
    table.apply([_insert(i, rng) for i in rng.sample(live, 30)])
    table.apply(
        [{"op": "delete", "key": {"id": i}} for i in rng.sample(live, 20)]
        + [_update(i, rng, "upsert") for i in range(N_ROWS + 40, N_ROWS + 50)]
    )


# ---------------------------------------------------------------------- helpers
def _norm(v: Any) -> Any:
    return "NaN" if isinstance(v, float) and math.isnan(v) else v


def _rows(t: pa.Table) -> list[tuple[Any, ...]]:
    """Rows sorted by ``id`` (NaN made comparable)."""
    if "id" in t.column_names:
        t = t.sort_by("id")
    return [tuple(_norm(v) for v in r.values()) for r in t.to_pylist()]


def _spark_rows(df: DataFrame) -> list[tuple[Any, ...]]:
    return _rows(df.toArrow())


def _plan(df: DataFrame) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        df.explain()
    return out.getvalue()


@contextlib.contextmanager
def _conf(spark: SparkSession, key: str, value: str) -> Iterator[None]:
    old = spark.conf.get(key)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        spark.conf.set(key, old)


def _read(spark: SparkSession, path: str, *, fmt: str | None = None, **options: Any) -> DataFrame:
    """``path`` read through ``fmt`` (default: this module's Python source) with ``options``."""
    reader = spark.read.format(fmt or SOURCE)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(path)


# ---------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def cdc_spark(spark: SparkSession) -> SparkSession:
    """The session with the cdc_sink format registered (the public entry point). This
    module tests the Python data source: where the JVM connector owns ``cdc_sink``
    (tests/integration/test_jvm_reader.py), the Python source is ``cdc_sink_python``."""
    global SOURCE
    SOURCE = PYTHON_FORMAT if cdc_sink.spark.register(spark) == "jvm" else FORMAT
    assert spark.conf.get(PUSHDOWN) == "true"
    return spark


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Table:
    """The every-type table at versions 0..7."""
    path = tmp_path_factory.mktemp("spark_source") / "t"
    t = cdc_sink.create_table(path, SCHEMA, options=TableOptions.for_tests())
    _build_versions(t, random.Random(20240501))
    assert t.version == 7
    return t


# ---------------------------------------------------------------------- reads
def test_version_as_of_equals_table_read(cdc_spark: SparkSession, table: Table) -> None:
    """Versions 0..7, read in one Spark job (a union of the reads, tagged by version)."""
    from pyspark.sql import functions as F

    versions = list(range(table.version + 1))
    reads = [
        _read(cdc_spark, table.root, versionAsOf=v).withColumn("__v", F.lit(v)) for v in versions
    ]
    union = reads[0]
    for df in reads[1:]:
        union = union.unionByName(df)
    got = union.toArrow()
    for v in versions:
        part = got.filter(pc.equal(got.column("__v"), v)).drop_columns(["__v"])
        expected = table.read(version=v)
        assert part.num_rows == expected.num_rows, v
        assert _rows(part) == _rows(expected), v


def test_schema_has_the_versions_types_and_nullability(
    cdc_spark: SparkSession, table: Table
) -> None:
    df = _read(cdc_spark, table.root, versionAsOf=3)
    assert [(f.name, f.dataType.simpleString(), f.nullable) for f in df.schema.fields] == [
        ("id", "bigint", False),
        ("i8", "tinyint", True),
        ("i16", "smallint", True),
        ("i32", "int", True),
        ("i64", "bigint", True),
        ("f32", "float", True),
        ("f64", "double", True),
        ("flag", "boolean", True),
        ("s", "string", True),
        ("b", "binary", True),
        ("d", "date", True),
        ("ts", "timestamp", True),
        ("dec10", "decimal(10,2)", True),
        ("dec38", "decimal(38,6)", True),
        ("status", "string", False),
    ]
    arrow = df.toArrow()
    ts_type = arrow.schema.field("ts").type
    assert pa.types.is_timestamp(ts_type) and ts_type.unit == "us" and ts_type.tz is not None
    assert arrow.schema.field("dec38").type == pa.decimal128(38, 6)


def test_default_reads_the_latest_version(cdc_spark: SparkSession, table: Table) -> None:
    assert _spark_rows(_read(cdc_spark, table.root)) == _rows(table.read())


def test_one_partition_per_bucket(cdc_spark: SparkSession, table: Table) -> None:
    assert _read(cdc_spark, table.root, versionAsOf=2).rdd.getNumPartitions() == NUM_BUCKETS


def test_columns_option_prunes_and_orders(cdc_spark: SparkSession, table: Table) -> None:
    df = _read(cdc_spark, table.root, versionAsOf=4, columns="s, id,dec38,ts")
    assert df.columns == ["s", "id", "dec38", "ts"]
    expected = table.read(version=4, columns=["s", "id", "dec38", "ts"])
    assert _rows(df.toArrow().sort_by("id")) == _rows(expected.sort_by("id"))


def test_columns_option_rejects_unknown_columns(cdc_spark: SparkSession, table: Table) -> None:
    with pytest.raises(Exception, match="no column"):
        _read(cdc_spark, table.root, columns="id,nope").collect()


def test_each_version_reads_with_its_own_schema(cdc_spark: SparkSession, tmp_path: Path) -> None:
    t = cdc_sink.create_table(tmp_path / "evolve", SCHEMA, options=TableOptions.for_tests())
    rng = random.Random(3)
    v1 = t.apply([_insert(i, rng) for i in range(30)]).version
    v2 = t.add_column("note", "string", default="n/a")
    v3 = t.rename_column("s", "label")
    v4 = t.apply([{"op": "upsert", "key": {"id": 1}, "set": {"note": "hi", "label": "x"}}]).version
    empty = _read(cdc_spark, t.root, versionAsOf=0)
    assert empty.count() == 0 and empty.columns == [c["name"] for c in SCHEMA["columns"]]
    for v in (v1, v2, v3, v4):
        df = _read(cdc_spark, t.root, versionAsOf=v)
        expected = t.read(version=v)
        assert df.columns == expected.column_names
        assert _spark_rows(df) == _rows(expected)
    assert "note" not in _read(cdc_spark, t.root, versionAsOf=v1).columns
    assert _read(cdc_spark, t.root, versionAsOf=v3).columns[-1] == "note"


def test_user_schema_selects_columns_and_must_match(cdc_spark: SparkSession, table: Table) -> None:
    df = (
        cdc_spark.read.format(SOURCE)
        .schema("id bigint, dec10 decimal(10,2)")
        .option("versionAsOf", 6)
        .load(table.root)
    )
    assert _spark_rows(df) == _rows(table.read(version=6, columns=["id", "dec10"]))
    bad = (
        cdc_spark.read.format(SOURCE)
        .schema("id bigint, dec10 double")
        .option("versionAsOf", 6)
        .load(table.root)
    )
    with pytest.raises(Exception, match="'dec10' is decimal"):
        bad.collect()


def check_timestamp_as_of(
    spark: SparkSession, table: Table, form: str, at: int, fmt: str | None = None
) -> None:
    """``timestampAsOf`` the commit time of version ``at`` (epoch ms or ISO text, as
    ``form`` says) reads the newest version committed by then, through ``fmt``."""
    entries = {e["version"]: e["commit_time_ms"] for e in table.versions()}
    ms = entries[at]
    expected_version = max(v for v, t in entries.items() if t <= ms)  # same-ms commits
    value: Any = ms
    if form == "iso":
        value = (dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(milliseconds=ms)).isoformat()
    df = _read(spark, table.root, fmt=fmt, timestampAsOf=value)
    assert _spark_rows(df) == _rows(table.read(version=expected_version))


@pytest.mark.parametrize("form", ["epoch_ms", "iso"])
def test_timestamp_as_of_reads_the_version_committed_then(
    cdc_spark: SparkSession, table: Table, form: str
) -> None:
    check_timestamp_as_of(cdc_spark, table, form, 3)


def test_version_and_timestamp_together_is_an_error(cdc_spark: SparkSession, table: Table) -> None:
    with pytest.raises(Exception, match="not both"):
        _read(cdc_spark, table.root, versionAsOf=1, timestampAsOf=0).collect()


def test_missing_table_is_a_clear_error(cdc_spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="no cdc_sink table"):
        _read(cdc_spark, str(tmp_path / "nothing")).collect()


def test_version_below_the_retention_horizon_names_the_oldest(
    cdc_spark: SparkSession, tmp_path: Path
) -> None:
    t = cdc_sink.create_table(tmp_path / "gc", SCHEMA, options=TableOptions.for_tests())
    rng = random.Random(7)
    t.apply([_insert(i, rng) for i in range(40)])
    for _ in range(5):
        t.apply([_update(i, rng) for i in rng.sample(range(40), 10)])
    t.gc(dry_run=False, retain_versions=2, retain_seconds=0)
    oldest = t.oldest_version
    assert oldest > 1
    with pytest.raises(Exception, match=rf"oldest readable version is {oldest}\b"):
        _read(cdc_spark, t.root, versionAsOf=1).collect()
    assert _spark_rows(_read(cdc_spark, t.root, versionAsOf=oldest)) == _rows(
        t.read(version=oldest)
    )


# ---------------------------------------------------------------------- filters
def _nn(*vals: Any) -> bool:
    return all(v is not None for v in vals)


def _f_gt(x: float | None, v: float) -> bool:
    """Spark's ``x > v`` on a float column: NaN is above every number."""
    return x is not None and (math.isnan(x) or x > v)


def _case(
    name: str,
    expr: Callable[[], Column],
    pred: Callable[[dict[str, Any]], bool],
    pushed: bool | None,
) -> Any:
    return pytest.param(expr, pred, pushed, id=name)


def _filter_cases() -> list[Any]:
    from pyspark.sql import functions as F

    ts0 = dt.datetime(2020, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    return [
        _case("int8_gt", lambda: F.col("i8") > 5, lambda r: _nn(r["i8"]) and r["i8"] > 5, True),
        _case(
            "int16_between",
            lambda: F.col("i16").between(-100, 100),
            lambda r: _nn(r["i16"]) and -100 <= r["i16"] <= 100,
            None,
        ),
        _case(
            "int32_in",
            lambda: F.col("i32").isin(2**31 - 1, 0, 5, -7),
            lambda r: r["i32"] in (2**31 - 1, 0, 5, -7),
            True,
        ),
        _case(
            "int32_not_eq",
            lambda: F.col("i32") != 3,
            lambda r: _nn(r["i32"]) and r["i32"] != 3,
            True,
        ),
        _case("key_lt", lambda: F.col("id") < 50, lambda r: r["id"] < 50, True),
        _case(
            "float32_lt",
            lambda: F.col("f32") < F.lit(0.5).cast("float"),
            lambda r: _nn(r["f32"]) and not math.isnan(r["f32"]) and r["f32"] < 0.5,
            True,
        ),
        _case(
            "float64_gt_nan_is_greater",
            lambda: F.col("f64") > 0.0,
            lambda r: _f_gt(r["f64"], 0.0),
            False,
        ),
        _case(
            "float64_in_signed_zero",
            lambda: F.col("f64").isin(0.0, 2.5),
            lambda r: _nn(r["f64"]) and r["f64"] in (0.0, 2.5),
            True,
        ),
        _case(
            "float64_eq_nan",
            lambda: F.col("f64") == float("nan"),
            lambda r: _nn(r["f64"]) and math.isnan(r["f64"]),
            False,
        ),
        _case("bool_is_true", lambda: F.col("flag"), lambda r: r["flag"] is True, True),
        _case("bool_not", lambda: ~F.col("flag"), lambda r: r["flag"] is False, True),
        _case("string_eq", lambda: F.col("s") == "abc", lambda r: r["s"] == "abc", True),
        _case(
            "string_ge_unicode",
            lambda: F.col("s") >= "m",
            lambda r: _nn(r["s"]) and r["s"] >= "m",
            True,
        ),
        _case(
            "string_not_in",
            lambda: ~F.col("s").isin("a", "日本"),
            lambda r: _nn(r["s"]) and r["s"] not in ("a", "日本"),
            True,
        ),
        _case("string_is_null", lambda: F.col("s").isNull(), lambda r: r["s"] is None, True),
        _case(
            "string_startswith",
            lambda: F.col("s").startswith("ab"),
            lambda r: _nn(r["s"]) and r["s"].startswith("ab"),
            False,
        ),
        _case(
            "binary_eq",
            lambda: F.col("b") == F.lit(bytearray(b"\x00\x01")),
            lambda r: r["b"] == b"\x00\x01",
            True,
        ),
        _case(
            "binary_gt_unsigned",
            lambda: F.col("b") > F.lit(bytearray(b"\x00")),
            lambda r: _nn(r["b"]) and r["b"] > b"\x00",
            True,
        ),
        _case(
            "date_lt",
            lambda: F.col("d") < F.lit(dt.date(2020, 1, 15)),
            lambda r: _nn(r["d"]) and r["d"] < dt.date(2020, 1, 15),
            True,
        ),
        _case(
            "timestamp_ge",
            lambda: F.col("ts") >= F.lit(ts0),
            lambda r: _nn(r["ts"]) and r["ts"] >= ts0,
            True,
        ),
        _case(
            "decimal10_eq",
            lambda: F.col("dec10") == F.lit(D("12.34")),
            lambda r: r["dec10"] == D("12.34"),
            True,
        ),
        _case(
            "decimal10_eq_more_digits",
            lambda: F.col("dec10") == F.lit(D("12.345")),
            lambda r: False,
            None,
        ),
        _case(
            "decimal38_gt",
            lambda: F.col("dec38") > F.lit(D("0.000001")).cast("decimal(38,6)"),
            lambda r: _nn(r["dec38"]) and r["dec38"] > D("0.000001"),
            True,
        ),
        _case(
            "null_safe_eq",
            lambda: F.col("i16").eqNullSafe(F.lit(3).cast("smallint")),
            lambda r: r["i16"] == 3,
            None,
        ),
        _case(
            "conjunction_of_types",
            lambda: (
                (F.col("i32").isNotNull())
                & (F.col("status") == "new")
                & (F.col("d") >= F.lit(dt.date(2019, 12, 20)))
            ),
            lambda r: (
                _nn(r["i32"], r["d"]) and r["status"] == "new" and r["d"] >= dt.date(2019, 12, 20)
            ),
            True,
        ),
    ]


FILTER_VERSION = 5
FILTER_CASES = _filter_cases()


@pytest.fixture(scope="module")
def spark_truth(cdc_spark: SparkSession, table: Table) -> dict[str, list[int]]:
    """Per filter case, the ids Spark itself selects: every case's expression evaluated
    as a column of one unfiltered read (one Spark job; nothing to push down)."""
    df = _read(cdc_spark, table.root, versionAsOf=FILTER_VERSION)
    cols = [case.values[0]().alias(f"c{i}") for i, case in enumerate(FILTER_CASES)]
    t = df.select("id", *cols).toArrow()
    ids = t.column("id").to_pylist()
    return {
        case.id: sorted(
            i for i, hit in zip(ids, t.column(f"c{n}").to_pylist(), strict=True) if hit is True
        )
        for n, case in enumerate(FILTER_CASES)
    }


@pytest.mark.parametrize(("expr", "pred", "pushed"), FILTER_CASES)
def test_filter_gives_the_rows_spark_semantics_give(
    cdc_spark: SparkSession,
    table: Table,
    spark_truth: dict[str, list[int]],
    request: pytest.FixtureRequest,
    expr: Callable[[], Column],
    pred: Callable[[dict[str, Any]], bool],
    pushed: bool | None,
) -> None:
    # pushFilters: a fresh DataFrame per query, the one way the option is safe on Spark 4.3
    df = _read(cdc_spark, table.root, versionAsOf=FILTER_VERSION, pushFilters="true")
    df = df.filter(expr())
    got = _spark_rows(df)
    all_rows = table.read(version=FILTER_VERSION)
    expected = _rows(
        pa.Table.from_pylist([r for r in all_rows.to_pylist() if pred(r)], schema=all_rows.schema)
    )
    assert got == expected
    assert [r[0] for r in got] == spark_truth[request.node.callspec.id]
    assert len(expected) > 0 or pushed is None  # every case but the empty one selects rows
    spark_filters = re.findall(r"\bFilter\b.*", _plan(df))  # the plan just executed
    if pushed is True:  # Spark kept no Filter over the scan: the source applies them all
        assert spark_filters == []
    elif pushed is False:
        assert spark_filters != []


@pytest.mark.parametrize("source", ["python", "jvm"])
def test_a_dataframe_filtered_once_reads_every_row_in_its_next_query(
    cdc_spark: SparkSession, table: Table, source: str
) -> None:
    """A filtered query, then unfiltered ones on the same DataFrame: the later queries
    see every row. With the Python source's ``pushFilters=true`` Spark 4.3 would plan
    them with the reader the first query's filters were pushed to (PUSHDOWN_HAZARD), so
    the default pushes none; the JVM connector builds a scan per query."""
    from pyspark.sql import functions as F

    if source == "jvm" and SOURCE == FORMAT:
        pytest.fail("the JVM connector's jar is not on the shared session (make install)")
    df = _read(cdc_spark, table.root, fmt=SOURCE if source == "python" else FORMAT)
    everything = table.read()
    picked = df.filter(F.col("id") < 3).count()
    assert picked == sum(1 for i in everything.column("id").to_pylist() if i < 3)
    assert df.count() == everything.num_rows
    assert _spark_rows(df) == _rows(everything)


def test_push_filters_false_reads_with_pushdown_disabled(
    cdc_spark: SparkSession, table: Table
) -> None:
    """Spark refuses a reader implementing pushFilters when the session disables
    pushdown; ``pushFilters=false`` is the way to read there."""
    from pyspark.sql import functions as F

    with _conf(cdc_spark, PUSHDOWN, "false"):
        df = _read(cdc_spark, table.root, versionAsOf=FILTER_VERSION, pushFilters="false")
        got = _spark_rows(df.filter(F.col("i32") > 0))
    expected = table.read(version=FILTER_VERSION, filter=[("i32", ">", 0)])
    assert got == _rows(expected)


def test_pushed_filters_skip_pages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Direct use of the reader, in this process: the kept filter skips pages by min/max
    (counted by wrapping the tablet's ``may_match``) and selects exactly its rows; the
    filter it cannot apply goes back to Spark."""
    from pyspark.sql.datasource import GreaterThanOrEqual, StringStartsWith

    t = cdc_sink.create_table(tmp_path / "pages", SCHEMA, options=TableOptions.for_tests())
    t.apply(
        [{"op": "insert", "key": {"id": i}, "set": {"i64": i * 10, "s": "x"}} for i in range(400)]
    )
    t.compact()  # page statistics live in base pages: a snapshot makes them
    skipped = count_skipped_pages(monkeypatch)
    ds = CdcSinkDataSource({"path": t.root, "columns": "id,i64", "pushFilters": "true"})
    reader = ds.reader(ds.schema())
    keep = GreaterThanOrEqual(("i64",), 3500)
    rest = StringStartsWith(("s",), "x")
    assert reader.pushFilters([keep, rest]) == [rest]
    parts = reader.partitions()
    assert [p.bucket for p in parts if isinstance(p, BucketPartition)] == [0, 1, 2, 3]
    batches = [b for p in parts for b in reader.read(p)]
    assert all(b.schema == reader.arrow_schema for b in batches)
    got = sorted(pa.Table.from_batches(batches).column("id").to_pylist())
    assert got == list(range(350, 400))
    pages = -(-400 // 8)
    assert skipped.count >= pages // 2, f"only {skipped.count} of ~{pages} pages skipped"


def test_translate_filter_converts_exactly_or_refuses() -> None:
    from pyspark.sql.datasource import (
        EqualNullSafe,
        EqualTo,
        GreaterThan,
        In,
        IsNotNull,
        IsNull,
        LessThan,
        Not,
    )

    types = {
        "i8": pa.int8(),
        "f32": pa.float32(),
        "f64": pa.float64(),
        "dec": pa.decimal128(10, 2),
        "ts": pa.timestamp("us", tz="UTC"),
    }
    assert translate_filter(GreaterThan(("i8",), 5), types) == ("i8", ">", 5)
    assert translate_filter(GreaterThan(("i8",), 500), types) is None  # out of range
    assert translate_filter(EqualTo(("nested", "x"), 1), types) is None
    assert translate_filter(EqualTo(("f32",), 0.1), types) is None  # not a float32
    assert translate_filter(EqualTo(("f32",), 0.5), types) == ("f32", "=", 0.5)
    assert translate_filter(LessThan(("f64",), math.nan), types) is None
    assert translate_filter(GreaterThan(("f64",), 1.0), types) is None  # NaN rows
    assert translate_filter(Not(GreaterThan(("f64",), 1.0)), types) == ("f64", "<=", 1.0)
    assert translate_filter(Not(LessThan(("f64",), 1.0)), types) is None
    assert translate_filter(Not(LessThan(("i8",), 1)), types) == ("i8", ">=", 1)
    assert translate_filter(EqualTo(("dec",), D("1.5")), types) == ("dec", "=", D("1.50"))
    assert translate_filter(EqualTo(("dec",), D("1.505")), types) is None
    assert translate_filter(EqualTo(("dec",), D("123456789")), types) is None  # > p
    est = dt.timezone(dt.timedelta(hours=-5))
    assert translate_filter(EqualTo(("ts",), dt.datetime(2024, 1, 1, 7, tzinfo=est)), types) == (
        "ts",
        "=",
        dt.datetime(2024, 1, 1, 12, tzinfo=UTC),
    )
    assert translate_filter(EqualTo(("ts",), dt.datetime(2024, 1, 1)), types) is None
    assert translate_filter(In(("f64",), (0.0, None)), types) == ("f64", "in", [0.0, 0.0, -0.0])
    assert translate_filter(Not(In(("i8",), (1, None))), types) is None
    assert translate_filter(Not(In(("i8",), ())), types) is None
    assert translate_filter(EqualNullSafe(("i8",), None), types) == ("i8", "is null")
    assert translate_filter(EqualNullSafe(("i8",), 3), types) == ("i8", "=", 3)
    assert translate_filter(Not(EqualNullSafe(("i8",), 3)), types) is None
    assert translate_filter(Not(IsNull(("i8",))), types) == ("i8", "is not null")
    assert translate_filter(Not(IsNotNull(("i8",))), types) == ("i8", "is null")


# ---------------------------------------------------------------------- repeatability
def test_reads_of_a_version_repeat_while_commits_go_on(
    cdc_spark: SparkSession, tmp_path: Path
) -> None:
    """A writer thread commits, compacts (snapshots) and collects garbage while Spark
    reads version 2 again and again, and re-runs one DataFrame created at the latest
    version before the writer started: every read gives the same rows."""
    path = tmp_path / "busy"
    t = cdc_sink.create_table(path, SCHEMA, options=TableOptions.for_tests())
    rng = random.Random(99)
    t.apply([_insert(i, rng) for i in range(120)])
    t.apply([_update(i, rng) for i in rng.sample(range(120), 40)])
    t.apply([{"op": "delete", "key": {"id": i}} for i in range(0, 120, 7)])
    expected_v2 = _rows(t.read(version=2))
    expected_v3 = _rows(t.read(version=3))
    pinned = _read(cdc_spark, str(path))  # latest = 3, fixed now

    stop = threading.Event()
    commits: list[int] = []
    errors: list[BaseException] = []

    def write() -> None:
        w = cdc_sink.open_table(path, options=TableOptions.for_tests())
        wrng = random.Random(5)
        try:
            while not stop.is_set():
                n = len(commits)
                if n % 5 == 4:
                    commits.append(w.compact())
                    w.gc(dry_run=False, retain_versions=1000, retain_seconds=0)
                else:
                    ev = [_update(i, wrng, "upsert") for i in wrng.sample(range(200), 30)]
                    commits.append(w.apply(ev).version)
        except BaseException as exc:
            errors.append(exc)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        reads = 0
        while reads < 3 or len(commits) < 8:
            assert _spark_rows(_read(cdc_spark, str(path), versionAsOf=2)) == expected_v2
            assert _spark_rows(pinned) == expected_v3
            reads += 1
            assert reads < 40 and not errors
    finally:
        stop.set()
        writer.join(timeout=60)
    assert not errors, errors
    assert len(commits) >= 8
    assert _spark_rows(_read(cdc_spark, str(path))) == _rows(cdc_sink.open_table(path).read())


# ---------------------------------------------------------------------- SQL names
@pytest.mark.parametrize("clause", ["LOCATION '{path}'", "OPTIONS (path '{path}')"])
def test_a_table_named_in_sql_reads_its_newest_version(
    cdc_spark: SparkSession, tmp_path: Path, clause: str
) -> None:
    """``CREATE TABLE … USING cdc_sink`` with a location, then ``SELECT`` by name: Spark
    gives the reader no options then, only the stored schema, which carries the
    location (cdc_sink/spark/_catalog_location.py)."""
    t = cdc_sink.create_table(tmp_path / "named", SCHEMA, options=TableOptions.for_tests())
    rng = random.Random(9)
    t.apply([_insert(i, rng) for i in range(20)])
    name = f"named_{abs(hash((clause, str(tmp_path)))) % 10**8}"
    cdc_spark.sql(f"CREATE TABLE {name} USING {SOURCE} {clause.format(path=t.root)}")
    try:
        assert _spark_rows(cdc_spark.sql(f"SELECT * FROM {name}")) == _rows(t.read())
        t.apply([{"op": "delete", "key": {"id": 3}}, _insert(99, rng)])
        got = cdc_spark.sql(f"SELECT id, s FROM {name} WHERE id > 2").toArrow()
        assert _rows(got) == _rows(
            t.read(columns=["id", "s"]).filter(pc.greater(pc.field("id"), 2))
        )
        meta = cdc_spark.sql(f"SELECT * FROM {name}").schema.fields[0].metadata
        assert list(meta) == ["cdc_sink.location"] and meta["cdc_sink.location"].endswith("/named")
    finally:
        cdc_spark.sql(f"DROP TABLE IF EXISTS {name}")
