"""A schema given with ``spark.readStream.schema(...)`` to a change stream is checked
against the table's change feed when the query starts (without a Spark session: the
reader Spark builds from it): the feed's own schema, or one naming some value columns,
is taken; any other is refused with SchemaMismatch naming each field that differs."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql.types import (
    BooleanType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

import cdc_sink
from cdc_sink import Table, TableOptions
from cdc_sink.errors import CdcSinkError, SchemaMismatch
from cdc_sink.spark.change_stream import stream_reader, stream_schema
from tests.changefeed.stream_copy import SCHEMA

META = [
    StructField("_change_type", StringType(), False),
    StructField("_commit_version", LongType(), False),
    StructField("_commit_timestamp", TimestampType(), False),
]


@pytest.fixture
def table(tmp_path: Path) -> Table:
    t = cdc_sink.create_table(tmp_path / "t", SCHEMA, options=TableOptions.for_tests())
    t.apply([{"op": "insert", "key": {"id": 1}, "set": {"s": "a", "n": 1}}])
    return t


def _options(table: Table, **more: str) -> dict[str, str]:
    return {"path": table.root, "readChangeFeed": "true", **more}


def _schema(*fields: StructField) -> StructType:
    return StructType([StructField("id", LongType(), False), *fields, *META])


def test_the_feeds_own_schema_and_one_naming_some_columns_are_taken(table: Table) -> None:
    opts = _options(table)
    assert stream_reader(opts, stream_schema(opts)).stream.columns == ("id", "s", "n")
    only_n = _schema(StructField("n", LongType()))
    assert stream_reader(opts, only_n).stream.columns == ("id", "n")
    nullable = StructType([StructField(f.name, f.dataType, True) for f in only_n.fields])
    assert stream_reader(opts, nullable).stream.columns == ("id", "n")  # wider is fine
    masks = _schema(StructField("s", StringType()), StructField("_set_s", BooleanType()))
    only = _options(table, setColumnsOnly="true")
    assert stream_reader(only, masks).stream.columns == ("id", "s")


def test_a_given_schema_that_differs_is_refused_naming_every_differing_field(
    table: Table,
) -> None:
    given = StructType(
        [
            StructField("id", LongType(), False),
            StructField("s", StringType(), False),  # the feed's s is nullable
            StructField("n", StringType()),  # the feed's n is bigint
            StructField("zz", LongType()),  # no such column
            *META[:2],  # no _commit_timestamp
        ]
    )
    with pytest.raises(SchemaMismatch) as err:
        stream_reader(_options(table), given)
    msg = str(err.value)
    assert isinstance(err.value, CdcSinkError)
    assert "'_commit_timestamp' is missing" in msg
    assert "'zz' is not in the change feed" in msg
    assert "'n' is string, the feed's is bigint" in msg
    assert "'s' is declared not null, the feed's is nullable" in msg
    listed = msg.split("): ", 1)[1].split(". The change feed's schema")[0]
    assert len(listed.split("; ")) == 4  # the fields that agree are not named


def test_fields_out_of_order_or_a_columns_option_it_contradicts_are_refused(
    table: Table,
) -> None:
    swapped = StructType([*_schema(StructField("n", LongType())).fields][::-1])
    with pytest.raises(SchemaMismatch, match="in another order"):
        stream_reader(_options(table), swapped)
    with pytest.raises(SchemaMismatch, match="'s' is missing"):
        stream_reader(_options(table, columns="s,n"), _schema(StructField("n", LongType())))
