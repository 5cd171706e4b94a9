"""A small reference applier: what the table must contain after a stream of events.

It applies native events one at a time, in order, with the semantics of DESIGN.md §3,
written independently of the engine (plain dicts, no Arrow in the apply path), so the
demo can check the engine against it:

- validation first: an unknown op or column, a key column in ``set``, a missing key, a
  value of the wrong type, null in a non-nullable column, a missing ``seq`` (tables with
  a sequence column) -> ``rejected``; undecodable records (``None``) too;
- with a sequence column S, an event applies only when ``seq`` >= the key's last
  sequence (of its live row, or of the tombstone its last delete left) -> else ``stale``;
  an applied event writes ``S = seq``;
- ``insert`` replaces the row (unset columns take defaults); ``upsert`` sets columns,
  creating the row when missing; ``update`` of a missing key is ``rejected``; ``delete``
  removes the row (``ignored`` when not live) and leaves a tombstone.

Values are kept as Python values of the column types (``Decimal`` quantized to the
column's scale, timezone-aware UTC ``datetime``), and :func:`normalize_row` brings rows
read back from Arrow or Spark to the same form for comparison.
"""

from __future__ import annotations

import copy
import datetime as dt
import decimal
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from cdc_sink.schema import Column, TableSchema, coerce

__all__ = ["ExpectedTable", "coerce_value", "diff_rows", "normalize_row"]

Key = tuple[Any, ...]
Row = dict[str, Any]
_OPS = ("insert", "upsert", "update", "delete")


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


def normalize_row(row: Mapping[str, Any], schema: TableSchema) -> Row:
    """A row read back from Arrow/Spark, comparable with :class:`ExpectedTable` rows."""
    return {c.name: normalize_value(row.get(c.name), c) for c in schema.columns}


def diff_rows(expected: Mapping[Key, Row], actual: Iterable[Mapping[str, Any]],
              schema: TableSchema, *, limit: int = 10) -> list[str]:
    """Differences between the expected rows and rows read back (empty when equal).

    Args:
        expected: Key -> row, as :meth:`ExpectedTable.snapshot` returns.
        actual: Rows read back (dicts by column name, any order).
        schema: The table schema.
        limit: At most this many differences are described.

    Returns:
        Human-readable differences, at most ``limit`` (plus a count line when cut).
    """
    out: list[str] = []
    seen: dict[Key, Row] = {}
    dupes = 0
    for r in actual:
        row = normalize_row(r, schema)
        key = tuple(row[k] for k in schema.primary_key)
        if key in seen:
            dupes += 1
            if len(out) < limit:
                out.append(f"key {key} read twice")
        seen[key] = row
    missing = [k for k in expected if k not in seen]
    extra = [k for k in seen if k not in expected]
    changed = [k for k in expected if k in seen and seen[k] != expected[k]]
    for k in missing[:limit]:
        out.append(f"missing row {k}: expected {expected[k]}")
    for k in extra[:limit]:
        out.append(f"unexpected row {k}: {seen[k]}")
    for k in changed[:limit]:
        cols = [c for c in expected[k] if expected[k][c] != seen[k].get(c)]
        want = {c: expected[k][c] for c in cols}
        got = {c: seen[k].get(c) for c in cols}
        out.append(f"row {k} differs in {cols}: expected {want}, got {got}")
    total = len(missing) + len(extra) + len(changed) + dupes
    if total > limit:
        out = [*out[:limit], f"... {total} differences in all ({len(missing)} missing, "
               f"{len(extra)} unexpected, {len(changed)} changed, {dupes} duplicated)"]
    return out


class ExpectedTable:
    """The reference state of one table, event by event (see the module docstring).

    Attributes:
        schema: The table schema.
        counts: Outcome counts so far (inserted/updated/deleted/ignored/stale/rejected).
    """

    def __init__(self, schema: TableSchema) -> None:
        self.schema = schema
        self._rows: dict[Key, Row] = {}
        self._seqs: dict[Key, int] = {}
        self.counts: dict[str, int] = dict.fromkeys(
            ("inserted", "updated", "deleted", "ignored", "stale", "rejected"), 0)
        self.reject_reasons: list[str] = []

    def __len__(self) -> int:
        return len(self._rows)

    # -- validation -------------------------------------------------------------------

    def check(self, event: Any) -> str | None:
        """Why ``event`` is refused without looking at the state (``None``: it is valid)."""
        s = self.schema
        if not isinstance(event, Mapping):
            return "not a decodable event"
        op = event.get("op")
        if op not in _OPS:
            return f"unknown op {op!r}"
        key = event.get("key")
        if len(s.primary_key) == 1 and key is not None and not isinstance(key, Mapping):
            key = {s.primary_key[0]: key}
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
        sets = event.get("set") or {}
        if not isinstance(sets, Mapping):
            return "'set' is not an object"
        if op != "delete":
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
        if s.sequence_column is not None:
            seq = event.get("seq")
            if seq is None and op != "delete":
                seq = sets.get(s.sequence_column)
            if isinstance(seq, bool) or not isinstance(seq, int):
                return "seq is missing"
            if s.sequence_column in sets and sets[s.sequence_column] != seq:
                return "sequence column in 'set' differs from seq"
        return None

    def _key(self, event: Mapping[str, Any]) -> Key:
        key = event["key"]
        if not isinstance(key, Mapping):
            key = {self.schema.primary_key[0]: key}
        return tuple(coerce_value(key[c.name], c) for c in self.schema.key_columns)

    def _new_row(self, key: Key) -> Row:
        row: Row = {}
        for c in self.schema.columns:
            if c.name in self.schema.primary_key:
                row[c.name] = key[self.schema.primary_key.index(c.name)]
            else:
                row[c.name] = normalize_value(c.default.as_py(), c)
        return row

    # -- apply ------------------------------------------------------------------------

    def apply(self, event: Any) -> str:
        """Applies one event (``None`` = an undecodable record); returns its outcome:
        ``inserted``, ``updated``, ``deleted``, ``ignored``, ``stale`` or ``rejected``."""
        outcome = self._apply(event)
        self.counts[outcome] += 1
        return outcome

    def apply_all(self, events: Iterable[Any]) -> None:
        """Applies events in order."""
        for e in events:
            self.apply(e)

    def _apply(self, event: Any) -> str:
        reason = self.check(event)
        if reason is not None:
            self.reject_reasons.append(reason)
            return "rejected"
        s = self.schema
        op = event["op"]
        key = self._key(event)
        sets = {} if op == "delete" else {
            name: coerce_value(v, s.column(name)) for name, v in (event.get("set") or {}).items()}
        seq: int | None = None
        if s.sequence_column is not None:
            seq = event.get("seq")
            if seq is None:
                seq = sets[s.sequence_column]
            if key in self._seqs and seq < self._seqs[key]:
                return "stale"
            sets[s.sequence_column] = seq
        live = key in self._rows
        if op == "update" and not live:
            self.reject_reasons.append("update of missing key")
            return "rejected"
        if op == "delete":
            outcome = "deleted" if live else "ignored"
            self._rows.pop(key, None)
        elif op == "insert" or not live:
            outcome = "updated" if live else "inserted"
            row = self._new_row(key)
            row.update(sets)
            self._rows[key] = row
        else:
            self._rows[key].update(sets)
            outcome = "updated"
        if seq is not None:
            self._seqs[key] = seq
        return outcome

    # -- state ------------------------------------------------------------------------

    def row(self, key: Key) -> Row | None:
        """The live row of ``key`` (a copy), or ``None``."""
        r = self._rows.get(key)
        return None if r is None else dict(r)

    def snapshot(self) -> dict[Key, Row]:
        """A copy of the live rows, key -> row."""
        return copy.deepcopy(self._rows)

    def to_arrow(self) -> pa.Table:
        """The live rows as an Arrow table of the schema, sorted by key."""
        rows = [self._rows[k] for k in sorted(self._rows)]
        return pa.Table.from_pylist(rows, schema=self.schema.arrow_schema())
