"""The producer SDK against a real broker, with both Kafka clients.

Events are produced, consumed back and decoded; keys must map to stable partitions (the
same for both clients and for Java's murmur2 partitioner), and deliveries the broker
refuses must surface as DeliveryError.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from cdc_sink.kafka.producer import CdcProducer, DeliveryError, DeliveryFailure, RawProducer
from cdc_sink.schema import TableSchema
from cdc_sink_testkit.kafka import KafkaHandle

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

BACKENDS = ["confluent", "kafka-python"]

SCHEMA = TableSchema.from_dict(
    {
        "columns": [
            {"name": "order_id", "type": "int64", "nullable": False},
            {"name": "status", "type": "string", "default": "new"},
            {"name": "amount", "type": "decimal128(12, 2)"},
            {"name": "seq", "type": "int64"},
        ],
        "primary_key": ["order_id"],
        "num_buckets": 4,
        "sequence_column": "seq",
    }
)

# Lets the client build records larger than the test topic accepts, so the broker refuses.
_BIG_CLIENT = {
    "confluent": {"message.max.bytes": 2_000_000},
    "kafka-python": {"max_request_size": 2_000_000},
}
# Fail fast on a topic that does not exist (auto-creation is off on the test broker).
_FAST_FAIL = {"confluent": {"message.timeout.ms": 3000}, "kafka-python": {"max_block_ms": 3000}}


def _consume(bootstrap: str, topic: str, n: int, timeout: float = 60.0) -> list[Any]:
    """The first ``n`` records of ``topic`` (every partition), with confluent-kafka."""
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < n and time.monotonic() < deadline:
            out += [m for m in c.consume(n - len(out), timeout=0.5) if m.error() is None]
    finally:
        c.close()
    assert len(out) == n, f"consumed {len(out)} of {n} records"
    return out


def _config(backend: str, *extra: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for e in extra:
        out.update(e[backend])
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_raw_records_round_trip_with_headers_and_timestamp(
    kafka: KafkaHandle, topic_name: str, backend: str
) -> None:
    kafka.create_topic(topic_name, 1)
    with RawProducer(kafka.bootstrap_servers, backend=backend) as p:  # type: ignore[arg-type]
        assert p.backend == backend
        p.produce(topic_name, b"k1", b"v1", headers=[("h", b"x")], timestamp_ms=1_700_000_000_123)
        p.produce(topic_name, b"k2", None)  # a tombstone
        assert p.flush(30) == 0
        assert p.delivered == 2 and p.pending == 0
    m1, m2 = _consume(kafka.bootstrap_servers, topic_name, 2)
    assert (m1.key(), m1.value(), m1.headers(), m1.timestamp()[1]) == (
        b"k1",
        b"v1",
        [("h", b"x")],
        1_700_000_000_123,
    )
    assert (m2.key(), m2.value()) == (b"k2", None)


@pytest.mark.parametrize("backend", BACKENDS)
def test_events_round_trip_in_order_with_keys_and_ts_ms(
    kafka: KafkaHandle, topic_name: str, backend: str
) -> None:
    from cdc_sink.formats import get_decoder

    kafka.create_topic(topic_name, 3)
    before = int(time.time() * 1000)
    with CdcProducer(kafka.bootstrap_servers, topic_name, SCHEMA, backend=backend) as p:  # type: ignore[arg-type]
        p.insert({"order_id": 1}, {"status": "new", "amount": "12.50"}, seq=1)
        p.update({"order_id": 1}, {"status": "paid"}, seq=2)
        p.upsert({"order_id": 2}, {"amount": None}, seq=3)
        p.delete({"order_id": 1}, seq=4)
        p.send({"op": "insert", "key": 3, "set": {}, "seq": 5})
        p.send_many(
            {"op": "upsert", "key": {"order_id": i}, "set": {"status": "s"}, "seq": i}
            for i in range(10, 40)
        )
    after = int(time.time() * 1000)
    msgs = _consume(kafka.bootstrap_servers, topic_name, 35)
    by_key: dict[bytes, list[Any]] = {}
    for m in msgs:
        by_key.setdefault(m.key(), []).append(m)
    assert set(by_key) == {b"[1]", b"[2]", b"[3]", *(b"[%d]" % i for i in range(10, 40))}
    assert len({m.partition() for m in by_key[b"[1]"]}) == 1  # one key, one partition
    ones = sorted(by_key[b"[1]"], key=lambda m: m.offset())
    events = [json.loads(m.value()) for m in ones]
    assert [e["op"] for e in events] == ["insert", "update", "delete"]
    assert [e["seq"] for e in events] == [1, 2, 4]
    for m in msgs:
        ts = json.loads(m.value())["ts_ms"]
        assert before <= ts <= after
        assert m.timestamp()[1] == ts  # the record timestamp is the same instant

    batch, rejects = get_decoder("json").decode(
        __import__("pyarrow").array([m.value() for m in msgs], "binary"), SCHEMA
    )
    assert len(rejects) == 0 and len(batch) == 35


@pytest.mark.parametrize("fmt", ["rowv2", "debezium"])
def test_other_formats_decode_back(kafka: KafkaHandle, topic_name: str, fmt: str) -> None:
    import pyarrow as pa

    from cdc_sink.formats import get_decoder

    kafka.create_topic(topic_name, 2)
    with CdcProducer(kafka.bootstrap_servers, topic_name, SCHEMA, format=fmt) as p:  # type: ignore[arg-type]
        for i in range(20):
            p.upsert({"order_id": i}, {"status": f"s{i}", "amount": "1.25", "seq": i}, seq=i)
        p.delete({"order_id": 3}, seq=99)
    msgs = _consume(kafka.bootstrap_servers, topic_name, 21)
    batch, rejects = get_decoder(fmt).decode(  # type: ignore[arg-type]
        pa.array([m.value() for m in msgs], pa.binary()), SCHEMA
    )
    assert len(rejects) == 0, rejects.reasons
    assert len(batch) == 21


def test_a_key_goes_to_the_same_partition_with_both_clients_as_with_java(
    kafka: KafkaHandle, topic_name: str
) -> None:
    from kafka.partitioner.default import murmur2

    n_parts = 6
    kafka.create_topic(topic_name, n_parts)
    keys = [b"[%d]" % i for i in range(300)]
    for backend in BACKENDS:
        with RawProducer(kafka.bootstrap_servers, backend=backend) as p:  # type: ignore[arg-type]
            for k in keys:
                p.produce(topic_name, k, backend.encode())
    msgs = _consume(kafka.bootstrap_servers, topic_name, 2 * len(keys))
    placed: dict[tuple[bytes, bytes], int] = {(m.key(), m.value()): m.partition() for m in msgs}
    java = {k: (murmur2(k) & 0x7FFFFFFF) % n_parts for k in keys}  # Java's default
    for k in keys:
        assert placed[(k, b"confluent")] == placed[(k, b"kafka-python")] == java[k]
    assert len(set(java.values())) == n_parts


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_bucket_partitioner_puts_each_bucket_on_one_partition(
    kafka: KafkaHandle, topic_name: str, backend: str
) -> None:
    """``partitioner="bucket"``: partition = Spark's ``pmod(xxhash64(key), buckets)``
    modulo the topic's partitions (4 buckets on 3 partitions: partition 0 holds buckets 0
    and 3), whichever client sends."""
    import pyarrow as pa

    from cdc_sink.bucketing import bucket_ids

    kafka.create_topic(topic_name, 3)
    keys = list(range(200))
    with CdcProducer(
        kafka.bootstrap_servers,
        topic_name,
        SCHEMA,
        backend=backend,  # type: ignore[arg-type]
        partitioner="bucket",
    ) as p:
        p.send_many([{"op": "upsert", "key": k, "set": {"status": "x"}, "seq": 1} for k in keys])
    msgs = _consume(kafka.bootstrap_servers, topic_name, len(keys))
    buckets = bucket_ids([pa.array(keys, pa.int64())], SCHEMA.num_buckets)
    want = {json.dumps([k]).encode(): int(b) % 3 for k, b in zip(keys, buckets, strict=True)}
    placed = {m.key(): m.partition() for m in msgs}
    assert placed == want
    assert sorted(set(placed.values())) == [0, 1, 2]


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_bucket_partitioner_on_a_missing_topic_raises_topic_unavailable(
    kafka: KafkaHandle, topic_name: str, backend: str
) -> None:
    from cdc_sink.kafka.producer import TopicUnavailable

    with (
        CdcProducer(
            kafka.bootstrap_servers,
            topic_name,  # never created
            SCHEMA,
            backend=backend,  # type: ignore[arg-type]
            partitioner="bucket",
            **_config(backend, _FAST_FAIL),
        ) as p,
        pytest.raises(TopicUnavailable, match=topic_name),
    ):
        p.upsert({"order_id": 1}, {"status": "x"}, seq=1)
    assert p.sent == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_record_too_large_for_the_topic_raises_delivery_error(
    kafka: KafkaHandle, topic_name: str, backend: str
) -> None:
    kafka.create_topic(topic_name, 1, config={"max.message.bytes": "2048"})
    p = RawProducer(
        kafka.bootstrap_servers,
        backend=backend,  # type: ignore[arg-type]
        **_config(backend, _BIG_CLIENT),
    )
    p.produce(topic_name, b"[1]", b"x" * 20_000)
    with pytest.raises(DeliveryError) as info:
        p.flush(30)
    (failure,) = info.value.failures
    assert failure.topic == topic_name and failure.key == b"[1]"
    assert "TOOLARGE" in failure.code.upper().replace("_", "")
    p.produce(topic_name, b"[2]", b"small")
    if backend == "confluent":  # the failure was raised once; the producer goes on working
        assert p.flush(30) == 0
        p.close()
        assert [m.value() for m in _consume(kafka.bootstrap_servers, topic_name, 1)] == [b"small"]
    else:  # kafka-python's idempotent producer turns the refusal into a fatal state:
        with pytest.raises(DeliveryError):  # what follows fails too, loudly
            p.flush(30)
        p.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_event_to_a_missing_topic_raises_delivery_error(kafka: KafkaHandle, backend: str) -> None:
    p = CdcProducer(
        kafka.bootstrap_servers,
        "no-such-topic",
        SCHEMA,
        backend=backend,
        **_config(backend, _FAST_FAIL),
    )  # type: ignore[arg-type]
    p.upsert({"order_id": 1}, {"status": "x"}, seq=1)
    with pytest.raises(DeliveryError) as info:
        p.flush(30)
    assert [f.key for f in info.value.failures] == [b"[1]"]
    p.close()


def test_on_error_callback_receives_failures_instead_of_flush(
    kafka: KafkaHandle, topic_name: str
) -> None:
    kafka.create_topic(topic_name, 1, config={"max.message.bytes": "2048"})
    seen: list[DeliveryFailure] = []
    with RawProducer(
        kafka.bootstrap_servers, on_error=seen.append, **_BIG_CLIENT["confluent"]
    ) as p:
        p.produce(topic_name, b"[1]", b"x" * 20_000)
        assert p.flush(30) == 0  # no raise: the callback got the failure
        p.produce(topic_name, b"[2]", b"ok")  # (not in the refused record batch)
        assert p.flush(30) == 0
    assert [f.key for f in seen] == [b"[1]"]


def test_invalid_event_is_refused_before_anything_is_sent(
    kafka: KafkaHandle, topic_name: str
) -> None:
    kafka.create_topic(topic_name, 1)
    with CdcProducer(kafka.bootstrap_servers, topic_name, SCHEMA) as p:
        with pytest.raises(ValueError, match="unknown column 'coupon'"):
            p.send_many(
                [
                    {"op": "upsert", "key": 1, "set": {}, "seq": 1},
                    {"op": "upsert", "key": 2, "set": {"coupon": "x"}, "seq": 2},
                ]
            )
        p.upsert({"order_id": 3}, {}, seq=3)
        assert p.flush(30) == 0
        assert p.sent == 1
    assert [m.key() for m in _consume(kafka.bootstrap_servers, topic_name, 1)] == [b"[3]"]
