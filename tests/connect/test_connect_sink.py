"""The streaming sink through a real Spark Connect server: Kafka -> ``foreachBatch(sink)``
-> table, in both apply modes. The client pickles the sink; the server runs each batch in
its own ``foreachBatch`` Python worker, where the sink opens the table, and every
DataFrame there is a Connect DataFrame (no JVM)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from cdc_sink import open_table
from cdc_sink.spark import DecodeOptions, SinkOptions, sink
from tests.integration.streams import start_sink_query
from tests.integration.test_sink import SCHEMA, expected, is_malformed, make_events, produce
from tests.model import table_to_rows

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka]


@pytest.mark.parametrize("apply_mode", ["driver", "executors"])
def test_stream_through_connect_equals_the_model(
    connect_spark: Any, kafka: Any, topic_name: str, tmp_path: Path, apply_mode: str
) -> None:
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    assert isinstance(connect_spark, ConnectSession)
    kafka.create_topic(topic_name, 3)
    rng = random.Random(40)
    phase1 = make_events(rng, 900, 1, range(150))
    phase2 = make_events(rng, 600, 10_000, range(150))
    path = str(tmp_path / "orders")
    fn = sink(path, schema=SCHEMA, options=SinkOptions(app_id="connect-job", apply_mode=apply_mode))
    ckpt = tmp_path / "ckpt"

    produce(kafka.bootstrap_servers, topic_name, phase1)
    q = start_sink_query(
        connect_spark, kafka.bootstrap_servers, topic_name, fn, ckpt, max_offsets=300
    )
    q.processAllAvailable()
    v1 = open_table(path).version
    produce(kafka.bootstrap_servers, topic_name, phase2)
    q.processAllAvailable()
    q.stop()

    table = open_table(path)
    assert v1 >= 3  # maxOffsetsPerTrigger split the backlog into several versions
    assert table_to_rows(table.read(version=v1), ["order_id"]) == expected(phase1)
    assert table_to_rows(table.read(), ["order_id"]) == expected(phase1 + phase2)
    rejects = [  # every version's, with their raw bytes (a join in Spark)
        r for v in range(1, table.version + 1) for r in table.rejects(v).to_pylist()
    ]
    assert sum("missing key" not in r["reason"] for r in rejects) == sum(
        map(is_malformed, phase1 + phase2)
    )
    assert all(r["topic"] == topic_name and r["value"] for r in rejects)
    batch_ids = [v["batch_id"] for v in table.versions() if v["app_id"] == "connect-job"]
    assert batch_ids == sorted(set(batch_ids))  # every micro-batch exactly once
    assert len(fn.stats) == 0  # the batches ran in the server's worker, not in this process


def test_every_decode_path_through_connect_builds_the_model(
    connect_spark: Any, kafka: Any, topic_name: str, tmp_path: Path
) -> None:
    """Each place the sink can decode, under Connect: Spark's ``from_json`` (the JVM's
    decoder, reached through the plan), Spark tasks (``decode_in="executors"``) and the
    driver's decode workers (``decode_processes``)."""
    kafka.create_topic(topic_name, 2)
    events = make_events(random.Random(41), 800, 1, range(120))
    produce(kafka.bootstrap_servers, topic_name, events)
    variants: dict[str, DecodeOptions] = {
        "jvm-json": DecodeOptions(json_decoder="jvm"),
        "decode-in-tasks": DecodeOptions(where="executors"),
        "decode-workers": DecodeOptions(processes=2),
    }
    for name, decode in variants.items():
        path = str(tmp_path / name)
        fn = sink(path, schema=SCHEMA, options=SinkOptions(app_id=name, decode=decode))
        q = start_sink_query(
            connect_spark,
            kafka.bootstrap_servers,
            topic_name,
            fn,
            tmp_path / f"{name}.ckpt",
            max_offsets=400,
        )
        q.processAllAvailable()
        q.stop()
        table = open_table(path)
        assert table_to_rows(table.read(), ["order_id"]) == expected(events), name
