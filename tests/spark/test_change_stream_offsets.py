"""The change stream's offsets, without a Spark session: where a new query starts
(startingVersion n, latest, startingTimestamp, none), the end of a micro-batch under each
read limit and under Trigger.AvailableNow, the partitions of a range, and the options and
offsets it refuses."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles, ReadMaxRows

import cdc_sink
from cdc_sink import Table, TableOptions
from cdc_sink.errors import InvalidOption
from cdc_sink.spark.change_stream import (
    SNAPSHOT,
    ChangeStreamReader,
    estimated_records,
    stream_reader,
    stream_schema,
)
from tests.changefeed.stream_copy import SCHEMA, random_batch


@pytest.fixture
def table(tmp_path: Path) -> Table:
    t = cdc_sink.create_table(tmp_path / "t", SCHEMA, options=TableOptions.for_tests())
    rng, next_id = random.Random(1), 0
    for _ in range(8):
        events, next_id = random_batch(rng, next_id, rng.randrange(1, 10))
        t.apply(events)
    return t


def _reader(table: Table, **options: str) -> ChangeStreamReader:
    opts = {"path": table.root, "readChangeFeed": "true", **options}
    return stream_reader(opts, stream_schema(opts))


def test_where_a_new_query_starts(table: Table) -> None:
    versions = table.versions()
    third = versions[3]["commit_time_ms"]
    assert _reader(table, startingVersion="3").initialOffset() == {"version": 2}
    assert _reader(table, startingVersion="0").initialOffset() == {"version": 0}
    assert _reader(table, startingVersion="LATEST").initialOffset() == {"version": table.version}
    assert _reader(table, startingTimestamp=str(third)).initialOffset() == {
        "version": max(v["version"] for v in versions if v["commit_time_ms"] < third)
    }
    assert _reader(table).initialOffset() == {"version": SNAPSHOT}


def test_a_micro_batch_ends_at_the_latest_version_within_the_limits(table: Table) -> None:
    latest = table.version
    bounded = _reader(table, maxVersionsPerTrigger="3")
    assert bounded.getDefaultReadLimit() == ReadMaxFiles(3)
    assert bounded.latestOffset({"version": 1}, ReadMaxFiles(3)) == {"version": 4}
    assert bounded.latestOffset({"version": 1}, ReadAllAvailable()) == {"version": latest}
    assert bounded.latestOffset({"version": latest}, ReadMaxFiles(3)) == {"version": latest}
    assert bounded.latestOffset({"version": SNAPSHOT}, ReadMaxFiles(3)) == {"version": latest}
    assert _reader(table).getDefaultReadLimit() == ReadAllAvailable()


def test_max_rows_per_trigger_takes_whole_versions_within_the_estimate(table: Table) -> None:
    sizes = {e["version"]: estimated_records(e["stats"]) for e in table.versions()}
    limit = sizes[2] + sizes[3]
    r = _reader(table, maxRowsPerTrigger=str(limit))
    assert r.getDefaultReadLimit() == ReadMaxRows(limit)
    assert r.latestOffset({"version": 1}, ReadMaxRows(limit)) == {"version": 3}
    one = _reader(table, maxRowsPerTrigger="1")  # a version bigger than the limit: alone
    assert one.latestOffset({"version": 1}, ReadMaxRows(1)) == {"version": 2}


def test_available_now_stops_at_the_version_latest_when_it_started(table: Table) -> None:
    r = _reader(table)
    r.prepareForTriggerAvailableNow()
    target = table.version
    table.apply([{"op": "insert", "key": {"id": 10_000}, "set": {"n": 1}}])
    assert r.latestOffset({"version": 1}, ReadAllAvailable()) == {"version": target}
    assert r.reportLatestOffset() == {"version": target + 1}


def test_partitions_are_one_per_bucket_and_none_for_an_empty_range(table: Table) -> None:
    r = _reader(table, startingVersion="1")
    parts = r.partitions({"version": 2}, {"version": 5})
    assert [(p.start, p.end, p.bucket) for p in parts] == [(2, 5, b) for b in range(3)]
    assert r.partitions({"version": 5}, {"version": 5}) == []


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"readChangeFeed": "false"}, "readChangeFeed"),
        ({"endingVersion": "4"}, "endingVersion"),
        ({"maxVersionsPerTrigger": "0"}, "maxVersionsPerTrigger"),
        ({"maxRowsPerTrigger": "many"}, "maxRowsPerTrigger"),
    ],
)
def test_options_a_stream_refuses_name_the_option(
    table: Table, options: dict[str, str], named: str
) -> None:
    opts = {"path": table.root, "readChangeFeed": "true", **options}
    with pytest.raises(InvalidOption, match=named) as err:
        stream_reader(opts, stream_schema(opts))
    assert err.value.option == named


def test_an_offset_of_another_source_is_refused(table: Table) -> None:
    with pytest.raises(InvalidOption, match="no offset of a cdc_sink change stream"):
        _reader(table).latestOffset({"partition-0": 7}, ReadAllAvailable())
