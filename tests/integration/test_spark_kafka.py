"""Spark's own Kafka source (spark-sql-kafka from Maven Central) reads a real broker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cdc_sink_testkit.kafka import KafkaHandle

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.spark]

SCHEMA = "id BIGINT, op STRING, name STRING"


def _produce(bootstrap: str, topic: str, ids: range) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in ids:
        row = {"id": i, "op": "u" if i % 3 else "c", "name": f"n{i}"}
        producer.produce(topic, key=str(i % 11).encode(), value=json.dumps(row).encode())
        producer.poll(0)
    assert producer.flush(30) == 0


def test_structured_streaming_foreach_batch(
    kafka: KafkaHandle, spark: SparkSession, topic_name: str, tmp_path: Path
) -> None:
    from pyspark.sql import functions as F

    kafka.create_topic(topic_name, partitions=2)
    _produce(kafka.bootstrap_servers, topic_name, range(300))

    batches: list[int] = []
    rows: list[dict[str, Any]] = []

    def collect(df: DataFrame, batch_id: int) -> None:
        batches.append(batch_id)
        rows.extend(r.asDict() for r in df.collect())

    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", topic_name)
        .option("startingOffsets", "earliest")
        .load()
        .select(
            F.col("partition"),
            F.col("offset"),
            F.from_json(F.col("value").cast("string"), SCHEMA).alias("r"),
        )
        .select("partition", "offset", "r.*")
    )
    query = (
        stream.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        query.processAllAvailable()
        assert sorted(r["id"] for r in rows) == list(range(300))
        assert {r["op"] for r in rows} == {"c", "u"}
        assert all(r["name"] == f"n{r['id']}" for r in rows)

        # More data while the query runs: the next processAllAvailable() sees it.
        _produce(kafka.bootstrap_servers, topic_name, range(300, 450))
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    assert sorted(r["id"] for r in rows) == list(range(450))
    assert len(batches) >= 2
    for p in (0, 1):  # within a partition, offsets arrive in order without gaps
        offsets = [r["offset"] for r in rows if r["partition"] == p]
        assert offsets == list(range(len(offsets)))


def test_batch_read(kafka: KafkaHandle, spark: SparkSession, topic_name: str) -> None:
    from pyspark.sql import functions as F

    kafka.create_topic(topic_name, partitions=3)
    _produce(kafka.bootstrap_servers, topic_name, range(200))

    df = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", topic_name)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
        .select(
            F.col("key").cast("string").alias("k"),
            F.from_json(F.col("value").cast("string"), SCHEMA).alias("r"),
        )
    )
    got = df.select("k", "r.id").collect()
    assert sorted(r["id"] for r in got) == list(range(200))
    assert all(r["k"] == str(r["id"] % 11) for r in got)
    per_partition = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", topic_name)
        .load()
        .groupBy("partition")
        .count()
        .collect()
    )
    assert sum(r["count"] for r in per_partition) == 200
