"""The reference semantics of a table, for checks: what it must hold after a stream of
events.

:class:`ReferenceTable` applies native events one at a time, in order, with the semantics
of docs/architecture.md §3, written independently of the engine (plain dicts, no Arrow in
the apply path), so the demo (:class:`cdc_sink_testkit.demo.ExpectedTable`) and the tests
(``tests/model.py``) can check the engine against it:

- validation first (:meth:`ReferenceTable.check`): an unknown op or column, a key column
  in ``set``, a missing key, a value of the wrong type, null in a non-nullable column, an
  insert that leaves a required column unset, a missing ``seq`` (tables with a sequence
  column) -> ``invalid``; undecodable records (``None``) too. A delete's ``set`` is not
  looked at (the engine ignores it);
- ``truncate`` removes every live row (``truncated``); the keys' last sequences stay;
- with a sequence column S, an event applies only when ``seq`` >= the key's last
  sequence (of its live row, or of the tombstone its last delete left) -> else ``stale``;
  an applied event writes ``S = seq`` (``seq`` may come from ``set[S]`` when absent);
- ``insert`` replaces the row (unset columns take defaults); ``upsert`` sets columns,
  creating the row when missing (``rejected`` when that leaves a required column unset);
  ``update`` of a missing key is ``rejected``; ``delete`` removes the row (``ignored``
  when not live) and leaves a tombstone.

Values are kept as Python values of the column types (:func:`cdc_sink.schema.coerce`,
strict: ``Decimal`` quantized to the column's scale, timezone-aware UTC ``datetime``).
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from cdc_sink.schema import Column, TableSchema, coerce

__all__ = ["OUTCOMES", "Key", "ReferenceTable", "Row", "coerce_value", "normalize_value"]

Key = tuple[Any, ...]
Row = dict[str, Any]
#: What :meth:`ReferenceTable.apply_event` returns.
OUTCOMES = (
    "inserted",
    "updated",
    "deleted",
    "ignored",
    "stale",
    "rejected",
    "truncated",
    "invalid",
)
_OPS = ("insert", "upsert", "update", "delete", "truncate")


def coerce_value(value: Any, column: Column) -> Any:
    """``value`` (as a JSON event carries it) as the Python value of ``column``'s type
    (:func:`cdc_sink.schema.coerce`, strict).

    Raises:
        TypeError: The value is not of the column's type.
        ValueError: The value does not parse or is out of range.
    """
    return coerce(value, column.type, strict=True)


def normalize_value(value: Any, column: Column) -> Any:
    """A value read back from Arrow/Spark in the form :func:`coerce_value` gives."""
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        return value.astimezone(dt.timezone.utc)
    if isinstance(value, decimal.Decimal) and pa.types.is_decimal(column.type):
        return value.quantize(decimal.Decimal(1).scaleb(-column.type.scale))
    return value


class ReferenceTable:
    """The reference state of one table (all buckets together), event by event.

    Attributes:
        schema: The table schema (a caller changing the schema assigns a new one and
            fixes ``rows`` itself).
        rows: The live rows, key -> row (column name -> value).
        seqs: The last sequence of every key seen (live or deleted), with a sequence
            column.
        last_reason: Why the last ``invalid`` or ``rejected`` event was refused.
    """

    def __init__(self, schema: TableSchema) -> None:
        self.schema = schema
        self.rows: dict[Key, Row] = {}
        self.seqs: dict[Key, int] = {}
        self.last_reason: str | None = None

    # -- validation -------------------------------------------------------------------

    def check(self, event: Any) -> str | None:
        """Why ``event`` is refused without looking at the state (``None``: it is valid)."""
        if not isinstance(event, Mapping):
            return "not a decodable event"
        op = event.get("op")
        if op not in _OPS:
            return f"unknown op {op!r}"
        if op == "truncate":
            return None  # needs no key, set or seq
        sets = event.get("set") or {}
        if not isinstance(sets, Mapping):
            return "'set' is not an object"
        return (
            self._key_reason(event.get("key"))
            or (None if op == "delete" else self._set_reason(op, sets))
            or self._seq_reason(event, op, sets)
        )

    def _key_map(self, key: Any) -> Any:
        """A scalar key of a one-column primary key as ``{column: key}``."""
        pk = self.schema.primary_key
        if len(pk) == 1 and key is not None and not isinstance(key, Mapping):
            return {pk[0]: key}
        return key

    def _key_reason(self, key: Any) -> str | None:
        s = self.schema
        key = self._key_map(key)
        if not isinstance(key, Mapping):
            return "no key"
        for name in key:
            if name not in s.primary_key:
                return f"unknown key column {name!r}"
        for kc in s.key_columns:
            try:
                if coerce_value(key.get(kc.name), kc) is None:
                    return f"key column {kc.name!r} is missing or null"
            except (TypeError, ValueError) as exc:
                return f"key column {kc.name!r}: {exc}"
        return None

    def _set_reason(self, op: str, sets: Mapping[str, Any]) -> str | None:
        s = self.schema
        for name, value in sets.items():
            if name in s.primary_key:
                return f"key column {name!r} inside 'set'"
            if not s.has_column(name):
                return f"unknown column {name!r}"
            col = s.column(name)
            try:
                v = coerce_value(value, col)
            except (TypeError, ValueError) as exc:
                return f"column {name!r}: {exc}"
            if v is None and not col.nullable:
                return f"null in non-nullable column {name!r}"
        if op == "insert":
            for c in s.required_columns:
                if c.name not in sets:
                    return f"insert does not set non-nullable column {c.name!r}"
        return None

    def _seq_reason(self, event: Mapping[str, Any], op: str, sets: Mapping[str, Any]) -> str | None:
        s = self.schema
        if s.sequence_column is None:
            return None
        seq = event.get("seq")
        if seq is None and op != "delete":
            seq = sets.get(s.sequence_column)
        if isinstance(seq, bool) or not isinstance(seq, int):
            return "seq is missing"
        if op != "delete" and s.sequence_column in sets and sets[s.sequence_column] != seq:
            return "sequence column in 'set' differs from seq"
        return None

    def key_of(self, event: Mapping[str, Any]) -> Key:
        """The key of a valid event, as a tuple in primary-key order."""
        key = self._key_map(event["key"])
        return tuple(coerce_value(key[c.name], c) for c in self.schema.key_columns)

    def new_row(self, key: Key) -> Row:
        """A row of ``key`` with every other column at its default."""
        row: Row = {}
        pk = self.schema.primary_key
        for c in self.schema.columns:
            if c.name in pk:
                row[c.name] = key[pk.index(c.name)]
            else:
                row[c.name] = normalize_value(c.default.as_py(), c)
        return row

    # -- apply ------------------------------------------------------------------------

    def apply_event(self, event: Any) -> str:
        """Applies one event (``None`` = an undecodable record); returns its outcome, one
        of :data:`OUTCOMES` (``truncated`` for a truncate, whatever it removed)."""
        reason = self.check(event)
        if reason is not None:
            self.last_reason = reason
            return "invalid"
        if event["op"] == "truncate":
            self.rows.clear()  # every live row goes; the sequences stay as tombstones
            return "truncated"
        s = self.schema
        op = event["op"]
        key = self.key_of(event)
        sets = (
            {}
            if op == "delete"
            else {
                name: coerce_value(v, s.column(name))
                for name, v in (event.get("set") or {}).items()
            }
        )
        seq: int | None = None
        if s.sequence_column is not None:
            seq = event.get("seq")
            if seq is None:
                seq = sets[s.sequence_column]
            if key in self.seqs and seq < self.seqs[key]:
                return "stale"
            sets[s.sequence_column] = seq
        outcome = self._write(op, key, sets)
        if seq is not None and outcome != "rejected":
            self.seqs[key] = seq
        return outcome

    def _write(self, op: str, key: Key, sets: Row) -> str:
        """Applies a valid, not stale event to the rows; returns its outcome."""
        live = key in self.rows
        if op == "delete":
            self.rows.pop(key, None)
            return "deleted" if live else "ignored"
        if op == "update" and not live:
            self.last_reason = "update of missing key"
            return "rejected"
        if op == "upsert" and live:
            self.rows[key].update(sets)
            return "updated"
        if op == "upsert":
            unset = [c.name for c in self.schema.required_columns if c.name not in sets]
            if unset:
                self.last_reason = (
                    f"upsert of a missing key does not set non-nullable column {unset[0]!r}"
                )
                return "rejected"
        row = self.new_row(key) if op != "update" else self.rows[key]
        row.update(sets)
        self.rows[key] = row
        return "updated" if live else "inserted"
