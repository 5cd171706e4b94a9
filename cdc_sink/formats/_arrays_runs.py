"""Decoding in runs and assembling the decoded batch, shared by the decoders (private).

A decoder turns a run of events into :class:`Columns` (aligned numpy/Arrow columns plus a
reject reason per event); :func:`decode_in_runs` cuts the input into runs of a few MB
(:func:`event_ranges`), isolates by bisection the events that make a run raise
(:func:`decode_guarded`), concatenates the runs (:func:`merge_columns`), and
:func:`assemble` builds the wire-form table of the events that decoded, validated by
:meth:`ChangeBatch.from_arrow`, with every reject mapped back to its source position.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from cdc_sink.batch import ChangeBatch, Rejects
from cdc_sink.formats._arrays import Parts, new_reasons, no_reason
from cdc_sink.formats._base import TS_MISSING, Decoded
from cdc_sink.schema import TableSchema


@dataclass
class Columns:
    """The decoded columns of a run of events, before validation (all aligned).

    Attributes:
        op: Op code per event (int8; anything for events with a reason).
        keys: Key column name → array.
        values: Value column name → (array, presence mask).
        seq: ``__seq`` per event, or ``None`` (tables without a sequence column).
        reasons: Reject reason per event (``None`` = decoded).
        ts_ms: Producer timestamp per event (``TS_MISSING`` when absent), or ``None``.
        skip: Events skipped on purpose (neither decoded nor rejected), or ``None``.
        messages: The skipped events that are logical decoding messages, or ``None``.
    """

    op: np.ndarray
    keys: dict[str, pa.Array]
    values: dict[str, tuple[pa.Array, np.ndarray]]
    seq: pa.Array | None
    reasons: np.ndarray
    ts_ms: np.ndarray | None = None
    skip: np.ndarray | None = None
    messages: np.ndarray | None = None


def failed_columns(n: int, schema: TableSchema, reason: str) -> Columns:
    """Columns of ``n`` events that are all refused with ``reason``."""
    reasons = new_reasons(n)
    reasons[:] = reason
    return Columns(
        op=np.full(n, -1, dtype=np.int8),
        keys={c.name: pa.nulls(n, c.type) for c in schema.key_columns},
        values={},
        seq=None if schema.sequence_column is None else pa.nulls(n, pa.int64()),
        reasons=reasons,
    )


def decode_guarded(
    decode_range: Callable[[int, int], Columns], lo: int, hi: int, schema: TableSchema
) -> list[Columns]:
    """Runs ``decode_range(lo, hi)``; if it raises, isolates the events that make it
    raise by bisection and refuses only them (the last resort of a decoder's promise
    never to raise for message content: the reason names the exception class).

    Returns:
        The columns of consecutive sub-ranges covering ``[lo, hi)``.
    """
    try:
        return [decode_range(lo, hi)]
    except Exception as exc:  # any failure on content becomes a reject
        if hi - lo <= 1:
            text = str(exc).splitlines()[0][:200] if str(exc) else ""
            return [
                failed_columns(
                    hi - lo, schema, f"undecodable message ({type(exc).__name__}: {text})"
                )
            ]
    mid = (lo + hi) // 2
    return decode_guarded(decode_range, lo, mid, schema) + decode_guarded(
        decode_range, mid, hi, schema
    )


def decode_in_runs(
    parts: Parts,
    position: np.ndarray | None,
    schema: TableSchema,
    run_bytes: int,
    decode_run: Callable[[int, int], Columns],
) -> Decoded:
    """Decodes events ``[lo, hi)`` by ``decode_run`` in runs of about ``run_bytes`` (each
    :func:`decode_guarded`), then validates all the runs' columns together."""
    pieces = [
        p
        for lo, hi in event_ranges(parts, run_bytes)
        for p in decode_guarded(decode_run, lo, hi, schema)
    ]
    if not pieces:  # no event
        pieces = [decode_run(0, parts.n)]
    cols = merge_columns(pieces, schema)
    pieces.clear()  # the runs' columns, once merged, are not held while assembling
    return assemble(schema, cols, position)


def event_ranges(parts: Parts, chunk_bytes: int) -> list[tuple[int, int]]:
    """Consecutive event ranges ``[lo, hi)`` of about ``chunk_bytes`` of data each (at
    least one event), so per-chunk working arrays stay small and in cache."""
    n = parts.n
    csum = np.cumsum(parts.lengths)
    out = []
    lo = 0
    while lo < n:
        base = int(csum[lo - 1]) if lo else 0
        hi = min(max(int(np.searchsorted(csum, base + chunk_bytes, side="right")), lo + 1), n)
        out.append((lo, hi))
        lo = hi
    return out


def merge_columns(pieces: list[Columns], schema: TableSchema) -> Columns:
    """Concatenates the columns of consecutive runs of events."""
    if len(pieces) == 1:
        return pieces[0]
    sizes = [len(p.reasons) for p in pieces]
    keys = {k: pa.concat_arrays([p.keys[k] for p in pieces]) for k in schema.primary_key}
    values: dict[str, tuple[pa.Array, np.ndarray]] = {}
    for c in schema.value_columns:
        if any(c.name in p.values for p in pieces):
            arrs = [
                p.values[c.name][0] if c.name in p.values else pa.nulls(k, c.type)
                for p, k in zip(pieces, sizes, strict=True)
            ]
            masks = [
                p.values[c.name][1] if c.name in p.values else np.zeros(k, bool)
                for p, k in zip(pieces, sizes, strict=True)
            ]
            values[c.name] = (pa.concat_arrays(arrs), np.concatenate(masks))
    seqs = [p.seq for p in pieces if p.seq is not None]
    ts = None
    if any(p.ts_ms is not None for p in pieces):
        ts = np.concatenate(
            [
                p.ts_ms if p.ts_ms is not None else np.full(k, TS_MISSING)
                for p, k in zip(pieces, sizes, strict=True)
            ]
        )

    def flags(get: Callable[[Columns], np.ndarray | None]) -> np.ndarray | None:
        if all(get(p) is None for p in pieces):
            return None
        return np.concatenate(
            [
                np.zeros(k, bool) if (v := get(p)) is None else v
                for p, k in zip(pieces, sizes, strict=True)
            ]
        )

    return Columns(
        op=np.concatenate([p.op for p in pieces]),
        keys=keys,
        values=values,
        seq=pa.concat_arrays(seqs) if len(seqs) == len(pieces) else None,
        reasons=np.concatenate([p.reasons for p in pieces]),
        ts_ms=ts,
        skip=flags(lambda p: p.skip),
        messages=flags(lambda p: p.messages),
    )


def assemble(schema: TableSchema, cols: Columns, position: np.ndarray | None) -> Decoded:
    """Builds the wire form of the events without a reason and validates it.

    Events with a reason are left out and reported as rejects; skipped events are left
    out of both and counted. The columns are consumed: each is dropped from ``cols`` once
    the events it keeps are taken from it.

    Args:
        schema: The table schema.
        cols: The decoded columns of every event.
        position: Source position per event (``None``: the event's index).

    Returns:
        The decoded batch (positions are source positions) and all rejects, sorted by
        input order.
    """
    reasons = cols.reasons
    n = len(reasons)
    skip = cols.skip if cols.skip is not None else np.zeros(n, dtype=bool)
    good = no_reason(reasons) & ~skip
    idx = np.flatnonzero(good)
    everything = len(idx) == n
    take = None if everything else pa.array(idx)

    def pick(arr: pa.Array) -> pa.Array:
        return arr if take is None else arr.take(take)

    table: dict[str, pa.Array] = {"__op": pick(pa.array(cols.op, pa.int8()))}
    if cols.seq is not None:
        table["__seq"] = pick(cols.seq)
    for kc in schema.key_columns:
        table[kc.name] = pick(cols.keys.pop(kc.name))
    for c in schema.value_columns:
        if c.name not in cols.values:
            continue
        arr, present = cols.values.pop(c.name)
        mask = present if everything else present[idx]
        if not mask.any():
            continue
        table[c.name] = pick(arr)
        table["__set__" + c.name] = pa.array(mask, pa.bool_())
    batch, rej = ChangeBatch.from_arrow(pa.table(table), schema, position=idx)
    inner = batch.positions
    bad = np.flatnonzero(~no_reason(reasons) & ~skip)
    texts = reasons[bad]  # the decoder's reasons are str
    if len(rej.positions):  # merged in input order with the validation's rejects
        all_pos = np.concatenate([bad, rej.positions])
        texts = np.concatenate([texts, np.array(rej.reasons, dtype=object)])
        order = np.argsort(all_pos, kind="stable")
        bad, texts = all_pos[order], texts[order]
    rejects = Rejects(positions=_at(position, bad), reasons=texts.tolist())
    out_ts = None
    if cols.ts_ms is not None:
        sel = cols.ts_ms[inner]
        if (sel != TS_MISSING).any():
            out_ts = sel
    batch.position = _at(position, inner)
    messages = 0 if cols.messages is None else int((cols.messages & skip).sum())
    return Decoded(
        batch=batch, rejects=rejects, ts_ms=out_ts, skipped=int(skip.sum()), messages=messages
    )


def _at(position: np.ndarray | None, idx: np.ndarray) -> np.ndarray:
    """The source positions of the events ``idx`` (``idx`` itself without positions)."""
    return idx if position is None else position[idx]
