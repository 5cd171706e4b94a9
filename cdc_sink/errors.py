"""The exception hierarchy of cdc_sink: every exception class the package raises.

Every domain error derives from :class:`CdcSinkError`, so callers can catch one root
(as delta-rs does with ``DeltaError``). Bad arguments raise :class:`InvalidOption` (also a
``ValueError``) or :class:`InvalidArgument` (also a ``TypeError``), so code written
against the built-in exceptions keeps working; so do the errors that are also an
``OSError``, an ``ImportError`` or a ``RuntimeError`` below.

Each class is defined here, once, and re-exported by the module that raises it (its
public home in the docs: ``cdc_sink.storage.objectstore.ObjectNotFound`` is
``cdc_sink.errors.ObjectNotFound``), so one class has one ``__module__`` and pickles by
the same name wherever it is imported from. This module imports nothing of the package:
it sits in the lowest layer, under everything that raises.

Two exceptions stay private in their modules, because no caller ever sees them: each is
raised and caught inside one module as control flow, and turned there into a reason or a
public error (``formats/_debezium_schema.py``'s ``_BadSchema``: a Kafka Connect schema the
decoder refuses, which becomes the events' reject reason; ``spark/_arrow_stream.py``'s
``_JobFailed``: a failed Spark job of a collect, re-raised as what Spark raised).

The hierarchy::

    CdcSinkError
      InvalidOption (ValueError)          bad option or option value
        StreamNeedsChangeFeed             a cdc_sink stream without readChangeFeed
      InvalidArgument (TypeError)         an argument of a type a function does not take
      MissingExtra (ImportError)          an optional dependency is not installed
      SchemaError                         an invalid table schema
        NoPrimaryKey                      a source table's schema names no primary key
      SchemaMismatch                      data not of the schema it is written/read with
      SchemaEvolutionError (RuntimeError) a registry schema the table cannot take
      SchemaRegistryUnavailable (RuntimeError)
        SchemaRegistryMismatch            a registry that knows none of a batch's ids
      TooManySchemaIds (RuntimeError)     a batch naming too many new schema ids
      TableExists, TableNotFound
      VersionNotFound                     a version not retained (or not yet committed)
        ChangesNotRetained                the change feed needs a collected version
      CommitConflict                      another writer committed the version first
      WalCorruption                       a damaged table file
      UnsupportedTableVersion             a table that needs a newer reader or writer
      TabletStateError                    an operation that does not fit a tablet's state
      ObjectStoreError                    an object-store call failed
        ObjectNotFound (FileNotFoundError), ObjectExists (FileExistsError), ShortRead,
        StoreIOError (OSError),
        StoreConfigError
          BucketNotFound, StoreAccessDenied, ConditionalWritesUnsupported
      KafkaUnreachable
        KafkaAuthenticationFailed
      DeliveryError                       Kafka did not accept records (DeliveryFailure)
      TopicUnavailable
      JarResolutionError (RuntimeError)
        MavenNotFound
      SparkSessionConflict (RuntimeError)
      MetricsServerError
    BadAvroSchema (ValueError)            an Avro schema the decoders cannot read
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class CdcSinkError(Exception):
    """Root of every error cdc_sink raises for a domain state."""


# ------------------------------------------------------------------ arguments


class InvalidOption(CdcSinkError, ValueError):
    """A decoder (or other component) was given an unknown option or a bad option value.

    Attributes:
        option: The name of the offending option.
    """

    def __init__(self, message: str, *, option: str) -> None:
        super().__init__(message)
        self.option = option


class StreamNeedsChangeFeed(InvalidOption):
    """``spark.readStream.format("cdc_sink")`` without ``readChangeFeed=true``."""


class InvalidArgument(CdcSinkError, TypeError):
    """A public function was given an argument of a type it does not take."""


class MissingExtra(CdcSinkError, ImportError):
    """A feature needs an optional dependency that is not installed.

    Attributes:
        extra: The extra that installs it (``pip install 'cdc_sink[<extra>]'``).
    """

    def __init__(self, message: str, *, extra: str, module: str) -> None:
        super().__init__(message, name=module)
        self.extra = extra


# ------------------------------------------------------------------ schemas


class SchemaError(CdcSinkError):
    """A table schema is invalid (unknown type, duplicate name, bad key, ...)."""


class NoPrimaryKey(SchemaError):
    """A table created from its source's schema has no primary key: the source's message
    key names none and none was given (the message names the source table)."""


class SchemaMismatch(CdcSinkError):
    """Data does not match the schema it is written or read with."""


class SchemaEvolutionError(CdcSinkError, RuntimeError):
    """A schema of the registry that the table cannot take (the stream stops: every
    following message would be refused)."""


class SchemaRegistryUnavailable(CdcSinkError, RuntimeError):
    """The schema registry could not be reached or refused the client (not a fact about
    any message: the batch should fail and be retried, nothing is rejected)."""


class SchemaRegistryMismatch(SchemaRegistryUnavailable):
    """The registry knows none of a batch's schema ids and looks like the wrong one (a
    wrong URL, or a registry that lost its storage): the batch fails rather than
    dead-letter every message.

    Attributes:
        ids: The ids the batch names (the first few, sorted).
    """

    def __init__(self, message: str, *, ids: list[int]) -> None:
        super().__init__(message)
        self.ids = ids


class TooManySchemaIds(CdcSinkError, RuntimeError):
    """A batch names more schema ids this process has not looked up than a batch may
    (:data:`cdc_sink.formats.avro_wire.MAX_NEW_IDS`): the batch fails before any is fetched.

    Attributes:
        count: How many new ids the batch names.
        limit: How many it may name.
    """

    def __init__(self, message: str, *, count: int, limit: int) -> None:
        super().__init__(message)
        self.count = count
        self.limit = limit


class BadAvroSchema(ValueError):
    """A schema the Avro decoders cannot read (the message says why).

    Not a :class:`CdcSinkError`: it never leaves the decoders, which refuse every event
    written with the schema, with the message as the reason.
    """


# ------------------------------------------------------------------ tables and versions


class TableExists(CdcSinkError):
    """``create_table`` was called on a path that already holds a table."""


class TableNotFound(CdcSinkError):
    """``open_table`` was called on a path that holds no table."""


class VersionNotFound(CdcSinkError):
    """The requested version is not retained (or not yet committed).

    Attributes:
        version: The version asked for.
        oldest: The oldest readable version, or ``None`` when the table is empty.
        latest: The newest committed version, or ``None`` when the table is empty.
    """

    def __init__(
        self,
        message: str,
        *,
        version: int | None = None,
        oldest: int | None = None,
        latest: int | None = None,
    ) -> None:
        super().__init__(message)
        self.version = version
        self.oldest = oldest
        self.latest = latest


class ChangesNotRetained(VersionNotFound):
    """The changes asked for need a version that GC has collected (or that does not
    exist yet). The message names the oldest readable version; ``oldest`` holds it."""


class CommitConflict(CdcSinkError):
    """Another writer committed the version this writer tried to commit."""


class WalCorruption(CdcSinkError):
    """A WAL segment or log record is damaged somewhere other than its torn tail.

    Attributes:
        path: The damaged file.
        offset: Byte offset of the first bad record.
    """

    def __init__(self, message: str, *, path: str, offset: int) -> None:
        super().__init__(f"{message} (file {path}, offset {offset})")
        self.path = path
        self.offset = offset


class UnsupportedTableVersion(CdcSinkError):
    """The table needs a newer reader or writer protocol than this release implements
    (its ``_table.json``; docs/format.md, "Protocol versions").

    Attributes:
        kind: ``"reader"`` or ``"writer"``.
        needed: The version the table asks for (``None``: not a positive integer).
        supported: The highest version this release implements.
    """

    def __init__(self, message: str, *, kind: str, needed: int | None, supported: int) -> None:
        super().__init__(message)
        self.kind = kind
        self.needed = needed
        self.supported = supported


class TabletStateError(CdcSinkError):
    """An operation does not fit the tablet's state (e.g. a second pending version)."""


# ------------------------------------------------------------------ object stores


class ObjectStoreError(CdcSinkError):
    """A call on an object store failed."""


class ObjectNotFound(ObjectStoreError, FileNotFoundError):
    """The key names no object (a ``FileNotFoundError`` too, for code written for files)."""


class ObjectExists(ObjectStoreError, FileExistsError):
    """``put_if_absent`` found the key taken: another writer created it first."""


class ShortRead(ObjectStoreError):
    """A byte range reaches past the end of its object."""


class StoreIOError(ObjectStoreError, OSError):
    """The store could not be reached or failed (a file-system error, a network error, a
    server error after the client's retries). The outcome of a write that raised this is
    unknown: the object may or may not exist."""


class StoreConfigError(ObjectStoreError):
    """The store is misconfigured: an unknown URL scheme, a malformed URL, an unknown
    option. Never holds the value of an option (it may be a secret)."""


class BucketNotFound(StoreConfigError):
    """The URL names a bucket (or container) that does not exist."""


class StoreAccessDenied(StoreConfigError):
    """The store refused the credentials (wrong, expired or missing), or they do not allow
    the operation."""


class ConditionalWritesUnsupported(StoreConfigError):
    """The endpoint does not honour conditional creates (``If-None-Match: *``): two
    writers could both commit one version, so cdc_sink refuses to write there."""


# ------------------------------------------------------------------ Kafka


class KafkaUnreachable(CdcSinkError):
    """No broker answered a metadata request within the time given."""


class KafkaAuthenticationFailed(KafkaUnreachable):
    """A broker refused the client's credentials (SASL) or its TLS handshake failed."""


@dataclass(frozen=True)
class DeliveryFailure:
    """One record Kafka did not accept (an item of :attr:`DeliveryError.failures`).

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


class TopicUnavailable(CdcSinkError):
    """A topic's partitions could not be learned: it does not exist, or the cluster
    sent no metadata in time."""


class JarResolutionError(CdcSinkError, RuntimeError):
    """The jars could not be resolved (Maven failed, or found no such artifact)."""


class MavenNotFound(JarResolutionError):
    """The ``mvn`` executable is not installed (and nothing is cached yet)."""


# ------------------------------------------------------------------ Spark and metrics


class SparkSessionConflict(CdcSinkError, RuntimeError):
    """A SparkContext already runs in this process without the jars this session needs."""


class MetricsServerError(CdcSinkError):
    """The metrics endpoint could not be started (e.g. its port is in use, or its TLS or
    auth files cannot be read)."""
