"""The driver mode's streaming collect (``cdc_sink.spark._arrow_stream``) against Spark's
own ``toArrow()``: same rows in the same order, each batch handed over as it arrives,
the job's errors raised, and empty results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

from cdc_sink.spark._arrow_stream import collect_arrow
from tests.fixtures import ID_V

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _frame(spark: SparkSession, rows: int, partitions: int) -> DataFrame:
    from pyspark.sql import functions as F

    # Partitions of different sizes finish in any order; the rows' order is the
    # partitions' order.
    return (
        spark.range(rows, numPartitions=partitions)
        .withColumn("value", F.concat(F.lit("v"), F.col("id").cast("string")).cast("binary"))
        .withColumn("part", F.spark_partition_id())
    )


def test_same_rows_in_the_same_order_as_to_arrow(spark: SparkSession) -> None:
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
    try:
        df = _frame(spark, 25_000, 7)
        seen: list[int] = []

        def count(rb: pa.RecordBatch) -> int:
            n: int = rb.num_rows
            seen.append(n)
            return n

        got = collect_arrow(df, count)
        expected = df.toArrow()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert got is not None
    table = got.table()
    assert table.equals(expected.cast(table.schema))
    # One call per batch, as it arrived; the results come back in row order.
    assert sorted(seen) == sorted(got.results)
    assert got.results == [b.num_rows for b in got.batches]
    assert len(got.batches) >= 25  # 1,000 rows per batch at most
    assert all(b.num_rows <= 1000 for b in got.batches)


def test_a_failing_job_raises_and_a_failing_callback_raises(spark: SparkSession) -> None:
    from pyspark.sql import functions as F

    bad = spark.range(100, numPartitions=2).select(
        F.raise_error(F.lit("boom in a task")).alias("x")
    )
    with pytest.raises(Exception, match="boom in a task"):
        collect_arrow(bad, lambda rb: rb.num_rows)

    def refuse(rb: pa.RecordBatch) -> int:
        raise ValueError("callback refused")

    with pytest.raises(ValueError, match="callback refused"):
        collect_arrow(_frame(spark, 1000, 2), refuse)
    # Also while the JVM is still writing (its write then fails: not the error raised).
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
    try:
        with pytest.raises(ValueError, match="callback refused"):
            collect_arrow(_frame(spark, 400_000, 4), refuse)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    # The session is still usable afterwards.
    assert spark.range(10).count() == 10


def test_an_empty_frame_gives_no_batches_and_its_schema(spark: SparkSession) -> None:
    df = _frame(spark, 100, 2).where("id < 0")
    got = collect_arrow(df, lambda rb: rb.num_rows)
    assert got is not None
    assert got.batches == [] and got.results == []
    assert got.table().num_rows == 0
    assert got.schema.names == ["id", "value", "part"]


def _kafka_frame(spark: SparkSession, values: list[bytes], partitions: int) -> DataFrame:
    """A DataFrame shaped like Spark's Kafka source: record i is in partition
    ``i % partitions`` at offset ``i // partitions``; one Spark partition per Kafka one."""
    from datetime import datetime, timezone

    from pyspark.sql.types import (
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    schema = StructType(
        [
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("timestamp", TimestampType()),
        ]
    )
    ts = datetime(2026, 1, 1, tzinfo=timezone.utc)
    rows = [(None, v, "t", i % partitions, i // partitions, ts) for i, v in enumerate(values)]
    df = spark.createDataFrame(rows, schema)
    return df.repartitionByRange(partitions, "partition").sortWithinPartitions("offset")


@pytest.mark.parametrize("decode_processes", [0, 2])
def test_driver_mode_decodes_batch_by_batch_with_exact_rejects(
    spark: SparkSession, tmp_path: Path, decode_processes: int
) -> None:
    """Many small Arrow batches, each decoded on arrival (in the driver's thread, or in
    two decode worker processes): the table and the rejects (with their Kafka
    coordinates and raw bytes) are those of decoding all records at once."""
    from cdc_sink.spark import DecodeOptions, SinkOptions, sink

    values: list[bytes] = []
    for i in range(3_000):
        if i % 97 == 5:
            values.append(b'{"op":"upsert","key":{"id":' + str(i).encode() + b"}")  # cut off
        else:
            values.append(
                json.dumps({"op": "upsert", "key": {"id": i % 700}, "set": {"v": f"v{i}"}}).encode()
            )
    fn = sink(
        str(tmp_path / "t"),
        schema={**ID_V, "num_buckets": 3},
        options=SinkOptions(app_id="stream-test", decode=DecodeOptions(processes=decode_processes)),
    )
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "64")
    try:
        df = _kafka_frame(spark, values, 4)
        order = df.select("partition", "offset", "value").toArrow()  # the sink's row order
        fn(df, 0)
        assert (fn.decode_pool is not None and fn.decode_pool.running) == bool(decode_processes)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
        fn.close()  # stops the decode workers
    bad = {i for i in range(3_000) if i % 97 == 5}
    rejects = fn.table.rejects().sort_by([("partition", "ascending"), ("offset", "ascending")])
    got = list(zip(rejects["partition"].to_pylist(), rejects["offset"].to_pylist(), strict=True))
    assert got == sorted((i % 4, i // 4) for i in bad)
    assert rejects["value"].to_pylist() == [values[p + 4 * o] for p, o in got]
    # The table is the events applied in the sink's row order (partition by partition).
    model: dict[int, str] = {}
    for v in order.column("value").to_pylist():
        if v.endswith(b"}}"):  # the well-formed ones
            e = json.loads(v)
            model[e["key"]["id"]] = e["set"]["v"]
    rows = fn.table.read().to_pylist()
    assert {r["id"]: r["v"] for r in rows} == model and len(rows) == len(model)
