"""Reject reasons -> a small fixed set of classes (the ``reason`` label of the metrics).

A reason string names the column, the raw value, the op it saw (``column 'amount': "x" is
not a valid float64``): free text, unbounded. A metrics label must not be, so every
reason is mapped to one of :data:`REASON_CLASSES` by the first matching rule below. The
rules follow the messages the decoders (:mod:`cdc_sink.formats`, the JVM decoder of
:mod:`cdc_sink.spark.decode`), :class:`~cdc_sink.batch.ChangeBatch` validation and the
tablets produce; most are anchored at the start of the message, and the type errors at
its end, so a column name or raw value quoted inside a reason cannot change its class.

========================  ================================================================
class                     events
========================  ================================================================
``bad_json``              not decodable in their format: invalid JSON, not one object,
                          null or empty message value, malformed rowv2 bytes
``bad_envelope``          decodable but not an event: ``set``/``payload``/``after`` not
                          an object, a duplicated member, ``seq`` and the sequence column
                          disagreeing
``unknown_op``            no op, or one that is not insert/upsert/update/delete
``unknown_column``        a column (or key column) the schema does not have
``wrong_type``            a value that is not of its column's type (also ``seq``/``ts_ms``)
``out_of_range``          a value of the right kind that does not fit its column
``null_not_allowed``      a null (or, for an insert, no value) in a non-nullable column
``missing_key``           no key object, or a key column missing or null
``key_in_set``            a key column inside ``set``
``missing_seq``           no sequence number where the table orders events by one
``update_missing_key``    an update (or a partial upsert) of a key that is not live
``truncated_rejected``    a truncate event refused (``truncate='reject'``)
``other``                 anything else
========================  ================================================================
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache

__all__ = ["REASON_CLASSES", "classify_reason", "classify_reasons"]

REASON_CLASSES: tuple[str, ...] = (
    "bad_json",
    "bad_envelope",
    "unknown_op",
    "unknown_column",
    "wrong_type",
    "out_of_range",
    "null_not_allowed",
    "missing_key",
    "key_in_set",
    "missing_seq",
    "update_missing_key",
    "truncated_rejected",
    "other",
)

# A type as schema.type_to_str spells it: int64, decimal128(10, 2), timestamp[us, UTC].
_TYPE = r"[a-z][a-z0-9_]*(?:\([0-9, ]+\)|\[[a-zA-Z, ]+\])?"

_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (cls, re.compile(pattern, re.IGNORECASE | re.DOTALL))
    for cls, pattern in (
        ("update_missing_key", r"^(update|upsert) of missing key"),
        ("truncated_rejected", r"^truncate (events? (are|is) not supported|event rejected)"),
        (
            "bad_json",
            r"^(invalid json|not a json object|not a single json object"
            r"|null message value|empty message value|malformed event"
            r"|truncated row|bad codec version|unknown flag bits"
            r"|value offsets are not|a value offset points"
            r"|trailing bytes after|column ids are not sorted"
            r"|column id \d+ is both null|undecodable message|message key: )",
        ),
        (
            "unknown_op",
            r"^(unknown op|unknown debezium op|event has no 'op'"
            r"|logical decoding messages)",
        ),
        ("unknown_column", r"^unknown (key )?column"),
        ("key_in_set", r"^key column .* inside 'set'$"),
        (
            "missing_key",
            r"^(key column .* is missing( or null)?$|event has no 'key'"
            r"|delete without a 'before' row|the row lacks its key"
            r"|key column .* is in neither the row nor the message key$)",
        ),
        ("missing_seq", r"^seq is (missing|null)"),
        ("out_of_range", r"^(seq out of range|source\.\w+ is outside)"),
        ("wrong_type", r"^source\.\w+ .* is not a"),
        (
            "null_not_allowed",
            r"^(null in non-nullable column|insert does not set "
            r"non-nullable column)",
        ),
        ("wrong_type", r"^(seq|ts_ms) .* is not an? (64-bit )?integer"),
        (
            "out_of_range",
            r"^(key )?column [^:]*: (value )?(out of range( of .+| \d{4}-.+)?"
            r"|exceeds the precision of .+)$",
        ),
        (
            "out_of_range",
            rf"^(key )?column .*: (.* is out of range of {_TYPE}"
            rf"|.*does not fit (in )?{_TYPE}"
            r"|.* has more than \d+ decimals|.* is not a finite decimal)$",
        ),
        (
            "wrong_type",
            r"^(key )?column .*: .*(is not a valid .+|is not an? [a-z0-9 ]+"
            r"|must be 0 or 1|must take \d+ bytes|is not valid utf-8"
            r"|is a datetime, not a date)$",
        ),
        (
            "bad_envelope",
            r"^('set' is not|'payload' is not|'after' is missing|'before' is not"
            r"|'schema' is not|invalid envelope schema"
            r"|event is not an object|duplicate |sequence column .* differs)",
        ),
    )
)


@lru_cache(maxsize=4096)
def classify_reason(reason: str) -> str:
    """The class (one of :data:`REASON_CLASSES`) of a reject reason.

    Args:
        reason: A reason as a decoder, the batch validation or a tablet wrote it.

    Returns:
        Its class; ``"other"`` when no rule matches.
    """
    text = reason.strip()
    for cls, pattern in _RULES:
        if pattern.search(text):
            return cls
    return "other"


def classify_reasons(by_reason: Mapping[str, int]) -> dict[str, int]:
    """Sums reject counts by class.

    Args:
        by_reason: Raw reason string -> number of events rejected with it.

    Returns:
        Class -> count (only classes with a count).
    """
    out: dict[str, int] = {}
    for reason, n in by_reason.items():
        if n:
            cls = classify_reason(str(reason))
            out[cls] = out.get(cls, 0) + int(n)
    return out
