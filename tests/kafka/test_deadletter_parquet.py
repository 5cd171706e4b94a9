"""Unit tests of the dead-letter sinks that need no broker (Parquet, URIs, pickling)."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cdc_sink.kafka.deadletter import (
    DEAD_LETTER_SCHEMA,
    KafkaDeadLetter,
    ParquetDeadLetter,
    dedupe,
    from_uri,
    records_from_rows,
)


def _rows(
    batch_id: int, offsets: list[int], *, partition: int = 0, reason: str = "bad"
) -> list[dict[str, Any]]:
    return [
        {
            "topic": "orders",
            "partition": partition,
            "offset": o,
            "key": b"[%d]" % o,
            "value": b"{not json",
            "reason": reason,
            "batch_id": batch_id,
            "app_id": "job",
        }
        for o in offsets
    ]


def test_schema_matches_the_sink_contract() -> None:
    from cdc_sink.spark.writer import DEAD_LETTER_SCHEMA as SINK_SCHEMA

    assert DEAD_LETTER_SCHEMA.equals(SINK_SCHEMA)


def test_parquet_write_then_read_round_trips(tmp_path: Path) -> None:
    sink = ParquetDeadLetter(tmp_path / "dlq")
    sink.write(records_from_rows(_rows(3, [10, 11])))
    got = sink.read()
    assert got.schema.equals(DEAD_LETTER_SCHEMA)
    assert got.to_pylist() == _rows(3, [10, 11])


def test_one_file_per_batch_id_per_attempt(tmp_path: Path) -> None:
    sink = ParquetDeadLetter(tmp_path)
    sink.write(records_from_rows(_rows(1, [1]) + _rows(2, [2, 3])))
    sink.write(records_from_rows(_rows(1, [1])))  # batch 1 replayed: a second attempt
    names = [p.name for p in sink.files()]
    assert len(names) == 3
    assert sum(n.startswith("batch-000000000001-") for n in names) == 2
    assert sum(n.startswith("batch-000000000002-") for n in names) == 1
    assert {pq.read_table(p).num_rows for p in sink.files()} == {1, 2}


def test_replayed_batches_are_read_once_with_dedupe(tmp_path: Path) -> None:
    sink = ParquetDeadLetter(tmp_path)
    sink.write(records_from_rows(_rows(1, [1, 2])))
    sink.write(records_from_rows(_rows(1, [1, 2], reason="again")))
    assert sink.read(deduplicate=False).num_rows == 4
    got = sink.read()
    assert got.column("offset").to_pylist() == [1, 2]
    assert set(got.column("reason").to_pylist()) == {"bad"}


def test_dedupe_keys_on_topic_partition_offset_and_keeps_order() -> None:
    rows = _rows(1, [5, 3]) + _rows(1, [5], partition=1) + _rows(2, [3])
    got = dedupe(records_from_rows(rows))
    assert [(r["partition"], r["offset"]) for r in got.to_pylist()] == [(0, 5), (0, 3), (1, 5)]


def test_no_file_for_no_records_and_no_temporary_files_left(tmp_path: Path) -> None:
    sink = ParquetDeadLetter(tmp_path / "d")
    sink.write(DEAD_LETTER_SCHEMA.empty_table())
    assert sink.files() == []
    assert sink.read().num_rows == 0
    sink.write(records_from_rows(_rows(9, [1])))
    assert [n for n in os.listdir(tmp_path / "d") if n.startswith(".tmp")] == []


def test_a_failed_write_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sink = ParquetDeadLetter(tmp_path)

    def boom(*_a: Any, **_k: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", boom)
    with pytest.raises(OSError, match="disk full"):
        sink.write(records_from_rows(_rows(1, [1])))
    assert os.listdir(tmp_path) == []


def test_records_are_cast_to_the_schema(tmp_path: Path) -> None:
    t = pa.table(
        {
            "topic": ["t"],
            "partition": pa.array([1], pa.int64()),
            "offset": [7],
            "key": pa.array([None], pa.binary()),
            "value": [b"x"],
            "reason": ["r"],
            "batch_id": [4],
            "app_id": ["a"],
            "extra": [1],
        }
    )
    sink = ParquetDeadLetter(tmp_path)
    sink.write(t)
    got = sink.read()
    assert got.schema.equals(DEAD_LETTER_SCHEMA)
    assert got.column("partition").to_pylist() == [1]


def test_missing_columns_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"lack column\(s\) \['partition', 'offset'"):
        ParquetDeadLetter(tmp_path).write(pa.table({"topic": ["t"]}))


@pytest.mark.parametrize(
    ("uri", "kind", "where"),
    [
        ("kafka://127.0.0.1:9092/orders.dlq", KafkaDeadLetter, ("127.0.0.1:9092", "orders.dlq")),
        ("kafka://a:1,b:2/dlq", KafkaDeadLetter, ("a:1,b:2", "dlq")),
        ("file:///tmp/dlq", ParquetDeadLetter, "/tmp/dlq"),
        ("/var/dlq", ParquetDeadLetter, "/var/dlq"),
        ("relative/dlq", ParquetDeadLetter, "relative/dlq"),
    ],
)
def test_from_uri(uri: str, kind: type, where: Any) -> None:
    sink = from_uri(uri)
    assert isinstance(sink, kind)
    if isinstance(sink, KafkaDeadLetter):
        assert (sink.bootstrap_servers, sink.topic) == where
    else:
        assert isinstance(sink, ParquetDeadLetter)
        assert str(sink.path) == where


@pytest.mark.parametrize(
    "uri",
    [
        "kafka://host:1",
        "kafka:///topic",
        "s3://bucket/dlq",
        "file://otherhost/dlq",
        "kafka://h:1/a/b",
    ],
)
def test_from_uri_refuses(uri: str) -> None:
    with pytest.raises(ValueError, match="dead-letter URI"):
        from_uri(uri)


def test_sinks_pickle_without_a_client() -> None:
    k = KafkaDeadLetter("127.0.0.1:9", "dlq", timeout=5.0)
    k2 = pickle.loads(pickle.dumps(k))
    assert (k2.bootstrap_servers, k2.topic, k2.timeout) == ("127.0.0.1:9", "dlq", 5.0)
    p = pickle.loads(pickle.dumps(ParquetDeadLetter("/x")))
    assert str(p.path) == "/x"
