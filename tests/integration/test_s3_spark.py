"""Spark on a table named by an ``s3://`` URL (issue 39, step 7), on the session's real
S3 server (SeaweedFS) and Kafka broker: the streaming sink in both apply modes, with its
``storage_options`` in :class:`~cdc_sink.spark.options.SinkOptions` (executors mode opens
the table in the executors' Python workers), and ``format("cdc_sink")`` reads of every
committed version (``versionAsOf``) with the options as ``storage.*`` reader options."""

from __future__ import annotations

import random
import uuid
from pathlib import Path
from typing import Any

import pytest

from cdc_sink import open_table
from cdc_sink.spark import register, sink
from cdc_sink.spark.options import ApplyMode, SinkOptions
from cdc_sink_testkit.s3 import SeaweedS3
from tests.integration.streams import start_sink_query
from tests.integration.test_sink import SCHEMA, expected, make_events, produce
from tests.model import table_to_rows

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka]


def _read_version(spark: Any, url: str, storage: dict[str, str], version: int) -> Any:
    """Version ``version`` of the table at ``url`` through ``format("cdc_sink")``, as Arrow."""
    reader = spark.read.format("cdc_sink").option("versionAsOf", version)
    for key, value in storage.items():
        reader = reader.option(f"storage.{key}", value)
    return reader.load(url).toArrow()


@pytest.mark.parametrize("apply_mode", ["driver", "executors"])
def test_stream_onto_s3_equals_the_model_at_every_committed_version(
    spark: Any,
    kafka: Any,
    topic_name: str,
    tmp_path: Path,
    s3_server: SeaweedS3,
    apply_mode: ApplyMode,
) -> None:
    kafka.create_topic(topic_name, 1)  # one partition: version v holds the first end offsets
    events = make_events(random.Random(39), 700, 1, range(120))
    produce(kafka.bootstrap_servers, topic_name, events)
    url = s3_server.url(f"spark-{uuid.uuid4().hex}/orders")
    storage = s3_server.storage_options()
    opts = SinkOptions(app_id="s3-sink", apply_mode=apply_mode, storage_options=storage)
    fn = sink(url, schema=SCHEMA, options=opts)
    assert storage["secret_access_key"] not in repr(fn.options)  # reprs end up in logs

    q = start_sink_query(
        spark, kafka.bootstrap_servers, topic_name, fn, tmp_path / "ckpt", max_offsets=250
    )
    q.processAllAvailable()
    q.stop()

    table = open_table(url, storage_options=storage)  # a fresh reader of the bucket
    assert table.root == url
    data = [v for v in range(1, table.version + 1) if table.log.read(v).kind == "data"]
    assert len(data) >= 3  # maxOffsetsPerTrigger split the backlog into several versions
    assert table.log.read(data[-1]).source_offsets[topic_name] == {"0": len(events)}
    register(spark)
    for v in data:
        end = table.log.read(v).source_offsets[topic_name]["0"]
        want = expected(events[:end])
        assert table_to_rows(_read_version(spark, url, storage, v), ["order_id"]) == want, v
    if apply_mode == "executors":  # the buckets were prepared in the executors' workers
        assert sorted(fn.bucket_figures) == list(range(SCHEMA.num_buckets))
