"""Time travel on tables named in Spark's session catalog (issue 51): with
``spark.sql.catalog.spark_catalog=io.cdcsink.spark.CdcSinkSessionCatalog``, a table made by
``CREATE TABLE … USING cdc_sink LOCATION …`` reads ``VERSION AS OF`` and ``TIMESTAMP AS OF``
through the JVM connector, and a commit made after the ``CREATE`` is what a later
``SELECT`` reads. Other tables of the session catalog (Parquet here) behave as Spark's own
catalog has them, time travel refused included.

A session of its own (``newSession()`` of the shared one: same JVM, same jar, its own
catalog settings), so the shared session keeps Spark's built-in session catalog.
"""

from __future__ import annotations

import datetime as dt
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import cdc_sink
from cdc_sink import Table, TableOptions
from cdc_sink.spark.session import connector_jar
from tests.integration.test_spark_source import (
    SCHEMA,
    _build_versions,
    _insert,
    _rows,
    _spark_rows,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SESSION_CATALOG = "io.cdcsink.spark.CdcSinkSessionCatalog"


@pytest.fixture(scope="module")
def catalog_spark(spark: SparkSession) -> Iterator[SparkSession]:
    """A session of the shared JVM whose session catalog is cdc_sink's extension."""
    if connector_jar() is None:
        pytest.fail("the JVM connector's jar is not installed: make install builds it")
    s = spark.newSession()
    s.conf.set("spark.sql.catalog.spark_catalog", SESSION_CATALOG)
    yield s


@pytest.fixture
def named(catalog_spark: SparkSession, tmp_path: Path) -> Iterator[tuple[str, Table]]:
    """A table at versions 0..7, named in the session catalog by ``CREATE TABLE``."""
    t = cdc_sink.create_table(tmp_path / "t", SCHEMA, options=TableOptions.for_tests())
    _build_versions(t, random.Random(7))
    name = f"t_{uuid.uuid4().hex[:8]}"
    catalog_spark.sql(f"CREATE TABLE {name} USING cdc_sink LOCATION '{t.root}'")
    try:
        yield name, t
    finally:
        catalog_spark.sql(f"DROP TABLE IF EXISTS {name}")


def test_version_as_of_on_a_session_catalog_name(
    catalog_spark: SparkSession, named: tuple[str, Table]
) -> None:
    name, t = named
    assert _spark_rows(catalog_spark.sql(f"SELECT * FROM {name}")) == _rows(t.read())
    for v in (1, 3, t.version):
        got = catalog_spark.sql(f"SELECT * FROM {name} VERSION AS OF {v}")
        assert _spark_rows(got) == _rows(t.read(version=v)), v


def test_timestamp_as_of_on_a_session_catalog_name(
    catalog_spark: SparkSession, named: tuple[str, Table]
) -> None:
    name, t = named
    times = {e["version"]: e["commit_time_ms"] for e in t.versions()}
    ms = times[4]
    want = max(v for v, at in times.items() if at <= ms)  # commits in the same millisecond
    at = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=ms)
    sql = f"SELECT * FROM {name} TIMESTAMP AS OF '{at.strftime('%Y-%m-%d %H:%M:%S.%f')}'"
    catalog_spark.sql("SET spark.sql.session.timeZone=UTC")
    assert _spark_rows(catalog_spark.sql(sql)) == _rows(t.read(version=want))


def test_a_commit_after_the_create_is_read_by_name(
    catalog_spark: SparkSession, named: tuple[str, Table]
) -> None:
    name, t = named
    before = t.version
    t.apply([_insert(10_000 + i, random.Random(i)) for i in range(5)])
    assert _spark_rows(catalog_spark.sql(f"SELECT * FROM {name}")) == _rows(t.read())
    old = catalog_spark.sql(f"SELECT * FROM {name} VERSION AS OF {before}")
    assert _spark_rows(old) == _rows(t.read(version=before))


def test_a_version_not_in_the_table_is_a_clear_error(
    catalog_spark: SparkSession, named: tuple[str, Table]
) -> None:
    name, t = named
    with pytest.raises(Exception, match=f"version {t.version + 5}"):
        catalog_spark.sql(f"SELECT * FROM {name} VERSION AS OF {t.version + 5}").collect()


def test_other_tables_keep_the_session_catalogs_behaviour(
    catalog_spark: SparkSession, tmp_path: Path
) -> None:
    name = f"p_{uuid.uuid4().hex[:8]}"
    catalog_spark.sql(f"CREATE TABLE {name} (id INT) USING parquet LOCATION '{tmp_path / 'p'}'")
    try:
        catalog_spark.sql(f"INSERT INTO {name} VALUES (1), (2)")
        assert sorted(r.id for r in catalog_spark.sql(f"SELECT * FROM {name}").collect()) == [1, 2]
        with pytest.raises(Exception, match=r"TIME_TRAVEL|time travel"):
            catalog_spark.sql(f"SELECT * FROM {name} VERSION AS OF 1").collect()
    finally:
        catalog_spark.sql(f"DROP TABLE IF EXISTS {name}")
