"""The Kafka source every streaming benchmark reads: a topic from its earliest offset,
``maxOffsetsPerTrigger`` records per micro-batch.

PySpark only (no cdc_sink import), so the Delta worker, which runs in its own
virtualenv, shares it with the benchmarks that run in the project's: ``e2e.py``,
``e2e_ceiling.py`` and ``metrics_overhead.py`` (through ``e2e``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["earliest_stream"]


def earliest_stream(
    spark: Any, bootstrap: str, topics: str, max_per_trigger: int, min_partitions: int = 0
) -> Any:
    """The streaming DataFrame of Kafka ``topics`` (comma-separated) from earliest; with
    ``min_partitions``, the source's ``minPartitions`` (more, smaller read tasks)."""
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topics)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", max_per_trigger)
    )
    if min_partitions:
        reader = reader.option("minPartitions", min_partitions)
    return reader.load()
