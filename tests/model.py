"""A plain-Python reference model of a cdc_sink table, for model-based tests.

It applies events one by one with the semantics of DESIGN.md §3 and keeps a full copy of
the state per version, so every retained version of the real engine can be compared.
"""

from __future__ import annotations

import copy
import datetime as dt
import decimal
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from cdc_sink.schema import TableSchema

Key = tuple[Any, ...]
Row = dict[str, Any]


class RefModel:
    """Reference semantics of one table (all buckets together)."""

    def __init__(self, schema: TableSchema) -> None:
        self.schema = schema
        self.rows: dict[Key, Row] = {}
        self.seqs: dict[Key, int] = {}
        self.versions: dict[int, dict[Key, Row]] = {0: {}}
        self._saved: tuple[dict[Key, Row], dict[Key, int]] | None = None

    # ------------------------------------------------------------------ validation
    def static_reason(self, e: Mapping[str, Any]) -> str | None:
        """Why the event is rejected without looking at state (None: valid)."""
        s = self.schema
        if e.get("op") == "truncate":
            return None  # needs no key, set or seq
        if e.get("op") not in ("insert", "upsert", "update", "delete"):
            return "op"
        key = e.get("key")
        if not isinstance(key, Mapping):
            return "key"
        for k in s.primary_key:
            if key.get(k) is None:
                return "key"
        sets = e.get("set") or {}
        for name, v in sets.items():
            if not s.has_column(name) or name in s.primary_key:
                return "column"
            c = s.column(name)
            if e["op"] != "delete" and v is None and not c.nullable:
                return "null"
        if e["op"] == "insert":
            for c in s.required_columns:
                if c.name not in sets:
                    return "required"
        if s.sequence_column is not None and e.get("seq") is None:
            return "seq"
        return None

    def key_of(self, e: Mapping[str, Any]) -> Key:
        return tuple(e["key"][k] for k in self.schema.primary_key)

    def new_row(self, key: Key, sets: Mapping[str, Any]) -> Row:
        row: Row = {}
        for c in self.schema.columns:
            if c.name in self.schema.primary_key:
                row[c.name] = key[self.schema.primary_key.index(c.name)]
            else:
                row[c.name] = c.default.as_py()
        row.update(sets)
        return row

    # ------------------------------------------------------------------ apply
    def apply(self, events: Sequence[Mapping[str, Any]]) -> dict[str, int]:
        """Applies events in order; returns counts like ``ApplyResult.counts()``."""
        counts = dict.fromkeys(
            ("inserted", "updated", "deleted", "ignored", "stale", "rejected", "truncated",
             "invalid"), 0)
        s = self.schema
        S = s.sequence_column
        required = {c.name for c in s.required_columns}
        self._saved = (copy.deepcopy(self.rows), dict(self.seqs))
        for e in events:
            if self.static_reason(e) is not None:
                counts["invalid"] += 1
                continue
            if e["op"] == "truncate":
                # Every live row goes; its sequence stays as the key's tombstone.
                counts["truncated"] += len(self.rows)
                self.rows.clear()
                continue
            key = self.key_of(e)
            op = e["op"]
            sets = dict(e.get("set") or {}) if op != "delete" else {}
            live = key in self.rows
            seq = e.get("seq")
            if S is not None:
                if key in self.seqs and seq < self.seqs[key]:
                    counts["stale"] += 1
                    continue
                sets[S] = seq
            if op == "insert":
                counts["updated" if live else "inserted"] += 1
                self.rows[key] = self.new_row(key, sets)
            elif op == "upsert":
                if live:
                    self.rows[key].update(sets)
                    counts["updated"] += 1
                elif required - set(sets):
                    counts["rejected"] += 1
                    continue
                else:
                    self.rows[key] = self.new_row(key, sets)
                    counts["inserted"] += 1
            elif op == "update":
                if not live:
                    counts["rejected"] += 1
                    continue
                self.rows[key].update(sets)
                counts["updated"] += 1
            else:
                if live:
                    del self.rows[key]
                    counts["deleted"] += 1
                else:
                    counts["ignored"] += 1
            if S is not None:
                self.seqs[key] = seq
        return counts

    def commit(self, version: int) -> None:
        self.versions[version] = copy.deepcopy(self.rows)
        self._saved = None

    def rollback(self) -> None:
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


def model_rows(rows: Mapping[Key, Row], schema: TableSchema,
               columns: Sequence[str] | None = None) -> dict[Key, Row]:
    names = columns or schema.names
    out = {}
    for k, r in rows.items():
        conv = pa.Table.from_pylist([{n: r[n] for n in names}], schema=schema.arrow_schema(names))
        out[k] = {n: normalize(v) for n, v in conv.to_pylist()[0].items()}
    return out
