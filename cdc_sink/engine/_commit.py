"""The steps of the two-phase commit protocol: private helpers of
:class:`~cdc_sink.engine.core.TableCore`, whose methods call them under its lock (writers
go through :class:`cdc_sink.transaction.Transaction`).

A commit of version ``v`` happens in two steps, which may run in different processes::

    prepare  once per bucket the batch touches (on the driver, or on the executor that
             owns the bucket): bring the bucket's tablet to v - 1, write the batch as a
             WAL segment unique to this attempt (fsynced) -- or, for a large batch into
             an empty bucket, as a snapshot of the bucket at v (the bulk path) --, with
             TableOptions.change_images the pre-images of its keys beside it, maybe
             snapshot v - 1, and apply the batch in memory as pending version v
    commit   once per version, on the driver: write the rejects file, then create log
             entry v exclusively, naming every prepared bucket's file -> visible
             (CommitConflict: another writer won v -> abort)
    abort    roll the pending tablets back and remove the attempt's files, unless the
             log says v was committed with them after all

What a process prepared and has not seen decided is kept per bucket as a
:class:`~cdc_sink.engine.pending.PendingBucket`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from cdc_sink.batch import ChangeBatch
from cdc_sink.engine import _maintenance
from cdc_sink.engine.pending import PendingBucket
from cdc_sink.engine.results import CommitResult, PreparedBucket
from cdc_sink.errors import CommitConflict, VersionNotFound
from cdc_sink.storage.faults import fault_point, register
from cdc_sink.storage.preimages import capture_preimages, write_preimages
from cdc_sink.storage.rejects import write_rejects
from cdc_sink.storage.segments import write_change_segment
from cdc_sink.storage.snapshot import apply_locations, write_snapshot
from cdc_sink.storage.version_log import BucketRef, LogEntry
from cdc_sink.tablet import ApplyResult, MemTablet

if TYPE_CHECKING:
    from cdc_sink.engine.core import TableCore

__all__ = [
    "abort_prepared",
    "commit_prepared",
    "prepare_bucket",
    "prepare_buckets",
]

register("table.prepared", "table.rejects_written", "table.committed")


# ---------------------------------------------------------------------- entry points
def prepare_bucket(s: TableCore, bucket: int, version: int, batch: ChangeBatch) -> PreparedBucket:
    """Prepares ``batch`` (events of one bucket) as pending version ``version``.

    Raises:
        CommitConflict: The log is no longer at ``version - 1``.
    """
    plan = _begin(s, bucket, version, batch)
    return _finish(s, plan, *_write(s, plan))


def prepare_buckets(
    s: TableCore, version: int, parts: Sequence[tuple[int, ChangeBatch]]
) -> list[PreparedBucket]:
    """Prepares several buckets' events as pending version ``version``, in
    ``prepare_threads`` threads (see :attr:`TableOptions.prepare_threads
    <cdc_sink.engine.options.TableOptions.prepare_threads>`).

    Returns:
        The prepared buckets, in the order of ``parts``.

    Raises:
        CommitConflict: The log is no longer at ``version - 1``. On any error, what was
            prepared is rolled back and its files removed before the error is raised.
    """
    prepared: list[PreparedBucket] = []
    try:
        _prepare_buckets(s, version, parts, prepared)
    except BaseException:
        abort_prepared(s, version, prepared)
        raise
    return prepared


# ---------------------------------------------------------------------- prepare
@dataclass
class _Plan:
    """What the locked first step of a bucket's prepare decided (:func:`_begin`)."""

    bucket: int
    version: int
    schema_id: int
    batch: ChangeBatch
    tablet: MemTablet  # the bucket's tablet; for a bulk write, the new empty one
    bulk: bool


def _prepare_buckets(
    s: TableCore, version: int, parts: Sequence[tuple[int, ChangeBatch]], out: list[PreparedBucket]
) -> None:
    """Prepares every bucket of a batch, appending each prepared bucket to ``out`` (in the
    order of ``parts``) as soon as it is, so that an abort finds what was written.

    The state is read and changed in this thread, under the table's lock (:func:`_begin`,
    :func:`_finish`); the buckets' own work (:func:`_write`: encode and fsync a segment,
    maybe snapshot, apply to the tablet) touches only the bucket's tablet and files, so
    it runs in ``prepare_threads`` threads (numpy's sorts and takes, Arrow's IPC encode
    and compression, and the fsyncs release the GIL). Every thread is finished before
    this returns or raises; the first error, by bucket order, is raised.
    """
    plans = [_begin(s, b, version, part) for b, part in parts]
    threads = s.options.threads_for(len(plans))
    if threads <= 1:
        for plan in plans:
            out.append(_finish(s, plan, *_write(s, plan)))
        return
    futures: list[Future[tuple[PreparedBucket, PendingBucket]]] = []
    error: BaseException | None = None
    try:
        with ThreadPoolExecutor(threads, thread_name_prefix="cdc_sink-prepare") as pool:
            futures = [pool.submit(_write, s, plan) for plan in plans]
    finally:  # also when this thread is interrupted: the pool has finished every task
        for plan, fut in zip(plans, futures, strict=False):
            exc = fut.exception()
            if exc is None:
                out.append(_finish(s, plan, *fut.result()))
            elif error is None:
                error = exc
    if error is not None:
        raise error


def _begin(s: TableCore, bucket: int, version: int, batch: ChangeBatch) -> _Plan:
    """The first step of a bucket's prepare, under the lock: check the version
    (following the log only when this process is behind it: an executor's table, whose
    driver commits), settle what an earlier attempt left, and pick the bulk path or the
    WAL."""
    if s.version < version - 1:
        s.refresh()
    if s.version != version - 1:
        raise CommitConflict(f"cannot prepare version {version}: the table is at {s.version}")
    schema_id = s.schema_at(s.version).schema_id
    t = s.tablet(bucket)
    if t.pending_version is not None:  # an earlier attempt in this process
        s.settle_pending(bucket, t, s.version)
    s._pending.pop(bucket, None)  # an earlier attempt's bulk write, never committed
    if len(batch) >= s.options.bulk_events and t.row_count == 0:
        return _Plan(bucket, version, schema_id, batch, s.empty_tablet(bucket, version - 1), True)
    return _Plan(bucket, version, schema_id, batch, t, False)


def _write(s: TableCore, plan: _Plan) -> tuple[PreparedBucket, PendingBucket]:
    """The bucket's own work (any thread; touches only its tablet, files and entry of
    ``s._since_snapshot``): write the batch durably and apply it as the pending version."""
    if plan.bulk:
        return _write_bulk(s, plan)
    t, version = plan.tablet, plan.version
    seg, wal_bytes = write_change_segment(
        s.store,
        plan.bucket,
        version,
        plan.schema_id,
        plan.batch,
        compression=s.options.wal_compression,
    )
    written = [seg]
    pending = PendingBucket(version=version, segment=seg)
    try:
        images = _write_images(s, plan, written)
        snap = _maintenance.maybe_snapshot(
            s, t, plan.schema_id, written, len(plan.batch), pending, wal_bytes
        )
        res = t.apply(plan.batch, version)
    except BaseException:
        s.discard(written)
        raise
    files = [f for f in written if f not in (seg, images)]
    prepared = _prepared(plan.bucket, version, seg, snap, res, files)
    prepared.images = images
    return prepared, pending


def _write_images(s: TableCore, plan: _Plan, written: list[str]) -> str | None:
    """With ``change_images``: the pre-images of the batch's keys, read from the tablet
    before the batch is applied and written beside the segment (appended to
    ``written``); their key, or None (option off, or a batch they cannot serve)."""
    if not s.options.change_images:
        return None
    rows = capture_preimages(plan.tablet, plan.batch, s.schema_of(plan.schema_id))
    if rows is None:
        return None
    rel = write_preimages(
        s.store,
        plan.bucket,
        plan.version,
        plan.schema_id,
        rows,
        compression=s.options.wal_compression,
    )
    written.append(rel)
    return rel


def _write_bulk(s: TableCore, plan: _Plan) -> tuple[PreparedBucket, PendingBucket]:
    """The bulk path of :func:`_write` (a large batch for a bucket without rows):
    applies the batch to the plan's new tablet and writes it as a snapshot of the bucket
    at ``version``, which the log entry names instead of a WAL segment. The bucket's
    tablet is replaced by the new one when the version commits."""
    nt, version = plan.tablet, plan.version
    res = nt.apply(plan.batch, version)
    nt.commit(version)
    nt.compact(version)
    rel, manifest, updates = write_snapshot(
        s.store,
        nt,
        version,
        plan.schema_id,
        previous=None,
        compression=s.options.page_compression,
    )
    apply_locations(updates)  # the pages are this tablet's alone: no rollback needed
    pending = PendingBucket(version=version, segment=None, snapshot=rel, tablet=nt)
    return _prepared(plan.bucket, version, None, rel, res, sorted(manifest.files)), pending


def _finish(
    s: TableCore, plan: _Plan, prepared: PreparedBucket, pending: PendingBucket
) -> PreparedBucket:
    """The last step of a bucket's prepare, under the lock: record what was prepared."""
    s._pending[plan.bucket] = pending
    if plan.bulk:
        s._since_snapshot[plan.bucket] = (0, 0, 0)
    return prepared


def _prepared(
    bucket: int,
    version: int,
    segment: str | None,
    snapshot: str | None,
    res: ApplyResult,
    files: list[str],
) -> PreparedBucket:
    """The message of ``bucket`` prepared at ``version``: its files and ``res``'s outcome
    (the arguments are the dataclass's fields, in order)."""
    rej = res.rejects
    return PreparedBucket(
        bucket, version, segment, snapshot, res.counts(), rej.positions, rej.reasons, files
    )


# ---------------------------------------------------------------------- commit
def commit_prepared(
    s: TableCore,
    version: int,
    prepared: Sequence[PreparedBucket],
    app_id: str | None,
    batch_id: int | None,
    events: int | None,
    rejects: pa.Table | None,
    source_offsets: Mapping[str, Mapping[str, int]] | None,
) -> CommitResult:
    """Makes version ``version`` visible with every bucket of ``prepared``, atomically.

    ``rejects`` (columns of :data:`~cdc_sink.storage.rejects.REJECTS_SCHEMA`) are written
    durably first and named by the log entry, so they exist exactly when the version
    does; ``source_offsets`` go into the entry.

    Raises:
        CommitConflict: Another writer committed ``version`` first (then call
            :func:`abort_prepared`).
    """
    fault_point("table.prepared")
    total = ApplyResult()
    for p in prepared:
        total.add(ApplyResult(**p.counts, rejects=p.rejects()))
    stats = total.counts()
    if events is not None:
        stats["events"] = events
    rejects_rel = None
    if rejects is not None and rejects.num_rows:
        rejects_rel = write_rejects(s.store, version, rejects)
        fault_point("table.rejects_written")
    refs = {
        p.bucket: BucketRef(segment=p.segment, snapshot=p.snapshot, images=p.images)
        for p in prepared
    }
    offsets = {
        str(t): {str(p): int(o) for p, o in parts.items()}
        for t, parts in (source_offsets or {}).items()
    }
    entry = LogEntry(
        version=version,
        app_id=app_id,
        batch_id=batch_id,
        commit_time_ms=s.commit_time(),
        schema_id=s.history.schema_id_at(version - 1),
        buckets=refs,
        stats=stats,
        rejects=rejects_rel,
        source_offsets=offsets,
    )
    try:
        s.log.commit(entry)
    except CommitConflict:
        if rejects_rel is not None:
            s.discard([rejects_rel])
        s.follow_lost_race()
        raise
    except BaseException:
        # The outcome is unknown (e.g. the directory fsync failed after the entry was
        # linked): if the entry is there, the version is committed -- publish it so
        # memory matches the log, then report the error.
        if _committed_as(s, version, prepared):
            s.history.add(s.log.read(version))
            _publish_prepared(s, version, prepared)
        raise
    fault_point("table.committed")
    s.history.add(entry)
    _publish_prepared(s, version, prepared)
    _maintenance.write_last_checkpoint(s)
    return CommitResult(
        version=version, counts=total.counts(), rejects=total.rejects, buckets=sorted(refs)
    )


def _publish_prepared(s: TableCore, version: int, prepared: Sequence[PreparedBucket]) -> None:
    """Makes this process's memory match the committed version ``version``."""
    pending: list[MemTablet] = []
    bulk: list[MemTablet] = []
    for p in prepared:
        mine = s._pending.get(p.bucket)
        if (
            mine is not None
            and mine.tablet is not None
            and mine.version == version
            and mine.won(BucketRef(segment=p.segment, snapshot=p.snapshot))
        ):  # this process's bulk write
            del s._pending[p.bucket]
            bulk.append(mine.tablet)
            continue
        t = s._tablets.get(p.bucket)
        if t is not None and t.pending_version == version:
            pending.append(t)
            done = s._pending.pop(p.bucket, None)
            if done is not None:
                apply_locations(done.locations)
        elif t is not None:
            # Prepared in another process (executors mode): this copy lacks the
            # version's changes and must not be advanced to it; it reloads on use.
            del s._tablets[p.bucket]
    s.publish(version, pending)
    for nt in bulk:
        s._tablets[nt.bucket] = nt


def _committed_as(s: TableCore, version: int, prepared: Sequence[PreparedBucket]) -> bool:
    """Whether log entry ``version`` exists and names exactly these files."""
    try:
        entry = s.log.read(version)
    except (VersionNotFound, FileNotFoundError):
        return False
    mine = {p.bucket: (p.segment, p.snapshot, p.images) for p in prepared}
    return {b: (r.segment, r.snapshot, r.images) for b, r in entry.buckets.items()} == mine


# ---------------------------------------------------------------------- abort
def abort_prepared(s: TableCore, version: int, prepared: Sequence[PreparedBucket]) -> None:
    """Rolls back the prepared buckets of a failed commit and removes their files.

    Nothing is done when the log says the version was committed with them after all.
    """
    if _committed_as(s, version, prepared):
        return
    for b, t in s._tablets.items():
        if t.pending_version == version:
            t.rollback()
            s._pending.pop(b, None)
    for b, pb in list(s._pending.items()):
        if pb.version == version:
            del s._pending[b]
    for p in prepared:
        files = [p.segment, p.snapshot, p.images, *p.files]
        s.discard([f for f in files if f])
