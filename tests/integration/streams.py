"""The streaming queries of the integration tests: a Kafka topic read from its earliest
offset into a ``foreachBatch`` function (the sink), with a checkpoint; and the streaming
job's flags for the demo's orders stream."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["ORDERS_SCHEMA_FILE", "kafka_stream", "orders_job_args", "start_sink_query"]

ORDERS_SCHEMA_FILE = Path(__file__).resolve().parents[2] / "streaming_jobs" / "orders_schema.json"


def orders_job_args(bootstrap: str, topic: str, workdir: Path, *extra: str) -> list[str]:
    """The streaming job's flags for the demo's orders stream on ``topic``: the table
    (``workdir/orders``, created from the orders schema file) and the checkpoint
    (``workdir/checkpoint``); then ``extra``."""
    return [
        "--bootstrap-servers",
        bootstrap,
        "--topic",
        topic,
        "--table-path",
        str(workdir / "orders"),
        "--schema-file",
        str(ORDERS_SCHEMA_FILE),
        "--checkpoint",
        str(workdir / "checkpoint"),
        *extra,
    ]


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
