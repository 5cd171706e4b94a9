"""The JVM connector (jvm/, issue 51) in the shared Spark session: ``format("cdc_sink")``
read by ``io.cdcsink.spark.CdcSinkProvider`` equals ``Table.read`` at every version of a
table with partial updates, deletes and schema changes; column pruning; ``versionAsOf`` /
``timestampAsOf``; the SQL catalog ``io.cdcsink.spark.CdcSinkCatalog`` over a table root
(``SELECT … FROM cat.db.table``, ``VERSION AS OF``, ``TIMESTAMP AS OF``, read-only) on a
local directory and on the S3 server; the change feed read by the connector too; and
clear errors. The session is the one of tests/integration/conftest.py: its
``local_spark`` puts the connector's jar (``make install`` builds it) on ``spark.jars``.
"""

from __future__ import annotations

import datetime as dt
import random
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

import cdc_sink
import cdc_sink.spark
from cdc_sink import Table, TableOptions
from cdc_sink.spark.session import connector_jar
from tests.integration.test_spark_source import (
    FILTER_CASES,
    FILTER_VERSION,
    SCHEMA,
    _build_versions,
    _insert,
    _plan,
    _rows,
    _spark_rows,
    check_timestamp_as_of,
)
from tests.integration.test_spark_source import (
    _read as read_through,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from cdc_sink_testkit.s3 import SeaweedS3

pytestmark = [pytest.mark.integration, pytest.mark.spark]

UTC = dt.timezone.utc


@pytest.fixture(scope="module")
def jvm_spark(spark: SparkSession) -> SparkSession:
    """The shared session, ``format("cdc_sink")`` owned by the JVM connector."""
    if connector_jar() is None:
        pytest.fail("the JVM connector's jar is not installed: make install builds it")
    assert cdc_sink.spark.register(spark) == "jvm"
    return spark


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Table:
    """The every-type table at versions 0..7 (inserts, partial updates, deletes, upserts),
    then a column added (v8) and one renamed (v9), then upserts of both (v10)."""
    path = tmp_path_factory.mktemp("jvm_reader") / "t"
    t = cdc_sink.create_table(path, SCHEMA, options=TableOptions.for_tests())
    _build_versions(t, random.Random(51))
    t.add_column("note", "string", default="n/a")
    t.rename_column("s", "label")
    t.apply(
        [{"op": "upsert", "key": {"id": i}, "set": {"note": f"n{i}"}} for i in range(0, 300, 7)]
    )
    assert t.version == 10
    return t


def _read(spark: SparkSession, path: str, **options: Any) -> DataFrame:
    return read_through(spark, path, fmt="cdc_sink", **options)


def _scan_node(df: Any) -> str:
    return next(line for line in _plan(df).splitlines() if "BatchScan" in line)


# ---------------------------------------------------------------------- format("cdc_sink")
def test_every_version_equals_table_read(jvm_spark: SparkSession, table: Table) -> None:
    for v in range(table.version + 1):
        df = _read(jvm_spark, table.root, versionAsOf=v)
        expected = table.read(version=v)
        assert df.columns == expected.column_names, v
        assert _spark_rows(df) == _rows(expected), v
    assert "cdc_sink " in _scan_node(_read(jvm_spark, table.root))  # the JVM scan, not Python


def test_the_default_is_the_latest_version(jvm_spark: SparkSession, table: Table) -> None:
    assert _spark_rows(_read(jvm_spark, table.root)) == _rows(table.read())


def test_one_columnar_partition_per_bucket(jvm_spark: SparkSession, table: Table) -> None:
    df = _read(jvm_spark, table.root)
    assert df.rdd.getNumPartitions() == SCHEMA["num_buckets"]
    assert "ColumnarToRow" in _plan(df)


def test_a_large_bucket_is_read_as_ranges_of_its_pages(
    jvm_spark: SparkSession, tmp_path: Path
) -> None:
    """A bucket read page by page whose pages hold more than
    ``spark.sql.files.maxPartitionBytes`` is split into page ranges, a partition each (as
    Spark splits a large Parquet file); a bucket with segments after its snapshot, or with
    a column added since, is one partition; the rows are the same either way."""
    schema = {**SCHEMA, "num_buckets": 2}
    t = cdc_sink.create_table(tmp_path / "t", schema, options=TableOptions(page_rows=64))
    rng = random.Random(5)
    t.apply([_insert(i, rng) for i in range(2000)])
    t.apply([{"op": "delete", "key": {"id": i}} for i in range(0, 2000, 7)])
    t.compact()
    key = jvm_spark.conf.get("spark.sql.files.maxPartitionBytes")
    jvm_spark.conf.set("spark.sql.files.maxPartitionBytes", "4k")
    try:
        whole = _read(jvm_spark, t.root)
        assert whole.rdd.getNumPartitions() > 2 * 4  # ~16 pages a bucket
        assert _spark_rows(whole) == _rows(t.read())
        assert whole.count() == t.read().num_rows
        narrow = _read(jvm_spark, t.root).select("id", "i32").filter("id >= 1500")
        want = t.read(columns=["id", "i32"], filter=[("id", ">=", 1500)])
        assert _spark_rows(narrow) == _rows(want)
        # a segment after the snapshot: its bucket is merged whole, in one partition
        t.apply([{"op": "upsert", "key": {"id": 3}, "set": {"i32": 1}}])
        merged = _read(jvm_spark, t.root)
        assert 2 < merged.rdd.getNumPartitions() < whole.rdd.getNumPartitions()
        assert _spark_rows(merged) == _rows(t.read())
        t.compact()
        t.add_column("extra", "int64", default=7)  # stored on no page: read as its default
        added = _read(jvm_spark, t.root)
        assert added.rdd.getNumPartitions() == 2
        assert _spark_rows(added) == _rows(t.read())
    finally:
        jvm_spark.conf.set("spark.sql.files.maxPartitionBytes", key)


def test_columns_are_pruned_to_what_the_query_needs(jvm_spark: SparkSession, table: Table) -> None:
    df = _read(jvm_spark, table.root, versionAsOf=6).select("dec10", "id")
    assert "columns [id, dec10]" in _scan_node(df)  # the scan reads two of 16
    assert _spark_rows(df) == _rows(table.read(version=6, columns=["dec10", "id"]))
    counted = _read(jvm_spark, table.root, versionAsOf=3)
    assert counted.count() == table.read(version=3).num_rows
    assert "columns []" in _scan_node(counted.groupBy().count())


@pytest.mark.parametrize(("expr", "pred", "pushed"), FILTER_CASES)
def test_filters_give_the_rows_spark_semantics_give(
    jvm_spark: SparkSession, table: Table, expr: Any, pred: Any, pushed: Any
) -> None:
    """Every filter case of the Python source's tests: the readers skip pages by the
    filters they are given, Spark evaluates each again; the rows are those the case's
    plain-Python evaluation of Spark's semantics selects."""
    df = _read(jvm_spark, table.root, versionAsOf=FILTER_VERSION).filter(expr())
    rows = table.read(version=FILTER_VERSION)
    want = [r for r in rows.to_pylist() if pred(r)]
    assert _spark_rows(df) == _rows(pa.Table.from_pylist(want, schema=rows.schema))


def test_a_key_equality_reads_one_bucket(jvm_spark: SparkSession, table: Table) -> None:
    df = _read(jvm_spark, table.root, versionAsOf=6).filter("id = 17")
    assert df.rdd.getNumPartitions() == 1
    assert "skipping by [id = 17]" in _scan_node(df)
    assert _spark_rows(df) == _rows(table.read(version=6, filter=[("id", "=", 17)]))


def test_the_columns_option_and_a_given_schema_select(
    jvm_spark: SparkSession, table: Table
) -> None:
    df = _read(jvm_spark, table.root, versionAsOf=6, columns="s,id")
    assert df.columns == ["s", "id"]
    assert _spark_rows(df) == _rows(table.read(version=6, columns=["s", "id"]))
    given = jvm_spark.read.format("cdc_sink").schema("id bigint, dec10 decimal(10,2)")
    df = given.option("versionAsOf", 6).load(table.root)
    assert _spark_rows(df) == _rows(table.read(version=6, columns=["id", "dec10"]))
    with pytest.raises(Exception, match="'dec10' is decimal"):
        jvm_spark.read.format("cdc_sink").schema("id bigint, dec10 double").load(
            table.root
        ).collect()


@pytest.mark.parametrize("form", ["epoch_ms", "iso"])
def test_timestamp_as_of_reads_the_version_committed_then(
    jvm_spark: SparkSession, table: Table, form: str
) -> None:
    check_timestamp_as_of(jvm_spark, table, form, 4, fmt="cdc_sink")


def test_a_version_not_retained_is_a_clear_error(jvm_spark: SparkSession, tmp_path: Path) -> None:
    t = cdc_sink.create_table(tmp_path / "gc", SCHEMA, options=TableOptions.for_tests())
    rng = random.Random(7)
    for _ in range(6):
        t.apply([_insert(i, rng) for i in rng.sample(range(40), 10)])
    t.gc(dry_run=False, retain_versions=2, retain_seconds=0)
    assert t.oldest_version > 1
    with pytest.raises(Exception, match=rf"(?s)not retained.*\b{t.oldest_version}\b"):
        _read(jvm_spark, t.root, versionAsOf=1).collect()
    with pytest.raises(Exception, match="not both"):
        _read(jvm_spark, t.root, versionAsOf=1, timestampAsOf=0).collect()


def test_the_change_feed_is_read_by_the_connector(jvm_spark: SparkSession, table: Table) -> None:
    """More in tests/integration/test_jvm_change_feed.py."""
    df = (
        jvm_spark.read.format("cdc_sink")
        .option("readChangeFeed", "true")
        .option("startingVersion", 9)
        .option("endingVersion", 10)
        .load(table.root)
    )
    assert "cdc_sink changes of" in _scan_node(df)
    assert df.count() == len(range(0, 300, 7)) * 2 - _missing_upserts(table)


def _missing_upserts(table: Table) -> int:
    """Upserts of v10 that inserted rather than updated (one change row, not two)."""
    live = set(table.read(version=9, columns=["id"]).column("id").to_pylist())
    return sum(1 for i in range(0, 300, 7) if i not in live)


# ---------------------------------------------------------------------- SQL
def _catalog(spark: SparkSession, root: str, **settings: str) -> str:
    """A fresh catalog name over ``root`` (a loaded catalog keeps its settings)."""
    name = f"cdc_{uuid.uuid4().hex[:8]}"
    spark.conf.set(f"spark.sql.catalog.{name}", "io.cdcsink.spark.CdcSinkCatalog")
    spark.conf.set(f"spark.sql.catalog.{name}.root", root)
    for key, value in settings.items():
        spark.conf.set(f"spark.sql.catalog.{name}.{key}", value)
    return name


def _database_root(root: Path | str, make: Any) -> dict[str, Table]:
    """Two tables as the whole-database job names them under ``root``."""
    out = {}
    for name, seed in (("inventory.customers", 1), ("inventory.orders", 2)):
        t = make(f"{root}/{name}")
        rng = random.Random(seed)
        t.apply([_insert(i, rng) for i in range(50)])
        t.apply([{"op": "delete", "key": {"id": i}} for i in range(10)])
        out[name] = t
    return out


def _check_catalog(spark: SparkSession, cat: str, tables: dict[str, Table]) -> None:
    assert {r.namespace for r in spark.sql(f"SHOW NAMESPACES IN {cat}").collect()} == {"inventory"}
    listed = {r.tableName for r in spark.sql(f"SHOW TABLES IN {cat}.inventory").collect()}
    assert listed == {"customers", "orders"}
    t = tables["inventory.customers"]
    q = f"SELECT * FROM {cat}.inventory.customers"
    assert _spark_rows(spark.sql(q)) == _rows(t.read())
    assert _spark_rows(spark.sql(f"{q} VERSION AS OF 1")) == _rows(t.read(version=1))
    when = dt.datetime.fromtimestamp(t.versions()[-2]["commit_time_ms"] / 1000, UTC)
    at = when.strftime("%Y-%m-%d %H:%M:%S.%f")
    got = spark.sql(f"{q} TIMESTAMP AS OF '{at}'")
    assert _spark_rows(got) == _rows(t.read(version=t.versions()[-2]["version"]))
    props = {
        r[0]: r[1] for r in spark.sql(f"SHOW TBLPROPERTIES {cat}.inventory.customers").collect()
    }
    assert props["cdc_sink.version"] == str(t.version)
    assert int(props["cdc_sink.history_size"]) == t.version + 1
    history = spark.sql(f"SELECT * FROM {cat}.inventory.customers.history").collect()
    assert [(r.version, r.operation) for r in history] == [
        (e["version"], e["kind"]) for e in reversed(t.versions())
    ]
    with pytest.raises(Exception, match="read-only"):
        spark.sql(f"DROP TABLE {cat}.inventory.orders")
    with pytest.raises(Exception, match=r"\b99\b"):
        spark.sql(f"{q} VERSION AS OF 99").collect()


def test_the_catalog_on_a_local_root(jvm_spark: SparkSession, tmp_path: Path) -> None:
    def make(path: str) -> Table:
        return cdc_sink.create_table(path, SCHEMA, options=TableOptions.for_tests())

    tables = _database_root(tmp_path, make)
    _check_catalog(jvm_spark, _catalog(jvm_spark, str(tmp_path)), tables)


def test_create_table_using_cdc_sink_then_select(jvm_spark: SparkSession, table: Table) -> None:
    name = f"t_{uuid.uuid4().hex[:8]}"
    jvm_spark.sql(f"CREATE TABLE {name} USING cdc_sink LOCATION '{table.root}'")
    try:
        assert _spark_rows(jvm_spark.sql(f"SELECT * FROM {name}")) == _rows(table.read())
    finally:
        jvm_spark.sql(f"DROP TABLE {name}")


def s3_catalog(spark: SparkSession, s3_server: SeaweedS3, root: str) -> str:
    """A catalog over ``root`` (an ``s3://`` URL of the S3 server), read as ``s3a://``: the
    endpoint among the catalog's settings, the keys in the session's Hadoop configuration
    through the JVM (:func:`~cdc_sink.spark.s3a.set_s3a_credentials`); its name."""
    from cdc_sink.spark.s3a import s3a_conf, set_s3a_credentials

    storage = s3_server.storage_options()
    bucket = s3_server.first_bucket
    set_s3a_credentials(spark, storage, bucket=bucket)
    settings = {
        k.removeprefix("spark.hadoop."): v
        for k, v in s3a_conf(storage, bucket=bucket, with_jars=False).items()
    }
    return _catalog(spark, "s3a" + root.removeprefix("s3"), **settings)


def test_the_catalog_on_the_s3_server(jvm_spark: SparkSession, s3_server: SeaweedS3) -> None:
    """The catalog's root an ``s3a://`` URL: S3A (on the session's classpath) reads it with
    the endpoint among the catalog's settings and the keys put in the session's Hadoop
    configuration through the JVM (:func:`~cdc_sink.spark.s3a.set_s3a_credentials`)."""

    storage = s3_server.storage_options()
    prefix = f"jvm-{uuid.uuid4().hex[:8]}/db"
    root = s3_server.url(prefix)

    def make(url: str) -> Table:
        return cdc_sink.create_table(
            url, SCHEMA, options=TableOptions.for_tests(), storage_options=storage
        )

    tables = _database_root(root, make)
    cat = s3_catalog(jvm_spark, s3_server, root)
    _check_catalog(jvm_spark, cat, tables)
    t = tables["inventory.orders"]  # format("cdc_sink") of an s3:// URL: read as s3a://
    reader = jvm_spark.read.format("cdc_sink").option("versionAsOf", 1)
    for key, value in storage.items():
        reader = reader.option(f"storage.{key}", value)
    df = reader.load(t.root)
    assert "cdc_sink s3a://" in _scan_node(df)
    assert _spark_rows(df) == _rows(t.read(version=1))


def test_cdc_sink_jars_prints_the_connector_last(
    jvm_spark: SparkSession, capsys: pytest.CaptureFixture[str]
) -> None:
    from cdc_sink import cli

    assert cli.main(["jars", "--spark-version", jvm_spark.version]) == 0
    assert capsys.readouterr().out.strip().split(",")[-1] == str(connector_jar())
