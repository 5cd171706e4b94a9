"""One decode pass for the tables of a micro-batch that share a schema (internal).

A router (:mod:`cdc_sink.spark.database`) splits a micro-batch among its tables. Decoded
one table at a time, each table's few events pay the decoder's set-up per call (its
phases are vectorized over the events of a call, and a call costs milliseconds however
few they are). Tables whose schemas are equal (sharded tables, one schema per tenant,
the same table in many databases) are decoded together: their records concatenated,
decoded in one call (in the calling thread or by a worker of the router's decode pool),
and the result split back by table with :func:`split_decoded`.

A Debezium event is decoded on its own (its envelope schema, its row, its source
block): no event's result depends on another event of the call. So a table's share of
a joint decode equals what decoding its records alone gives, positions counted from its
first record. Only the counts of skipped messages are per call: a call whose skipped
messages cannot be attributed to their tables (logical decoding messages) is not split,
and its tables are decoded alone.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from cdc_sink.batch import Rejects
from cdc_sink.formats._base import Decoded
from cdc_sink.schema import TableSchema

__all__ = [
    "SharedInput",
    "decode_passes",
    "decode_shared",
    "plan_shared",
    "split_decoded",
]

logger = logging.getLogger(__name__)

Submit = Callable[[pa.Table, TableSchema], Callable[[], Decoded]]
"""Starts decoding ``raw`` (Kafka records: ``value`` and ``key`` columns) against a
schema; the returned callable waits for the :class:`Decoded` (positions: row indices of
``raw``)."""


@dataclasses.dataclass(frozen=True)
class SharedInput:
    """One table's records of the micro-batch and the schema they are decoded against
    (``rows``: their rows in the micro-batch's records, when those are given)."""

    name: str
    raw: pa.Table
    schema: TableSchema
    rows: np.ndarray | None = None


def plan_shared(items: Sequence[SharedInput], *, min_tables: int = 2) -> list[list[SharedInput]]:
    """The decode passes of ``items``: one per schema that ``min_tables`` tables at least
    share. (Passes cut smaller, their tables' writes started while the next decodes,
    were slower: both hold the GIL most of the time.)"""
    groups: dict[TableSchema, list[SharedInput]] = {}
    for it in items:
        groups.setdefault(it.schema, []).append(it)
    return [members for members in groups.values() if len(members) >= min_tables]


def decode_passes(
    passes: Sequence[list[SharedInput]], submit: Submit, *, parent: pa.Table | None = None
) -> Iterator[tuple[list[SharedInput], dict[str, tuple[Decoded, float]]]]:
    """Decodes each pass (every pass submitted before the first is waited for: a decode
    pool works on them together), yielding its tables and, per table decoded, its
    :class:`Decoded` (positions counted from its first record, its own schema) and its
    share of the pass's seconds (by records); a table missing was not split off (see
    :func:`split_decoded`) and is decoded alone. With ``parent`` (the micro-batch's
    records, of which the items give their ``rows``), a pass's records are one slice of
    it when they follow each other there (as Spark's Kafka source gives a
    topic-partition's records), else taken from it at once."""
    started = [(m, time.perf_counter(), submit(_joined(m, parent), m[0].schema)) for m in passes]
    last = 0.0
    for members, t0, wait in started:
        dec = wait()
        t1 = time.perf_counter()
        secs, last = t1 - max(t0, last), t1
        sizes = [m.raw.num_rows for m in members]
        pieces = split_decoded(dec, sizes, [m.schema for m in members])
        out: dict[str, tuple[Decoded, float]] = {}
        if pieces is None:
            logger.debug("a shared decode of %d tables was not split", len(members))
        else:
            total = max(1, sum(sizes))
            for m, piece, n in zip(members, pieces, sizes, strict=True):
                out[m.name] = (piece, secs * n / total)
        yield members, out


def decode_shared(
    items: Sequence[SharedInput],
    submit: Submit,
    *,
    parent: pa.Table | None = None,
    min_tables: int = 2,
) -> dict[str, tuple[Decoded, float]]:
    """:func:`decode_passes` of :func:`plan_shared`, merged: per table decoded, its
    :class:`Decoded` and its share of the seconds."""
    out: dict[str, tuple[Decoded, float]] = {}
    plan = plan_shared(items, min_tables=min_tables)
    for _, decoded in decode_passes(plan, submit, parent=parent):
        out.update(decoded)
    return out


def _joined(members: Sequence[SharedInput], parent: pa.Table | None) -> pa.Table:
    """The records of ``members``, one table after another."""
    rows = [m.rows for m in members]
    if parent is None or any(r is None for r in rows):
        return pa.concat_tables([m.raw for m in members])
    at = np.concatenate([r for r in rows if r is not None])
    if len(at) and int(at[-1]) - int(at[0]) + 1 == len(at) and _ascending(at):
        return parent.slice(int(at[0]), len(at))
    return parent.take(pa.array(at))


def split_decoded(
    dec: Decoded, sizes: Sequence[int], schemas: Sequence[TableSchema]
) -> list[Decoded] | None:
    """``dec`` (the decode of consecutive record ranges of ``sizes`` rows, positions the
    row indices) split into one :class:`Decoded` per range, positions counted from the
    range's first row, batches given their range's schema (equal to ``dec``'s); None when
    ``dec``'s skipped messages cannot be attributed to ranges (see the module
    docstring)."""
    bounds = np.concatenate([[0], np.cumsum(np.asarray(sizes, dtype=np.int64))])
    batch, rejects = dec.batch, dec.rejects
    if dec.messages or dec.skipped != int(bounds[-1]) - len(batch) - len(rejects):
        return None
    pos = batch.positions
    order = np.arange(len(pos)) if _ascending(pos) else np.argsort(pos, kind="stable")
    cut = np.searchsorted(pos[order], bounds)
    rpos = rejects.positions
    rorder = np.arange(len(rpos)) if _ascending(rpos) else np.argsort(rpos, kind="stable")
    rcut = np.searchsorted(rpos[rorder], bounds)
    out = []
    for i, schema in enumerate(schemas):
        lo = int(bounds[i])
        sel = order[cut[i] : cut[i + 1]]
        part = batch.take(sel)
        part = dataclasses.replace(part, schema=schema, position=part.positions - lo)
        rsel = rorder[rcut[i] : rcut[i + 1]]
        mine = Rejects(rpos[rsel] - lo, [rejects.reasons[j] for j in rsel.tolist()])
        n = int(bounds[i + 1]) - lo
        out.append(
            Decoded(
                batch=part,
                rejects=mine,
                ts_ms=None if dec.ts_ms is None else dec.ts_ms[sel],
                skipped=n - len(part) - len(mine),
            )
        )
    return out


def _ascending(a: np.ndarray) -> bool:
    """Whether ``a`` is in ascending order."""
    return len(a) < 2 or bool(np.all(a[1:] >= a[:-1]))
