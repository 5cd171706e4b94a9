"""The Kafka dead-letter sink against a real broker: round trip, headers, replays, errors."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from cdc_sink.errors import CdcSinkError
from cdc_sink.kafka.deadletter import (
    DEAD_LETTER_SCHEMA,
    HEADER_NAMES,
    KafkaDeadLetter,
    from_uri,
    records_from_rows,
)
from cdc_sink_testkit.kafka import KafkaHandle

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

BACKENDS = ["confluent", "kafka-python"]


def _rows(batch_id: int = 4) -> list[dict[str, Any]]:
    return [
        {
            "topic": "orders",
            "partition": 2,
            "offset": 17,
            "key": b"[100017]",
            "value": b'{"op":"update","key":{"order_id":100',
            "reason": "malformed event",
            "batch_id": batch_id,
            "app_id": "job-1",
        },
        {
            "topic": "orders",
            "partition": 0,
            "offset": 3,
            "key": None,
            "value": b"\x01\x7fnot a row",
            "reason": "unknown column 'coupon_code'",
            "batch_id": batch_id,
            "app_id": "job-1",
        },
        {
            "topic": "orders",
            "partition": 0,
            "offset": 4,
            "key": b"[5]",
            "value": None,
            "reason": "update of missing key",
            "batch_id": batch_id,
            "app_id": "job-1",
        },
    ]


def _raw_records(bootstrap: str, topic: str, n: int) -> list[Any]:
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    out: list[Any] = []
    try:
        for _ in range(120):
            out += [m for m in c.consume(n, timeout=0.5) if m.error() is None]
            if len(out) >= n:
                break
    finally:
        c.close()
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_dead_letters_round_trip_with_original_bytes_and_headers(
    kafka: KafkaHandle, topic_name: str, backend: str
) -> None:
    kafka.create_topic(topic_name, 1)
    dl = KafkaDeadLetter(kafka.bootstrap_servers, topic_name, backend=backend)  # type: ignore[arg-type]
    try:
        dl.write(records_from_rows(_rows()))
        got = dl.read()
    finally:
        dl.close()
    assert got.schema.equals(DEAD_LETTER_SCHEMA)
    assert got.to_pylist() == _rows()

    raw = _raw_records(kafka.bootstrap_servers, topic_name, 3)
    assert [m.key() for m in raw] == [r["key"] for r in _rows()]
    assert [m.value() for m in raw] == [r["value"] for r in _rows()]
    headers = dict(raw[0].headers())
    assert tuple(headers) == HEADER_NAMES
    assert headers == {
        "topic": b"orders",
        "partition": b"2",
        "offset": b"17",
        "reason": b"malformed event",
        "batch_id": b"4",
        "app_id": b"job-1",
    }


def test_replayed_batch_is_read_back_once(kafka: KafkaHandle, topic_name: str) -> None:
    kafka.create_topic(topic_name, 1)
    dl = KafkaDeadLetter(kafka.bootstrap_servers, topic_name)
    try:
        dl.write(records_from_rows(_rows()))
        dl.write(records_from_rows(_rows()))  # the batch was retried after a failure
        assert dl.read(deduplicate=False).num_rows == 6
        assert dl.read().to_pylist() == _rows()
    finally:
        dl.close()


def test_from_uri_builds_a_working_kafka_sink(kafka: KafkaHandle, topic_name: str) -> None:
    kafka.create_topic(topic_name, 1)
    dl = from_uri(f"kafka://{kafka.bootstrap_servers}/{topic_name}")
    assert isinstance(dl, KafkaDeadLetter)
    dl.write(records_from_rows(_rows()[:1]))
    dl.close()
    assert dl.read().num_rows == 1


def test_a_pickled_sink_opens_its_own_client(kafka: KafkaHandle, topic_name: str) -> None:
    kafka.create_topic(topic_name, 1)
    dl = KafkaDeadLetter(kafka.bootstrap_servers, topic_name)
    dl.write(records_from_rows(_rows(1)[:1]))
    copy = pickle.loads(pickle.dumps(dl))
    copy.write(records_from_rows(_rows(2)[1:2]))
    dl.close()
    copy.close()
    assert dl.read().column("batch_id").to_pylist() == [1, 2]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_missing_dead_letter_topic_is_created_at_the_first_write(
    kafka: KafkaHandle, topic_name: str, backend: str
) -> None:
    dl = KafkaDeadLetter(kafka.bootstrap_servers, topic_name, backend=backend, timeout=20.0)  # type: ignore[arg-type]
    try:
        dl.write(records_from_rows(_rows()[:1]))
        assert dl.read().column("offset").to_pylist() == [17]
    finally:
        dl.close()


def test_an_unreachable_cluster_fails_with_the_topic_named() -> None:
    dl = KafkaDeadLetter("127.0.0.1:1", "orders.dead-letter", timeout=3.0)
    with pytest.raises(CdcSinkError, match=r"orders\.dead-letter"):
        dl.write(records_from_rows(_rows()[:1]))
    dl.close()


# -- exactly once: forwarded from the table's durable rejects -----------------------------

_SCHEMA = {
    "columns": [
        {"name": "id", "type": "int64", "nullable": False},
        {"name": "a", "type": "string"},
    ],
    "primary_key": ["id"],
    "num_buckets": 2,
}
_BAD = [
    {"op": "update", "key": {"id": 2}, "set": {"a": "y"}},
    {"op": "insert", "key": {"id": 3}, "set": {"zz": 1}},
]


def _table_with_rejects(tmp_path: Any, batches: int) -> Any:
    import pyarrow as pa

    from cdc_sink.table import TableOptions, create_table

    t = create_table(tmp_path / "t", _SCHEMA, options=TableOptions.for_tests())
    for b in range(batches):
        src = pa.table(
            {
                "topic": ["orders"] * 2,
                "partition": pa.array([0, 0], pa.int32()),
                "offset": pa.array([10 * b, 10 * b + 1], pa.int64()),
                "key": [b"k", b"k"],
                "value": [b"v%d" % b, b"w%d" % b],
            }
        )
        t.apply(_BAD, app_id="job", batch_id=b, source=src)
    return t


def test_forwarding_to_kafka_is_exactly_once_across_replays_and_aborts(
    kafka: KafkaHandle, topic_name: str, tmp_path: Any
) -> None:
    from cdc_sink.dead_letters import forward

    kafka.create_topic(topic_name, partitions=1)
    table = _table_with_rejects(tmp_path, 3)
    sink = KafkaDeadLetter(kafka.bootstrap_servers, topic_name, backend="confluent")
    assert sink.exactly_once

    class AbortsOnce(KafkaDeadLetter):
        """Dies inside the transaction of the second version (after producing)."""

        calls = 0

        def write_version(self, records: Any, *, app_id: str, version: int) -> None:
            AbortsOnce.calls += 1
            if AbortsOnce.calls == 2:
                producer, _ = self._transactional(app_id)
                producer.begin_transaction()
                for r in records.to_pylist():
                    producer.produce(self.topic, value=r["value"], key=r["key"])
                producer.flush(30)
                raise RuntimeError("crash inside the transaction")
            super().write_version(records, app_id=app_id, version=version)

    crashy = AbortsOnce(kafka.bootstrap_servers, topic_name, backend="confluent")
    with pytest.raises(RuntimeError):
        forward(table, crashy, "job")
    assert crashy.forwarded_version("job") == 1
    # A new incarnation fences the old transactional producer and resumes at version 2.
    assert forward(table, sink, "job") == 4
    assert forward(table, sink, "job") == 0
    table.apply(_BAD, app_id="job", batch_id=3)
    assert forward(table, sink, "job") == 2
    assert sink.forwarded_version("job") == table.version
    got = sink.read(deduplicate=False)
    assert got.num_rows == 8  # 4 versions x 2 rejects, none twice, none from the abort
    assert sorted(got.column("batch_id").to_pylist()) == [0, 0, 1, 1, 2, 2, 3, 3]
    sink.close()
    crashy.close()
