"""The reference model of a cdc_sink table for model-based tests.

:class:`RefModel` is :class:`cdc_sink_testkit.reference.ReferenceTable` (the one reference
semantics, shared with the demo) applied a batch at a time, with counts like
``ApplyResult.counts()`` and a full copy of the state per version, so every retained
version of the real engine can be compared.
"""

from __future__ import annotations

import copy
import datetime as dt
import decimal
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from cdc_sink.schema import TableSchema
from cdc_sink_testkit.reference import OUTCOMES, Key, ReferenceTable, Row

__all__ = ["Key", "RefModel", "Row", "model_rows", "normalize", "table_to_rows"]


class RefModel(ReferenceTable):
    """Reference semantics of one table (all buckets together), with versions."""

    def __init__(self, schema: TableSchema) -> None:
        super().__init__(schema)
        self.versions: dict[int, dict[Key, Row]] = {0: {}}
        self._saved: tuple[dict[Key, Row], dict[Key, int]] | None = None

    def apply(self, events: Sequence[Mapping[str, Any]]) -> dict[str, int]:
        """Applies events in order; returns counts like ``ApplyResult.counts()`` (a
        truncate counts the rows it removed)."""
        counts = dict.fromkeys(OUTCOMES, 0)
        self._saved = (copy.deepcopy(self.rows), dict(self.seqs))
        for e in events:
            live = len(self.rows)
            outcome = self.apply_event(e)
            counts[outcome] += live if outcome == "truncated" else 1
        return counts

    def commit(self, version: int) -> None:
        """The state after the last :meth:`apply` is ``version``."""
        self.versions[version] = copy.deepcopy(self.rows)
        self._saved = None

    def rollback(self) -> None:
        """Undoes the last :meth:`apply`."""
        assert self._saved is not None
        self.rows, self.seqs = self._saved
        self._saved = None


def normalize(v: Any) -> Any:
    """Comparable form of a value read back from Arrow."""
    if isinstance(v, float) and v != v:
        return "NaN"
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if isinstance(v, decimal.Decimal):
        return v.normalize()
    return v


def table_to_rows(table: pa.Table, key_names: Sequence[str]) -> dict[Key, Row]:
    out: dict[Key, Row] = {}
    for r in table.to_pylist():
        k = tuple(r[n] for n in key_names)
        assert k not in out, f"key {k} read twice"
        out[k] = {n: normalize(v) for n, v in r.items()}
    return out


def model_rows(
    rows: Mapping[Key, Row], schema: TableSchema, columns: Sequence[str] | None = None
) -> dict[Key, Row]:
    names = columns or schema.names
    out = {}
    for k, r in rows.items():
        conv = pa.Table.from_pylist([{n: r[n] for n in names}], schema=schema.arrow_schema(names))
        out[k] = {n: normalize(v) for n, v in conv.to_pylist()[0].items()}
    return out
