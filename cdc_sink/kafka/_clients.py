"""The two Kafka client backends of the producer SDK, behind one small interface (private).

:class:`Client` is what :class:`~cdc_sink.kafka.producer.RawProducer` needs of a client:
queue a record and report its fate through a callback, serve callbacks, flush, close.
:class:`ConfluentClient` wraps confluent-kafka (librdkafka), :class:`KafkaPythonClient`
kafka-python; :func:`resolve_backend` picks one and :func:`new_client` builds it. Both use
Kafka's Java-compatible murmur2 partitioner, so a key lands on the same partition
whichever client (or a Java/Debezium producer) wrote it. Failures are reported as
:class:`DeliveryFailure` and raised together as :class:`DeliveryError` (both re-exported
by :mod:`cdc_sink.kafka.producer`, their public home).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from cdc_sink.errors import CdcSinkError

__all__ = [
    "BackendName",
    "Client",
    "ConfluentClient",
    "DeliveryError",
    "DeliveryFailure",
    "Headers",
    "KafkaPythonClient",
    "TopicUnavailable",
    "new_client",
    "resolve_backend",
]

BackendName = Literal["auto", "confluent", "kafka-python"]
"""A Kafka client library of the producer (``auto``: confluent-kafka when importable)."""
Headers = Sequence[tuple[str, bytes]]
"""Record headers: ``(name, bytes)`` pairs."""


# -- errors -----------------------------------------------------------------------------


@dataclass(frozen=True)
class DeliveryFailure:
    """One record Kafka did not accept.

    Attributes:
        topic: The topic it was sent to.
        key: Its Kafka key.
        error: The client's error message.
        code: The error's name (librdkafka code or kafka-python exception class).
        retriable: Whether the client classified the error as retriable.
        partition: The partition, when one was chosen (-1 otherwise).
    """

    topic: str
    key: bytes | None
    error: str
    code: str
    retriable: bool = False
    partition: int = -1


class DeliveryError(CdcSinkError):
    """Kafka did not accept one or more records.

    Attributes:
        failures: Every failed delivery, in the order they were reported.
    """

    def __init__(self, failures: Sequence[DeliveryFailure]) -> None:
        self.failures = list(failures)
        first = self.failures[0] if self.failures else None
        detail = (
            f"; first: topic {first.topic!r} key {first.key!r}: {first.code}: {first.error}"
            if first
            else ""
        )
        super().__init__(f"{len(self.failures)} record(s) were not delivered{detail}")


# -- backends ---------------------------------------------------------------------------


class TopicUnavailable(CdcSinkError):
    """A topic's partitions could not be learned: it does not exist, or the cluster
    sent no metadata in time."""


def resolve_backend(backend: BackendName = "auto") -> Literal["confluent", "kafka-python"]:
    """Picks the client library: confluent-kafka when importable, else kafka-python.

    Raises:
        ValueError: ``backend`` is not one of the names.
        ImportError: The requested library is not installed.
    """
    if backend not in ("auto", "confluent", "kafka-python"):
        raise ValueError(f"backend must be 'auto', 'confluent' or 'kafka-python', got {backend!r}")
    if backend == "kafka-python":
        import kafka

        return "kafka-python"
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        if backend == "confluent":
            raise
        import kafka  # noqa: F401

        return "kafka-python"
    return "confluent"


class Client:
    """What a backend does: queue a record, report its fate through a callback."""

    def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
        timestamp_ms: int | None,
        done: Callable[[DeliveryFailure | None], None],
        partition: int | None = None,
    ) -> None:
        """Queues one record (to ``partition``, or where the key's hash sends it);
        ``done`` is called once with ``None`` (delivered) or the failure (possibly at
        once, when the client refuses it before queueing)."""
        raise NotImplementedError

    def partitions(self, topic: str, timeout: float) -> int:
        """The number of partitions of ``topic`` (from the cluster's metadata).

        Raises:
            TopicUnavailable: The topic does not exist, or no metadata came within
                ``timeout`` seconds.
        """
        raise NotImplementedError

    def poll(self) -> None:
        """Serves delivery callbacks that are ready (no-op for threaded clients)."""

    def flush(self, timeout: float) -> None:
        """Waits up to ``timeout`` seconds for queued records (never raises a timeout)."""
        raise NotImplementedError

    def close(self, timeout: float) -> None:
        """Flushes and releases the client."""
        raise NotImplementedError


class ConfluentClient(Client):
    """confluent-kafka (librdkafka): idempotent, Java's murmur2 partitioner."""

    def __init__(self, bootstrap_servers: str, config: Mapping[str, Any]) -> None:
        from confluent_kafka import Producer

        conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap_servers,
            "partitioner": "murmur2_random",  # Java's partitioner: same key, same partition
            "enable.idempotence": True,  # acks=all, no duplicates or reordering on retry
            "linger.ms": 5,
        }
        conf.update(config)
        self._p = Producer(conf)

    def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
        timestamp_ms: int | None,
        done: Callable[[DeliveryFailure | None], None],
        partition: int | None = None,
    ) -> None:
        from confluent_kafka import KafkaException

        def on_delivery(err: Any, msg: Any) -> None:
            if err is None:
                done(None)
            else:
                part = msg.partition()
                done(
                    DeliveryFailure(
                        topic=msg.topic() or topic,
                        key=msg.key(),
                        error=err.str(),
                        code=err.name(),
                        retriable=bool(err.retriable()),
                        partition=-1 if part is None else int(part),
                    )
                )

        while True:
            try:
                self._p.produce(
                    topic,
                    value=value,
                    key=key,
                    headers=list(headers) if headers else None,
                    timestamp=timestamp_ms or 0,
                    on_delivery=on_delivery,
                    partition=-1 if partition is None else partition,  # -1: the partitioner's
                )
                return
            except BufferError:  # local queue full: serve callbacks, then retry
                self._p.poll(0.05)
            except KafkaException as exc:  # refused before queueing (size, unknown topic)
                err = exc.args[0]
                done(
                    DeliveryFailure(
                        topic=topic,
                        key=key,
                        error=err.str(),
                        code=err.name(),
                        retriable=bool(err.retriable()),
                    )
                )
                return

    def poll(self) -> None:
        self._p.poll(0)

    def partitions(self, topic: str, timeout: float) -> int:
        from confluent_kafka import KafkaException

        try:
            md = self._p.list_topics(topic, timeout=timeout).topics.get(topic)
        except KafkaException as exc:
            raise TopicUnavailable(f"no metadata of topic {topic!r}: {exc}") from exc
        if md is None or md.error is not None or not md.partitions:
            why = "no such topic" if md is None or md.error is None else md.error.str()
            raise TopicUnavailable(f"no partitions of topic {topic!r}: {why}")
        return len(md.partitions)

    def flush(self, timeout: float) -> None:
        self._p.flush(timeout)

    def close(self, timeout: float) -> None:
        self._p.flush(timeout)
        close = getattr(self._p, "close", None)  # confluent-kafka >= 2.6
        if close is not None:
            close()


class KafkaPythonClient(Client):
    """kafka-python: ``acks=all``, its default murmur2 partitioner."""

    def __init__(self, bootstrap_servers: str, config: Mapping[str, Any]) -> None:
        from kafka import KafkaProducer

        conf: dict[str, Any] = {"acks": "all", "linger_ms": 5}
        conf.update(config)
        # kafka-python's DefaultPartitioner is murmur2, as Java's and librdkafka's
        # murmur2_random: one key maps to one partition whichever client produced it.
        self._p = KafkaProducer(bootstrap_servers=bootstrap_servers.split(","), **conf)

    def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
        timestamp_ms: int | None,
        done: Callable[[DeliveryFailure | None], None],
        partition: int | None = None,
    ) -> None:
        from kafka.errors import KafkaError

        def fail(exc: BaseException) -> None:
            done(
                DeliveryFailure(
                    topic=topic,
                    key=key,
                    error=str(exc) or type(exc).__name__,
                    code=type(exc).__name__,
                    retriable=bool(getattr(exc, "retriable", False)),
                )
            )

        try:
            fut = self._p.send(
                topic,
                value=value,
                key=key,
                headers=list(headers) if headers else None,
                partition=partition,
                timestamp_ms=timestamp_ms,
            )
        except KafkaError as exc:  # refused before queueing (metadata timeout, size)
            fail(exc)
            return
        fut.add_callback(lambda _md: done(None))
        fut.add_errback(fail)

    def partitions(self, topic: str, timeout: float) -> int:
        from kafka.errors import KafkaError

        try:
            parts = self._p.partitions_for(topic)  # waits up to the producer's max_block_ms
        except KafkaError as exc:
            raise TopicUnavailable(f"no metadata of topic {topic!r}: {exc}") from exc
        if not parts:
            raise TopicUnavailable(f"no partitions of topic {topic!r}: no such topic")
        return len(parts)

    def flush(self, timeout: float) -> None:
        from kafka.errors import KafkaTimeoutError

        with contextlib.suppress(KafkaTimeoutError):  # the caller counts what is pending
            self._p.flush(timeout=timeout)

    def close(self, timeout: float) -> None:
        self._p.close(timeout=timeout)


def new_client(
    backend: Literal["confluent", "kafka-python"], bootstrap_servers: str, config: Mapping[str, Any]
) -> Client:
    """A client of the resolved ``backend`` (see :func:`resolve_backend`)."""
    if backend == "confluent":
        return ConfluentClient(bootstrap_servers, config)
    return KafkaPythonClient(bootstrap_servers, config)
