"""Native event dicts to columns: the phases of :meth:`cdc_sink.batch.ChangeBatch.from_events`.

An event is ``{"op", "key", "set", "seq"?}`` (see ``from_events``). :func:`split_events`
takes the events apart (one pass over the dicts), :func:`column_from_py` builds one
column with :func:`cdc_sink.schema.coercer`, :func:`set_columns` the value columns and
:func:`event_seqs` the seq column. An event refused on the way gets a reason in
``reasons`` (the first one it gets is the one it keeps); nothing raises for a bad event.
"""

from __future__ import annotations

import decimal
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from cdc_sink.schema import Column, TableSchema, coercer, type_to_str
from cdc_sink.utils.values import CONVERSION_ERRORS

__all__ = ["column_from_py", "event_seqs", "set_columns", "split_events"]

#: A value or seq an event does not carry (unlike ``None``, an explicit null).
_MISSING = object()
_Split = tuple[Any, Mapping[str, Any], Mapping[str, Any], Any, str | None]


def split_events(
    events: Sequence[Mapping[str, Any]], schema: TableSchema, reasons: np.ndarray
) -> tuple[list[Any], list[Mapping[str, Any]], list[Mapping[str, Any]], list[Any]]:
    """Splits events into their ops, key maps, set maps and seqs (``_MISSING`` when
    absent); an event refused for its shape gets its reason."""
    key_names = list(schema.primary_key)
    known_values = {c.name for c in schema.value_columns}
    ops: list[Any] = []
    key_maps: list[Mapping[str, Any]] = []
    set_maps: list[Mapping[str, Any]] = []
    seqs: list[Any] = []
    for i, e in enumerate(events):
        op, k, sets, seq, reason = _split_event(e, key_names, known_values)
        ops.append(op)
        key_maps.append(k)
        set_maps.append(sets)
        seqs.append(seq)
        reasons[i] = reason
    return ops, key_maps, set_maps, seqs


def _split_event(e: Any, key_names: list[str], known_values: set[str]) -> _Split:
    """One event as ``(op, key map, set map, seq, reason or None)``."""
    if not isinstance(e, Mapping):
        return None, {}, {}, None, f"event is not an object: {type(e).__name__}"
    op = e.get("op")
    if op == "truncate":  # names no key, sets nothing, needs no seq
        return op, {}, {}, _MISSING, None
    reason: str | None = None
    k = e.get("key")
    if len(key_names) == 1 and k is not None and not isinstance(k, Mapping):
        k = {key_names[0]: k}
    if not isinstance(k, Mapping):
        reason = "event has no 'key' object"
        k = {}
    s = e.get("set") or {}
    if op == "delete":
        s = {}  # a delete sets nothing; whatever it carries is ignored
    if not isinstance(s, Mapping):
        reason = reason or "'set' is not an object"
        s = {}
    if reason is None:
        reason = _unknown_name(k, s, key_names, known_values)
    return op, k, s, e.get("seq", _MISSING), reason


def _unknown_name(
    k: Mapping[str, Any], s: Mapping[str, Any], key_names: list[str], known_values: set[str]
) -> str | None:
    """Why an event naming a column that is not one of the schema is refused."""
    bad = [name for name in s if name not in known_values]
    if bad:
        in_key = [b for b in bad if b in key_names]
        return f"key column {in_key[0]!r} inside 'set'" if in_key else f"unknown column {bad[0]!r}"
    extra = [name for name in k if name not in key_names]
    if extra:
        return f"unknown key column {extra[0]!r}"
    return None


def set_columns(
    schema: TableSchema, set_maps: list[Mapping[str, Any]], reasons: np.ndarray
) -> tuple[dict[int, pa.Array], dict[int, np.ndarray]]:
    """The value columns some event sets: values by column id and where they are set."""
    n = len(set_maps)
    values: dict[int, pa.Array] = {}
    present: dict[int, np.ndarray] = {}
    for c in schema.value_columns:
        vals = [sm.get(c.name, _MISSING) for sm in set_maps]
        mask = np.fromiter((v is not _MISSING for v in vals), dtype=bool, count=n)
        if not mask.any():
            continue
        values[c.id] = column_from_py([None if v is _MISSING else v for v in vals], c, reasons)
        present[c.id] = mask
    return values, present


def _given_seqs(seqs: list[Any], reasons: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The seqs events give (0 elsewhere) and where they give a valid one; a seq that is
    not a 64-bit integer gets a reason."""
    n = len(seqs)
    seq_arr = np.zeros(n, dtype=np.int64)
    seq_given = np.zeros(n, dtype=bool)
    for i, s in enumerate(seqs):
        if s is _MISSING or s is None:
            continue
        if isinstance(s, bool) or not isinstance(s, int) or not -(2**63) <= s < 2**63:
            reasons[i] = reasons[i] or f"seq {s!r} is not a 64-bit integer"
            continue
        seq_arr[i] = s
        seq_given[i] = True
    return seq_arr, seq_given


def event_seqs(
    schema: TableSchema,
    seqs: list[Any],
    is_truncate: np.ndarray,
    values: dict[int, pa.Array],
    present: dict[int, np.ndarray],
    reasons: np.ndarray,
) -> np.ndarray | None:
    """The seq column of a batch of events (None for a table without a sequence column);
    an event of such a table without a seq gets a reason."""
    if schema.sequence_column is None and all(s is _MISSING for s in seqs):
        return None
    seq_arr, seq_given = _given_seqs(seqs, reasons)
    if schema.sequence_column is None:
        return None
    missing = ~seq_given & (reasons == None) & ~is_truncate  # noqa: E711
    # Events without seq may carry the sequence column in 'set' instead.
    scol = schema.column(schema.sequence_column)
    if scol.id in values:
        sv = values[scol.id]
        from_set = present[scol.id] & np.asarray(sv.is_valid(), dtype=bool)
        use = missing & from_set
        if use.any():
            seq_arr[use] = np.asarray(
                sv.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64
            )[use]
            seq_given |= use
    reasons[missing & ~seq_given] = "seq is missing"
    return seq_arr


def column_from_py(vals: list[Any], c: Column, reasons: np.ndarray) -> pa.Array:
    """Builds an Arrow array of ``c.type``; values that do not convert become null and
    their events get a reason naming the column."""
    convert = coercer(c.type)
    try:
        return pa.array([convert(v) for v in vals], type=c.type)
    except (TypeError, ValueError, OverflowError, pa.ArrowException, decimal.InvalidOperation):
        pass
    clean: list[Any] = []
    for i, v in enumerate(vals):
        try:
            cv = convert(v)
            pa.array([cv], type=c.type)
            clean.append(cv)
        except CONVERSION_ERRORS:
            if reasons[i] is None:
                reasons[i] = f"column {c.name!r}: {v!r} is not a valid {type_to_str(c.type)}"
            clean.append(None)
    return pa.array(clean, type=c.type)
