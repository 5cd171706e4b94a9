"""The batch change feed: the changes of the versions in (start, end] as Arrow.

:func:`changes` is what :meth:`Table.changes <cdc_sink.table.Table.changes>` reads. It
works bucket by bucket and, within a bucket, version by version, visiting only the
versions that changed the bucket (its WAL segments, bulk loads and schema changes that
give rows a new value, from the table's history). For each it needs a tablet holding the
version and the one before with the version's deltas apart: the writer's own tablet when
it retains both in memory; else, for a version written with
``TableOptions.change_images``, a small tablet of the keys its segment names, rebuilt
from the pre-images stored with it (:mod:`cdc_sink.changefeed.stored`: no page and no
key index of the bucket is read); else one loaded at the version before (newest
snapshot, pages read lazily, then the segments after it) and replayed one segment at a
time. The rows and images of a version come from :mod:`cdc_sink.changefeed.images`
(docs/architecture.md, "Change feed").
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from cdc_sink.changefeed.images import (
    CHANGE_TYPES,
    ChangedRows,
    all_live_rows,
    changed_rows,
    full_images,
    set_images,
)
from cdc_sink.changefeed.stored import POST, PRE, read_preimages, replay_tablet
from cdc_sink.errors import ChangesNotRetained, InvalidOption, VersionNotFound, WalCorruption
from cdc_sink.filters import evaluate, parse_filter
from cdc_sink.schema import Column
from cdc_sink.storage.segments import read_change_segment
from cdc_sink.tablet import MemTablet

if TYPE_CHECKING:
    from cdc_sink.engine import TableCore

__all__ = [
    "META_COLUMNS",
    "ChangesNotRetained",
    "FeedPlan",
    "bucket_changes",
    "changes",
    "plan_feed",
]

META_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")
"""The columns every change record carries after the table's."""


@dataclass(frozen=True)
class FeedPlan:
    """What a change-feed read fixed before reading: the range, the output columns
    (those of the schema at ``end``, keys first) and the commit time of each version."""

    start: int
    end: int
    columns: tuple[Column, ...]
    nkeys: int
    set_columns_only: bool
    commit_ms: dict[int, int]

    @property
    def arrow_schema(self) -> pa.Schema:
        """The schema of the records (value columns nullable: a record may lack them)."""
        fields = [
            pa.field(c.name, c.type, nullable=i >= self.nkeys or c.nullable)
            for i, c in enumerate(self.columns)
        ]
        if self.set_columns_only:
            fields += [pa.field(f"_set_{c.name}", pa.bool_()) for c in self.columns[self.nkeys :]]
        return pa.schema(
            [
                *fields,
                pa.field("_change_type", pa.string(), nullable=False),
                pa.field("_commit_version", pa.int64(), nullable=False),
                pa.field("_commit_timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
            ]
        )


def _not_retained(state: TableCore, start: int, end: int, latest: int) -> ChangesNotRetained:
    oldest = state.oldest_version()
    return ChangesNotRetained(
        f"the changes of versions {start + 1}..{end} need version {start}, which is not"
        f" readable: the oldest readable version is {oldest} (the changes of versions"
        f" {oldest + 1}..{latest} can be read)",
        version=start,
        oldest=oldest,
        latest=latest,
    )


def plan_feed(
    state: TableCore,
    start: int,
    end: int,
    columns: Sequence[str] | None,
    set_columns_only: bool,
) -> FeedPlan:
    """Checks the range and fixes the output columns and commit times.

    Raises:
        ChangesNotRetained: ``start`` is older than the oldest readable version, or
            ``end`` is newer than the latest.
        InvalidOption: ``start > end``, or a column the schema at ``end`` lacks.
    """
    if start > end:
        raise InvalidOption(f"changes: start {start} is after end {end}", option="start")
    state.refresh()
    latest = state.version
    if start < state.oldest_version() or end > latest:
        raise _not_retained(state, start, end, latest)
    schema = state.schema_at(end)
    names = list(schema.names if columns is None else columns)
    missing = [n for n in names if not schema.has_column(n)]
    if missing:
        raise InvalidOption(
            f"changes: no column(s) {missing} in the schema at version {end}"
            f" (columns: {schema.names}; a dropped column is absent from the feed)",
            option="columns",
        )
    keys = schema.key_columns
    rest = [schema.column(n) for n in dict.fromkeys(names) if n not in schema.primary_key]
    ms = {v: state.log.read(v).commit_time_ms for v in range(start + 1, end + 1)}
    return FeedPlan(start, end, (*keys, *rest), len(keys), set_columns_only, ms)


def _adds_values(state: TableCore, version: int, plan: FeedPlan) -> bool:
    """Whether schema change ``version`` adds an output column with a non-null default
    (every live row then changes: null before the column existed, the default after)."""
    before = {c.id for c in state.schema_at(version - 1).columns}
    now = {c.id: c for c in state.schema_at(version).columns}
    return any(
        c.id not in before and c.id in now and now[c.id].has_default
        for c in plan.columns[plan.nkeys :]
    )


def _versions(state: TableCore, bucket: int, plan: FeedPlan) -> list[tuple[int, str]]:
    """The versions of (start, end] that may change ``bucket``, with their kind."""
    h = state.history
    kinds = {v: "data" for v, _ in h.segments_between(bucket, plan.start, plan.end)}
    for v in h.bulk.get(bucket, []):
        if plan.start < v <= plan.end:
            kinds[v] = "bulk"
    if not plan.set_columns_only:
        for v, _ in h.schema_changes_between(plan.start, plan.end):
            if v > 0 and _adds_values(state, v, plan):
                kinds.setdefault(v, "schema")
    return sorted(kinds.items())


@contextmanager
def _writers(
    state: TableCore, bucket: int, v: int, own: MemTablet | None
) -> Iterator[MemTablet | None]:
    """The writer's tablet of ``bucket``, pinned at ``v - 1`` and ``v``, when it retains
    both (and is not ``own``); else None."""
    w = state.writer_tablet(bucket)
    if w is not None and w is not own and w.oldest <= v - 1 and v <= w.committed:
        with ExitStack() as pins:
            try:
                pins.enter_context(w.pin(v - 1))
                pins.enter_context(w.pin(v))
            except VersionNotFound:  # the writer released v - 1 meanwhile
                pass
            else:
                yield w
                return
    yield None


def _brought_to(state: TableCore, bucket: int, v: int, own: MemTablet | None) -> MemTablet:
    """``own`` brought to ``v`` with ``v``'s deltas apart (loaded at ``v - 1`` first when
    it is missing or past it)."""
    if own is None or own.committed > v - 1:
        own = state.load_bucket(bucket, v - 1)
    state.replay(own, own.committed, v)
    return own


def _records(plan: FeedPlan, v: int, arrays: list[pa.Array], codes: np.ndarray) -> pa.RecordBatch:
    n = len(codes)
    kinds = pa.DictionaryArray.from_arrays(pa.array(codes), pa.array(CHANGE_TYPES))
    stamp = pa.array(np.full(n, plan.commit_ms[v] * 1000, dtype=np.int64)).cast(
        pa.timestamp("us", tz="UTC")
    )
    meta = [kinds.cast(pa.string()), pa.array(np.full(n, v, dtype=np.int64)), stamp]
    return pa.RecordBatch.from_arrays([*arrays, *meta], schema=plan.arrow_schema)


def _version_records(
    state: TableCore,
    plan: FeedPlan,
    t: MemTablet,
    v: int,
    ch: ChangedRows,
    bulk: bool,
    at: tuple[int, int] | None = None,
) -> pa.RecordBatch:
    """The records of version ``v`` from ``t``, which holds the versions before and
    after it at ``at`` (default ``(v - 1, v)``)."""
    before, after = at or (v - 1, v)
    post = (t, after, state.schema_at(v))
    if plan.set_columns_only:
        arrays, codes, masks = set_images(post, ch, plan.columns, plan.nkeys)
        arrays += [pa.array(m) for m in masks]
    else:
        pre = None if bulk else (t, before, state.schema_at(v - 1))
        arrays, codes = full_images(pre, post, ch, plan.columns)
    return _records(plan, v, arrays, codes)


def _stored_records(
    state: TableCore, plan: FeedPlan, bucket: int, v: int, images: str
) -> pa.RecordBatch:
    """The records of data version ``v`` from its stored pre-images and its segment,
    without the bucket's tablet (:mod:`cdc_sink.changefeed.stored`)."""
    schema = state.schema_at(v)
    ((_, seg),) = state.history.segments_between(bucket, v - 1, v)
    _, batch = read_change_segment(state.store, seg, schema)
    rows = read_preimages(state.store, images, schema, bucket=bucket, version=v)
    t = replay_tablet(schema, rows, batch, bucket=bucket)
    return _version_records(state, plan, t, v, changed_rows(t, POST), False, (PRE, POST))


def bucket_changes(state: TableCore, plan: FeedPlan, bucket: int) -> list[pa.RecordBatch]:
    """The change records of ``bucket`` for the versions of ``plan``, by version.

    Raises:
        ChangesNotRetained: GC collected a version the read needed while it read.
    """
    out: list[pa.RecordBatch] = []
    own: MemTablet | None = None
    try:
        for v, kind in _versions(state, bucket, plan):
            if kind == "bulk":  # the bucket held no rows: every live row is an insert
                own = state.load_bucket(bucket, v)
                out.append(
                    _version_records(state, plan, own, v, all_live_rows(own, v, before=False), True)
                )
                continue
            images = state.history.images.get(bucket, {}).get(v) if kind == "data" else None
            with _writers(state, bucket, v, own) as w:
                if w is None and images is not None:  # stored pre-images: no tablet
                    out.append(_stored_records(state, plan, bucket, v, images))
                    continue
                t = w if w is not None else _brought_to(state, bucket, v, own)
                if w is None:
                    own = t
                ch = changed_rows(t, v) if kind == "data" else all_live_rows(t, v, before=True)
                out.append(_version_records(state, plan, t, v, ch, False))
            if own is not None:
                if own.delta_versions() >= state.options.compact_every:
                    own.compact(v)  # a long range: keep the deltas a gather walks few
                own.release(v)
    except (WalCorruption, FileNotFoundError, VersionNotFound) as exc:
        if state.oldest_version() > plan.start:
            raise _not_retained(state, plan.start, plan.end, state.latest()) from exc
        raise
    return out


def changes(
    state: TableCore,
    start: int,
    end: int,
    *,
    columns: Sequence[str] | None = None,
    filter: Any = None,
    set_columns_only: bool = False,
    buckets: Sequence[int] | None = None,
) -> pa.Table:
    """The changes of the versions after ``start`` up to and including ``end``:
    replayed onto the table at ``start``, they give the table at ``end``.

    Each record holds the key columns, the columns asked for (named as at ``end``),
    ``_change_type`` (``insert``, ``update_preimage``, ``update_postimage``,
    ``delete``), ``_commit_version`` and ``_commit_timestamp``. An update yields its
    full pre-image and post-image (consecutive); an update that changed none of the
    columns read yields nothing. Several events on one key in one version give what the
    version committed; a truncate gives a delete per live row. A column added inside
    the range reads null in records of versions before it existed (and, if it has a
    non-null default, the version adding it updates every live row to it); a column
    dropped before ``end`` is absent. Records come by version, then bucket.

    Args:
        state: The table's core (:meth:`Table.changes` passes its own).
        start: The version the changes start from (excluded).
        end: The last version whose changes are read (included).
        columns: Value columns to return (default all, as at ``end``); keys always.
        filter: Conjunctive predicates ``[(column, op, value), ...]`` on the records.
        set_columns_only: Instead of full images, one record per changed row holding only
            the cells the version wrote (null elsewhere) with a ``_set_<column>`` mask
            per value column: ``insert``, ``update_postimage`` or ``delete`` (key only).
        buckets: Only these buckets (a Spark partition reads one); default all.

    Raises:
        ChangesNotRetained: A version the range needs is not retained (GC collected it,
            also during the read); the message names the oldest readable version.
            Never partial data.
        InvalidOption: ``start > end``, or a column not in the schema at ``end``.
        ValueError: A malformed filter.
    """
    plan = plan_feed(state, int(start), int(end), columns, set_columns_only)
    schema = plan.arrow_schema
    preds = parse_filter(filter, schema.names)
    todo = range(state.schema_at(plan.end).num_buckets) if buckets is None else buckets
    per_bucket = [bucket_changes(state, plan, b) for b in todo]
    by_version = sorted(
        (
            (int(b.column("_commit_version")[0].as_py()), i, b)
            for i, bs in enumerate(per_bucket)
            for b in bs
            if b.num_rows
        ),
        key=lambda x: x[:2],
    )
    result = pa.Table.from_batches([b for _, _, b in by_version], schema=schema)
    return result.filter(pa.array(evaluate(result, preds))) if preds else result
