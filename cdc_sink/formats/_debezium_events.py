"""The parts of Debezium change events the decoder reads, and their options (private).

For :mod:`cdc_sink.formats.debezium`: :func:`event_body` finds each event's body (its
``payload`` when enveloped, else the value itself) and its members (:class:`Body`); the
decoder then derives each event's op and row object (:class:`Ops`) and reads the row's
columns (:class:`Row`), completing missing key columns from the Kafka message keys
(:func:`fill_key`). :func:`event_ts` picks each event's timestamp,
:func:`placeholder_forms` the JSON forms of the ``unavailable.value.placeholder`` option,
and :func:`scan_budget` what one message may declare before it is refused unread.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_sink.errors import InvalidOption
from cdc_sink.formats._arrays import Parts, refuse
from cdc_sink.formats._base import TS_MISSING
from cdc_sink.formats._debezium_schema import _MAX_SCHEMA_DEPTH
from cdc_sink.formats._jsonmembers import children, int_member, member_kind, named_members
from cdc_sink.formats._jsonscan import KIND_NULL, KIND_OBJECT, Budget, Members
from cdc_sink.schema import Column, TableSchema

_BODY = ("before", "after", "source", "op", "ts_ms")

ENVELOPE_MEMBERS = 512
"""Members a message may hold besides those of its columns: the envelope, the payload's
members, ``source`` and ``transaction`` and their field schemas, with room to spare."""
MEMBERS_PER_COLUMN = 24
"""Members a message may hold per column, at the levels the decoder indexes: the column
in ``before`` and ``after`` (a ``VariableScaleDecimal`` holds two more each) and its two
field schemas (``type``, ``optional``, ``field``, ``name``, ``version``, ``parameters``,
``default``), with room to spare."""
UPSTREAM_COLUMNS = 4096
"""The columns an upstream table may have (MySQL's limit; PostgreSQL's is 1600): the
budget of a decoder that ignores unknown columns, whose rows may hold more columns than
the table's schema."""


def scan_budget(schema: TableSchema, ignore_unknown_columns: bool) -> Budget:
    """What one Debezium message (value or key) may declare (issue 38): members for the
    envelope and for every column the row may hold (the schema's, or
    :data:`UPSTREAM_COLUMNS` when unknown columns are ignored); nesting one level below an
    envelope schema's limit. A message beyond is refused before its members are indexed
    (see :class:`~._jsonscan.Budget`)."""
    columns = max(len(schema.columns), UPSTREAM_COLUMNS if ignore_unknown_columns else 0)
    return Budget(
        members=ENVELOPE_MEMBERS + MEMBERS_PER_COLUMN * columns,
        depth=_MAX_SCHEMA_DEPTH + 1,
        what="invalid envelope schema or payload: nested",
    )


@dataclass
class Body:
    """Where each event's change is: the members of its payload (enveloped events) or of
    the value itself (-1 where an event has no such member)."""

    schema_m: np.ndarray  # the envelope's "schema"
    before_m: np.ndarray
    after_m: np.ndarray
    source_m: np.ndarray
    op_m: np.ndarray
    ts_m: np.ndarray
    level: np.ndarray  # level of the body's members: 2 in an envelope, else 1


@dataclass
class Ops:
    """Each event's canonical op and the row object it applies."""

    op: np.ndarray  # int8 op codes
    skip: np.ndarray  # tombstones and messages: neither decoded nor rejected
    message: np.ndarray  # logical decoding messages (op "m")
    live: np.ndarray  # ~skip
    is_delete: np.ndarray
    is_truncate: np.ndarray
    row_m: np.ndarray  # "before" of a delete, "after" otherwise, -1 for a truncate
    keyless_delete: np.ndarray  # a delete without a "before" object


@dataclass
class Row:
    """The columns read from the events' row objects (all events, null where absent)."""

    keys: dict[str, pa.Array]
    key_given: dict[str, np.ndarray]
    values: dict[str, tuple[pa.Array, np.ndarray]]


def event_body(
    parts: Parts,
    m: Members,
    schema_m: np.ndarray,
    payload_m: np.ndarray,
    tomb: np.ndarray,
    reasons: np.ndarray,
) -> tuple[Body, np.ndarray]:
    """Finds each event's body (its payload when enveloped, else the value); a ``null``
    payload is one more tombstone.

    Returns:
        The body members and the tombstones.
    """
    payload_kind = member_kind(m, payload_m)
    tomb = tomb | (payload_kind == KIND_NULL)
    refuse(
        reasons,
        (payload_kind >= 0) & (payload_kind != KIND_OBJECT) & ~tomb,
        "'payload' is not an object",
    )
    envelope = payload_kind == KIND_OBJECT
    schema_kind = member_kind(m, schema_m)
    refuse(
        reasons,
        envelope & (schema_kind >= 0) & (schema_kind != KIND_OBJECT) & (schema_kind != KIND_NULL),
        "'schema' is not an object",
    )
    l1 = np.flatnonzero(m.level == 1)
    members = np.concatenate([l1[~envelope[m.event[l1]]], children(m, payload_m, level=2)])
    members.sort()
    before_m, after_m, source_m, op_m, ts_m = named_members(parts, m, members, _BODY, reasons)
    return Body(
        schema_m=schema_m,
        before_m=before_m,
        after_m=after_m,
        source_m=source_m,
        op_m=op_m,
        ts_m=ts_m,
        level=np.where(envelope, 2, 1),
    ), tomb


def fill_key(
    c: Column,
    arr: pa.Array,
    got_events: np.ndarray,
    need: np.ndarray,
    keys: dict[str, pa.Array],
    key_given: dict[str, np.ndarray],
    kreasons: np.ndarray,
) -> None:
    """Takes key column ``c`` of the events ``need`` that lack it from their message
    keys' values ``arr`` (one per event of ``need``; ``got_events`` have one)."""
    n = len(key_given[c.name])
    got = np.zeros(len(need), dtype=bool)
    got[got_events] = True
    lacks = ~key_given[c.name][need]
    take = got & lacks
    refuse(
        kreasons, ~got & lacks, f"key column {c.name!r} is in neither the row nor the message key"
    )
    full_idx = np.full(n, -1, dtype=np.int64)
    full_idx[need[take]] = np.flatnonzero(take)
    fill = arr.take(pa.array(full_idx, mask=full_idx < 0))
    use = np.zeros(n, dtype=bool)
    use[need[take]] = True
    keys[c.name] = pc.if_else(pa.array(use), fill, keys[c.name])
    key_given[c.name] |= use


def event_ts(
    parts: Parts, m: Members, src_ts_m: np.ndarray, ts_m: np.ndarray, reasons: np.ndarray
) -> np.ndarray | None:
    """Each event's timestamp: ``source.ts_ms``, else the payload's ``ts_ms``
    (:data:`TS_MISSING` for neither; ``None`` when no event has one)."""
    src_ts, src_given = int_member(
        parts, m, src_ts_m, reasons, "source.ts_ms {raw} is not an integer"
    )
    ts_v, ts_given = int_member(parts, m, ts_m, reasons, "ts_ms {raw} is not an integer")
    ts_v = np.where(src_given, src_ts, ts_v)
    ts_given |= src_given
    return np.where(ts_given, ts_v, TS_MISSING) if ts_given.any() else None


def placeholder_forms(placeholder: str | bytes | None) -> tuple[str, ...]:
    """The JSON string forms of the placeholder: the text itself (string columns, and
    binary columns in ``binary.handling.mode=hex``), then base64 and base64-url-safe of
    its bytes (binary columns in the ``bytes``/``base64``/``base64-url-safe`` modes).

    Raises:
        InvalidOption: The placeholder is not a non-empty string/bytes (``hex:`` + hex).
    """
    if placeholder is None:
        return ()
    opt = "unavailable_value_placeholder"
    if isinstance(placeholder, str) and placeholder.startswith("hex:"):
        try:
            raw = bytes.fromhex(placeholder[4:])
        except ValueError:
            raise InvalidOption(
                f"decoder option {opt!r}: {placeholder!r} is not hex:<hex digits>", option=opt
            ) from None
    elif isinstance(placeholder, str):
        raw = placeholder.encode("utf-8")
    elif isinstance(placeholder, bytes):
        raw = placeholder
    else:
        raise InvalidOption(
            f"decoder option {opt!r} must be a string, bytes or None, got {placeholder!r}",
            option=opt,
        )
    if not raw:
        raise InvalidOption(f"decoder option {opt!r} must not be empty", option=opt)
    text = raw.decode("utf-8", "replace")
    forms = [
        text,
        base64.b64encode(raw).decode("ascii"),
        base64.urlsafe_b64encode(raw).decode("ascii"),
    ]
    return tuple(dict.fromkeys(forms))
