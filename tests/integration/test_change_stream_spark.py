"""``spark.readStream.format("cdc_sink").option("readChangeFeed", "true")`` against a live
local Spark: a query maintains a downstream copy while a writer commits, resumes from its
checkpoint with nothing lost or doubled (also after GC collected its startingVersion),
starts from the latest snapshot when given no startingVersion, honours
maxVersionsPerTrigger (also under Trigger.AvailableNow) and maxRowsPerTrigger, refuses a
stream without readChangeFeed, fails with the error naming the oldest readable version
when GC collected its range, gives setColumnsOnly records (the snapshot fully set, then
the written cells), fails naming the version that dropped one of its columns, and takes
a schema given to readStream only when it is the change feed's (for the columns it
names)."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import cdc_sink
import cdc_sink.spark
from cdc_sink import Table, TableOptions
from cdc_sink.spark.change_stream import estimated_records
from tests.changefeed.stream_copy import SCHEMA, apply_records, check_copy, random_batch

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _stream(spark: SparkSession, path: str, **options: Any) -> DataFrame:
    cdc_sink.spark.register(spark)
    reader = spark.readStream.format("cdc_sink").option("readChangeFeed", "true")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(path)


def _copying(
    spark: SparkSession, source: Table, copy: Table, checkpoint: Path, **options: Any
) -> StreamingQuery:
    def each(df: DataFrame, batch_id: int) -> None:
        apply_records(copy, df.toArrow(), batch_id)

    return (
        _stream(spark, source.root, **options)
        .writeStream.foreachBatch(each)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )


def _end_offset(q: StreamingQuery) -> int:
    progress = q.lastProgress
    assert progress is not None
    return int(json.loads(progress["sources"][0]["endOffset"])["version"])


def _commit(source: Table, rng: random.Random, next_id: int, versions: int) -> int:
    for _ in range(versions):
        events, next_id = random_batch(rng, next_id, size=rng.randrange(1, 12))
        source.apply(events)
    return next_id


@pytest.fixture
def tables(tmp_path: Path) -> tuple[Table, Table]:
    opts = TableOptions.for_tests()
    source = cdc_sink.create_table(tmp_path / "source", SCHEMA, options=opts)
    copy = cdc_sink.create_table(tmp_path / "copy", SCHEMA, options=opts)
    return source, copy


def test_stream_keeps_a_copy_while_the_writer_commits_and_resumes_exactly_once(
    spark: SparkSession, tables: tuple[Table, Table], tmp_path: Path
) -> None:
    source, copy = tables
    rng = random.Random(41)
    next_id = _commit(source, rng, 0, 3)
    checkpoint = tmp_path / "checkpoint"
    q = _copying(spark, source, copy, checkpoint, startingVersion=1, maxVersionsPerTrigger=4)
    writer = threading.Thread(target=_commit, args=(source, rng, next_id, 30))
    try:
        writer.start()
        writer.join()
        q.processAllAvailable()
        assert _end_offset(q) == source.version
    finally:
        q.stop()
    position = check_copy(source, copy, start=0)
    assert position == source.version
    before = copy.version

    _commit(source, random.Random(42), 10_000, 12)
    # GC collects startingVersion 1 (not the query's position): the restarted query
    # resumes from its checkpoint.
    source.compact()
    keep = source.version - position + 1
    source.gc(dry_run=False, retain_versions=keep, retain_seconds=0.0, orphan_grace_seconds=0.0)
    assert 1 < source.oldest_version <= position
    q = _copying(spark, source, copy, checkpoint, startingVersion=1, maxVersionsPerTrigger=4)
    try:
        q.processAllAvailable()
        top = _end_offset(q)
    finally:
        q.stop()
    assert copy.version > before
    assert check_copy(source, copy, start=0, top=top) == source.version


def test_stream_without_a_starting_version_starts_from_the_latest_snapshot(
    spark: SparkSession, tables: tuple[Table, Table], tmp_path: Path
) -> None:
    source, copy = tables
    rng = random.Random(7)
    next_id = _commit(source, rng, 0, 5)
    snapshot_version = source.version
    q = _copying(spark, source, copy, tmp_path / "checkpoint")
    try:
        q.processAllAvailable()
        _commit(source, rng, next_id, 4)
        q.processAllAvailable()
    finally:
        q.stop()
    first = copy.log.read(1).source_offsets["changefeed"]
    assert first == {str(snapshot_version): len(source.read(version=snapshot_version))}
    # the snapshot stands for every version up to it: the rest reached the copy once each
    assert check_copy(source, copy, start=snapshot_version) == source.version


def _batches_of(
    spark: SparkSession, source: Table, tmp_path: Path, available_now: bool = False, **options: Any
) -> list[list[int]]:
    """The source versions each micro-batch of a query over ``source`` held (the query
    run with ``processAllAvailable()``, or with ``Trigger.AvailableNow`` to its end)."""
    seen: list[list[int]] = []
    each: Callable[[DataFrame, int], None] = lambda df, _: seen.append(  # noqa: E731
        sorted({r[0] for r in df.select("_commit_version").collect()})
    )
    writer = (
        _stream(spark, source.root, startingVersion=1, **options)
        .writeStream.foreachBatch(each)
        .option("checkpointLocation", str(tmp_path / "bounded"))
    )
    q = (writer.trigger(availableNow=True) if available_now else writer).start()
    try:
        if available_now:
            q.awaitTermination()
        else:
            q.processAllAvailable()
    finally:
        q.stop()
    return seen


@pytest.mark.parametrize("available_now", [False, True], ids=["processing-time", "available-now"])
def test_max_versions_per_trigger_bounds_each_micro_batch(
    spark: SparkSession, tables: tuple[Table, Table], tmp_path: Path, available_now: bool
) -> None:
    """Under a processing-time trigger and under Trigger.AvailableNow (which keeps the
    limit and ends after the latest version)."""
    source, _ = tables
    _commit(source, random.Random(3 if not available_now else 4), 0, 7)
    seen = _batches_of(
        spark, source, tmp_path, available_now=available_now, maxVersionsPerTrigger=3
    )
    assert [v for b in seen for v in b] == list(range(1, source.version + 1))
    assert max(len(b) for b in seen) == 3


def test_max_rows_per_trigger_bounds_each_micro_batch_by_whole_versions(
    spark: SparkSession, tables: tuple[Table, Table], tmp_path: Path
) -> None:
    source, _ = tables
    _commit(source, random.Random(5), 0, 8)
    sizes = {e["version"]: estimated_records(e["stats"]) for e in source.versions()}
    limit = max(sizes.values())
    seen = _batches_of(spark, source, tmp_path, maxRowsPerTrigger=limit)
    assert [v for b in seen for v in b] == list(range(1, source.version + 1))
    assert all(sum(sizes[v] for v in b) <= limit for b in seen)
    assert len(seen) < source.version  # small versions share a micro-batch


def test_stream_without_read_change_feed_is_refused_naming_the_option(
    spark: SparkSession, tables: tuple[Table, Table], tmp_path: Path
) -> None:
    source, _ = tables
    cdc_sink.spark.register(spark)
    df = spark.readStream.format("cdc_sink").load(source.root)
    q = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "c")).start()
    try:
        with pytest.raises(Exception, match=r'option\("readChangeFeed", "true"\)'):
            q.processAllAvailable()
    finally:
        q.stop()


def test_stream_from_a_collected_version_names_the_oldest_readable_version(
    spark: SparkSession, tables: tuple[Table, Table], tmp_path: Path
) -> None:
    source, _ = tables
    _commit(source, random.Random(9), 0, 8)
    source.compact()
    source.gc(dry_run=False, retain_versions=2, retain_seconds=0.0, orphan_grace_seconds=0.0)
    oldest = source.oldest_version
    q = (
        _stream(spark, source.root, startingVersion=oldest)
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "c"))
        .start()
    )
    try:
        with pytest.raises(Exception, match=f"oldest readable version is {oldest}"):
            q.processAllAvailable()
    finally:
        q.stop()


def _collected(
    spark: SparkSession, source: Table, tmp_path: Path, **options: Any
) -> tuple[list[Any], StreamingQuery]:
    """A running query's micro-batches, each as Arrow (the query left running)."""
    batches: list[Any] = []
    q = (
        _stream(spark, source.root, **options)
        .writeStream.foreachBatch(lambda df, _: batches.append(df.toArrow()))
        .option("checkpointLocation", str(tmp_path / "collected"))
        .start()
    )
    return batches, q


def _rows_of(t: Any, names: list[str]) -> list[tuple[Any, ...]]:
    return sorted(zip(*(t.column(n).to_pylist() for n in names), strict=True), key=repr)


def test_set_columns_only_stream_gives_the_snapshot_fully_set_then_the_written_cells(
    spark: SparkSession, tables: tuple[Table, Table], tmp_path: Path
) -> None:
    source, _ = tables
    rng = random.Random(13)
    next_id = _commit(source, rng, 0, 3)
    at = source.version
    batches, q = _collected(spark, source, tmp_path, setColumnsOnly="true")
    try:
        q.processAllAvailable()
        _commit(source, rng, next_id, 3)
        q.processAllAvailable()
    finally:
        q.stop()
    snapshot, *changes = batches
    live = source.read(version=at)
    assert _rows_of(snapshot, ["id", "s", "n", "_set_s", "_set_n", "_change_type"]) == sorted(
        (
            (i, s, n, True, True, "insert")
            for i, s, n in zip(*(live.column(c).to_pylist() for c in ["id", "s", "n"]), strict=True)
        ),
        key=repr,
    )
    names = ["id", "s", "n", "_set_s", "_set_n", "_change_type", "_commit_version"]
    expected = source.changes(at, source.version, set_columns_only=True)
    got = sorted((r for b in changes for r in _rows_of(b, names)), key=repr)
    assert got == _rows_of(expected, names)


def test_a_column_dropped_under_a_running_stream_fails_it_naming_the_version(
    spark: SparkSession, tables: tuple[Table, Table], tmp_path: Path
) -> None:
    source, _ = tables
    _commit(source, random.Random(17), 0, 2)
    _, q = _collected(spark, source, tmp_path, startingVersion=1)
    try:
        q.processAllAvailable()
        dropped_at = source.drop_column("s")
        with pytest.raises(Exception, match=f"no column.*'s'.*at version {dropped_at}"):
            q.processAllAvailable()
    finally:
        q.stop()


_DDL = "id BIGINT, {} _change_type STRING, _commit_version BIGINT, _commit_timestamp TIMESTAMP"


def test_a_schema_given_to_read_stream_is_checked_against_the_change_feed(
    spark: SparkSession, tables: tuple[Table, Table], tmp_path: Path
) -> None:
    """One naming some of the feed's columns reads them; one whose field differs from the
    feed's fails the query's start naming the field."""
    source, _ = tables
    _commit(source, random.Random(21), 0, 2)
    cdc_sink.spark.register(spark)
    reader = spark.readStream.format("cdc_sink").option("readChangeFeed", "true")
    batches: list[Any] = []
    q = (
        reader.schema(_DDL.format("n BIGINT,"))
        .option("startingVersion", 1)
        .load(source.root)
        .writeStream.foreachBatch(lambda df, _: batches.append(df.toArrow()))
        .option("checkpointLocation", str(tmp_path / "good"))
        .start()
    )
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    names = ["id", "n", "_change_type", "_commit_version"]
    assert batches and all(b.column_names[:2] == ["id", "n"] for b in batches)
    got = sorted((r for b in batches for r in _rows_of(b, names)), key=repr)
    assert got == _rows_of(source.changes(0, source.version, columns=["n"]), names)
    bad = reader.schema(_DDL.format("n STRING,")).load(source.root)
    with pytest.raises(Exception, match="'n' is string, the feed's is bigint"):
        q = bad.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "bad"))
        q = q.start()
        try:
            q.processAllAvailable()
        finally:
            q.stop()
