"""``spark.read.format("cdc_sink").option("readChangeFeed", "true")`` against a live local
Spark: startingVersion/endingVersion are both inclusive (the changes of versions a..b are
``Table.changes(a - 1, b)``), the timestamp options name the same range, and a range GC
collected fails with the error naming the oldest readable version."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import cdc_sink
import cdc_sink.spark
from cdc_sink import Table, TableOptions

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SCHEMA = {
    "columns": [
        {"name": "id", "type": "int64", "nullable": False},
        {"name": "s", "type": "string"},
        {"name": "n", "type": "int64"},
    ],
    "primary_key": ["id"],
    "num_buckets": 3,
}


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Table:
    t = cdc_sink.create_table(
        tmp_path_factory.mktemp("feed") / "t", SCHEMA, options=TableOptions.for_tests()
    )
    t.apply([{"op": "insert", "key": {"id": i}, "set": {"s": f"r{i}", "n": i}} for i in range(30)])
    for v in range(5):
        t.apply(
            [
                {"op": "update", "key": {"id": v}, "set": {"n": 100 + v}},
                {"op": "delete", "key": {"id": 29 - v}},
                {"op": "insert", "key": {"id": 50 + v}, "set": {"s": "new"}},
            ]
        )
    return t


def _utc(ts: dt.datetime) -> dt.datetime:
    """A timestamp as naive UTC (Spark collects them naive, in the session's zone: UTC)."""
    return ts if ts.tzinfo is None else ts.astimezone(dt.timezone.utc).replace(tzinfo=None)


def _rows(records: Any) -> list[tuple[Any, ...]]:
    return sorted(
        (
            r["_change_type"],
            r["_commit_version"],
            r["id"],
            r["s"],
            r["n"],
            _utc(r["_commit_timestamp"]),
        )
        for r in records
    )


def _feed(spark: SparkSession, path: str, **options: Any) -> Any:
    cdc_sink.spark.register(spark)
    reader = spark.read.format("cdc_sink").option("readChangeFeed", "true")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(path)


def test_read_change_feed_options_name_the_inclusive_range(
    spark: SparkSession, table: Table
) -> None:
    path = table.root
    got = _feed(spark, path, startingVersion=3, endingVersion=5).collect()
    want = table.changes(2, 5).to_pylist()
    assert _rows(r.asDict() for r in got) == _rows(want)
    ms = {e["version"]: e["commit_time_ms"] for e in table.versions()}
    by_time = _feed(spark, path, startingTimestamp=ms[3], endingTimestamp=ms[5]).collect()
    assert _rows(r.asDict() for r in by_time) == _rows(want)
    whole = _feed(spark, path, startingVersion=0).collect()
    assert _rows(r.asDict() for r in whole) == _rows(table.changes(0, table.version).to_pylist())


def test_read_change_feed_of_a_collected_range_names_the_oldest_version(
    spark: SparkSession, tmp_path: Path
) -> None:
    t = cdc_sink.create_table(tmp_path / "t", SCHEMA, options=TableOptions.for_tests())
    for i in range(6):
        t.apply([{"op": "upsert", "key": {"id": i % 2}, "set": {"n": i}}])
    t.compact()
    t.gc(dry_run=False, retain_versions=2, retain_seconds=0.0, orphan_grace_seconds=0.0)
    oldest = t.oldest_version
    with pytest.raises(Exception, match=f"oldest readable version is {oldest}"):
        _feed(spark, t.root, startingVersion=oldest).collect()


_DDL = "id BIGINT, {} _change_type STRING, _commit_version BIGINT, _commit_timestamp TIMESTAMP"


def test_a_schema_given_to_read_is_checked_against_the_change_feed(
    spark: SparkSession, table: Table
) -> None:
    """A schema given to ``spark.read`` naming some of the feed's columns reads them; one
    whose field's type differs from the feed's fails naming the field, not with wrong or
    shifted values."""
    cdc_sink.spark.register(spark)
    reader = spark.read.format("cdc_sink").option("readChangeFeed", "true")
    reader = reader.option("startingVersion", 2).option("endingVersion", 4)
    got = reader.schema(_DDL.format("n BIGINT,")).load(table.root)
    assert got.columns[:2] == ["id", "n"]
    want = table.changes(1, 4, columns=["n"]).to_pylist()
    key = ("_change_type", "_commit_version", "id", "n")
    assert sorted(tuple(r[k] for k in key) for r in got.collect()) == sorted(
        tuple(r[k] for k in key) for r in want
    )
    bad = reader.schema(_DDL.format("n STRING,")).load(table.root)
    with pytest.raises(Exception, match="'n' is string, the feed's is bigint"):
        bad.collect()
