"""The streaming queries of the integration tests: a Kafka topic read from its earliest
offset into a ``foreachBatch`` function (the sink), with a checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["kafka_stream", "start_sink_query"]


def kafka_stream(spark: Any, bootstrap: str, topic: str, *, max_offsets: int | None = None) -> Any:
    """Spark's Kafka source on ``topic`` from its earliest offset (at most
    ``max_offsets`` records per micro-batch when given)."""
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    if max_offsets is not None:
        reader = reader.option("maxOffsetsPerTrigger", max_offsets)
    return reader.load()


def start_sink_query(
    spark: Any,
    bootstrap: str,
    topic: str,
    fn: Any,
    ckpt: Path,
    *,
    max_offsets: int | None = None,
) -> Any:
    """The started query of ``topic`` into ``fn`` (``foreachBatch``), checkpointed in
    ``ckpt``."""
    df = kafka_stream(spark, bootstrap, topic, max_offsets=max_offsets)
    return df.writeStream.foreachBatch(fn).option("checkpointLocation", str(ckpt)).start()
