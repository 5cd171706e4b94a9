"""Debezium's inventory database, whole, through a real Kafka broker and real Spark:
PostgreSQL-shaped events as Avro through the session's schema registry in driver mode
(MySQL-shaped JSON in executors mode: test_database_job.py, through ``cdc-sink run``)
(:mod:`cdc_sink_testkit.inventory`: the tutorial's tables and rows, a composite key,
decimals and timestamps, a table without a primary key, heartbeats, transaction
metadata, tombstones, a table created mid-stream, a column added mid-stream and another
``NOT NULL DEFAULT 0``, a widening int32 -> int64 with a value beyond int32, a truncate
(PostgreSQL), and a type change the table cannot take).

One query reads every topic (``subscribePattern``) into ``database_sink``, several
micro-batches. Every table, at every version it committed, equals the generator's
reference after the messages its log entry's Kafka offsets say it had read; the table
with the refused change stops there, and its later change events are dead letters,
exactly once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cdc_sink import open_table
from cdc_sink.kafka.deadletter import ParquetDeadLetter
from cdc_sink.spark import DatabaseOptions, DecodeOptions, SinkOptions, database_sink
from cdc_sink_testkit.demo.database import start_database_query, stream_pattern
from cdc_sink_testkit.inventory import InventoryStream, KafkaRecordProducer, inventory_stream

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka]


def _sorted(t: pa.Table, keys: list[str]) -> list[dict[str, Any]]:
    return t.sort_by([(k, "ascending") for k in keys]).to_pylist()


def _check_every_version(s: InventoryStream, root: Path) -> int:
    """Every committed data version of every table against the reference; how many."""
    msgs = s.messages()
    at: dict[str, list[int]] = {}
    for i, m in enumerate(msgs):
        at.setdefault(m.topic, []).append(i)
    checked = 0
    for name, topic in s.tables.items():
        t = open_table(str(root / name))
        keys = list(t.schema.primary_key)
        for v in t.versions():
            if v["batch_id"] is None:
                continue
            offsets = t.log.read(v["version"]).source_offsets.get(topic, {})
            read = int(offsets.get("0", 0))
            n = at[topic][read - 1] + 1 if read else 0
            want = s.reference_at(n).get(name)
            got = t.read(version=v["version"])
            expected = [] if want is None else _sorted(want, keys)
            got_rows = _sorted(got.select(want.column_names) if want is not None else got, keys)
            assert got_rows == expected, (name, v["version"], n)
            checked += 1
    return checked


@pytest.mark.parametrize(
    ("flavor", "encoding", "mode"),
    # MySQL JSON in executors mode runs through `cdc-sink run` (test_database_job.py)
    [("postgres", "avro", "driver")],
)
def test_the_inventory_database_in_one_job(
    spark: Any,
    kafka: Any,
    schema_registry: Any,
    tmp_path: Path,
    topic_name: str,
    flavor: str,
    encoding: str,
    mode: str,
) -> None:
    prefix = "db_" + topic_name[-8:]
    s = inventory_stream(
        flavor,  # type: ignore[arg-type]
        encoding,  # type: ignore[arg-type]
        seed=11,
        events=300,
        registry=schema_registry if encoding == "avro" else None,
        topic_prefix=prefix,
        refused_change=True,
    )
    for topic in s.topics():
        kafka.create_topic(topic, partitions=1)
    s.produce(KafkaRecordProducer(kafka.bootstrap_servers))
    options = {"registry_url": schema_registry.url} if encoding == "avro" else {}
    dlq = ParquetDeadLetter(tmp_path / "dlq")
    root = tmp_path / "root"
    fn = database_sink(
        DatabaseOptions(str(root), num_buckets=2, key_columns={s.no_key_table: s.no_key_columns}),
        options=SinkOptions(
            format="debezium" if encoding == "json" else "debezium-avro",
            apply_mode=mode,  # type: ignore[arg-type]
            app_id=f"inventory-{flavor}",
            decode=DecodeOptions(options=options),
        ),
        dead_letter=dlq,
    )
    query = start_database_query(
        spark, kafka.bootstrap_servers, stream_pattern(s), fn, tmp_path / "ckpt", 400
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert len(fn.stats) >= 2
    assert sum(st.ignored.get("transaction", 0) for st in fn.stats) > 0
    assert _check_every_version(s, root) > len(s.tables)
    refused_topic = s.tables[s.refused_table]
    assert s.refused_from is not None
    later = [
        m.value
        for m in s.messages()[s.refused_from :]
        if m.topic == refused_topic and m.value is not None
    ]
    dead = [bytes(r["value"]) for r in dlq.read(deduplicate=False).to_pylist()]
    assert sorted(dead) == sorted(later)
