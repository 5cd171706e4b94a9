"""The streaming sink with ``TableOptions(change_images=True)`` (issue 41), real Kafka and
Spark, in both apply modes: the pre-images are written where each bucket is prepared (the
driver, or the executors' Python workers), every data version's entry names them for
each bucket it touched, and a reader opened afresh gets every version's changes from them
(no page read, no bucket loaded), equal to the diff of the snapshots around it."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from cdc_sink import TableOptions, open_table
from cdc_sink.engine import TableCore
from cdc_sink.spark import sink
from cdc_sink.spark.options import ApplyMode, SinkOptions
from cdc_sink.storage.pages import PageReader
from tests.changefeed.diff import feed_records, reference_feed
from tests.integration.streams import start_sink_query
from tests.integration.test_sink import SCHEMA, make_events, produce

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka]


@pytest.mark.parametrize("apply_mode", ["driver", "executors"])
def test_the_sink_stores_pre_images_where_it_prepares_and_a_cold_reader_reads_from_them(
    spark: Any,
    kafka: Any,
    topic_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    apply_mode: ApplyMode,
) -> None:
    kafka.create_topic(topic_name, 1)
    events = make_events(random.Random(41), 600, 1, range(100))
    produce(kafka.bootstrap_servers, topic_name, events)
    path = str(tmp_path / "orders")
    opts = SinkOptions(
        app_id="images", apply_mode=apply_mode, table=TableOptions(change_images=True)
    )
    fn = sink(path, schema=SCHEMA, options=opts)
    q = start_sink_query(
        spark, kafka.bootstrap_servers, topic_name, fn, tmp_path / "ckpt", max_offsets=200
    )
    q.processAllAvailable()
    q.stop()
    if apply_mode == "executors":  # the buckets were prepared in the executors' workers
        assert sorted(fn.bucket_figures) == list(range(SCHEMA.num_buckets))

    table = open_table(path)
    data = [v for v in range(1, table.version + 1) if table.log.read(v).kind == "data"]
    assert len(data) >= 3  # maxOffsetsPerTrigger split the backlog into several versions
    for v in data:
        refs = table.log.read(v).buckets
        assert refs and all(r.segment and r.images for r in refs.values()), (v, refs)
    reads = {"pages": 0, "loads": 0}
    blob, load = PageReader.blob, TableCore.load_bucket

    def counting_blob(reader: PageReader, loc: Any) -> Any:
        reads["pages"] += 1
        return blob(reader, loc)

    def counting_load(state: TableCore, bucket: int, version: int) -> Any:
        reads["loads"] += 1
        return load(state, bucket, version)

    monkeypatch.setattr(PageReader, "blob", counting_blob)
    monkeypatch.setattr(TableCore, "load_bucket", counting_load)
    names = SCHEMA.names
    feeds = {v: feed_records(table.changes(v - 1, v), names) for v in data}
    assert reads == {"pages": 0, "loads": 0}
    for v, got in feeds.items():
        assert got and sorted(got, key=repr) == reference_feed(table, v - 1, v, names), v
