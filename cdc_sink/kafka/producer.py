"""The producer SDK: change events of one table schema onto a Kafka topic.

:class:`CdcProducer` validates each event against the table schema (the same checks the
sink makes, :meth:`cdc_sink.ChangeBatch.from_events`), encodes it in one of the wire
formats of :mod:`cdc_sink.formats` and produces it with

- **key** = the event's primary key, canonical JSON of the key values in key order
  (``[42]``, ``["eu", 7]``; :func:`encode_key`). Equal keys give equal bytes, so the
  partitioner sends every event of a key to one partition and Kafka keeps their order.
  Both backends use Kafka's Java-compatible murmur2 partitioner, so a key lands on the
  same partition whichever client (or a Java/Debezium producer) wrote it. With
  ``partitioner="bucket"`` the producer picks the partition itself: the table bucket of
  the key modulo the topic's partition count
  (:func:`cdc_sink.bucketing.bucket_partitions`), so each partition holds whole buckets
  and the sink's executors mode can prepare them where they are read, without a
  shuffle (``sink(..., bucket_partitioned=True)``; docs/design-notes.md);
- **value** = the encoded event; with ``stamp_ts`` the event carries ``ts_ms``, the
  producer's wall clock in milliseconds at produce time (JSON and Debezium formats), and
  the Kafka record timestamp is set to the same instant (every format), so the job can
  measure freshness end to end.

:class:`RawProducer` is the byte-level half (also used by the Kafka dead-letter sink):
two backends behind one interface, confluent-kafka (librdkafka) by default and
kafka-python when confluent-kafka cannot be imported or ``backend="kafka-python"``.
Deliveries are asynchronous; failed ones are collected and raised as one
:class:`DeliveryError` from :meth:`RawProducer.flush` (or handed to an ``on_error``
callback instead). The backends live in :mod:`cdc_sink.kafka._clients`, key encoding in
:mod:`cdc_sink.kafka._keys` and the value encoders in the format registry
(:mod:`cdc_sink.formats`); this module re-exports their public names::

    with CdcProducer("127.0.0.1:9092", "orders", schema) as p:
        p.insert({"order_id": 1}, {"status": "new", "amount": "12.50"}, seq=1)
        p.update({"order_id": 1}, {"status": "paid"}, seq=2)
        p.delete({"order_id": 1}, seq=3)
    # leaving the block flushes; an undelivered event raises DeliveryError
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal

from cdc_sink.bucketing import bucket_partitions
from cdc_sink.errors import InvalidOption
from cdc_sink.formats import EventEncoder, FormatName, get_format
from cdc_sink.kafka._clients import (
    BackendName,
    Client,
    DeliveryError,
    DeliveryFailure,
    Headers,
    TopicUnavailable,
    new_client,
    resolve_backend,
)
from cdc_sink.kafka._keys import encode_key, event_keys, keyed_events
from cdc_sink.kafka.properties import ClientProperties
from cdc_sink.schema import TableSchema

__all__ = [
    "BackendName",
    "CdcProducer",
    "DeliveryError",
    "DeliveryFailure",
    "FormatName",
    "Partitioner",
    "RawProducer",
    "TopicUnavailable",
    "encode_key",
    "event_keys",
    "resolve_backend",
    "value_encoder",
]


Partitioner = Literal["key", "bucket"]
"""How :class:`CdcProducer` picks partitions: ``key`` (Kafka's murmur2 hash of the
message key) or ``bucket`` (the table bucket of the key modulo the partition count)."""


# -- byte-level producer ----------------------------------------------------------------


class RawProducer:
    """Produces records (bytes) and collects failed deliveries.

    Args:
        bootstrap_servers: ``host:port[,host:port...]``.
        backend: ``"confluent"``, ``"kafka-python"`` or ``"auto"`` (confluent-kafka when
            it can be imported).
        on_error: Called with each failed delivery instead of raising them from
            :meth:`flush` (it runs on the client's callback thread).
        client_properties: The cluster's connection settings (SASL, TLS;
            :class:`~cdc_sink.kafka.properties.ClientProperties`), in the backend's names.
        **config: Client settings passed through unchanged (librdkafka names such as
            ``"message.max.bytes"`` for confluent-kafka, keyword names such as
            ``max_request_size`` for kafka-python); they win over ``client_properties``.
            Java client settings are translated for confluent-kafka, or left out with a
            logged note (:func:`~cdc_sink.kafka._clients.confluent_client`).

    Raises:
        InvalidOption: A setting the client refuses (the error names it, not its value).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        backend: BackendName = "auto",
        on_error: Callable[[DeliveryFailure], None] | None = None,
        client_properties: ClientProperties | None = None,
        **config: Any,
    ) -> None:
        self.backend = resolve_backend(backend)
        if client_properties is not None:
            security = (
                client_properties.confluent_config()
                if self.backend == "confluent"
                else client_properties.kafka_python_config()
            )
            config = {**security, **config}
        self._on_error = on_error
        self._failures: list[DeliveryFailure] = []
        self._pending = 0
        self._delivered = 0
        self._lock = threading.Lock()
        self._closed = False
        self._client: Client = new_client(self.backend, bootstrap_servers, config)

    @property
    def pending(self) -> int:
        """Records produced whose delivery has not been reported yet."""
        with self._lock:
            return self._pending

    @property
    def delivered(self) -> int:
        """Records Kafka acknowledged so far."""
        with self._lock:
            return self._delivered

    @property
    def failures(self) -> list[DeliveryFailure]:
        """Failed deliveries not yet raised by :meth:`flush` (a copy)."""
        with self._lock:
            return list(self._failures)

    def _done(self, failure: DeliveryFailure | None) -> None:
        with self._lock:
            self._pending -= 1
            if failure is None:
                self._delivered += 1
                return
            if self._on_error is None:
                self._failures.append(failure)
        if self._on_error is not None:
            self._on_error(failure)

    def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        *,
        headers: Headers | None = None,
        timestamp_ms: int | None = None,
        partition: int | None = None,
    ) -> None:
        """Queues one record (delivery is reported later, see :meth:`flush`).

        Args:
            topic: Destination topic.
            key: Record key (``None`` for none).
            value: Record value (``None`` for a tombstone).
            headers: ``(name, bytes)`` pairs.
            timestamp_ms: Record timestamp (CreateTime); the client's clock when omitted.
            partition: The partition (None: the murmur2 hash of the key picks it).

        Raises:
            RuntimeError: The producer is closed.
        """
        if self._closed:
            raise RuntimeError("the producer is closed")
        with self._lock:
            self._pending += 1
        try:
            self._client.produce(topic, key, value, headers, timestamp_ms, self._done, partition)
        except BaseException:  # refused by the client's argument checks: not queued
            with self._lock:
                self._pending -= 1
            raise
        self._client.poll()

    def partitions(self, topic: str, timeout: float = 30.0) -> int:
        """The number of partitions of ``topic``, from the cluster's metadata.

        Raises:
            TopicUnavailable: The topic does not exist, or no metadata came in time.
        """
        return self._client.partitions(topic, timeout)

    def flush(self, timeout: float = 30.0) -> int:
        """Waits up to ``timeout`` seconds for every queued record to be reported.

        Returns:
            The number of records still undelivered (0 when all were reported).

        Raises:
            DeliveryError: Some records failed (and no ``on_error`` callback was given);
                the failures are cleared once raised.
        """
        deadline = time.monotonic() + timeout
        self._client.flush(timeout)
        while self.pending and time.monotonic() < deadline:  # callbacks may trail flush
            self._client.poll()
            time.sleep(0.005)
        self.raise_failures()
        return self.pending

    def raise_failures(self) -> None:
        """Raises the failed deliveries collected so far (and forgets them).

        Raises:
            DeliveryError: At least one delivery failed.
        """
        with self._lock:
            failures, self._failures = self._failures, []
        if failures:
            raise DeliveryError(failures)

    def close(self, timeout: float = 30.0) -> None:
        """Flushes and closes the client (idempotent).

        Raises:
            DeliveryError: Records queued before closing were not delivered.
        """
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            self._closed = True
            self._client.close(timeout)
        if self.pending:
            raise DeliveryError(
                [
                    DeliveryFailure(
                        topic="",
                        key=None,
                        code="_TIMED_OUT",
                        error=f"{self.pending} record(s) still queued after {timeout}s",
                    )
                ]
            )

    def __enter__(self) -> RawProducer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:  # do not mask the body's exception with a delivery error
            with contextlib.suppress(DeliveryError):
                self.close()


# -- the CDC producer ---------------------------------------------------------------------


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class CdcProducer:
    """Produces change events of one table to a Kafka topic (see the module docstring).

    Args:
        bootstrap_servers: ``host:port[,host:port...]``.
        topic: The topic the events go to.
        schema: The table schema (a :class:`TableSchema` or its dictionary form).
        format: One of :data:`cdc_sink.formats.FORMATS`: ``"json"`` (native JSON),
            ``"debezium"`` or ``"rowv2"``.
        backend: Kafka client, see :class:`RawProducer`.
        stamp_ts: Stamp ``ts_ms`` (produce-time wall clock) on every event and record.
        validate: Check every event against the schema before sending (on by default).
        on_error: Receives failed deliveries instead of :meth:`flush` raising them.
        debezium_envelope: With ``format="debezium"``, wrap events in the Kafka Connect
            envelope (see :func:`value_encoder`).
        encoder_options: More options of the format's encoder, e.g. for
            ``"debezium-avro"`` ``{"registry_url": ...}`` (its ``subject`` defaults to
            ``<topic>-value``, Confluent's topic name strategy).
        partitioner: ``"key"`` (the default: Kafka's murmur2 hash of the message key) or
            ``"bucket"``: partition = the key's table bucket modulo the topic's partition
            count, read from the cluster on the first send (see the module docstring);
            a topic's partition count must not change while it is produced to so.
        client_properties: The deployment's connection settings
            (:class:`~cdc_sink.kafka.properties.ClientProperties`): the cluster's SASL and
            TLS settings for the client, and, for ``"debezium-avro"``, the schema
            registry's (``encoder_options`` win). With confluent-kafka the connection is
            checked first (:func:`~cdc_sink.kafka.connection.check_connection`): refused
            credentials raise ``KafkaAuthenticationFailed`` here, not a timeout later.
        **producer_config: Client settings, passed through (see :class:`RawProducer`).

    Raises:
        ValueError: Unknown format or backend.
        InvalidOption: Unknown partitioner, or a client setting the client refuses
            (named, not its value).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        schema: TableSchema | Mapping[str, Any],
        *,
        format: FormatName = "json",
        backend: BackendName = "auto",
        stamp_ts: bool = True,
        validate: bool = True,
        on_error: Callable[[DeliveryFailure], None] | None = None,
        debezium_envelope: bool = True,
        encoder_options: Mapping[str, Any] | None = None,
        partitioner: Partitioner = "key",
        client_properties: ClientProperties | None = None,
        **producer_config: Any,
    ) -> None:
        fmt = get_format(format)  # an unknown format is an InvalidOption naming the valid ones
        encoder_options = dict(encoder_options or {})
        if client_properties is not None and "registry_url" in fmt.encoder_options:
            encoder_options = {**client_properties.registry_options(), **encoder_options}
        if "subject" in fmt.encoder_options:
            encoder_options.setdefault("subject", f"{topic}-value")
        if partitioner not in ("key", "bucket"):
            raise InvalidOption(
                f"partitioner must be 'key' or 'bucket', not {partitioner!r}",
                option="partitioner",
            )
        self.partitioner: Partitioner = partitioner
        self._num_partitions: int | None = None
        self.topic = topic
        self.schema = schema if isinstance(schema, TableSchema) else TableSchema.from_dict(schema)
        self.format: FormatName = format
        #: The options the format's encoder was built with (``subject`` filled in).
        self.encoder_options: Mapping[str, Any] = dict(encoder_options)
        self.stamp_ts = stamp_ts
        self.validate = validate
        self._encode = value_encoder(
            format,
            self.schema,
            debezium_envelope=debezium_envelope,
            encoder_options=encoder_options,
        )
        self.sent = 0
        if client_properties is not None and resolve_backend(backend) == "confluent":
            from cdc_sink.kafka.connection import check_connection

            check_connection(bootstrap_servers, client_properties)
        self._raw = RawProducer(
            bootstrap_servers,
            backend=backend,
            on_error=on_error,
            client_properties=client_properties,
            **producer_config,
        )

    @property
    def backend(self) -> str:
        """The Kafka client in use: ``"confluent"`` or ``"kafka-python"``."""
        return self._raw.backend

    @property
    def raw(self) -> RawProducer:
        """The byte-level producer underneath (delivery counters, failures)."""
        return self._raw

    # -- events -----------------------------------------------------------------------

    def insert(self, key: Any, set: Mapping[str, Any], seq: int | None = None) -> None:
        """Sends an ``insert``: the row becomes exactly ``set`` (others take defaults)."""
        self.send(_event("insert", key, set, seq))

    def upsert(self, key: Any, set: Mapping[str, Any], seq: int | None = None) -> None:
        """Sends an ``upsert``: set these columns, creating the row if it is missing."""
        self.send(_event("upsert", key, set, seq))

    def update(self, key: Any, set: Mapping[str, Any], seq: int | None = None) -> None:
        """Sends an ``update``: set these columns of a live row (rejected if missing)."""
        self.send(_event("update", key, set, seq))

    def delete(self, key: Any, seq: int | None = None) -> None:
        """Sends a ``delete`` of the row with this key."""
        self.send(_event("delete", key, None, seq))

    def send(self, event: Mapping[str, Any]) -> None:
        """Validates, encodes and produces one event ``{"op", "key", "set"?, "seq"?}``.

        A ``{"op": "truncate"}`` (every row of the table deleted) is produced like any
        event, but a sink decoding native JSON applies it only when told to: decoder
        option ``allow_truncate=True`` (the streaming job's ``--allow-truncate``); by
        default it is rejected to the dead letters (docs/security.md).

        Raises:
            ValueError: The event does not fit the schema (the message says why).
        """
        self.send_many([event])

    def send_many(self, events: Iterable[Mapping[str, Any]]) -> int:
        """Validates all events (in one vectorized pass), then produces them in order.

        Nothing is sent when one event is invalid.

        Returns:
            The number of events produced.

        Raises:
            ValueError: An event does not fit the schema (names its index and why).
        """
        batch = list(events)
        if not batch:
            return 0
        keys, key_columns = keyed_events(batch, self.schema, validate=self.validate)
        partitions = self._partitions(key_columns, len(batch))
        # Encode everything before producing anything: an encoder error sends nothing.
        ts = _now_ms() if self.stamp_ts else None
        try:
            values = [self._encode(e if ts is None else {**e, "ts_ms": ts}) for e in batch]
        except (ValueError, TypeError) as exc:
            raise ValueError(f"cannot encode an event as {self.format}: {exc}") from exc
        for key, value, part in zip(keys, values, partitions, strict=True):
            self._raw.produce(self.topic, key, value, timestamp_ms=ts, partition=part)
            self.sent += 1
        return len(batch)

    def _partitions(self, key_columns: list[Any] | None, n: int) -> list[int | None]:
        """The partition of each of ``n`` events (None: the client's partitioner)."""
        if self.partitioner == "key":
            return [None] * n
        if key_columns is None:
            raise ValueError(
                "partitioner='bucket' needs key values of the key columns' types "
                "(these do not cast; send them with validate=True to see why)"
            )
        if self._num_partitions is None:
            self._num_partitions = self._raw.partitions(self.topic)
        parts = bucket_partitions(key_columns, self.schema.num_buckets, self._num_partitions)
        return [int(p) for p in parts.tolist()]

    def send_raw(
        self, key: bytes | None, value: bytes | None, *, headers: Headers | None = None
    ) -> None:
        """Produces bytes as they are, unvalidated (replays, tests of malformed input)."""
        self._raw.produce(
            self.topic,
            key,
            value,
            headers=headers,
            timestamp_ms=_now_ms() if self.stamp_ts else None,
        )
        self.sent += 1

    def message_key(self, event: Mapping[str, Any]) -> bytes:
        """The Kafka key of ``event`` (validating it).

        Raises:
            ValueError: The event does not fit the schema.
        """
        return self.message_keys([event])[0]

    def message_keys(self, events: Sequence[Mapping[str, Any]]) -> list[bytes]:
        """Kafka keys of ``events`` (see :func:`event_keys`; validates unless
        ``validate`` is off).

        Raises:
            ValueError: An event does not fit the schema (names its index and why).
        """
        return event_keys(events, self.schema, validate=self.validate)

    # -- lifecycle --------------------------------------------------------------------

    def flush(self, timeout: float = 30.0) -> int:
        """Waits for deliveries; returns how many records are still undelivered.

        Raises:
            DeliveryError: Some events were not delivered.
        """
        return self._raw.flush(timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Flushes and closes (idempotent).

        Raises:
            DeliveryError: Some events were not delivered.
        """
        self._raw.close(timeout)

    def __enter__(self) -> CdcProducer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._raw.__exit__(exc_type, exc, tb)


def _event(op: str, key: Any, sets: Mapping[str, Any] | None, seq: int | None) -> dict[str, Any]:
    e: dict[str, Any] = {"op": op, "key": key}
    if sets is not None:
        e["set"] = dict(sets)
    if seq is not None:
        e["seq"] = seq
    return e


def value_encoder(
    format: FormatName,
    schema: TableSchema,
    *,
    debezium_envelope: bool = True,
    encoder_options: Mapping[str, Any] | None = None,
) -> EventEncoder:
    """The value encoder of a wire format, for native events: the encoder of the format in
    the registry of :mod:`cdc_sink.formats` (:meth:`~cdc_sink.formats.Format.new_encoder`).

    ``json`` writes the event as it is (:func:`cdc_sink.formats.native_json.encode_json`);
    ``rowv2`` writes the op byte and the row (``seq`` as the sequence column's value; no
    ``ts_ms``: the record timestamp carries it). ``debezium`` writes what a Debezium
    connector would: ``insert`` as op ``c`` and ``upsert``/``update`` as op ``u`` with
    ``after`` = key + ``set`` (+ the sequence column = ``seq``), ``delete`` as op ``d``
    with ``before`` = key (+ sequence column); ``ts_ms`` in the payload. A Debezium
    ``c``/``u`` is applied as an upsert of ``after``, so send full row images (as
    connectors do) when insert or update semantics matter.

    Args:
        format: One of :data:`cdc_sink.formats.FORMATS`.
        schema: The table schema.
        debezium_envelope: Wrap Debezium events in the Kafka Connect ``schema``/``payload``
            envelope (``value.converter.schemas.enable=true``, Debezium's default; other
            formats ignore it).
        encoder_options: More keyword options of the format's encoder (``debezium-avro``:
            ``registry_url``, ``subject``...; see :mod:`cdc_sink.formats`).

    Returns:
        A function from one native event to its message value.

    Raises:
        InvalidOption: ``format`` is not a known format (a ``ValueError``).
    """
    fmt = get_format(format)
    options = {"envelope": debezium_envelope} if "envelope" in fmt.encoder_options else {}
    return fmt.new_encoder(schema, **options, **dict(encoder_options or {}))
