"""The streaming queries of the integration tests: a Kafka topic read from its earliest
offset into a ``foreachBatch`` function (the sink), with a checkpoint; and the streaming
job's flags for the demo's orders stream."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "ORDERS_SCHEMA_FILE",
    "Orders",
    "cdc_sink_command",
    "job_process_env",
    "kafka_stream",
    "orders_job_args",
    "produce_orders",
    "start_sink_query",
]

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


@dataclass
class Orders:
    """The demo's orders stream put on a topic: its records and the table they make."""

    records: list[Any]
    expected: Any  # cdc_sink_testkit.demo.ExpectedTable

    @property
    def malformed(self) -> int:
        """How many records the sink must dead-letter."""
        return sum(r.malformed for r in self.records)

    def differences(self, rows: list[dict[str, Any]]) -> list[str]:
        """What ``rows`` (a table's) differ in from the expected state (empty: equal)."""
        from cdc_sink_testkit.demo import diff_rows, orders_schema

        return diff_rows(self.expected.snapshot(), rows, orders_schema())  # type: ignore[no-any-return]


def produce_orders(kafka: Any, topic: str, n: int, *, seed: int, partitions: int = 2) -> Orders:
    """Creates ``topic`` and produces the first ``n`` records of the orders stream of
    ``seed`` (malformed ones included) with the producer SDK; the records and the state
    the sink must reach."""
    from cdc_sink.kafka.producer import CdcProducer
    from cdc_sink_testkit.demo import ExpectedTable, generate_orders, orders_schema
    from cdc_sink_testkit.demo.stream import produce_records

    kafka.create_topic(topic, partitions)
    records = generate_orders(n, seed=seed)
    with CdcProducer(kafka.bootstrap_servers, topic, orders_schema()) as producer:
        produce_records(producer, records)
    expected = ExpectedTable(orders_schema())
    expected.apply_all(r.event if r.decodable else None for r in records)
    return Orders(list(records), expected)


def job_process_env(*drop: str) -> dict[str, str]:
    """This process's environment for a job started in a subprocess, without the
    settings the job reads (``PYSPARK_*``, ``SPARK_*``, ``CDC_SINK_*``) or ``drop``'s."""
    prefixes = ("PYSPARK_", "SPARK_", "CDC_SINK_", *drop)
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}


def cdc_sink_command() -> str:
    """The ``cdc-sink`` script of this interpreter's environment."""
    return str(Path(sys.executable).with_name("cdc-sink"))
