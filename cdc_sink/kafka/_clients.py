"""The two Kafka client backends of the producer SDK, behind one small interface (private).

:class:`Client` is what :class:`~cdc_sink.kafka.producer.RawProducer` needs of a client:
queue a record and report its fate through a callback, serve callbacks, flush, close.
:class:`ConfluentClient` wraps confluent-kafka (librdkafka), :class:`KafkaPythonClient`
kafka-python; :func:`resolve_backend` picks one and :func:`new_client` builds it. Both use
Kafka's Java-compatible murmur2 partitioner, so a key lands on the same partition
whichever client (or a Java/Debezium producer) wrote it. Failures are reported as
:class:`DeliveryFailure` and raised together as :class:`DeliveryError` (both defined in
:mod:`cdc_sink.errors` and re-exported by :mod:`cdc_sink.kafka.producer`, their public
home).

Every confluent-kafka client of the package (the producer's, the admin client, the Kafka
dead-letter sink's) is built by :func:`confluent_client`, which takes Kafka settings as a
deployment writes them for Java clients too (one ``client.properties`` for Spark and for
Python) and gives librdkafka its own spelling of them:

- a Java key store is translated: ``ssl.keystore.type=PEM`` with ``ssl.keystore.key``
  and ``ssl.keystore.certificate.chain`` (the PEM texts) become ``ssl.key.pem`` and
  ``ssl.certificate.pem``, with ``ssl.keystore.location`` (key and certificate in one PEM
  file) ``ssl.key.location`` and ``ssl.certificate.location``; a ``PKCS12`` key store is
  read by librdkafka as it is (its ``ssl.keystore.location`` is PKCS#12); a ``JKS`` one
  it cannot read, so it needs librdkafka's own ``ssl.certificate.location`` and
  ``ssl.key.location`` beside it (else :class:`~cdc_sink.errors.InvalidOption`);
- the settings only the Java client has (:data:`JAVA_ONLY`: its TLS provider and
  protocols, login classes, serializers, buffer sizes...) are left out, with one logged
  note naming them;
- a setting librdkafka still refuses (a name it does not know, a value it does not take,
  a key or certificate it cannot load) is an :class:`~cdc_sink.errors.InvalidOption`
  naming the setting as the deployment wrote it, never its value.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from cdc_sink.errors import DeliveryError, DeliveryFailure, InvalidOption, TopicUnavailable
from cdc_sink.kafka.properties import pem_lines  # OpenSSL wants the PEM lines

__all__ = [
    "JAVA_ONLY",
    "BackendName",
    "Client",
    "ConfluentClient",
    "ConfluentKind",
    "DeliveryError",
    "DeliveryFailure",
    "Headers",
    "KafkaPythonClient",
    "TopicUnavailable",
    "confluent_client",
    "librdkafka_config",
    "new_client",
    "resolve_backend",
]

BackendName = Literal["auto", "confluent", "kafka-python"]
"""A Kafka client library of the producer (``auto``: confluent-kafka when importable)."""
Headers = Sequence[tuple[str, bytes]]
"""Record headers: ``(name, bytes)`` pairs."""
ConfluentKind = Literal["producer", "consumer", "admin"]
"""A confluent-kafka client class."""

_log = logging.getLogger(__name__)

JAVA_ONLY = frozenset(
    {
        "ssl.protocol",
        "ssl.enabled.protocols",
        "ssl.provider",
        "ssl.keymanager.algorithm",
        "ssl.trustmanager.algorithm",
        "ssl.secure.random.implementation",
        "ssl.engine.factory.class",
        "security.providers",
        "sasl.login.class",
        "sasl.login.callback.handler.class",
        "sasl.client.callback.handler.class",
        "sasl.login.refresh.window.factor",
        "sasl.login.refresh.window.jitter",
        "sasl.login.refresh.min.period.seconds",
        "sasl.login.refresh.buffer.seconds",
        "sasl.login.connect.timeout.ms",
        "sasl.login.read.timeout.ms",
        "sasl.login.retry.backoff.ms",
        "sasl.login.retry.backoff.max.ms",
        "sasl.kerberos.ticket.renew.window.factor",
        "sasl.kerberos.ticket.renew.jitter",
        "interceptor.classes",
        "metric.reporters",
        "metrics.num.samples",
        "metrics.sample.window.ms",
        "metrics.recording.level",
        "auto.include.jmx.reporter",
        "default.api.timeout.ms",
        "send.buffer.bytes",
        "receive.buffer.bytes",
        "buffer.memory",
        "max.block.ms",
        "key.serializer",
        "value.serializer",
        "key.deserializer",
        "value.deserializer",
        "partitioner.class",
    }
)
"""Kafka settings of the Java client that librdkafka has no counterpart of: left out of
the Python clients' settings (with a logged note), kept for Spark's Kafka source."""

_KEYSTORE_PEM = ("ssl.keystore.key", "ssl.keystore.certificate.chain")
_LIBRDKAFKA_CERT = (
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.certificate.pem",
    "ssl.key.pem",
)
_ALIASES = {  # librdkafka names some settings by another of their names in its errors
    "request.required.acks": "acks",
    "queue.buffering.max.ms": "linger.ms",
    "sasl.mechanisms": "sasl.mechanism",
    "message.timeout.ms": "delivery.timeout.ms",
}
_NAMED = re.compile(r'property:? "([^"]+)"')
_noted: set[frozenset[str]] = set()


# -- confluent-kafka clients ------------------------------------------------------------


def librdkafka_config(config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """``config`` in librdkafka's names (module docstring), and for each translated name
    the setting it came from.

    Raises:
        InvalidOption: A Java key store librdkafka cannot read (``JKS``) and no client
            certificate in librdkafka's names beside it.
    """
    conf = dict(config)
    origin: dict[str, str] = {}
    dropped = sorted(k for k in conf if k in JAVA_ONLY)
    kind = str(conf.pop("ssl.keystore.type", "")).strip().upper()
    java = {k: conf.pop(k) for k in _KEYSTORE_PEM if k in conf}
    if kind not in ("", "PKCS12") and "ssl.keystore.location" in conf:
        java["ssl.keystore.location"] = conf.pop("ssl.keystore.location")  # not PKCS#12
        if "ssl.keystore.password" in conf:
            dropped.append("ssl.keystore.password")
    if not java:
        pass  # none, or a PKCS#12 key store: librdkafka's ssl.keystore.location reads it
    elif any(k in conf for k in _LIBRDKAFKA_CERT):
        dropped += sorted(java)  # librdkafka's own client certificate settings win
    elif kind in ("", "PEM", "PKCS12") or "ssl.keystore.location" not in java:
        _pem_keystore(conf, origin, java)
    else:
        raise InvalidOption(
            f"ssl.keystore.type {kind}: librdkafka (the producer, the admin client, the Kafka "
            "dead-letter sink) reads a PEM or PKCS12 key store only: use one, or add "
            "ssl.certificate.location and ssl.key.location (PEM files) beside the "
            f"{kind} key store (Spark's Kafka source keeps using that)",
            option="ssl.keystore.type",
        )
    for k in dropped:
        conf.pop(k, None)
    if dropped and frozenset(dropped) not in _noted:
        _noted.add(frozenset(dropped))
        _log.info(
            "Kafka settings of the Java client left out of the Python clients' (librdkafka "
            "has no counterpart; Spark's Kafka source still uses them): %s",
            ", ".join(dropped),
        )
    return conf, origin


def _pem_keystore(conf: dict[str, Any], origin: dict[str, str], java: dict[str, Any]) -> None:
    """Java's PEM key store in librdkafka's names."""
    pairs = {
        "ssl.keystore.key": ("ssl.key.pem",),
        "ssl.keystore.certificate.chain": ("ssl.certificate.pem",),
        "ssl.keystore.location": ("ssl.key.location", "ssl.certificate.location"),
    }
    for key, value in java.items():
        for name in pairs[key]:
            text = isinstance(value, str) and key != "ssl.keystore.location"
            conf[name] = pem_lines(value) if text and "-----BEGIN" in value else value
            origin[name] = key


def confluent_client(kind: ConfluentKind, config: Mapping[str, Any]) -> Any:
    """A confluent-kafka client (``Producer``, ``Consumer`` or ``AdminClient``) of
    ``config`` in librdkafka's names (:func:`librdkafka_config`).

    Raises:
        InvalidOption: A setting librdkafka refuses (the error names it, not its value).
    """
    from confluent_kafka import Consumer, KafkaException, Producer
    from confluent_kafka.admin import AdminClient

    conf, origin = librdkafka_config(config)
    factory = {"producer": Producer, "consumer": Consumer, "admin": AdminClient}[kind]
    try:
        return factory(conf)
    except KafkaException as exc:
        err: Any = exc.args[0] if exc.args else exc
        text = err.str() if hasattr(err, "str") else str(exc)
    except (TypeError, ValueError) as exc:
        text = f"{type(exc).__name__}"
    raise _refused(kind, text, conf, origin) from None


def _refused(
    kind: str, text: str, conf: Mapping[str, Any], origin: Mapping[str, str]
) -> InvalidOption:
    """The error of a setting librdkafka refused, by what it said (``text``), naming the
    setting as the deployment wrote it and never its value."""
    found = _NAMED.search(text)
    named = found.group(1) if found else None
    if named is None:  # "ssl.key.pem failed: ...", "Failed to open ssl.keystore.location"
        named = next((k for k in sorted(conf, key=len, reverse=True) if k in text), None)
    if named is None and "SASL mechanism" in text:
        named = "sasl.mechanism"
    name = origin.get(named or "", _ALIASES.get(named or "", named))
    if "No such configuration property" in text:
        why = "is not a setting librdkafka knows"
        if name and name.startswith(("ssl.", "sasl.")):
            why += " (a Java client setting? the Python clients read librdkafka's names)"
    elif "Invalid value" in text or "Unsupported" in text:
        why = "has a value librdkafka does not take"
    elif name is not None:
        why = "could not be loaded (a file that cannot be read, or not a PEM key or certificate)"
    else:
        why = "was refused"
    what = f"the Kafka setting {name!r}" if name else "a Kafka setting"
    return InvalidOption(
        f"confluent-kafka could not build its {kind} client: {what} {why}",
        option=name or "kafka",
    )


# -- backends ---------------------------------------------------------------------------


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

        conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap_servers,
            "partitioner": "murmur2_random",  # Java's partitioner: same key, same partition
            "enable.idempotence": True,  # acks=all, no duplicates or reordering on retry
            "linger.ms": 5,
        }
        conf.update(config)
        self._p = confluent_client("producer", conf)

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
        unknown = sorted(set(conf) - set(KafkaProducer.DEFAULT_CONFIG))
        if unknown:  # kafka-python's own error would show the values
            raise InvalidOption(
                f"kafka-python's producer takes no setting {', '.join(map(repr, unknown))}",
                option=unknown[0],
            )
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
