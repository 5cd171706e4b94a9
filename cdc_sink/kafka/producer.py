"""The producer SDK: change events of one table schema onto a Kafka topic.

:class:`CdcProducer` validates each event against the table schema (the same checks the
sink makes, :meth:`cdc_sink.ChangeBatch.from_events`), encodes it in one of the wire
formats of :mod:`cdc_sink.formats` and produces it with

- **key** = the event's primary key, canonical JSON of the key values in key order
  (``[42]``, ``["eu", 7]``; :func:`encode_key`). Equal keys give equal bytes, so the
  partitioner sends every event of a key to one partition and Kafka keeps their order.
  Both backends use Kafka's Java-compatible murmur2 partitioner, so a key lands on the
  same partition whichever client (or a Java/Debezium producer) wrote it;
- **value** = the encoded event; with ``stamp_ts`` the event carries ``ts_ms``, the
  producer's wall clock in milliseconds at produce time (JSON and Debezium formats), and
  the Kafka record timestamp is set to the same instant (every format), so the job can
  measure freshness end to end.

:class:`RawProducer` is the byte-level half (also used by the Kafka dead-letter sink):
two backends behind one interface, confluent-kafka (librdkafka) by default and
kafka-python when confluent-kafka cannot be imported or ``backend="kafka-python"``.
Deliveries are asynchronous; failed ones are collected and raised as one
:class:`DeliveryError` from :meth:`RawProducer.flush` (or handed to an ``on_error``
callback instead)::

    with CdcProducer("127.0.0.1:9092", "orders", schema) as p:
        p.insert({"order_id": 1}, {"status": "new", "amount": "12.50"}, seq=1)
        p.update({"order_id": 1}, {"status": "paid"}, seq=2)
        p.delete({"order_id": 1}, seq=3)
    # leaving the block flushes; an undelivered event raises DeliveryError
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import decimal
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal

from cdc_sink.errors import CdcSinkError
from cdc_sink.schema import TableSchema

__all__ = [
    "BackendName",
    "CdcProducer",
    "DeliveryError",
    "DeliveryFailure",
    "FormatName",
    "RawProducer",
    "encode_key",
    "event_keys",
    "resolve_backend",
    "value_encoder",
]

FormatName = Literal["json", "rowv2", "debezium"]
BackendName = Literal["auto", "confluent", "kafka-python"]
Headers = Sequence[tuple[str, bytes]]
_EVENT_FIELDS = frozenset({"op", "key", "set", "seq", "ts_ms"})


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
        detail = (f"; first: topic {first.topic!r} key {first.key!r}: {first.code}: "
                  f"{first.error}" if first else "")
        super().__init__(f"{len(self.failures)} record(s) were not delivered{detail}")


# -- backends ---------------------------------------------------------------------------


def resolve_backend(backend: BackendName = "auto") -> Literal["confluent", "kafka-python"]:
    """Picks the client library: confluent-kafka when importable, else kafka-python.

    Raises:
        ValueError: ``backend`` is not one of the names.
        ImportError: The requested library is not installed.
    """
    if backend not in ("auto", "confluent", "kafka-python"):
        raise ValueError(f"backend must be 'auto', 'confluent' or 'kafka-python', "
                         f"got {backend!r}")
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


class _Client:
    """What a backend does: queue a record, report its fate through a callback."""

    def produce(self, topic: str, key: bytes | None, value: bytes | None,
                headers: Headers | None, timestamp_ms: int | None,
                done: Callable[[DeliveryFailure | None], None]) -> None:
        raise NotImplementedError

    def poll(self) -> None:
        """Serves delivery callbacks that are ready (no-op for threaded clients)."""

    def flush(self, timeout: float) -> None:
        raise NotImplementedError

    def close(self, timeout: float) -> None:
        raise NotImplementedError


class _ConfluentClient(_Client):
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

    def produce(self, topic: str, key: bytes | None, value: bytes | None,
                headers: Headers | None, timestamp_ms: int | None,
                done: Callable[[DeliveryFailure | None], None]) -> None:
        from confluent_kafka import KafkaException

        def on_delivery(err: Any, msg: Any) -> None:
            if err is None:
                done(None)
            else:
                part = msg.partition()
                done(DeliveryFailure(topic=msg.topic() or topic, key=msg.key(), error=err.str(),
                                     code=err.name(), retriable=bool(err.retriable()),
                                     partition=-1 if part is None else int(part)))

        while True:
            try:
                self._p.produce(topic, value=value, key=key,
                                headers=list(headers) if headers else None,
                                timestamp=timestamp_ms or 0, on_delivery=on_delivery)
                return
            except BufferError:  # local queue full: serve callbacks, then retry
                self._p.poll(0.05)
            except KafkaException as exc:  # refused before queueing (size, unknown topic)
                err = exc.args[0]
                done(DeliveryFailure(topic=topic, key=key, error=err.str(), code=err.name(),
                                     retriable=bool(err.retriable())))
                return

    def poll(self) -> None:
        self._p.poll(0)

    def flush(self, timeout: float) -> None:
        self._p.flush(timeout)

    def close(self, timeout: float) -> None:
        self._p.flush(timeout)
        close = getattr(self._p, "close", None)  # confluent-kafka >= 2.6
        if close is not None:
            close()


class _KafkaPythonClient(_Client):
    def __init__(self, bootstrap_servers: str, config: Mapping[str, Any]) -> None:
        from kafka import KafkaProducer

        conf: dict[str, Any] = {"acks": "all", "linger_ms": 5}
        conf.update(config)
        # kafka-python's DefaultPartitioner is murmur2, as Java's and librdkafka's
        # murmur2_random: one key maps to one partition whichever client produced it.
        self._p = KafkaProducer(bootstrap_servers=bootstrap_servers.split(","), **conf)

    def produce(self, topic: str, key: bytes | None, value: bytes | None,
                headers: Headers | None, timestamp_ms: int | None,
                done: Callable[[DeliveryFailure | None], None]) -> None:
        from kafka.errors import KafkaError

        def fail(exc: BaseException) -> None:
            done(DeliveryFailure(topic=topic, key=key, error=str(exc) or type(exc).__name__,
                                 code=type(exc).__name__,
                                 retriable=bool(getattr(exc, "retriable", False))))

        try:
            fut = self._p.send(topic, value=value, key=key,
                               headers=list(headers) if headers else None,
                               timestamp_ms=timestamp_ms)
        except KafkaError as exc:  # refused before queueing (metadata timeout, size)
            fail(exc)
            return
        fut.add_callback(lambda _md: done(None))
        fut.add_errback(fail)

    def flush(self, timeout: float) -> None:
        from kafka.errors import KafkaTimeoutError

        with contextlib.suppress(KafkaTimeoutError):  # the caller counts what is pending
            self._p.flush(timeout=timeout)

    def close(self, timeout: float) -> None:
        self._p.close(timeout=timeout)


# -- byte-level producer ----------------------------------------------------------------


class RawProducer:
    """Produces records (bytes) and collects failed deliveries.

    Args:
        bootstrap_servers: ``host:port[,host:port...]``.
        backend: ``"confluent"``, ``"kafka-python"`` or ``"auto"`` (confluent-kafka when
            it can be imported).
        on_error: Called with each failed delivery instead of raising them from
            :meth:`flush` (it runs on the client's callback thread).
        **config: Client settings passed through unchanged (librdkafka names such as
            ``"message.max.bytes"`` for confluent-kafka, keyword names such as
            ``max_request_size`` for kafka-python).
    """

    def __init__(self, bootstrap_servers: str, *, backend: BackendName = "auto",
                 on_error: Callable[[DeliveryFailure], None] | None = None,
                 **config: Any) -> None:
        self.backend = resolve_backend(backend)
        self._on_error = on_error
        self._failures: list[DeliveryFailure] = []
        self._pending = 0
        self._delivered = 0
        self._lock = threading.Lock()
        self._closed = False
        self._client: _Client = (_ConfluentClient(bootstrap_servers, config)
                                 if self.backend == "confluent"
                                 else _KafkaPythonClient(bootstrap_servers, config))

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

    def produce(self, topic: str, key: bytes | None, value: bytes | None, *,
                headers: Headers | None = None, timestamp_ms: int | None = None) -> None:
        """Queues one record (delivery is reported later, see :meth:`flush`).

        Args:
            topic: Destination topic.
            key: Record key (``None`` for none).
            value: Record value (``None`` for a tombstone).
            headers: ``(name, bytes)`` pairs.
            timestamp_ms: Record timestamp (CreateTime); the client's clock when omitted.

        Raises:
            RuntimeError: The producer is closed.
        """
        if self._closed:
            raise RuntimeError("the producer is closed")
        with self._lock:
            self._pending += 1
        try:
            self._client.produce(topic, key, value, headers, timestamp_ms, self._done)
        except BaseException:  # refused by the client's argument checks: not queued
            with self._lock:
                self._pending -= 1
            raise
        self._client.poll()

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
            raise DeliveryError([DeliveryFailure(
                topic="", key=None, code="_TIMED_OUT",
                error=f"{self.pending} record(s) still queued after {timeout}s")])

    def __enter__(self) -> RawProducer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        else:  # do not mask the body's exception with a delivery error
            with contextlib.suppress(DeliveryError):
                self.close()


# -- keys ---------------------------------------------------------------------------------


def _json_scalar(v: Any) -> Any:
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, dt.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return v.isoformat()
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, bytes):
        return base64.b64encode(v).decode("ascii")
    return v


def encode_key(values: Sequence[Any]) -> bytes:
    """The Kafka key of an event: canonical JSON of its key values in key order.

    Pass values as Arrow gives them back for the key columns' types (so ``Decimal("1.5")``
    of a ``decimal128(12, 2)`` key is ``Decimal("1.50")``): equal keys, equal bytes.
    Decimals are strings, dates and timestamps ISO strings (timestamps in UTC, no
    offset), binaries base64.

    Args:
        values: Key values in primary-key order.

    Returns:
        UTF-8 JSON, e.g. ``b'[42]'`` or ``b'["eu",7]'``.
    """
    return json.dumps([_json_scalar(v) for v in values], separators=(",", ":"),
                      ensure_ascii=False).encode("utf-8")


# -- the CDC producer ---------------------------------------------------------------------


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class CdcProducer:
    """Produces change events of one table to a Kafka topic (see the module docstring).

    Args:
        bootstrap_servers: ``host:port[,host:port...]``.
        topic: The topic the events go to.
        schema: The table schema (a :class:`TableSchema` or its dictionary form).
        format: ``"json"`` (native JSON), ``"rowv2"`` or ``"debezium"``.
        backend: Kafka client, see :class:`RawProducer`.
        stamp_ts: Stamp ``ts_ms`` (produce-time wall clock) on every event and record.
        validate: Check every event against the schema before sending (on by default).
        on_error: Receives failed deliveries instead of :meth:`flush` raising them.
        debezium_envelope: With ``format="debezium"``, wrap events in the Kafka Connect
            envelope (see :func:`value_encoder`).
        **producer_config: Client settings, passed through (see :class:`RawProducer`).

    Raises:
        ValueError: Unknown format or backend.
    """

    def __init__(self, bootstrap_servers: str, topic: str,
                 schema: TableSchema | Mapping[str, Any], *, format: FormatName = "json",
                 backend: BackendName = "auto", stamp_ts: bool = True, validate: bool = True,
                 on_error: Callable[[DeliveryFailure], None] | None = None,
                 debezium_envelope: bool = True, **producer_config: Any) -> None:
        if format not in ("json", "rowv2", "debezium"):
            raise ValueError(f"format must be 'json', 'rowv2' or 'debezium', got {format!r}")
        self.topic = topic
        self.schema = schema if isinstance(schema, TableSchema) else TableSchema.from_dict(
            schema)
        self.format: FormatName = format
        self.stamp_ts = stamp_ts
        self.validate = validate
        self._encode = value_encoder(format, self.schema, debezium_envelope=debezium_envelope)
        self.sent = 0
        self._raw = RawProducer(bootstrap_servers, backend=backend, on_error=on_error,
                                **producer_config)

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
        keys = self.message_keys(batch)
        # Encode everything before producing anything: an encoder error sends nothing.
        ts = _now_ms() if self.stamp_ts else None
        try:
            values = [self._encode(e if ts is None else {**e, "ts_ms": ts}) for e in batch]
        except (ValueError, TypeError) as exc:
            raise ValueError(f"cannot encode an event as {self.format}: {exc}") from exc
        for key, value in zip(keys, values, strict=True):
            self._raw.produce(self.topic, key, value, timestamp_ms=ts)
            self.sent += 1
        return len(batch)

    def send_raw(self, key: bytes | None, value: bytes | None, *,
                 headers: Headers | None = None) -> None:
        """Produces bytes as they are, unvalidated (replays, tests of malformed input)."""
        self._raw.produce(self.topic, key, value, headers=headers,
                          timestamp_ms=_now_ms() if self.stamp_ts else None)
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

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._raw.__exit__(exc_type, exc, tb)


def event_keys(events: Sequence[Mapping[str, Any]], schema: TableSchema, *,
               validate: bool = True) -> list[bytes]:
    """Kafka keys of ``events``: :func:`encode_key` of their key values cast to the key
    columns' types, after validating the events against ``schema`` (in one vectorized
    pass, :meth:`cdc_sink.ChangeBatch.from_events`).

    Args:
        events: Native events ``{"op", "key", "set"?, "seq"?, "ts_ms"?}``.
        schema: The table schema.
        validate: Check the events (off: only the keys are read, as given).

    Returns:
        One key per event.

    Raises:
        ValueError: An event does not fit the schema (names its index and why).
    """
    from cdc_sink.changes import ChangeBatch

    for i, e in enumerate(events):
        if not isinstance(e, Mapping):
            raise ValueError(f"event #{i} is not a mapping: {type(e).__name__}")
        extra = sorted(set(e) - _EVENT_FIELDS)
        if extra and validate:
            raise ValueError(f"event #{i}: unknown field(s) {extra}; an event has "
                             f"{sorted(_EVENT_FIELDS)}")
    if validate:
        batch, rejects = ChangeBatch.from_events(events, schema)
        if len(rejects):
            pos, reason = int(rejects.positions[0]), rejects.reasons[0]
            e = events[pos]
            raise ValueError(f"invalid {e.get('op')!r} event #{pos} "
                             f"(key {e.get('key')!r}): {reason}")
        columns = [k.to_pylist() for k in batch.keys]
    else:
        columns = [_loose_key_column(events, name, schema) for name in schema.primary_key]
    return [encode_key(vals) for vals in zip(*columns, strict=True)]


def _event(op: str, key: Any, sets: Mapping[str, Any] | None,
           seq: int | None) -> dict[str, Any]:
    e: dict[str, Any] = {"op": op, "key": key}
    if sets is not None:
        e["set"] = dict(sets)
    if seq is not None:
        e["seq"] = seq
    return e


def _loose_key_column(events: Sequence[Mapping[str, Any]], name: str,
                      schema: TableSchema) -> list[Any]:
    """Key values of unvalidated events (cast through Arrow when possible)."""
    import pyarrow as pa

    one = len(schema.primary_key) == 1
    raw = []
    for e in events:
        k = e.get("key")
        raw.append(k.get(name) if isinstance(k, Mapping) else (k if one else None))
    try:
        return list(pa.array(raw, type=schema.column(name).type).to_pylist())
    except (pa.ArrowException, TypeError, ValueError, decimal.InvalidOperation):
        return raw


def value_encoder(format: FormatName, schema: TableSchema, *,
                  debezium_envelope: bool = True) -> Callable[[Mapping[str, Any]], bytes]:
    """The value encoder of a wire format, for native events (from :mod:`cdc_sink.formats`).

    ``json`` writes the event as it is (:func:`cdc_sink.formats.native_json.encode_json`);
    ``rowv2`` writes the op byte and the row (``seq`` as the sequence column's value; no
    ``ts_ms``: the record timestamp carries it). ``debezium`` writes what a Debezium
    connector would: ``insert`` as op ``c`` and ``upsert``/``update`` as op ``u`` with
    ``after`` = key + ``set`` (+ the sequence column = ``seq``), ``delete`` as op ``d``
    with ``before`` = key (+ sequence column); ``ts_ms`` in the payload. A Debezium
    ``c``/``u`` is applied as an upsert of ``after``, so send full row images (as
    connectors do) when insert or update semantics matter.

    Args:
        format: ``json``, ``rowv2`` or ``debezium``.
        schema: The table schema.
        debezium_envelope: Wrap Debezium events in the Kafka Connect ``schema``/``payload``
            envelope (``value.converter.schemas.enable=true``, Debezium's default).

    Returns:
        A function from one native event to its message value.
    """
    if format == "json":
        from cdc_sink.formats.native_json import encode_json

        return lambda e: encode_json(e)
    if format == "rowv2":
        from cdc_sink.formats.rowv2 import encode_event

        return lambda e: encode_event(e, schema)
    if format != "debezium":
        raise ValueError(f"format must be 'json', 'rowv2' or 'debezium', got {format!r}")
    from cdc_sink.formats.debezium import encode_debezium

    seq_col = schema.sequence_column
    order = {c.name: i for i, c in enumerate(schema.columns)}

    def encode(e: Mapping[str, Any]) -> bytes:
        key = e.get("key")
        if not isinstance(key, Mapping):
            key = {schema.primary_key[0]: key}
        row = dict(key) if e["op"] == "delete" else {**key, **(e.get("set") or {})}
        if seq_col is not None and e.get("seq") is not None:
            row[seq_col] = e["seq"]
        row = dict(sorted(row.items(), key=lambda kv: order.get(kv[0], len(order))))
        ts = e.get("ts_ms")
        if e["op"] == "delete":
            return encode_debezium("d", row, None, schema, envelope=debezium_envelope,
                                   ts_ms=ts)
        op = "c" if e["op"] == "insert" else "u"
        return encode_debezium(op, None, row, schema, envelope=debezium_envelope, ts_ms=ts)

    return encode
