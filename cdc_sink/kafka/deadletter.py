"""Dead-letter sinks: where the job puts the Kafka records it cannot apply.

The sink hands every reject of a micro-batch to ``dead_letter.write(records)`` as one
Arrow table of :data:`DEAD_LETTER_SCHEMA`::

    topic: string | partition: int32 | offset: int64 | key: binary | value: binary
    reason: string | batch_id: int64 | app_id: string

**Exactly once.** The streaming sink does not write dead letters itself: a batch's
rejects are stored in the table, atomically with the version that rejected them
(:mod:`cdc_sink.storage.rejects`), and :func:`forward` copies each committed version's
rejects to the sink with :meth:`DeadLetterSink.write_version`, in version order, resuming
after the last version the sink already holds (:meth:`DeadLetterSink.forwarded_version`).
Both sinks here make that step idempotent, so a crash anywhere neither loses nor
duplicates a dead letter:

- Parquet: one file per version, published with ``link()`` (create-if-absent): a
  replayed forward finds the file and skips it; the cursor is the newest file's version.
- Kafka: a transactional producer writes a version's records and moves the cursor (the
  committed offset of a consumer group of the sink's own, on partition 0 of the
  dead-letter topic, set to ``version + 1``) in one Kafka transaction
  (``send_offsets_to_transaction``), as Kafka Streams does; readers of the topic use
  ``isolation.level=read_committed``. This needs the confluent-kafka backend; with
  kafka-python the forwarder keeps its cursor in the table directory and a crash between
  the write and the cursor update can repeat one version (at least once).

A sink of your own may implement only ``write(records)``: it then gets the cursor-file
behaviour (at least once). ``write`` is also still how tests and tools write records
directly. Both implementations are picklable (a Spark task may carry them):

- :class:`KafkaDeadLetter` re-produces each record to a dead-letter topic: the original
  key and value bytes, and headers ``topic``, ``partition``, ``offset``, ``reason``,
  ``batch_id``, ``app_id`` (UTF-8 strings). ``write`` returns once Kafka acknowledged
  every record and raises :class:`~cdc_sink.kafka.producer.DeliveryError` otherwise.
- :class:`ParquetDeadLetter` writes one Parquet file per batch id per attempt, atomically
  (a hidden temporary file, fsync, rename, fsync of the directory)::

      <path>/
        batch-000000000007-<attempt>.parquet     attempt = <time_ns>-<pid>-<random>
        .tmp-batch-...parquet                    only while being written

:func:`from_uri` builds either from ``kafka://host:port[,host:port]/topic``,
``file:///dir`` or a plain path.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cdc_sink.kafka.producer import BackendName, RawProducer

if TYPE_CHECKING:
    from cdc_sink.table import Table

__all__ = [
    "DEAD_LETTER_SCHEMA",
    "HEADER_NAMES",
    "DeadLetterSink",
    "KafkaDeadLetter",
    "ParquetDeadLetter",
    "dedupe",
    "forward",
    "from_uri",
    "records_from_rows",
]

DEAD_LETTER_SCHEMA = pa.schema([
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("reason", pa.string()),
    pa.field("batch_id", pa.int64()),
    pa.field("app_id", pa.string()),
])
"""The columns of the records handed to ``write`` (and read back by ``read``)."""

HEADER_NAMES = ("topic", "partition", "offset", "reason", "batch_id", "app_id")
"""The headers :class:`KafkaDeadLetter` puts on each record (its source and the reason)."""

_SOURCE = ["topic", "partition", "offset"]


def _conform(records: pa.Table | pa.RecordBatch) -> pa.Table:
    """``records`` with exactly the dead-letter columns and types.

    Raises:
        ValueError: A column is missing or cannot be cast.
    """
    if isinstance(records, pa.RecordBatch):
        records = pa.Table.from_batches([records])
    missing = [f.name for f in DEAD_LETTER_SCHEMA if f.name not in records.column_names]
    if missing:
        raise ValueError(f"dead-letter records lack column(s) {missing}")
    try:
        return pa.table([records.column(f.name).cast(f.type) for f in DEAD_LETTER_SCHEMA],
                        schema=DEAD_LETTER_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(f"dead-letter records do not fit DEAD_LETTER_SCHEMA: {exc}") from exc


def dedupe(records: pa.Table) -> pa.Table:
    """Keeps the first record of each ``(topic, partition, offset)`` (replays write twice).

    Rows keep their order; records without a source position are all kept.
    """
    if records.num_rows == 0:
        return records
    idx = pa.array(np.arange(records.num_rows, dtype=np.int64))
    keyed = pa.table({**{c: records.column(c) for c in _SOURCE}, "__i": idx})
    firsts = keyed.group_by(_SOURCE, use_threads=False).aggregate([("__i", "min")])
    keep = pc.sort_indices(firsts.column("__i_min"))
    return records.take(pc.take(firsts.column("__i_min"), keep))


class DeadLetterSink:
    """Where rejected records go: anything with ``write(records: pa.Table) -> None``.

    Attributes:
        exactly_once: ``write_version`` and ``forwarded_version`` are idempotent and
            durable together (else :func:`forward` keeps a cursor file, at least once).
    """

    exactly_once: bool = False

    def write(self, records: pa.Table) -> None:
        """Stores ``records`` (columns of :data:`DEAD_LETTER_SCHEMA`) durably."""
        raise NotImplementedError

    def write_version(self, records: pa.Table, *, app_id: str, version: int) -> None:
        """Stores the dead letters of one table version of ``app_id`` (all at once)."""
        self.write(records)

    def forwarded_version(self, app_id: str) -> int | None:
        """The newest table version of ``app_id`` this sink holds (None: unknown/none)."""
        return None

    def close(self) -> None:
        """Releases clients (a later write opens new ones)."""

    def read(self, *, deduplicate: bool = True) -> pa.Table:
        """Every record stored so far (one per source position with ``deduplicate``)."""
        raise NotImplementedError


# -- Parquet ------------------------------------------------------------------------------


class ParquetDeadLetter(DeadLetterSink):
    """Dead letters as Parquet files in a directory (see the module docstring).

    Args:
        path: The directory (created when missing).
    """

    exactly_once = True

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"ParquetDeadLetter({str(self.path)!r})"

    def write_version(self, records: pa.Table, *, app_id: str, version: int) -> None:
        """Publishes ``version-<v>-<app>.parquet`` unless it exists (idempotent)."""
        table = _conform(records)
        self.path.mkdir(parents=True, exist_ok=True)
        name = f"version-{version:020d}-{_app_tag(app_id)}.parquet"
        if not (self.path / name).exists():
            self._write_atomic(table, name)

    def forwarded_version(self, app_id: str) -> int | None:
        """The newest version file of ``app_id`` (None: none yet)."""
        tag = _app_tag(app_id)
        versions = [int(p.name.split("-")[1]) for p in self.path.glob(f"version-*-{tag}.parquet")
                    ] if self.path.is_dir() else []
        return max(versions) if versions else None

    def write(self, records: pa.Table) -> None:
        """Writes one file per batch id in ``records`` (nothing for no records).

        Raises:
            ValueError: ``records`` does not fit :data:`DEAD_LETTER_SCHEMA`.
        """
        table = _conform(records)
        if table.num_rows == 0:
            return
        self.path.mkdir(parents=True, exist_ok=True)
        batch_ids = table.column("batch_id").fill_null(-1)
        attempt = f"{time.time_ns()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        for bid in pc.unique(batch_ids).to_pylist():
            part = table.filter(pc.equal(batch_ids, bid))
            name = f"batch-{bid:012d}-{attempt}.parquet" if bid >= 0 else \
                f"batch-none-{attempt}.parquet"
            self._write_atomic(part, name)

    def _write_atomic(self, table: pa.Table, name: str) -> None:
        """Publishes ``name`` complete and fsynced, or not at all; never replaces a file
        of that name (``link`` is create-if-absent: a concurrent or repeated publish of
        the same name is a no-op)."""
        tmp = self.path / f".tmp-{name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            with open(tmp, "wb") as f:
                pq.write_table(table, f, compression="zstd")
                f.flush()
                os.fsync(f.fileno())
            with contextlib.suppress(FileExistsError):
                os.link(tmp, self.path / name)
        finally:
            tmp.unlink(missing_ok=True)
        _fsync_dir(self.path)

    def files(self) -> list[Path]:
        """The committed files, oldest first (temporary files are not listed)."""
        if not self.path.is_dir():
            return []
        return sorted(p for pattern in ("batch-*.parquet", "version-*.parquet")
                      for p in self.path.glob(pattern) if p.is_file())

    def read(self, *, deduplicate: bool = True) -> pa.Table:
        """Every dead letter written so far, batch order."""
        tables = [pq.read_table(p, schema=DEAD_LETTER_SCHEMA) for p in self.files()]
        if not tables:
            return DEAD_LETTER_SCHEMA.empty_table()
        out = pa.concat_tables(tables)
        return dedupe(out) if deduplicate else out


# -- Kafka --------------------------------------------------------------------------------


class KafkaDeadLetter(DeadLetterSink):
    """Dead letters re-produced to a Kafka topic (see the module docstring).

    Args:
        bootstrap_servers: ``host:port[,host:port...]``.
        topic: The dead-letter topic. When it does not exist, the first write creates it
            (1 partition, replication factor ``min(3, brokers)``), as Kafka Connect does
            for its dead-letter queue; without the right to create topics, create it
            beforehand.
        backend: Kafka client, see :class:`~cdc_sink.kafka.producer.RawProducer`.
        timeout: Seconds ``write`` waits for Kafka to acknowledge the records.
        **config: Client settings passed to the producer.
    """

    def __init__(self, bootstrap_servers: str, topic: str, *, backend: BackendName = "auto",
                 timeout: float = 60.0, **config: Any) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.backend: BackendName = backend
        self.timeout = timeout
        self.config = dict(config)
        self._producer: RawProducer | None = None
        self._txn: dict[str, Any] = {}  # app_id -> (transactional producer, consumer)
        self._pid = os.getpid()
        self._topic_checked = False
        from cdc_sink.kafka.producer import resolve_backend

        self.exactly_once = resolve_backend(backend) == "confluent"

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
            CdcSinkError: The topic neither exists nor could be created (the message
                names the topic and the broker's reason).
        """
        if self._topic_checked:
            return
        try:
            from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]
        except ImportError:  # kafka-python only: producing tells
            self._topic_checked = True
            return
        from confluent_kafka import KafkaException

        from cdc_sink.errors import CdcSinkError
        from cdc_sink.kafka.broker import create_topic

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        try:
            md = admin.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise CdcSinkError(f"dead-letter topic {self.topic!r}: cannot reach "
                               f"{self.bootstrap_servers}: {exc}") from exc
        if self.topic not in md.topics or md.topics[self.topic].error is not None:
            try:
                create_topic(self.bootstrap_servers, self.topic, 1,
                             replication_factor=max(1, min(3, len(md.brokers))),
                             timeout=self.timeout)
            except CdcSinkError as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):  # another writer made it
                    raise CdcSinkError(f"dead-letter topic {self.topic!r} does not exist and "
                                       f"could not be created: {exc}") from exc
        self._topic_checked = True

    def _transactional(self, app_id: str) -> tuple[Any, Any]:
        """This app's transactional producer and cursor consumer (confluent-kafka)."""
        if self._pid != os.getpid():
            self._txn, self._producer, self._pid = {}, None, os.getpid()
        pair = self._txn.get(app_id)
        if pair is None:
            from confluent_kafka import Consumer, Producer

            self.ensure_topic()

            tag = _app_tag(app_id)
            producer = Producer({**self.config, "bootstrap.servers": self.bootstrap_servers,
                                 "transactional.id": f"cdc_sink-dlq-{self.topic}-{tag}"})
            producer.init_transactions(self.timeout)  # fences a previous incarnation
            consumer = Consumer({"bootstrap.servers": self.bootstrap_servers,
                                 "group.id": self.cursor_group(app_id),
                                 "enable.auto.commit": False,
                                 "isolation.level": "read_committed"})
            pair = (producer, consumer)
            self._txn[app_id] = pair
        return pair

    def cursor_group(self, app_id: str) -> str:
        """The consumer group whose committed offset is this sink's cursor for ``app_id``."""
        return f"cdc_sink-dlq-cursor-{self.topic}-{_app_tag(app_id)}"

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

        table = _conform(records)
        producer, consumer = self._transactional(app_id)
        producer.begin_transaction()
        try:
            cols = {name: table.column(name).to_pylist() for name in DEAD_LETTER_SCHEMA.names}
            for i in range(table.num_rows):
                headers = [(h, b"" if cols[h][i] is None else str(cols[h][i]).encode())
                           for h in HEADER_NAMES]
                producer.produce(self.topic, value=cols["value"][i], key=cols["key"][i],
                                 headers=headers)
                if i % 10_000 == 9_999:
                    producer.poll(0)
            producer.send_offsets_to_transaction(
                [TopicPartition(self.topic, 0, version + 1)],
                consumer.consumer_group_metadata(), self.timeout)
            producer.commit_transaction(self.timeout)
        except BaseException:
            with contextlib.suppress(Exception):
                producer.abort_transaction(self.timeout)
            raise

    def _client(self) -> RawProducer:
        if self._producer is None or self._pid != os.getpid():  # fork-safe
            self.ensure_topic()
            self._producer = RawProducer(self.bootstrap_servers, backend=self.backend,
                                         **self.config)
            self._pid = os.getpid()
        return self._producer

    def write(self, records: pa.Table) -> None:
        """Produces every record and waits until Kafka acknowledged all of them.

        Raises:
            ValueError: ``records`` does not fit :data:`DEAD_LETTER_SCHEMA`.
            DeliveryError: Kafka did not accept some records (or not within ``timeout``).
        """
        table = _conform(records)
        if table.num_rows == 0:
            return
        producer = self._client()
        cols = {name: table.column(name).to_pylist() for name in DEAD_LETTER_SCHEMA.names}
        for i in range(table.num_rows):
            headers = [(h, b"" if cols[h][i] is None else str(cols[h][i]).encode("utf-8"))
                       for h in HEADER_NAMES]
            producer.produce(self.topic, cols["key"][i], cols["value"][i], headers=headers)
        left = producer.flush(self.timeout)
        if left:
            from cdc_sink.kafka.producer import DeliveryError, DeliveryFailure

            raise DeliveryError([DeliveryFailure(
                topic=self.topic, key=None, code="_TIMED_OUT",
                error=f"{left} dead letter(s) unacknowledged after {self.timeout}s")])

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
        rows = _consume_all(self.bootstrap_servers, self.topic, timeout)
        cols: dict[str, list[Any]] = {f.name: [] for f in DEAD_LETTER_SCHEMA}
        for key, value, headers in rows:
            h = {k: (v.decode("utf-8") if v is not None else None) for k, v in headers}
            cols["key"].append(key)
            cols["value"].append(value)
            for name in HEADER_NAMES:
                raw = h.get(name) or None
                cols[name].append(int(raw) if raw is not None and name in
                                  ("partition", "offset", "batch_id") else raw)
        out = pa.table(cols, schema=DEAD_LETTER_SCHEMA)
        return dedupe(out) if deduplicate else out


def _consume_all(bootstrap_servers: str, topic: str,
                 timeout: float) -> list[tuple[bytes | None, bytes | None,
                                               list[tuple[str, bytes | None]]]]:
    """(key, value, headers) of every record of ``topic``, partition by partition."""
    from cdc_sink.kafka.producer import resolve_backend

    if resolve_backend("auto") == "kafka-python":
        return _consume_all_kafka_python(bootstrap_servers, topic, timeout)
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": "cdc_sink-dlq-read",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    try:
        md = consumer.list_topics(topic, timeout=timeout)
        parts = sorted(md.topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
                for p in parts}
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


def _consume_all_kafka_python(bootstrap_servers: str, topic: str,
                              timeout: float) -> list[tuple[bytes | None, bytes | None,
                                                            list[tuple[str, bytes | None]]]]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers.split(","),
                             enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic)
                                                          or ())]
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


# -- forwarding ---------------------------------------------------------------------------


def _app_tag(app_id: str) -> str:
    """A short, file- and topic-name-safe tag of an app id."""
    import hashlib

    return hashlib.sha256(app_id.encode()).hexdigest()[:16]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _cursor_path(table_root: str, sink: Any, app_id: str) -> Path:
    tag = _app_tag(f"{app_id}|{sink!r}")
    return Path(table_root) / "_dead_letters" / f"{tag}.cursor"


def forward(table: Table, sink: Any, app_id: str, *, checked: int | None = None) -> int:
    """Copies the rejects of every version ``app_id`` committed to ``sink``, exactly once.

    Versions are forwarded in order, starting after the sink's cursor
    (:meth:`DeadLetterSink.forwarded_version`, or a cursor file in the table directory for
    sinks that keep none). Versions that refused nothing are passed over; versions no
    longer retained by the table (GC) cannot be forwarded and are logged.

    Args:
        table: The table whose versions hold the rejects.
        sink: Where the dead letters go: a :class:`DeadLetterSink`, or any object with
            ``write(records)`` (forwarded at least once, with a cursor file).
        app_id: The writer whose versions are forwarded.
        checked: A version up to which this process already forwarded everything (the
            scan starts after it even when the sink's cursor is older, e.g. because
            versions since then refused nothing).

    Returns:
        The number of dead letters written.
    """
    import json as _json

    exactly_once = bool(getattr(sink, "exactly_once", False))
    cursor_file = None if exactly_once else _cursor_path(table.root, sink, app_id)
    if cursor_file is not None:
        done = (int(_json.loads(cursor_file.read_text())["version"])
                if cursor_file.exists() else None)
    else:
        done = sink.forwarded_version(app_id)
    written = 0
    start = max(table.oldest_version, (done or 0) + 1, (checked or 0) + 1)
    for entry in table.log.entries(from_version=start):
        if entry.app_id != app_id or entry.rejects is None:
            continue
        rej = table.rejects(entry.version)
        records = pa.table({
            "topic": rej.column("topic"), "partition": rej.column("partition"),
            "offset": rej.column("offset"), "key": rej.column("key"),
            "value": rej.column("value"), "reason": rej.column("reason"),
            "batch_id": rej.column("batch_id"), "app_id": rej.column("app_id")})
        write_version = getattr(sink, "write_version", None)
        if write_version is not None:
            write_version(records, app_id=app_id, version=entry.version)
        else:
            sink.write(records)
        written += records.num_rows
        if cursor_file is not None:
            from cdc_sink.storage.fsutil import atomic_replace

            cursor_file.parent.mkdir(exist_ok=True)
            atomic_replace(cursor_file, _json.dumps({"version": entry.version}).encode())
    return written


# -- URIs ---------------------------------------------------------------------------------


def from_uri(uri: str, **options: Any) -> KafkaDeadLetter | ParquetDeadLetter:
    """Builds a dead-letter sink from a URI.

    Args:
        uri: ``kafka://host:port[,host:port...]/topic``, ``file:///dir`` or a path.
        **options: Passed to :class:`KafkaDeadLetter` (ignored for Parquet).

    Returns:
        The sink.

    Raises:
        ValueError: An unknown scheme, or a Kafka URI without servers or topic.
    """
    parsed = urlparse(uri)
    if parsed.scheme == "kafka":
        servers = parsed.netloc
        topic = parsed.path.lstrip("/")
        if not servers or not topic or "/" in topic:
            raise ValueError(f"dead-letter URI {uri!r}: expected kafka://host:port/topic")
        return KafkaDeadLetter(servers, topic, **options)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ValueError(f"dead-letter URI {uri!r}: file URIs name a local path "
                             "(file:///dir)")
        return ParquetDeadLetter(parsed.path)
    if parsed.scheme == "" or (len(parsed.scheme) == 1 and os.name == "nt"):
        return ParquetDeadLetter(uri)
    raise ValueError(f"dead-letter URI {uri!r}: scheme {parsed.scheme!r} is not kafka:// "
                     "or file://")


def records_from_rows(rows: list[Mapping[str, Any]]) -> pa.Table:
    """A dead-letter table from row dicts (missing fields are null); for tests and tools."""
    return pa.Table.from_pylist([dict(r) for r in rows], schema=DEAD_LETTER_SCHEMA)
