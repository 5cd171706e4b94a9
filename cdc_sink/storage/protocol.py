"""The table format's protocol versions, kept in ``_table.json`` and checked on open.

A table's ``_table.json`` names the lowest reader and writer protocol versions that
understand every file in it (docs/format.md, "Protocol versions"; Delta's
``minReaderVersion``/``minWriterVersion`` are the model)::

    {"format": 1, "reader_version": 1, "writer_version": 1, "page_rows": 65536, ...}

A process refuses to read a table whose ``reader_version`` is above
:data:`READER_VERSION`, and to write one whose ``writer_version`` is above
:data:`WRITER_VERSION`, with :class:`~cdc_sink.errors.UnsupportedTableVersion` naming both
numbers, so an older release never misreads or damages a table a newer one changed. A
table created before the fields existed has neither and is protocol version 1. Every
change of a file's format from now on raises the versions it needs and is listed in
docs/format.md's changelog.

A table is created at :data:`CREATED_VERSION` and raised only when it first uses what an
older release would misread (:func:`raised_fields`): a column widened by a schema change
(:data:`WIDENING_VERSION`; its older pages, deltas and segments hold the narrower type,
which a version-1 reader would read as the wider one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from cdc_sink.errors import UnsupportedTableVersion

__all__ = [
    "CREATED_VERSION",
    "READER_VERSION",
    "WIDENING_VERSION",
    "WRITER_VERSION",
    "check_protocol",
    "protocol_fields",
    "raised_fields",
]

READER_VERSION = 2
"""The highest reader protocol version this release implements."""

WRITER_VERSION = 2
"""The highest writer protocol version this release implements."""

CREATED_VERSION = 1
"""The reader and writer version of a table created by this release (one that uses
nothing a version-1 release would misread)."""

WIDENING_VERSION = 2
"""The reader and writer version of a table in which a column was widened (docs/format.md,
"Column type changes")."""


def protocol_fields() -> dict[str, int]:
    """The protocol fields a table created by this release carries in ``_table.json``."""
    return {"reader_version": CREATED_VERSION, "writer_version": CREATED_VERSION}


def raised_fields(meta: Mapping[str, Any], version: int) -> dict[str, Any] | None:
    """``meta`` (a parsed ``_table.json``) with its reader and writer versions raised to
    at least ``version``, or None when they are there already."""
    have = [meta.get(f"{kind}_version", 1) for kind in ("reader", "writer")]
    if all(type(v) is int and v >= version for v in have):
        return None
    return {
        **meta,
        **{
            f"{kind}_version": max(v, version) if type(v) is int else version
            for kind, v in zip(("reader", "writer"), have, strict=True)
        },
    }


def check_protocol(
    meta: Mapping[str, Any], *, access: Literal["read", "write"], where: str
) -> None:
    """Raises unless this release may ``access`` the table whose ``_table.json`` is ``meta``.

    Args:
        meta: The parsed ``_table.json``.
        access: ``"read"`` checks the reader version; ``"write"`` both.
        where: The table's location, for the message.

    Raises:
        UnsupportedTableVersion: The table needs a newer reader (or writer) protocol than
            this release implements, or its ``_table.json`` names a version that is not
            a positive integer.
    """
    checks = [("reader", READER_VERSION)]
    if access == "write":
        checks.append(("writer", WRITER_VERSION))
    for kind, supported in checks:
        needed = meta.get(f"{kind}_version", 1)
        if type(needed) is not int or needed < 1:
            raise UnsupportedTableVersion(
                f"the table at {where} has an invalid {kind}_version in _table.json "
                f"({needed!r}): expected a positive integer",
                kind=kind,
                needed=None,
                supported=supported,
            )
        if needed > supported:
            raise UnsupportedTableVersion(
                f"the table at {where} needs {kind} protocol version {needed}, and this "
                f"release of cdc_sink implements version {supported}: upgrade cdc_sink "
                f'to {access} it (docs/format.md, "Protocol versions")',
                kind=kind,
                needed=needed,
                supported=supported,
            )
