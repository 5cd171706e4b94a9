"""Columns of a group of Avro records, gathered into one run's columns (private).

For :mod:`cdc_sink.formats.debezium_avro`: a run of messages is decoded one schema group
at a time (the events written with one schema id), each group giving its events' columns
as *pieces* (the events' row numbers in the run and their values). :class:`RunColumns`
collects the pieces and merges them once per column into arrays over the whole run.
:func:`restrict` keeps the part of a decoded value that some events use (so that a
``before`` image is converted only for deletes), :func:`field_column` converts one field
of a row record into a column, refusing the events whose value the column does not take.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_sink.formats._arrays import Parts, refuse_each, scatter, spans
from cdc_sink.formats._avro_read import Unread, Val
from cdc_sink.formats._avro_values import column_values, raw_text
from cdc_sink.formats.value_ranges import out_of_range_reason
from cdc_sink.schema import Column, TableSchema, type_to_str

__all__ = ["FieldColumn", "RunColumns", "field_column", "int_field", "restrict", "text_field"]


def restrict(val: Val, use: np.ndarray) -> Val:
    """The part of ``val`` (and of its children) on the records where ``use`` is set
    (``use`` is indexed by record, like :attr:`Val.rows`)."""
    sel = use[val.rows]
    if sel.all():
        return val
    out = Val(val.node, val.rows[sel])
    for name in ("ints", "floats", "bools", "starts", "ends", "branch"):
        arr = getattr(val, name)
        if arr is not None:
            setattr(out, name, arr[sel])
    kids = val.children
    out.children = kids.like(out.rows) if isinstance(kids, Unread) else {}
    out.children.update({k: restrict(v, use) for k, v in kids.items()})
    return out


@dataclass
class FieldColumn:
    """One column of a group's events (aligned with the group)."""

    values: pa.Array
    present: np.ndarray  # the event sets the column (absent: not in its row, or TOAST)
    given: np.ndarray  # present and not null


def field_column(
    rec: Val,
    c: Column,
    target: pa.DataType,
    g: int,
    parts: Parts,
    reasons: np.ndarray,
    *,
    unit: int,
    placeholders: tuple[bytes, ...] = (),
) -> FieldColumn | None:
    """Column ``c`` from the field of that name of the row records ``rec`` (None: the
    records have no such field). Values the column does not take refuse their events
    (``reasons`` has one entry per event of the group)."""
    f = rec.children.get(c.name)
    if f is None:
        return None
    fv, _nulls = f.nonnull()
    conv = column_values(fv, parts, target, unit)
    present = np.zeros(g, dtype=bool)
    present[rec.rows] = True
    if placeholders and fv.starts is not None and fv.ends is not None:
        hit = _is_placeholder(parts, fv, placeholders)
        present[fv.rows[hit]] = False
        conv.bad &= ~hit
    _refuse_values(reasons, fv, conv.bad, conv.oor, conv.wrong_type, c, parts)
    values = scatter(conv.values, fv.rows, g)
    given = np.zeros(g, dtype=bool)
    given[fv.rows] = True
    return FieldColumn(values=values, present=present, given=given & present)


def _is_placeholder(parts: Parts, fv: Val, forms: tuple[bytes, ...]) -> np.ndarray:
    """Which values are one of the placeholder's byte forms (vectorized)."""
    assert fv.starts is not None and fv.ends is not None
    arr = spans(parts, fv.starts, fv.ends).cast(pa.binary())
    hit = np.zeros(len(fv.rows), dtype=bool)
    length = fv.ends - fv.starts
    for form in forms:
        cand = length == len(form)
        if cand.any():
            eq = pc.equal(arr.filter(pa.array(cand)), pa.scalar(form, pa.binary()))
            same = np.asarray(eq.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)
            hit[np.flatnonzero(cand)[same]] = True
    return hit


def _refuse_values(
    reasons: np.ndarray,
    fv: Val,
    bad: np.ndarray,
    oor: np.ndarray,
    wrong_type: str,
    c: Column,
    parts: Parts,
) -> None:
    """Reasons of the events whose value of ``c`` is bad (reject path)."""
    idx = np.flatnonzero(bad)
    if not len(idx):
        return
    name = type_to_str(c.type)
    if wrong_type:
        texts = [f"column {c.name!r}: Avro {wrong_type} is not a valid {name}"] * len(idx)
    else:
        texts = [
            out_of_range_reason(c, raw_text(fv, i, parts))
            if oor[i]
            else f"column {c.name!r}: {raw_text(fv, i, parts)} is not a valid {name}"
            for i in idx.tolist()
        ]
    refuse_each(reasons, fv.rows[idx], texts)


def int_field(rec: Val | None, name: str, g: int) -> tuple[np.ndarray, np.ndarray]:
    """An integer field of records (``source.lsn``...) over the group: values (0 where
    none) and the mask of events that have one."""
    v = np.zeros(g, dtype=np.int64)
    given = np.zeros(g, dtype=bool)
    f = None if rec is None else rec.children.get(name)
    if f is None:
        return v, given
    fv, _ = f.nonnull()
    if fv.ints is not None and fv.node.kind in ("int", "long"):
        v[fv.rows] = fv.ints
        given[fv.rows] = True
    return v, given


def text_field(rec: Val | None, name: str, g: int, parts: Parts) -> pa.Array:
    """A string field of records over the group (null where none)."""
    f = None if rec is None else rec.children.get(name)
    if f is None:
        return pa.nulls(g, pa.string())
    fv, _ = f.nonnull()
    if fv.starts is None or fv.ends is None or fv.node.kind != "string":
        return pa.nulls(g, pa.string())
    vals = spans(parts, fv.starts, fv.ends).cast(pa.binary()).cast(pa.string(), safe=False)
    return scatter(vals, fv.rows, g)


Piece = tuple[np.ndarray, pa.Array, np.ndarray]
"""A group's part of a column: its events' rows in the run, values, presence."""


@dataclass
class RunColumns:
    """The columns of one run of ``n`` events, collected group by group."""

    n: int
    schema: TableSchema
    op: np.ndarray = field(init=False)
    ts: np.ndarray = field(init=False)
    skip: np.ndarray = field(init=False)
    message: np.ndarray = field(init=False)
    keys: dict[str, list[Piece]] = field(init=False)
    values: dict[str, list[Piece]] = field(init=False)
    seq: list[tuple[np.ndarray, pa.Array]] = field(init=False)

    def __post_init__(self) -> None:
        self.op = np.full(self.n, -1, dtype=np.int8)
        self.ts = np.full(self.n, np.iinfo(np.int64).min, dtype=np.int64)
        self.skip = np.zeros(self.n, dtype=bool)
        self.message = np.zeros(self.n, dtype=bool)
        self.keys = {k: [] for k in self.schema.primary_key}
        self.values = {}
        self.seq = []

    def put(self, where: str, name: str, rows: np.ndarray, col: FieldColumn) -> None:
        """Adds a group's column (``where``: ``"keys"`` or ``"values"``)."""
        target = self.keys if where == "keys" else self.values
        target.setdefault(name, []).append((rows, col.values, col.present))

    def merged(self, pieces: list[Piece], t: pa.DataType) -> tuple[pa.Array, np.ndarray]:
        """One column over the run from its pieces (null and absent elsewhere)."""
        present = np.zeros(self.n, dtype=bool)
        if not pieces:
            return pa.nulls(self.n, t), present
        rows = np.concatenate([p[0] for p in pieces])
        arr = pa.concat_arrays([p[1] for p in pieces]) if len(pieces) > 1 else pieces[0][1]
        present[rows] = np.concatenate([p[2] for p in pieces])
        return scatter(arr, rows, self.n), present
