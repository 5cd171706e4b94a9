"""Flat native JSON events in one compiled pass, the rest the general way (private).

Most native ``json`` events are flat: ``{"op": "...", "key": {...}, "set": {...}, "seq":
n, "ts_ms": n}`` with scalar values of integer, float, bool and string columns, and
strings without escapes. The C extension :mod:`._cflat` (``_cflat.c``) decodes such an
event in one pass over its bytes (grammar, op, key, every value, seq and ts_ms) and says
which events it accepted; :func:`decode_flat_run` builds the run's :class:`Columns` from
its outputs and decodes every other event with the general decoder (the structural index
of :mod:`._jsonscan` and the per-column conversions), which also gives every refused
event its reason. The two are merged back into event order.

The pass accepts an event only when the general path decodes it to the same values (see
the contract at the top of ``_cflat.c``): it never refuses one. That is checked by the
differential tests in ``tests/formats/test_flat_json.py`` (every fuzzed message of the
decoder fuzz tests, hand-written edge cases, and random floats, decoded with and
without the pass).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from cdc_sink.batch import OP_DELETE, OP_NAMES, OP_TRUNCATE
from cdc_sink.formats._arrays import Parts, gather, int_bounds, new_reasons
from cdc_sink.formats._arrays_runs import Columns, merge_columns
from cdc_sink.formats._base import TS_MISSING
from cdc_sink.schema import Column, TableSchema

try:  # the compiled pass (cdc_sink/formats/_cflat.c); the general path alone without it
    from cdc_sink.formats import _cflat as _cflat
except ImportError:  # pragma: no cover - the dev install builds it
    _cflat = None  # type: ignore[assignment]

__all__ = ["decode_flat_run"]

T_OTHER, T_INT, T_FLOAT, T_BOOL, T_STRING, T_FLOAT32 = range(6)
# index = op code; a truncate is never accepted here, so it always reaches the general
# path, where the decoder option allow_truncate gates it
_OPS = tuple(name.encode() for name in OP_NAMES[:OP_TRUNCATE])
MAX_GENERAL_SHARE = 0.25
"""Above this share of declined events a run is decoded the general way as a whole (the
split and the merge would cost more than they save)."""


@dataclass(frozen=True)
class _Plan:
    """The schema's columns as the compiled pass takes them (keys first)."""

    columns: tuple[Column, ...]
    names: tuple[bytes, ...]
    types: np.ndarray  # T_* per column
    lo: np.ndarray
    hi: np.ndarray
    nkeys: int


def _type_code(t: pa.DataType) -> int:
    if pa.types.is_integer(t):
        return T_INT
    if t == pa.float64():
        return T_FLOAT
    if t == pa.float32():
        return T_FLOAT32
    if pa.types.is_boolean(t):
        return T_BOOL
    if t == pa.string():
        return T_STRING
    return T_OTHER


_PLANS: dict[int, tuple[TableSchema, _Plan | None]] = {}


def _plan(schema: TableSchema) -> _Plan | None:
    """The plan of ``schema``, or ``None`` when a key column has a type the pass does
    not decode (every event would be declined)."""
    cached = _PLANS.get(id(schema))
    if cached is not None and cached[0] is schema:
        return cached[1]
    cols = (*schema.key_columns, *schema.value_columns)
    types = np.array([_type_code(c.type) for c in cols], dtype=np.int8)
    bounds = [int_bounds(c.type) if types[i] == T_INT else (0, 0) for i, c in enumerate(cols)]
    nkeys = len(schema.key_columns)
    plan = None
    if (types[:nkeys] != T_OTHER).all() and (types[:nkeys] != T_BOOL).all():
        plan = _Plan(
            columns=cols,
            names=tuple(c.name.encode() for c in cols),
            types=types,
            lo=np.array([b[0] for b in bounds], dtype=np.int64),
            hi=np.array([b[1] for b in bounds], dtype=np.int64),
            nkeys=nkeys,
        )
    if len(_PLANS) > 64:
        _PLANS.clear()
    _PLANS[id(schema)] = (schema, plan)
    return plan


def decode_flat_run(
    parts: Parts, schema: TableSchema, general: Callable[[Parts], Columns]
) -> Columns:
    """Decodes a run of native JSON events: flat ones by the compiled pass, the others
    by ``general`` (the general decode of a run), merged in event order.

    Args:
        parts: The run's message values.
        schema: The table schema.
        general: Decodes a run the general way (given the parts of its events).

    Returns:
        The columns of every event, as ``general(parts)`` would return them.
    """
    plan = _plan(schema) if _cflat is not None and parts.n else None
    if plan is None:
        return general(parts)
    flat, ok = _compiled(parts, plan, schema)
    declined = np.flatnonzero(~ok)
    if not len(declined):
        return flat
    if len(declined) > MAX_GENERAL_SHARE * parts.n:
        return general(parts)
    accepted = np.flatnonzero(ok)
    rest = general(_packed(parts, declined))
    both = merge_columns([take_columns(flat, accepted), rest], schema)
    where = np.empty(parts.n, dtype=np.int64)
    where[np.concatenate([accepted, declined])] = np.arange(parts.n)
    return take_columns(both, where)


def _packed(parts: Parts, events: np.ndarray) -> Parts:
    """The values of ``events`` copied into a buffer of their own, back to back: the
    general path reads a run's values as one contiguous range (as a binary array lays
    them out), never the accepted events between them."""
    lengths = parts.lengths[events]
    data = gather(parts.data, parts.starts[events], lengths)
    ends = np.cumsum(lengths)
    return Parts(
        buffer=pa.py_buffer(data),
        data=data,
        starts=ends - lengths,
        ends=ends,
        valid=parts.valid[events],
    )


def take_columns(cols: Columns, rows: np.ndarray) -> Columns:
    """The events ``rows`` of ``cols``, in that order."""
    idx = pa.array(rows, pa.int64())

    def pick(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else a[rows]

    return Columns(
        op=cols.op[rows],
        keys={k: a.take(idx) for k, a in cols.keys.items()},
        values={k: (a.take(idx), p[rows]) for k, (a, p) in cols.values.items()},
        seq=None if cols.seq is None else cols.seq.take(idx),
        reasons=cols.reasons[rows],
        ts_ms=pick(cols.ts_ms),
        skip=pick(cols.skip),
        messages=pick(cols.messages),
    )


def _compiled(parts: Parts, plan: _Plan, schema: TableSchema) -> tuple[Columns, np.ndarray]:
    """The compiled pass over every event of the run: the columns (meaningful for the
    accepted events only) and the mask of accepted events."""
    n, k = parts.n, len(plan.columns)
    op = np.empty(n, dtype=np.int8)
    seq, ts = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    seq_given, ts_given, ok = (np.empty(n, dtype=np.uint8) for _ in range(3))
    present, isnull = np.empty((k, n), dtype=np.uint8), np.empty((k, n), dtype=np.uint8)
    v, vend = np.empty((k, n), dtype=np.int64), np.empty((k, n), dtype=np.int64)
    _cflat.decode(
        np.ascontiguousarray(parts.data),
        np.ascontiguousarray(parts.starts, dtype=np.int64),
        np.ascontiguousarray(parts.ends, dtype=np.int64),
        _OPS,
        OP_DELETE,
        plan.names,
        plan.nkeys,
        plan.types,
        plan.lo,
        plan.hi,
        op,
        seq,
        seq_given,
        ts,
        ts_given,
        present,
        isnull,
        v,
        vend,
        ok,
    )
    accepted = ok.view(bool) & parts.valid
    given = present.view(bool) & accepted
    valid = given & ~isnull.view(bool)
    arrays = [_array(parts, plan, c, v[c], vend[c], valid[c]) for c in range(k)]
    nk = plan.nkeys
    keys = {plan.columns[c].name: arrays[c] for c in range(nk)}
    values = {plan.columns[c].name: (arrays[c], given[c]) for c in range(nk, k) if given[c].any()}
    seq_ok = seq_given.view(bool).copy()
    seq_arr = None
    if schema.sequence_column is not None:
        s_name = schema.sequence_column
        if s_name in values:  # without "seq", the sequence column the event sets
            s_arr, s_present = values[s_name]
            s_ok = s_present & np.asarray(s_arr.is_valid(), dtype=bool) & ~seq_ok
            s_vals = np.asarray(
                s_arr.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False), np.int64
            )
            seq = np.where(s_ok, s_vals, seq)
            seq_ok |= s_ok
        seq_arr = pa.array(seq, pa.int64(), mask=~seq_ok)
        if not seq_ok[accepted].all():  # "seq is missing": the general path's reason
            accepted &= seq_ok
            values = {
                name: (a, p & accepted) for name, (a, p) in values.items() if (p & accepted).any()
            }
    ts_ok = ts_given.view(bool) & accepted
    cols = Columns(
        op=op,
        keys=keys,
        values=values,
        seq=seq_arr,
        reasons=new_reasons(n),
        ts_ms=np.where(ts_ok, ts, TS_MISSING) if ts_ok.any() else None,
    )
    return cols, accepted


def _array(
    parts: Parts, plan: _Plan, c: int, v: np.ndarray, vend: np.ndarray, valid: np.ndarray
) -> pa.Array:
    """Column ``c`` of every event from the pass's outputs (null where not ``valid``)."""
    t, code = plan.columns[c].type, int(plan.types[c])
    if code == T_OTHER:
        return pa.nulls(len(v), t)
    mask = ~valid
    if code == T_STRING:
        lengths = np.where(valid, vend - v, 0)
        offsets = np.zeros(len(v) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        out = np.empty(int(offsets[-1]), dtype=np.uint8)
        _cflat.strings(np.ascontiguousarray(parts.data), np.where(valid, v, 0), lengths, out)
        bitmap = np.packbits(valid, bitorder="little")
        wide = offsets[-1] >= 2**31  # a run is a few MB: int32 offsets but in theory
        return pa.Array.from_buffers(
            pa.large_string() if wide else pa.string(),
            len(v),
            [
                pa.py_buffer(bitmap),
                pa.py_buffer(offsets if wide else offsets.astype(np.int32)),
                pa.py_buffer(out),
            ],
            null_count=int(mask.sum()),
        ).cast(t)
    if code in (T_FLOAT, T_FLOAT32):
        f = np.where(valid, v.view(np.float64), 0.0)
        return pa.array(f.astype(np.float32) if code == T_FLOAT32 else f, mask=mask)
    if code == T_BOOL:
        return pa.array(v != 0, pa.bool_(), mask=mask)
    return pa.array(np.where(valid, v, 0).astype(t.to_pandas_dtype()), t, mask=mask)
