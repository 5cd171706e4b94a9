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
- :class:`ParquetDeadLetter` writes one Parquet file per forwarded table version (and,
  for records written directly, per batch id per attempt), atomically: a
  ``put_if_absent`` of a :class:`~cdc_sink.storage.objectstore.local.LocalStore` on its
  directory (a hidden temporary file, fsync, create-if-absent ``link``, fsync of the
  directory); the file names are drawn in :mod:`cdc_sink.storage.layout`.

  The files hold the raw message keys and values, so they are created ``0o600`` (the
  sink's ``file_mode``; the directory, when the sink creates it, ``0o700``).

:func:`from_uri` builds either from ``kafka://host:port[,host:port]/topic``,
``file:///dir`` or a plain path.

The record schema, the sink contract and :func:`forward` are in :mod:`cdc_sink.dead_letters`, the
Kafka sink in :mod:`cdc_sink.kafka.deadletter_kafka`; this module re-exports them.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cdc_sink.dead_letters import (
    DEAD_LETTER_SCHEMA,
    HEADER_NAMES,
    DeadLetterSink,
    app_tag,
    conform,
    dedupe,
    forward,
    records_from_rows,
)
from cdc_sink.kafka.deadletter_kafka import KafkaDeadLetter
from cdc_sink.storage.layout import (
    dead_letter_batch_file,
    dead_letter_files,
    dead_letter_version_file,
    dead_letter_versions,
)
from cdc_sink.storage.objectstore import ObjectExists
from cdc_sink.storage.objectstore.local import LocalStore, check_file_mode

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


# -- Parquet ------------------------------------------------------------------------------


class ParquetDeadLetter(DeadLetterSink):
    """Dead letters as Parquet files in a directory (see the module docstring).

    Args:
        path: The directory (created when missing).
        file_mode: Permission bits of the files written (default ``0o600``: they hold
            raw message values); a directory the sink creates gets
            :func:`~cdc_sink.storage.objectstore.local.dir_mode` of them. The process umask may
            clear more bits; an existing directory keeps its mode.

    Raises:
        InvalidOption: ``file_mode`` is not permission bits that let the owner read and
            write.
    """

    exactly_once = True

    def __init__(self, path: str | os.PathLike[str], *, file_mode: int = 0o600) -> None:
        self.path = Path(path)
        self.file_mode = check_file_mode(file_mode)

    def __repr__(self) -> str:
        return f"ParquetDeadLetter({str(self.path)!r})"

    def write_version(self, records: pa.Table, *, app_id: str, version: int) -> None:
        """Publishes ``version-<v>-<app>.parquet`` unless it exists (idempotent)."""
        table = conform(records)
        name = dead_letter_version_file(version, app_tag(app_id))
        if not (self.path / name).exists():
            self._write_atomic(table, name)

    def forwarded_version(self, app_id: str) -> int | None:
        """The newest version file of ``app_id`` (None: none yet)."""
        names = os.listdir(self.path) if self.path.is_dir() else []
        versions = dead_letter_versions(names, app_tag(app_id))
        return max(versions) if versions else None

    def write(self, records: pa.Table) -> None:
        """Writes one file per batch id in ``records`` (nothing for no records).

        Raises:
            ValueError: ``records`` does not fit :data:`DEAD_LETTER_SCHEMA`.
        """
        table = conform(records)
        if table.num_rows == 0:
            return
        batch_ids = table.column("batch_id").fill_null(-1)
        attempt = f"{time.time_ns()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        for bid in pc.unique(batch_ids).to_pylist():
            part = table.filter(pc.equal(batch_ids, bid))
            name = dead_letter_batch_file(bid if bid >= 0 else None, attempt)
            self._write_atomic(part, name)

    def _write_atomic(self, table: pa.Table, name: str) -> None:
        """Publishes ``name`` complete and fsynced, or not at all; never replaces a file
        of that name (the local store's create-if-absent: a concurrent or repeated
        publish of the same name is a no-op). The directory is created, with the sink's
        directory mode, by the first file."""
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="zstd")
        with contextlib.suppress(ObjectExists):
            LocalStore(self.path, file_mode=self.file_mode).put_if_absent(
                name, memoryview(sink.getvalue())
            )

    def files(self) -> list[Path]:
        """The committed files, oldest first (temporary files are not listed)."""
        if not self.path.is_dir():
            return []
        names = dead_letter_files(os.listdir(self.path))
        return sorted(p for p in (self.path / n for n in names) if p.is_file())

    def read(self, *, deduplicate: bool = True) -> pa.Table:
        """Every dead letter written so far, batch order."""
        tables = [pq.read_table(p, schema=DEAD_LETTER_SCHEMA) for p in self.files()]
        if not tables:
            return DEAD_LETTER_SCHEMA.empty_table()
        out = pa.concat_tables(tables)
        return dedupe(out) if deduplicate else out


# -- URIs ---------------------------------------------------------------------------------


def from_uri(uri: str, **options: Any) -> KafkaDeadLetter | ParquetDeadLetter:
    """Builds a dead-letter sink from a URI.

    Args:
        uri: ``kafka://host:port[,host:port...]/topic``, ``file:///dir`` or a path.
        **options: Passed to :class:`KafkaDeadLetter`; of them a Parquet sink takes only
            ``file_mode``.

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
            raise ValueError(f"dead-letter URI {uri!r}: file URIs name a local path (file:///dir)")
        return ParquetDeadLetter(parsed.path, **_parquet_options(options))
    if parsed.scheme == "" or (len(parsed.scheme) == 1 and os.name == "nt"):
        return ParquetDeadLetter(uri, **_parquet_options(options))
    raise ValueError(
        f"dead-letter URI {uri!r}: scheme {parsed.scheme!r} is not kafka:// or file://"
    )


def _parquet_options(options: dict[str, Any]) -> dict[str, Any]:
    """The options of :func:`from_uri` a :class:`ParquetDeadLetter` takes."""
    return {k: v for k, v in options.items() if k == "file_mode"}
