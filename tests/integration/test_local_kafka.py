"""LocalKafka runs a real KRaft broker: keyed order holds, and stop() leaves nothing."""

from __future__ import annotations

import os
import socket
import time
from collections import defaultdict

import pytest

from cdc_sink_testkit.kafka import ExternalKafka, LocalKafka, start_kafka

pytestmark = [
    pytest.mark.integration,
    pytest.mark.kafka,
    # kafka-python's own use of importlib.resources' legacy API
    pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning"),
]

N_MESSAGES = 1000
N_KEYS = 37


def _port_closed(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return False
    except OSError:
        return True


def test_produce_consume_keyed_order_then_stop() -> None:
    from confluent_kafka import Producer
    from kafka import KafkaConsumer

    broker = LocalKafka(num_partitions=3)
    with broker:
        assert broker.is_running
        host, _, port_text = broker.bootstrap_servers.rpartition(":")
        assert host == "127.0.0.1"
        port, controller_port, pid = int(port_text), broker.controller_port, broker.pid
        workdir = broker.workdir
        assert pid is not None and controller_port is not None and workdir is not None
        topic = "orders"
        broker.create_topic(topic, partitions=3)

        # Produce: key k carries the sequence 0, 1, 2, ... of its own messages.
        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap_servers,
                "enable.idempotence": True,
                "linger.ms": 5,
            }
        )
        next_seq: dict[str, int] = defaultdict(int)
        for i in range(N_MESSAGES):
            key = f"k{i % N_KEYS:02d}"
            producer.produce(topic, key=key.encode(), value=f"{key}:{next_seq[key]}".encode())
            next_seq[key] += 1
            producer.poll(0)
        assert producer.flush(30) == 0
        del producer

        # Consume with another client library (kafka-python), as a consumer group.
        consumer = KafkaConsumer(
            topic,
            bootstrap_servers=broker.bootstrap_servers,
            group_id="order-check",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        seen: dict[str, list[int]] = defaultdict(list)
        partition_of: dict[str, set[int]] = defaultdict(set)
        received = 0
        deadline = time.monotonic() + 60
        try:
            while received < N_MESSAGES and time.monotonic() < deadline:
                for tp, records in consumer.poll(timeout_ms=500).items():
                    for rec in records:
                        key, seq = rec.value.decode().split(":")
                        assert rec.key.decode() == key
                        seen[key].append(int(seq))
                        partition_of[key].add(tp.partition)
                        received += 1
        finally:
            consumer.close()

        assert received == N_MESSAGES
        assert set(seen) == set(next_seq)
        for key, seqs in seen.items():
            assert seqs == list(range(next_seq[key])), f"key {key} out of order"
            assert len(partition_of[key]) == 1  # one key, one partition
        used = set().union(*partition_of.values())
        assert used == {0, 1, 2}

    # stop() (by __exit__): the JVM is gone (reaped), its ports closed, its dir removed.
    assert not broker.is_running
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert _port_closed(port)
    assert _port_closed(controller_port)
    assert not workdir.exists()
    broker.stop()  # idempotent


def test_start_kafka_uses_external_cluster_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDC_SINK_KAFKA_BOOTSTRAP", "127.0.0.1:1")
    monkeypatch.delenv("CDC_SINK_KAFKA", raising=False)
    with start_kafka() as handle:  # nothing is started for an external cluster
        assert isinstance(handle, ExternalKafka)
        assert handle.bootstrap_servers == "127.0.0.1:1"
