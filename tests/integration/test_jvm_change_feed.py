"""The JVM connector's change feed (jvm/, issue 51) in the shared Spark session:
``format("cdc_sink").option("readChangeFeed", "true")`` read by
``io.cdcsink.spark.CdcSinkProvider`` (a columnar partition per bucket over
``io.cdcsink.format.ChangeReader``) equals the Python source's (``cdc_sink_python``) and
``Table.changes`` for version ranges, timestamps, ``columns``, ``setColumnsOnly``, a schema
version adding a column with a default, a truncate, a table with a sequence column and a
schema given to ``spark.read``; the SQL function ``table_changes`` (the connector's
``spark.sql.extensions``, which ``local_spark`` sets) on a catalog name, a session-catalog
name and a path; bad options fail with the Python source's messages; a stream of the feed
stays with the Python source.
"""

from __future__ import annotations

import datetime as dt
import random
import re
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import cdc_sink
from cdc_sink import Table, TableOptions
from cdc_sink.spark.source import PYTHON_FORMAT
from tests.fixtures import ID_A_B_SEQ
from tests.integration.test_jvm_reader import _catalog, jvm_spark, s3_catalog
from tests.integration.test_spark_source import SCHEMA, _build_versions, _norm, _plan

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from cdc_sink_testkit.s3 import SeaweedS3

pytestmark = [pytest.mark.integration, pytest.mark.spark]

__all__ = ["jvm_spark"]  # the fixture, shared with test_jvm_reader

UTC = dt.timezone.utc
META = ["_change_type", "_commit_version", "_commit_timestamp"]


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Table:
    """The every-type table at versions 0..7, then a column added with a default (v8: every
    live row changes), upserts (v9), a truncate and inserts (v10)."""
    path = tmp_path_factory.mktemp("jvm_feed") / "t"
    t = cdc_sink.create_table(path, SCHEMA, options=TableOptions.for_tests())
    _build_versions(t, random.Random(51))
    t.add_column("note", "string", default="n/a")
    t.apply([{"op": "upsert", "key": {"id": i}, "set": {"note": f"n{i}"}} for i in range(0, 90, 7)])
    t.apply([{"op": "truncate"}, *({"op": "insert", "key": {"id": i}} for i in range(5))])
    assert t.version == 10
    return t


def _feed(spark: SparkSession, path: str, fmt: str = "cdc_sink", **options: Any) -> DataFrame:
    reader = spark.read.format(fmt).option("readChangeFeed", "true")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(path)


def _records(t: pa.Table, key: str = "id") -> list[tuple[Any, ...]]:
    """Change records in a fixed order (version, key, change type), NaN made comparable,
    commit timestamps as UTC instants."""
    t = t.sort_by(
        [("_commit_version", "ascending"), (key, "ascending"), ("_change_type", "ascending")]
    )
    return [tuple(_norm(_utc(v)) for v in r.values()) for r in t.to_pylist()]


def _utc(v: Any) -> Any:
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(UTC)
    return v


def _event(op: str, key: int, seq: int, **values: Any) -> dict[str, Any]:
    """An event of a table with the sequence column ``seq``."""
    event: dict[str, Any] = {"op": op, "key": {"id": key}, "seq": seq}
    if values:
        event["set"] = values
    return event


def _jvm_scan(df: DataFrame) -> str:
    return next(line for line in _plan(df).splitlines() if "BatchScan" in line)


def _check(df: DataFrame, want: pa.Table, key: str = "id") -> None:
    assert df.columns == want.column_names
    assert _records(df.toArrow(), key) == _records(want, key)


# ---------------------------------------------------------------------- ranges
@pytest.mark.parametrize(
    ("first", "last"),
    [(1, 1), (2, 5), (8, 8), (10, 10), (1, None)],
    ids=["inserts", "updates-deletes-upserts", "column-added", "truncate", "everything"],
)
def test_a_version_range_equals_table_changes(
    jvm_spark: SparkSession, table: Table, first: int, last: int | None
) -> None:
    opts = (
        {"startingVersion": first}
        if last is None
        else {"startingVersion": first, "endingVersion": last}
    )
    df = _feed(jvm_spark, table.root, **opts)
    assert "cdc_sink changes of" in _jvm_scan(df)  # the connector's scan, not Python's
    assert df.rdd.getNumPartitions() == SCHEMA["num_buckets"]
    _check(df, table.changes(first - 1, table.version if last is None else last))


def test_the_python_source_gives_the_same_records(jvm_spark: SparkSession, table: Table) -> None:
    for opts in (
        {"startingVersion": 2, "endingVersion": 9},
        {"startingVersion": 6, "columns": "s,i32"},
    ):
        jvm = _feed(jvm_spark, table.root, **opts)
        python = _feed(jvm_spark, table.root, fmt=PYTHON_FORMAT, **opts)
        assert jvm.schema == python.schema, opts
        assert _records(jvm.toArrow()) == _records(python.toArrow()), opts


@pytest.mark.parametrize("form", ["epoch_ms", "iso", "iso_naive"])
def test_timestamps_name_the_versions_committed_then(
    jvm_spark: SparkSession, table: Table, form: str
) -> None:
    ms = {e["version"]: e["commit_time_ms"] for e in table.versions()}

    def at(v: int) -> str:
        when = dt.datetime.fromtimestamp(ms[v] / 1000, UTC)
        if form == "epoch_ms":
            return str(ms[v])
        if form == "iso":
            return when.isoformat()
        return when.replace(tzinfo=None).isoformat(sep=" ")

    df = _feed(jvm_spark, table.root, startingTimestamp=at(3), endingTimestamp=at(6))
    _check(df, table.changes(2, 6))


def test_columns_and_set_columns_only(jvm_spark: SparkSession, table: Table) -> None:
    df = _feed(jvm_spark, table.root, startingVersion=2, endingVersion=9, columns="s, i32")
    _check(df, table.changes(1, 9, columns=["s", "i32"]))
    df = _feed(jvm_spark, table.root, startingVersion=2, endingVersion=9, setColumnsOnly="true")
    _check(df, table.changes(1, 9, set_columns_only=True))
    assert "_set_s" in df.columns
    both = _feed(
        jvm_spark, table.root, startingVersion=1, columns="note,f64", setColumnsOnly="true"
    )
    _check(both, table.changes(0, 10, columns=["note", "f64"], set_columns_only=True))


def test_a_query_reads_the_columns_it_needs(jvm_spark: SparkSession, table: Table) -> None:
    df = _feed(jvm_spark, table.root, startingVersion=2, endingVersion=5)
    picked = df.select("id", "_change_type").where("_change_type = 'delete'")
    assert "columns [id, _change_type]" in _jvm_scan(picked)
    want = table.changes(1, 5)
    deletes = sorted(r["id"] for r in want.to_pylist() if r["_change_type"] == "delete")
    assert sorted(r.id for r in picked.collect()) == deletes
    assert df.count() == want.num_rows


def test_a_table_with_a_sequence_column(jvm_spark: SparkSession, tmp_path: Path) -> None:
    """Events older than a row's sequence value are stale: they change nothing."""
    t = cdc_sink.create_table(tmp_path / "seq", ID_A_B_SEQ, options=TableOptions.for_tests())
    t.apply([_event("insert", i, 10, a=i, b="x") for i in range(20)])
    t.apply(
        [_event("update", i, 5, a=-i) for i in range(0, 20, 2)]
        + [_event("update", i, 11, b="y") for i in range(1, 20, 2)]
    )
    t.apply([_event("delete", i, 12) for i in range(0, 8)])
    df = _feed(jvm_spark, t.root, startingVersion=1)
    _check(df, t.changes(0, t.version))
    python = _feed(jvm_spark, t.root, fmt=PYTHON_FORMAT, startingVersion=2)
    assert _records(_feed(jvm_spark, t.root, startingVersion=2).toArrow()) == _records(
        python.toArrow()
    )


_DDL = "id BIGINT, {} _change_type STRING, _commit_version BIGINT, _commit_timestamp TIMESTAMP"


def test_a_schema_given_to_read_selects_and_is_checked(
    jvm_spark: SparkSession, table: Table
) -> None:
    reader = jvm_spark.read.format("cdc_sink").option("readChangeFeed", "true")
    reader = reader.option("startingVersion", 2).option("endingVersion", 4)
    got = reader.schema(_DDL.format("i64 BIGINT,")).load(table.root)
    assert "cdc_sink changes of" in _jvm_scan(got)
    assert _records(got.toArrow()) == _records(table.changes(1, 4, columns=["i64"]))
    bad = reader.schema(_DDL.format("i64 STRING,")).load(table.root)  # refused by a query
    with pytest.raises(Exception, match="'i64' is string, the feed's is bigint"):
        bad.collect()


# ---------------------------------------------------------------------- errors
def _message(run: Any) -> str:
    with pytest.raises(Exception) as info:
        run()
    return str(info.value)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"endingVersion": 3}, "readChangeFeed needs startingVersion or startingTimestamp"),
        ({"startingVersion": "five"}, "startingVersion must be an integer, got 'five'"),
        (
            {"startingVersion": 1, "startingTimestamp": 0},
            "give startingVersion or startingTimestamp, not both",
        ),
        (
            {"startingVersion": 1, "endingTimestamp": "yesterday"},
            "endingTimestamp is no timestamp: 'yesterday'",
        ),
        ({"startingVersion": 1, "setColumnsOnly": "maybe"}, "setColumnsOnly must be true or false"),
        ({"startingVersion": 6, "endingVersion": 3}, "start 5 is after end 3"),
        ({"startingVersion": 1, "endingVersion": 99}, "can be read"),
        ({"startingVersion": 1, "columns": "s,nope"}, "no column(s) ['nope']"),
    ],
)
def test_bad_options_fail_as_the_python_source_fails(
    jvm_spark: SparkSession, table: Table, options: dict[str, Any], expected: str
) -> None:
    for fmt in ("cdc_sink", PYTHON_FORMAT):
        msg = _message(lambda fmt=fmt: _feed(jvm_spark, table.root, fmt=fmt, **options).collect())
        assert expected in msg, (fmt, msg)


def test_a_collected_range_names_the_oldest_version(
    jvm_spark: SparkSession, tmp_path: Path
) -> None:
    t = cdc_sink.create_table(tmp_path / "gc", ID_A_B_SEQ, options=TableOptions.for_tests())
    for i in range(6):
        t.apply([_event("upsert", i % 2, i, a=i)])
    t.compact()
    t.gc(dry_run=False, retain_versions=2, retain_seconds=0.0, orphan_grace_seconds=0.0)
    oldest = t.oldest_version
    msg = _message(lambda: _feed(jvm_spark, t.root, startingVersion=oldest).collect())
    assert f"oldest readable version is {oldest}" in msg
    df = _feed(jvm_spark, t.root, startingVersion=oldest + 1)
    _check(df, t.changes(oldest, t.version))


def test_a_stream_of_the_feed_is_read_by_the_python_source(
    jvm_spark: SparkSession, table: Table
) -> None:
    """The connector's change-feed table reads batches only: a stream runs only if the
    provider handed it to the Python source."""
    df = (
        jvm_spark.readStream.format("cdc_sink")
        .option("readChangeFeed", "true")
        .option("startingVersion", 9)
        .load(table.root)
    )
    assert df.isStreaming
    name = f"feed_{uuid.uuid4().hex[:8]}"
    query = df.writeStream.format("memory").queryName(name).trigger(availableNow=True).start()
    try:
        query.awaitTermination(60)
    finally:
        query.stop()
    got = jvm_spark.table(name)
    assert _records(got.toArrow()) == _records(table.changes(8, 10))


# ---------------------------------------------------------------------- SQL
def test_table_changes_on_a_catalog_name_and_a_path(
    jvm_spark: SparkSession, tmp_path: Path
) -> None:
    t = cdc_sink.create_table(
        tmp_path / "inventory.orders", ID_A_B_SEQ, options=TableOptions.for_tests()
    )
    t.apply([_event("insert", i, 1, a=i, b="x") for i in range(30)])
    t.apply([_event("update", i, 2, b="y") for i in range(10)])
    t.apply([_event("delete", i, 3) for i in range(25, 30)])
    cat = _catalog(jvm_spark, str(tmp_path))
    by_name = jvm_spark.sql(f"SELECT * FROM table_changes('{cat}.inventory.orders', 2, 3)")
    assert "cdc_sink changes of" in _jvm_scan(by_name)
    _check(by_name, t.changes(1, 3))
    from_two = jvm_spark.sql(f"SELECT * FROM table_changes('{cat}.inventory.orders', 2)")
    _check(from_two, t.changes(1, 3))
    ms = {e["version"]: e["commit_time_ms"] for e in t.versions()}
    at = dt.datetime.fromtimestamp(ms[2] / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    by_path = jvm_spark.sql(f"SELECT * FROM table_changes('{t.root}', '{at}', TIMESTAMP '{at}')")
    _check(by_path, t.changes(1, 2))
    counted = jvm_spark.sql(
        f"SELECT _change_type, count(*) AS n FROM table_changes('{t.root}', 1)"
        " GROUP BY _change_type ORDER BY _change_type"
    )
    assert [(r[0], r[1]) for r in counted.collect()] == [
        ("delete", 5),
        ("insert", 30),
        ("update_postimage", 10),
        ("update_preimage", 10),
    ]
    name = f"t_{uuid.uuid4().hex[:8]}"
    jvm_spark.sql(f"CREATE TABLE {name} USING cdc_sink LOCATION '{t.root}'")
    try:
        _check(jvm_spark.sql(f"SELECT * FROM table_changes('{name}', 3, 3)"), t.changes(2, 3))
    finally:
        jvm_spark.sql(f"DROP TABLE {name}")


def test_a_catalog_table_read_with_read_change_feed_is_its_feed(
    jvm_spark: SparkSession, tmp_path: Path
) -> None:
    """As in Delta: the ``readChangeFeed`` option on a catalog's table (DataFrame options or
    SQL's ``WITH``) reads its change feed (the extensions' analyzer rule)."""
    t = cdc_sink.create_table(tmp_path / "db.t", ID_A_B_SEQ, options=TableOptions.for_tests())
    t.apply([_event("insert", i, 1, a=i, b="x") for i in range(12)])
    t.apply([_event("update", i, 2, a=-i) for i in range(4)] + [_event("delete", 11, 2)])
    cat = _catalog(jvm_spark, str(tmp_path))
    reader = jvm_spark.read.option("readChangeFeed", "true").option("startingVersion", 2)
    df = reader.table(f"{cat}.db.t")
    assert "cdc_sink changes of" in _jvm_scan(df)
    _check(df, t.changes(1, 2))
    sql = jvm_spark.sql(
        f"SELECT id, a, _change_type FROM {cat}.db.t"
        " WITH ('readChangeFeed' = 'true', 'startingVersion' = '1', 'endingVersion' = '1')"
        " WHERE id < 3"
    )
    want = t.changes(0, 1, columns=["a"])
    want = want.filter(pc.less(want["id"], 3))
    assert sorted(tuple(r) for r in sql.collect()) == sorted(
        (r["id"], r["a"], r["_change_type"]) for r in want.to_pylist()
    )
    assert jvm_spark.table(f"{cat}.db.t").columns == ["id", "a", "b", "seq"]  # no option: rows


def test_the_change_feed_on_the_s3_server(jvm_spark: SparkSession, s3_server: SeaweedS3) -> None:
    """An ``s3://`` table's feed, read as ``s3a://`` with its ``storage.*`` options as S3A's
    settings (the executors' readers get them), and ``table_changes`` of a catalog over it."""

    storage = s3_server.storage_options()
    root = s3_server.url(f"jvm-feed-{uuid.uuid4().hex[:8]}")
    t = cdc_sink.create_table(
        f"{root}/db.t", ID_A_B_SEQ, options=TableOptions.for_tests(), storage_options=storage
    )
    t.apply([_event("insert", i, 1, a=i, b="x") for i in range(20)])
    t.apply([_event("update", i, 2, b="y") for i in range(5)] + [_event("delete", 19, 2)])
    opts = {f"storage.{k}": v for k, v in storage.items()}
    df = _feed(jvm_spark, t.root, startingVersion=1, **opts)
    assert "cdc_sink changes of s3a://" in _jvm_scan(df)
    _check(df, t.changes(0, 2))
    cat = s3_catalog(jvm_spark, s3_server, root)
    _check(jvm_spark.sql(f"SELECT * FROM table_changes('{cat}.db.t', 2, 2)"), t.changes(1, 2))


def test_table_changes_errors_are_clear(jvm_spark: SparkSession, table: Table) -> None:
    cases = {
        f"table_changes('{table.root}')": "takes a table",
        f"table_changes('{table.root}', 1.5)": "a version (an integer) or a time",
        "table_changes('no_such_table', 1)": "no table no_such_table",
        f"table_changes('{table.root}', 4, 2)": "start 3 is after end 2",
    }
    for call, expected in cases.items():
        msg = _message(lambda call=call: jvm_spark.sql(f"SELECT * FROM {call}").collect())
        assert re.search(re.escape(expected), msg), (call, msg)
