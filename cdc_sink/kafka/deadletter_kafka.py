"""Dead letters re-produced to a Kafka topic, exactly once with confluent-kafka.

A transactional producer writes a version's records and moves the sink's cursor (the
committed offset of a consumer group of its own, on partition 0 of the dead-letter topic,
set to ``version + 1``) in one Kafka transaction (``send_offsets_to_transaction``), as
Kafka Streams does; readers use ``isolation.level=read_committed``. With kafka-python the
sink is at least once (see :mod:`cdc_sink.kafka.deadletter`). Needs the ``kafka`` extra.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

import pyarrow as pa

from cdc_sink import dead_letters as base
from cdc_sink.kafka._clients import confluent_client
from cdc_sink.kafka.producer import BackendName, RawProducer, resolve_backend
from cdc_sink.kafka.properties import ClientProperties
from cdc_sink.utils.extras import require, require_any

__all__ = ["KafkaDeadLetter"]


def _require_client(backend: BackendName) -> None:
    """Raises MissingExtra (naming the ``kafka`` extra) when ``backend`` is not installed."""
    feature = "KafkaDeadLetter"
    if backend == "confluent":
        require("confluent_kafka", feature=feature)
    elif backend == "kafka-python":
        require("kafka", feature=feature)
    else:
        require_any("confluent_kafka", "kafka", feature=feature)


class KafkaDeadLetter(base.DeadLetterSink):
    """Dead letters re-produced to a Kafka topic (see the module docstring).

    Args:
        bootstrap_servers: ``host:port[,host:port...]``.
        topic: The dead-letter topic. When it does not exist, the first write creates it
            (1 partition, replication factor ``min(3, brokers)``), as Kafka Connect does
            for its dead-letter queue; without the right to create topics, create it
            beforehand.
        backend: Kafka client, see :class:`~cdc_sink.kafka.producer.RawProducer`.
        timeout: Seconds ``write`` waits for Kafka to acknowledge the records.
        client_properties: The cluster's connection settings (SASL, TLS;
            :class:`~cdc_sink.kafka.properties.ClientProperties`), given to every client
            the sink makes: producers, the cursor consumer, the admin client, readers.
        **config: More client settings passed to the producer (they win).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        backend: BackendName = "auto",
        timeout: float = 60.0,
        client_properties: ClientProperties | None = None,
        **config: Any,
    ) -> None:
        _require_client(backend)
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.backend: BackendName = backend
        self.timeout = timeout
        self.client_properties = client_properties or ClientProperties()
        self.config = {**self._security(resolve_backend(backend)), **config}
        self._producer: RawProducer | None = None
        self._txn: dict[str, Any] = {}  # app_id -> (transactional producer, consumer)
        self._pid = os.getpid()
        self._topic_checked = False
        self.exactly_once = resolve_backend(backend) == "confluent"

    def _security(self, backend: str) -> dict[str, Any]:
        """The connection settings in ``backend``'s names (``confluent``: librdkafka's)."""
        props = self.client_properties
        return props.confluent_config() if backend == "confluent" else props.kafka_python_config()

    def __repr__(self) -> str:
        return f"KafkaDeadLetter({self.bootstrap_servers!r}, {self.topic!r})"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_producer"] = None  # a client does not travel; each process makes its own
        state["_txn"] = {}
        state["_topic_checked"] = False
        return state

    def ensure_topic(self) -> None:
        """Creates the dead-letter topic when it does not exist (once per object).

        Raises:
            KafkaAuthenticationFailed: The cluster refused the client properties'
                credentials (``KafkaUnreachable``: no broker answered in ``timeout``).
            CdcSinkError: The topic neither exists nor could be created (the message
                names the topic and the broker's reason).
        """
        if self._topic_checked:
            return
        try:
            import confluent_kafka  # noqa: F401
        except ImportError:  # kafka-python only: producing tells
            self._topic_checked = True
            return
        from confluent_kafka import KafkaException

        from cdc_sink.errors import CdcSinkError
        from cdc_sink.kafka.admin import create_topic
        from cdc_sink.kafka.connection import KafkaUnreachable, check_connection

        security = self._security("confluent")
        try:
            check_connection(self.bootstrap_servers, self.client_properties, timeout=self.timeout)
        except KafkaUnreachable as exc:
            raise type(exc)(f"dead-letter topic {self.topic!r}: {exc}") from exc
        admin = confluent_client("admin", {**security, "bootstrap.servers": self.bootstrap_servers})
        try:
            md = admin.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise CdcSinkError(
                f"dead-letter topic {self.topic!r}: cannot reach {self.bootstrap_servers}: {exc}"
            ) from exc
        if self.topic not in md.topics or md.topics[self.topic].error is not None:
            try:
                create_topic(
                    self.bootstrap_servers,
                    self.topic,
                    1,
                    replication_factor=max(1, min(3, len(md.brokers))),
                    timeout=self.timeout,
                    client_config=security,
                )
            except CdcSinkError as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):  # another writer made it
                    raise CdcSinkError(
                        f"dead-letter topic {self.topic!r} does not exist and "
                        f"could not be created: {exc}"
                    ) from exc
        self._topic_checked = True

    def _transactional(self, app_id: str) -> tuple[Any, Any]:
        """This app's transactional producer and cursor consumer (confluent-kafka)."""
        if self._pid != os.getpid():
            self._txn, self._producer, self._pid = {}, None, os.getpid()
        pair = self._txn.get(app_id)
        if pair is None:
            self.ensure_topic()

            tag = base.app_tag(app_id)
            producer = confluent_client(
                "producer",
                {
                    **self.config,
                    "bootstrap.servers": self.bootstrap_servers,
                    "transactional.id": f"cdc_sink-dlq-{self.topic}-{tag}",
                },
            )
            producer.init_transactions(self.timeout)  # fences a previous incarnation
            consumer = confluent_client(
                "consumer",
                {
                    **self._security("confluent"),
                    "bootstrap.servers": self.bootstrap_servers,
                    "group.id": self.cursor_group(app_id),
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                },
            )
            pair = (producer, consumer)
            self._txn[app_id] = pair
        return pair

    def cursor_group(self, app_id: str) -> str:
        """The consumer group whose committed offset is this sink's cursor for ``app_id``."""
        return f"cdc_sink-dlq-cursor-{self.topic}-{base.app_tag(app_id)}"

    def forwarded_version(self, app_id: str) -> int | None:
        """The newest version whose dead letters are committed to the topic (the cursor).

        Raises:
            KafkaException: The cursor could not be read.
        """
        if not self.exactly_once:
            return None
        from confluent_kafka import TopicPartition

        _, consumer = self._transactional(app_id)
        tp = consumer.committed([TopicPartition(self.topic, 0)], timeout=self.timeout)[0]
        return int(tp.offset) - 1 if tp.offset is not None and tp.offset > 0 else None

    def write_version(self, records: pa.Table, *, app_id: str, version: int) -> None:
        """Writes a version's records and moves the cursor in one Kafka transaction.

        Raises:
            KafkaException: The transaction failed (it is aborted; nothing is visible).
        """
        if not self.exactly_once:
            self.write(records)
            return
        from confluent_kafka import TopicPartition

        table = base.conform(records)
        producer, consumer = self._transactional(app_id)
        producer.begin_transaction()
        try:
            cols = {name: table.column(name).to_pylist() for name in base.DEAD_LETTER_SCHEMA.names}
            for i in range(table.num_rows):
                headers = [
                    (h, b"" if cols[h][i] is None else str(cols[h][i]).encode())
                    for h in base.HEADER_NAMES
                ]
                producer.produce(
                    self.topic, value=cols["value"][i], key=cols["key"][i], headers=headers
                )
                if i % 10_000 == 9_999:
                    producer.poll(0)
            producer.send_offsets_to_transaction(
                [TopicPartition(self.topic, 0, version + 1)],
                consumer.consumer_group_metadata(),
                self.timeout,
            )
            producer.commit_transaction(self.timeout)
        except BaseException:
            with contextlib.suppress(Exception):
                producer.abort_transaction(self.timeout)
            raise

    def _client(self) -> RawProducer:
        if self._producer is None or self._pid != os.getpid():  # fork-safe
            self.ensure_topic()
            self._producer = RawProducer(
                self.bootstrap_servers, backend=self.backend, **self.config
            )
            self._pid = os.getpid()
        return self._producer

    def write(self, records: pa.Table) -> None:
        """Produces every record and waits until Kafka acknowledged all of them.

        Raises:
            ValueError: ``records`` does not fit the dead-letter schema.
            DeliveryError: Kafka did not accept some records (or not within ``timeout``).
        """
        table = base.conform(records)
        if table.num_rows == 0:
            return
        producer = self._client()
        cols = {name: table.column(name).to_pylist() for name in base.DEAD_LETTER_SCHEMA.names}
        for i in range(table.num_rows):
            headers = [
                (h, b"" if cols[h][i] is None else str(cols[h][i]).encode("utf-8"))
                for h in base.HEADER_NAMES
            ]
            producer.produce(self.topic, cols["key"][i], cols["value"][i], headers=headers)
        left = producer.flush(self.timeout)
        if left:
            from cdc_sink.kafka.producer import DeliveryError, DeliveryFailure

            raise DeliveryError(
                [
                    DeliveryFailure(
                        topic=self.topic,
                        key=None,
                        code="_TIMED_OUT",
                        error=f"{left} dead letter(s) unacknowledged after {self.timeout}s",
                    )
                ]
            )

    def close(self) -> None:
        """Closes the producers (a later ``write`` opens new ones)."""
        if self._producer is not None:
            producer, self._producer = self._producer, None
            producer.close(self.timeout)
        txn, self._txn = self._txn, {}
        for producer, consumer in txn.values():
            producer.flush(self.timeout)
            consumer.close()

    def read(self, *, deduplicate: bool = True, timeout: float = 30.0) -> pa.Table:
        """Consumes the dead-letter topic from the beginning to its current end.

        Raises:
            TimeoutError: The end offsets were not reached within ``timeout``.
        """
        rows = _consume_all(self.bootstrap_servers, self.topic, timeout, self.client_properties)
        cols: dict[str, list[Any]] = {f.name: [] for f in base.DEAD_LETTER_SCHEMA}
        for key, value, headers in rows:
            h = {k: (v.decode("utf-8") if v is not None else None) for k, v in headers}
            cols["key"].append(key)
            cols["value"].append(value)
            for name in base.HEADER_NAMES:
                raw = h.get(name) or None
                cols[name].append(
                    int(raw)
                    if raw is not None and name in ("partition", "offset", "batch_id")
                    else raw
                )
        out = pa.table(cols, schema=base.DEAD_LETTER_SCHEMA)
        return base.dedupe(out) if deduplicate else out


def _consume_all(
    bootstrap_servers: str, topic: str, timeout: float, props: ClientProperties
) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]:
    """(key, value, headers) of every record of ``topic``, partition by partition."""
    if resolve_backend("auto") == "kafka-python":
        return _consume_all_kafka_python(bootstrap_servers, topic, timeout, props)
    from confluent_kafka import TopicPartition

    consumer = confluent_client(
        "consumer",
        {
            **props.confluent_config(),
            "bootstrap.servers": bootstrap_servers,
            "group.id": "cdc_sink-dlq-read",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        },
    )
    try:
        md = consumer.list_topics(topic, timeout=timeout)
        parts = sorted(md.topics[topic].partitions)
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
            for p in parts
        }
        # With transactions the last offsets may be commit markers, never delivered:
        # read until the position (not the last message) reaches the end.
        todo = {p: hi for p, (lo, hi) in ends.items() if hi > lo}
        if not todo:
            return []
        consumer.assign([TopicPartition(topic, p, ends[p][0]) for p in todo])
        out: dict[int, list[Any]] = {p: [] for p in todo}
        deadline = time.monotonic() + timeout
        while todo:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic!r}: end offsets not reached in {timeout}s")
            for msg in consumer.consume(500, timeout=0.5):
                if msg.error() is not None:
                    continue
                p, off = int(msg.partition() or 0), int(msg.offset() or 0)
                out[p].append((msg.key(), msg.value(), list(msg.headers() or [])))
                if p in todo and off + 1 >= todo[p]:
                    del todo[p]
            for tp in consumer.position([TopicPartition(topic, p) for p in list(todo)]):
                if tp.offset is not None and tp.offset >= todo[tp.partition]:
                    del todo[tp.partition]  # only markers (or aborted records) were left
        return [r for p in sorted(out) for r in out[p]]
    finally:
        consumer.close()


def _consume_all_kafka_python(
    bootstrap_servers: str, topic: str, timeout: float, props: ClientProperties
) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        **props.kafka_python_config(),
        bootstrap_servers=bootstrap_servers.split(","),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    try:
        parts = [
            TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())
        ]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        ends = consumer.end_offsets(parts)
        out: dict[int, list[Any]] = {tp.partition: [] for tp in parts}
        deadline = time.monotonic() + timeout
        while any(consumer.position(tp) < ends[tp] for tp in parts):
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic!r}: end offsets not reached in {timeout}s")
            for tp, msgs in consumer.poll(timeout_ms=500).items():
                out[tp.partition].extend((m.key, m.value, list(m.headers or [])) for m in msgs)
        return [r for p in sorted(out) for r in out[p]]
    finally:
        consumer.close()
