"""The demo's reference table: what the table must contain after a stream of events.

:class:`ExpectedTable` is :class:`cdc_sink_testkit.reference.ReferenceTable` (the reference
semantics, docs/architecture.md §3) with the demo's bookkeeping: outcome counts, the
reasons of refused events, snapshots. An event the reference finds invalid counts as
``rejected`` here, like one refused for the table's state.

Values are kept as Python values of the column types (``Decimal`` quantized to the
column's scale, timezone-aware UTC ``datetime``), and :func:`normalize_row` brings rows
read back from Arrow or Spark to the same form for comparison.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from cdc_sink.schema import TableSchema
from cdc_sink_testkit.reference import Key, ReferenceTable, Row, coerce_value, normalize_value

__all__ = ["ExpectedTable", "coerce_value", "diff_rows", "normalize_row", "normalize_value"]


def normalize_row(row: Mapping[str, Any], schema: TableSchema) -> Row:
    """A row read back from Arrow/Spark, comparable with :class:`ExpectedTable` rows."""
    return {c.name: normalize_value(row.get(c.name), c) for c in schema.columns}


def diff_rows(
    expected: Mapping[Key, Row],
    actual: Iterable[Mapping[str, Any]],
    schema: TableSchema,
    *,
    limit: int = 10,
) -> list[str]:
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
        out = [
            *out[:limit],
            f"... {total} differences in all ({len(missing)} missing, "
            f"{len(extra)} unexpected, {len(changed)} changed, {dupes} duplicated)",
        ]
    return out


class ExpectedTable(ReferenceTable):
    """The reference state of one table, event by event (see the module docstring).

    Attributes:
        schema: The table schema.
        counts: Outcome counts so far (inserted/updated/deleted/ignored/stale/rejected,
            and truncated once a truncate came).
        reject_reasons: Why each rejected event was refused, in order.
    """

    def __init__(self, schema: TableSchema) -> None:
        super().__init__(schema)
        self.counts: dict[str, int] = dict.fromkeys(
            ("inserted", "updated", "deleted", "ignored", "stale", "rejected"), 0
        )
        self.reject_reasons: list[str] = []

    def __len__(self) -> int:
        return len(self.rows)

    def apply(self, event: Any) -> str:
        """Applies one event (``None`` = an undecodable record); returns its outcome:
        ``inserted``, ``updated``, ``deleted``, ``ignored``, ``stale``, ``rejected`` or
        ``truncated``."""
        outcome = self.apply_event(event)
        if outcome in ("invalid", "rejected"):
            outcome = "rejected"
            self.reject_reasons.append(str(self.last_reason))
        self.counts[outcome] = self.counts.get(outcome, 0) + 1
        return outcome

    def apply_all(self, events: Iterable[Any]) -> None:
        """Applies events in order."""
        for e in events:
            self.apply(e)

    def row(self, key: Key) -> Row | None:
        """The live row of ``key`` (a copy), or ``None``."""
        r = self.rows.get(key)
        return None if r is None else dict(r)

    def snapshot(self) -> dict[Key, Row]:
        """A copy of the live rows, key -> row."""
        return copy.deepcopy(self.rows)

    def to_arrow(self) -> pa.Table:
        """The live rows as an Arrow table of the schema, sorted by key."""
        rows = [self.rows[k] for k in sorted(self.rows)]
        return pa.Table.from_pylist(rows, schema=self.schema.arrow_schema())
