"""The exception hierarchy of cdc_sink.

Every domain error derives from :class:`CdcSinkError`, so callers can catch one root
(as delta-rs does with ``DeltaError``). Bad arguments raise :class:`InvalidOption` (also a
``ValueError``) or :class:`InvalidArgument` (also a ``TypeError``), so code written
against the built-in exceptions keeps working.
"""

from __future__ import annotations


class CdcSinkError(Exception):
    """Root of every error cdc_sink raises for a domain state."""


class SchemaError(CdcSinkError):
    """A table schema is invalid (unknown type, duplicate name, bad key, ...)."""


class SchemaMismatch(CdcSinkError):
    """Data does not match the schema it is written or read with."""


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


class InvalidOption(CdcSinkError, ValueError):
    """A decoder (or other component) was given an unknown option or a bad option value.

    Attributes:
        option: The name of the offending option.
    """

    def __init__(self, message: str, *, option: str) -> None:
        super().__init__(message)
        self.option = option


class InvalidArgument(CdcSinkError, TypeError):
    """A public function was given an argument of a type it does not take."""


class TabletStateError(CdcSinkError):
    """An operation does not fit the tablet's state (e.g. a second pending version)."""
