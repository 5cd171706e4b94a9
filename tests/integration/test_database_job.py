"""``cdc-sink run --table-root`` (issue 48): the streaming job writing a whole database,
started as a subprocess on a real Kafka.

The test kit's inventory database (:func:`cdc_sink_testkit.inventory.inventory_stream`,
MySQL flavor, JsonConverter with schemas: nine tables, one of them without a primary
key and one created mid-stream, columns added and widened while the stream runs,
tombstones) goes to one topic per table, with its transaction-metadata and heartbeat
topics (the job subscribes to them too: their records are no tables' and no errors),
then one record that names no table (no ``source`` block). One ``available-now``
run of the job subscribed by pattern, in executors mode (the records routed and the
tables prepared in Spark tasks), must leave every table equal to the stream's
reference model, and the record naming no table in the dead letters exactly once, with
its topic, partition and offset.
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from collections import Counter
from pathlib import Path

import pytest

from cdc_sink.kafka.deadletter import ParquetDeadLetter
from cdc_sink.kafka.producer import RawProducer
from cdc_sink.spark.database import UNROUTED, table_path
from cdc_sink.table import open_table
from cdc_sink_testkit.inventory import InventoryStream, inventory_stream
from cdc_sink_testkit.kafka import KafkaHandle
from tests.integration.streams import cdc_sink_command, job_process_env

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.spark]

EVENTS = 1200


def produce_stream(
    kafka: KafkaHandle, stream: InventoryStream, malformed: bytes
) -> tuple[str, int]:
    """Produces the stream's messages in order (one partition per topic), then
    ``malformed`` on the customers topic; the malformed record's (topic, offset)."""
    for topic in stream.topics():
        kafka.create_topic(topic, 1)
    topic = stream.tables[stream.qualified("customers")]
    with RawProducer(kafka.bootstrap_servers) as producer:
        stream.produce(producer)
        producer.produce(topic, None, malformed, partition=0)
        assert producer.flush(60) == 0
    return topic, sum(1 for m in stream.messages() if m.topic == topic)


def test_cdc_sink_run_writes_every_table_of_a_database_exactly(
    kafka: KafkaHandle, tmp_path: Path
) -> None:
    prefix = f"db{uuid.uuid4().hex[:8]}"
    stream = inventory_stream("mysql", "json", seed=48, events=EVENTS, topic_prefix=prefix)
    assert len(stream.tables) >= 6
    no_source = json.dumps({"payload": {"op": "c", "after": {"id": 1}}}).encode()
    bad_topic, bad_offset = produce_stream(kafka, stream, no_source)
    assert f"__debezium-heartbeat.{prefix}" in {m.topic for m in stream.messages()}

    root = tmp_path / "inventory"
    dlq = tmp_path / "dlq"
    pattern = rf"{re.escape(prefix)}\.(inventory\..*|transaction)|__debezium-heartbeat\.{prefix}"
    key_columns = ",".join(stream.no_key_columns)
    done = subprocess.run(
        [
            cdc_sink_command(),
            "run",
            "--bootstrap-servers",
            kafka.bootstrap_servers,
            "--subscribe-pattern",
            pattern,
            "--table-root",
            str(root),
            "--format",
            "debezium",
            "--key-columns",
            f"{stream.no_key_table}={key_columns}",
            "--default-buckets",
            "2",
            "--checkpoint",
            str(tmp_path / "checkpoint"),
            "--dead-letter",
            f"file://{dlq}",
            "--trigger",
            "available-now",
            "--max-offsets-per-trigger",
            "700",
            "--apply-mode",
            "executors",  # routed and prepared in Spark tasks (driver mode: the inventory test)
            "--master",
            "local[2]",
            "--spark-log-level",
            "ERROR",
        ],
        env=job_process_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]

    expected = stream.reference()
    assert set(expected) == set(stream.tables)
    for name, ref in expected.items():
        table = open_table(table_path(str(root), name))
        keys = list(stream.key_columns(name))
        got = table.read().select(ref.column_names).sort_by([(k, "ascending") for k in keys])
        assert got.to_pylist() == ref.to_pylist(), name
        batches = Counter(
            (v["app_id"], v["batch_id"]) for v in table.versions() if v.get("batch_id") is not None
        )
        assert all(n == 1 for n in batches.values()), (name, batches)
        assert table.rejects().num_rows == 0, name

    letters = ParquetDeadLetter(dlq).read(deduplicate=False)
    assert letters.num_rows == 1, letters.to_pylist()
    letter = letters.to_pylist()[0]
    assert (letter["topic"], letter["partition"], letter["offset"]) == (bad_topic, 0, bad_offset)
    assert letter["value"] == no_source
    assert "source" in letter["reason"]
    unrouted = open_table(table_path(str(root), UNROUTED))
    assert unrouted.read().num_rows == 0
    assert "database batch" in done.stderr
