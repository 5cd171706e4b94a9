"""The canonical change batch: the one Arrow form every event format decodes to.

A :class:`ChangeBatch` is a column-oriented list of events of one table schema:

- ``op``: int8 code per event (:data:`OP_INSERT`, :data:`OP_UPSERT`, :data:`OP_UPDATE`,
  :data:`OP_DELETE`, :data:`OP_TRUNCATE`);
- ``keys``: one Arrow array per primary-key column, non-null except at truncates (a
  truncate names no key: it deletes every row live at its position in the batch, and
  its key columns, values and seq are null/absent/0);
- ``values`` and ``present``: for each value column that at least one event sets, the
  values and a boolean mask of the events that *set* it. *Absent is not null*: a column
  an event does not set has ``present == False`` and keeps its value; ``present`` with a
  null value is a real update to null;
- ``seq``: the int64 sequence of each event (tables with a ``sequence_column``);
- ``position``: where each event came from (its index in the input, or a caller's source
  position such as a Kafka offset), carried so rejects can be traced.

Its wire form (:meth:`ChangeBatch.to_arrow`, used by the WAL and accepted by
``Table.apply``) is one Arrow table::

    __op: int8 | __seq: int64 (opt) | <key columns> | <col> | __set__<col> | ...

Events are validated on construction; an invalid event is never raised mid-batch: it is
returned in :class:`Rejects` with its position and a reason, and it is not in the batch.
Validation also refuses values a column cannot hold although Arrow can
(:func:`cdc_sink.schema.out_of_bounds`: dates and timestamps outside
0001-01-01..9999-12-31, decimals beyond their precision), so no accepted value can fail a
later read, snapshot or compaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_sink._batch_events import column_from_py, event_seqs, set_columns, split_events
from cdc_sink.errors import SchemaMismatch
from cdc_sink.schema import (
    Column,
    TableSchema,
    bounds_reason,
    may_exceed_bounds,
    out_of_bounds,
    type_to_str,
    value_bounds,
)
from cdc_sink.utils.arrays import one_array

__all__ = [
    "OP_CODES",
    "OP_DELETE",
    "OP_INSERT",
    "OP_NAMES",
    "OP_TRUNCATE",
    "OP_UPDATE",
    "OP_UPSERT",
    "SET_PREFIX",
    "ChangeBatch",
    "Rejects",
]

OP_INSERT = 0
OP_UPSERT = 1
OP_UPDATE = 2
OP_DELETE = 3
OP_TRUNCATE = 4
OP_NAMES = ("insert", "upsert", "update", "delete", "truncate")
OP_CODES: dict[str, int] = {name: code for code, name in enumerate(OP_NAMES)}
SET_PREFIX = "__set__"


@dataclass
class Rejects:
    """Events refused by validation or by a tablet, with a reason each.

    Attributes:
        positions: Position of each rejected event (input index or source position).
        reasons: One human-readable reason per rejected event.
    """

    positions: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    reasons: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.reasons)

    def extend(self, other: Rejects) -> None:
        """Appends ``other``'s rejects to this one."""
        self.positions = np.concatenate([self.positions, other.positions])
        self.reasons.extend(other.reasons)

    def as_dict(self) -> dict[int, str]:
        """Maps each rejected position to its reason."""
        return {int(p): r for p, r in zip(self.positions.tolist(), self.reasons, strict=True)}


@dataclass
class ChangeBatch:
    """A validated batch of change events of one schema (see the module docstring)."""

    schema: TableSchema
    op: np.ndarray
    keys: tuple[pa.Array, ...]
    values: dict[int, pa.Array]
    present: dict[int, np.ndarray]
    seq: np.ndarray | None = None
    position: np.ndarray | None = None
    _key_hash: np.ndarray | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.op)

    # ------------------------------------------------------------------ derived data
    @property
    def positions(self) -> np.ndarray:
        """Source positions (the input index when no source position was given)."""
        if self.position is None:
            return np.arange(len(self), dtype=np.int64)
        return self.position

    def key_hash(self) -> np.ndarray:
        """Spark ``xxhash64`` of the key columns (int64), computed once."""
        if self._key_hash is None:
            from cdc_sink.xxhash64 import spark_xxhash64

            self._key_hash = np.asarray(spark_xxhash64(list(self.keys)), dtype=np.int64)
        return self._key_hash

    def bucket_ids(self) -> np.ndarray:
        """Bucket of each event: ``pmod(xxhash64(key), num_buckets)`` as Spark computes it."""
        buckets: np.ndarray = np.mod(self.key_hash(), self.schema.num_buckets).astype(np.int32)
        return buckets

    def take(self, indices: np.ndarray) -> ChangeBatch:
        """Returns the events at ``indices`` (in that order) as a new batch."""
        idx = np.asarray(indices, dtype=np.int64)
        pidx = pa.array(idx)
        values = {}
        present = {}
        for cid, arr in self.values.items():
            p = self.present[cid][idx]
            if p.any():
                values[cid] = arr.take(pidx)
                present[cid] = p
        return ChangeBatch(
            schema=self.schema,
            op=self.op[idx],
            keys=tuple(k.take(pidx) for k in self.keys),
            values=values,
            present=present,
            seq=None if self.seq is None else self.seq[idx],
            position=self.positions[idx],
            _key_hash=None if self._key_hash is None else self._key_hash[idx],
        )

    @classmethod
    def concat(cls, batches: Sequence[ChangeBatch]) -> ChangeBatch:
        """Concatenates batches of one schema, in order (events keep their order)."""
        if len(batches) == 1:
            return batches[0]
        schema = batches[0].schema
        n = [len(b) for b in batches]
        values: dict[int, pa.Array] = {}
        present: dict[int, np.ndarray] = {}
        for cid in sorted({c for b in batches for c in b.values}):
            t = schema.column_by_id(cid).type
            values[cid] = pa.concat_arrays(
                [
                    b.values[cid] if cid in b.values else pa.nulls(k, t)
                    for b, k in zip(batches, n, strict=True)
                ]
            )
            present[cid] = np.concatenate(
                [
                    b.present[cid] if cid in b.present else np.zeros(k, bool)
                    for b, k in zip(batches, n, strict=True)
                ]
            )
        seqs = [b.seq for b in batches]
        return cls(
            schema=schema,
            op=np.concatenate([b.op for b in batches]),
            keys=tuple(
                pa.concat_arrays([b.keys[i] for b in batches])
                for i in range(len(schema.primary_key))
            ),
            values=values,
            present=present,
            seq=None
            if any(s is None for s in seqs)
            else np.concatenate([s for s in seqs if s is not None]),
            position=np.concatenate([b.positions for b in batches]),
        )

    def split_by_bucket(self) -> dict[int, ChangeBatch]:
        """Splits the batch by bucket, keeping event order within each bucket.

        A truncate clears every bucket: it goes to *every* bucket of the table, at its
        position among that bucket's events.
        """
        if self.schema.num_buckets == 1:  # no hashing, sorting or copying
            return {0: self} if len(self) else {}
        buckets = self.bucket_ids()
        is_truncate = self.op == OP_TRUNCATE
        if is_truncate.any():
            truncates = np.flatnonzero(is_truncate)
            keyed = np.flatnonzero(~is_truncate)
            kb = buckets[keyed]
            order = keyed[np.argsort(kb, kind="stable")]
            counts = np.bincount(kb, minlength=self.schema.num_buckets)
            starts = np.r_[0, np.cumsum(counts)]
            return {
                b: self.take(np.sort(np.concatenate([order[starts[b] : starts[b + 1]], truncates])))
                for b in range(self.schema.num_buckets)
            }
        order = np.argsort(buckets, kind="stable")
        sorted_b = buckets[order]
        bounds = np.flatnonzero(np.diff(sorted_b)) + 1
        out: dict[int, ChangeBatch] = {}
        for chunk in np.split(order, bounds):
            if len(chunk):
                out[int(buckets[chunk[0]])] = self.take(chunk)
        return out

    @property
    def has_truncate(self) -> bool:
        """Whether any event of the batch is a truncate."""
        return bool((self.op == OP_TRUNCATE).any())

    # ------------------------------------------------------------------ wire form
    def to_arrow(self) -> pa.Table:
        """Returns the wire form (see the module docstring)."""
        cols: dict[str, pa.Array] = {"__op": pa.array(self.op, pa.int8())}
        if self.seq is not None:
            cols["__seq"] = pa.array(self.seq, pa.int64())
        for col, arr in zip(self.schema.key_columns, self.keys, strict=True):
            cols[col.name] = arr
        for c in self.schema.value_columns:
            if c.id in self.values:
                cols[c.name] = self.values[c.id]
                cols[SET_PREFIX + c.name] = pa.array(self.present[c.id], pa.bool_())
        return pa.table(cols)

    @classmethod
    def from_arrow(
        cls,
        table: pa.Table | pa.RecordBatch,
        schema: TableSchema,
        *,
        position: np.ndarray | None = None,
    ) -> tuple[ChangeBatch, Rejects]:
        """Builds a batch from its wire form, validating every event.

        ``__op`` may hold int8 codes or op names. A value column without its
        ``__set__<col>`` mask is taken as set by every event that is not a delete or a
        truncate. ``__seq`` is ignored when the table has no sequence column, and may be
        null for a truncate.

        Args:
            table: The wire-form table.
            schema: The table schema.
            position: Optional source position per row (defaults to the row index).

        Returns:
            The valid events and the rejects.

        Raises:
            SchemaMismatch: The table's columns do not fit the schema (unknown column,
                missing key column, type that cannot be cast).
        """
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        n = table.num_rows
        names = set(table.column_names)
        if "__op" not in names:
            raise SchemaMismatch("change table has no '__op' column")
        known = {"__op", "__seq", *schema.names}
        known |= {SET_PREFIX + c.name for c in schema.value_columns}
        unknown = sorted(names - known)
        if unknown:
            raise SchemaMismatch(f"change table has unknown column(s) {unknown}")
        reasons = np.full(n, None, dtype=object)
        op = _op_codes(table.column("__op"), reasons)
        keys = []
        for kc in schema.key_columns:
            if kc.name not in names:
                raise SchemaMismatch(f"change table lacks key column {kc.name!r}")
            keys.append(_cast(table.column(kc.name), kc))
        values: dict[int, pa.Array] = {}
        present: dict[int, np.ndarray] = {}
        not_delete = (op != OP_DELETE) & (op != OP_TRUNCATE)
        for c in schema.value_columns:
            if c.name not in names:
                continue
            arr = _cast(table.column(c.name), c)
            set_name = SET_PREFIX + c.name
            if set_name in names:
                mask = np.asarray(
                    table.column(set_name).fill_null(False).to_numpy(zero_copy_only=False),
                    dtype=bool,
                )
            else:
                mask = not_delete.copy()
            values[c.id] = arr
            present[c.id] = mask
        seq = None
        if "__seq" in names:
            s = table.column("__seq")
            if not pa.types.is_integer(s.type):
                raise SchemaMismatch(f"'__seq' must be an integer column, got {s.type}")
            s = one_array(s)
            seq_valid = np.asarray(s.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
            seq = s.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
            if schema.sequence_column is not None:  # a table without one ignores seq
                reasons[~seq_valid & (op != OP_TRUNCATE) & (reasons == None)] = "seq is null"  # noqa: E711
        return _finish(schema, op, keys, values, present, seq, reasons, position)

    @classmethod
    def from_events(
        cls,
        events: Sequence[Mapping[str, Any]],
        schema: TableSchema,
        *,
        position: np.ndarray | None = None,
    ) -> tuple[ChangeBatch, Rejects]:
        """Builds a batch from native event dicts ``{"op", "key", "set", "seq"?}``.

        ``key`` is a mapping of every key column (or a scalar for a one-column key);
        ``set`` maps column names to values (absent columns are not set). Dates and
        timestamps may be ISO strings, decimals strings or numbers, binaries bytes.
        ``{"op": "truncate"}`` needs nothing else (a key, set or seq it carries is
        ignored).

        Returns:
            The valid events and the rejects (with reasons); never raises for a bad event.
        """
        n = len(events)
        reasons = np.full(n, None, dtype=object)
        ops, key_maps, set_maps, seqs = split_events(events, schema, reasons)
        op = _op_codes(
            pa.array([o if isinstance(o, str) or o is None else repr(o) for o in ops], pa.string()),
            reasons,
        )
        keys = [
            column_from_py([km.get(c.name) for km in key_maps], c, reasons)
            for c in schema.key_columns
        ]
        values, present = set_columns(schema, set_maps, reasons)
        seq = event_seqs(schema, seqs, op == OP_TRUNCATE, values, present, reasons)
        return _finish(schema, op, keys, values, present, seq, reasons, position)


# ---------------------------------------------------------------------- helpers
def _op_codes(col: pa.Array | pa.ChunkedArray, reasons: np.ndarray) -> np.ndarray:
    """Maps an op column (names or int codes) to int8 codes; unknown ops get a reason."""
    col = one_array(col)
    n = len(col)
    if pa.types.is_integer(col.type):
        raw = col.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        ok = (raw >= 0) & (raw <= OP_TRUNCATE)
        op = np.where(ok, raw, -1).astype(np.int8)
    elif pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        idx = pc.index_in(col, value_set=pa.array(list(OP_NAMES)))
        op = idx.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int8)
        ok = op >= 0
    else:
        raise SchemaMismatch(f"'__op' must be int8 codes or op names, got {col.type}")
    bad = ~ok
    if bad.any():
        bad &= reasons == None  # noqa: E711  (an event already refused keeps its reason)
        shown = col.to_pylist()
        for i in np.flatnonzero(bad):
            reasons[i] = f"unknown op {shown[i]!r}"
    assert len(op) == n
    return op


def _cast(col: pa.Array | pa.ChunkedArray, c: Column) -> pa.Array:
    col = one_array(col)
    if col.type == c.type:
        return col
    if pa.types.is_null(col.type):
        return pa.nulls(len(col), c.type)
    try:
        return col.cast(c.type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SchemaMismatch(
            f"column {c.name!r}: cannot cast {col.type} to {type_to_str(c.type)}: {exc}"
        ) from exc


def _finish(
    schema: TableSchema,
    op: np.ndarray,
    keys: list[pa.Array],
    values: dict[int, pa.Array],
    present: dict[int, np.ndarray],
    seq: np.ndarray | None,
    reasons: np.ndarray,
    position: np.ndarray | None,
) -> tuple[ChangeBatch, Rejects]:
    """Vectorized checks shared by every constructor, then the split into valid/rejects."""
    n = len(op)
    refuse = _Refuser(reasons)
    is_truncate = op == OP_TRUNCATE
    keys = _checked_keys(schema, keys, is_truncate, refuse)
    _check_values(schema, op, values, present, refuse)
    if schema.sequence_column is not None:
        seq = _checked_seq(schema, seq, is_truncate, values, present, refuse)
    ok = refuse.ok
    pos = np.arange(n, dtype=np.int64) if position is None else np.asarray(position, np.int64)
    good = np.flatnonzero(ok)
    bad = np.flatnonzero(~ok)
    rejects = Rejects(positions=pos[bad], reasons=[str(r) for r in reasons[bad]])
    full = ChangeBatch(
        schema=schema,
        op=op.astype(np.int8),
        keys=tuple(keys),
        values=values,
        present=present,
        seq=seq,
        position=pos,
    )
    if len(bad) == 0:
        return full, rejects
    return full.take(good), rejects


class _Refuser:
    """Refuses events still valid where a mask holds, with a reason (the first reason an
    event gets is the one it keeps)."""

    def __init__(self, reasons: np.ndarray) -> None:
        self.reasons = reasons
        self.ok = reasons == None  # noqa: E711

    def __call__(self, mask: np.ndarray | bool, reason: str) -> None:
        hit = mask & self.ok
        if hit.any():
            self.reasons[hit] = reason
            self.ok[hit] = False


def _checked_keys(
    schema: TableSchema, keys: list[pa.Array], is_truncate: np.ndarray, refuse: _Refuser
) -> list[pa.Array]:
    """Refuses null and out-of-range keys; a truncate's key columns become null."""
    for kc, arr in zip(schema.key_columns, keys, strict=True):
        if arr.null_count:
            refuse(
                ~np.asarray(arr.is_valid(), dtype=bool) & ~is_truncate,
                f"key column {kc.name!r} is missing or null",
            )
        if may_exceed_bounds(arr):
            refuse(
                out_of_bounds(arr) & ~is_truncate,
                f"key column {kc.name!r}: {bounds_reason(kc.type)}",
            )
    if is_truncate.any():  # a truncate names no key: its key columns are null
        nulls = pa.array(is_truncate)
        keys = [pc.if_else(nulls, pa.scalar(None, arr.type), arr) for arr in keys]
        keys = [one_array(k) for k in keys]
    return keys


def _check_values(
    schema: TableSchema,
    op: np.ndarray,
    values: dict[int, pa.Array],
    present: dict[int, np.ndarray],
    refuse: _Refuser,
) -> None:
    """Unsets what deletes and truncates carry; refuses out-of-range values, nulls in
    non-nullable columns and inserts that leave a required column unset."""
    sets_nothing = (op == OP_DELETE) | (op == OP_TRUNCATE)
    for cid in list(present):
        present[cid] = present[cid] & ~sets_nothing  # a delete or truncate sets nothing
    for c in schema.value_columns:
        if c.id in values and may_exceed_bounds(values[c.id]):
            refuse(
                present[c.id] & out_of_bounds(values[c.id]),
                f"column {c.name!r}: {bounds_reason(c.type)}",
            )
    for c in schema.value_columns:
        if c.id in values and not c.nullable and values[c.id].null_count:
            nulls = present[c.id] & ~np.asarray(values[c.id].is_valid(), dtype=bool)
            refuse(nulls, f"null in non-nullable column {c.name!r}")
    for c in schema.required_columns:
        setting = present.get(c.id)
        refuse(
            (op == OP_INSERT) & (~setting if setting is not None else True),
            f"insert does not set non-nullable column {c.name!r} (it has no default)",
        )


def _checked_seq(
    schema: TableSchema,
    seq: np.ndarray | None,
    is_truncate: np.ndarray,
    values: dict[int, pa.Array],
    present: dict[int, np.ndarray],
    refuse: _Refuser,
) -> np.ndarray:
    """The seq of a table with a sequence column: refuses events without one, with a
    sequence column in 'set' that differs or out of the column's range; the sequence
    column leaves the values (the tablet writes it from seq)."""
    assert schema.sequence_column is not None
    if seq is None:
        refuse(~is_truncate, "seq is missing")
        return np.zeros(len(is_truncate), dtype=np.int64)
    if is_truncate.any():
        seq = np.where(is_truncate, 0, seq)
    scol = schema.column(schema.sequence_column)
    if scol.id in values:
        sv = values[scol.id]
        differs = present[scol.id] & ~np.asarray(
            pc.equal(sv, pa.array(seq).cast(sv.type, safe=False)).fill_null(False), dtype=bool
        )
        refuse(differs, f"sequence column {scol.name!r} in 'set' differs from seq")
        del values[scol.id]
        del present[scol.id]
    if scol.type != pa.int64():
        bounds = value_bounds(scol.type)  # an integer type: never None
        assert bounds is not None
        lo, hi = bounds
        refuse((seq < lo) | (seq > hi), f"seq out of range of {type_to_str(scol.type)}")
    return seq
