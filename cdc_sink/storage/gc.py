"""Garbage collection of a table's files: a pure plan, then its execution.

:func:`plan_gc` decides, without changing anything, what no retained version needs and
why (:class:`GcPlan`); :func:`execute_gc` carries a plan out::

    horizon    the oldest version kept: the newest ``retain_versions`` versions, every
               version committed in the last ``retain_seconds``, and every version from
               ``keep_from`` on (the sink's dead-letter forwarding holds GC back)
    per bucket the newest snapshot at or below the horizon is kept with every segment
               and snapshot after it, and every page file a kept manifest names; the
               change feed's pre-images of the versions above the horizon (the changes of
               the horizon itself need the version before it, which goes)
    deleted    older snapshots and pages, segments at or below the kept snapshot,
               pre-images at or below the horizon, rejects
               files of versions below the horizon, log entries below the horizon (a
               checkpoint keeps what they said), and orphans of failed attempts (files
               of a version above the newest that are older than the grace period:
               younger ones may belong to a commit in flight)

Execution writes the checkpoint at the horizon *first* (it moves the oldest readable
version, so a read that then finds a file gone knows the version was collected), then
deletes files with the store's ``delete_many`` (a local store unlinks them one by one and
fsyncs their directories after; an object store deletes in batches), and finally drops
the log entries below the horizon, oldest first.

The candidates come from listing the table's store by prefix (``_wal``, ``_snapshots``,
``_pages``, ``_change_data``, ``_rejects``); a listing only proposes them, the log, its
checkpoint and the kept manifests decide what is live, and a listing that lags behind
writes only delays a deletion to the next run. *Orphans* - files of a version above the
newest, which no entry names yet - are where the backends differ, as the store says
(:attr:`~cdc_sink.storage.objectstore.ObjectStore.trusts_mtime_for_orphans`): on a
local store (one machine, one clock) a file older than the grace period is taken for a
crashed attempt's, as always; on an object store an attempt's files are deleted only
once its version has been committed by an entry that does not name them
(docs/architecture.md, "Why a zombie writer cannot commit over its successor": a paused
writer's clock proves nothing).

GC deletes only inside the table: the files it considers come from listing the table's
own store (never from a path stored in a file; a local store lists nothing through a
directory that is a symbolic link), each must be a file name of the layout
(:func:`~cdc_sink.storage.layout.kind_of`), and :func:`execute_gc` refuses a plan
holding any other path before it deletes anything. The paths it reads from the log and
the manifests to know what is live are checked when read
(:func:`~cdc_sink.storage.layout.checked`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from cdc_sink.errors import WalCorruption
from cdc_sink.storage.faults import fault_point, register
from cdc_sink.storage.history import History
from cdc_sink.storage.layout import BUCKET_DIRS, REJECTS_DIR, file_version, kind_of
from cdc_sink.storage.objectstore import (
    ObjectInfo,
    ObjectStore,
    StoreLike,
    as_store,
    check_key,
)
from cdc_sink.storage.snapshot import read_manifest
from cdc_sink.storage.version_log import VersionLog

__all__ = ["GcPlan", "GcPolicy", "execute_gc", "plan_gc"]

register("gc.deleting")


@dataclass(frozen=True)
class GcPolicy:
    """What GC retains.

    Attributes:
        retain_versions: Keep at least this many newest versions.
        retain_seconds: Keep every version committed within this many seconds.
        orphan_grace_seconds: A file of a version above the newest is an orphan only
            once it is this old (else a commit may still be in flight).
        keep_from: Keep every version from this one on (``None``: no such floor).
    """

    retain_versions: int
    retain_seconds: float
    orphan_grace_seconds: float = 3600.0
    keep_from: int | None = None


class GcPlan(list[str]):
    """The sorted paths GC deletes, with why, and where the horizon is.

    A plan is a ``list`` of paths (a local store's absolute file names, an object
    store's URLs: :meth:`~cdc_sink.storage.objectstore.ObjectStore.location`), so it
    compares equal to the list of paths deleted.

    Attributes:
        horizon: The oldest version retained.
        reasons: Why each path goes.
        keep_snapshots: Per bucket, the version of the snapshot kept at the horizon (-1:
            none).
        snapshot_refs: Per bucket, that snapshot's manifest (for the checkpoint).
        keys: The store key of each path (a path missing here is taken relative to the
            table's root, if the store puts that key there).
    """

    def __init__(
        self,
        horizon: int,
        reasons: dict[str, str],
        keep_snapshots: dict[int, int],
        snapshot_refs: dict[int, str | None],
        keys: dict[str, str] | None = None,
    ) -> None:
        super().__init__(sorted(reasons))
        self.horizon = horizon
        self.reasons = reasons
        self.keep_snapshots = keep_snapshots
        self.snapshot_refs = snapshot_refs
        self.keys = keys or {}


@dataclass
class _Scan:
    """Inputs of a plan that come from the log."""

    store: ObjectStore
    log: VersionLog
    history: History
    latest: int
    oldest: int
    num_buckets: int
    reasons: dict[str, str] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)


def plan_gc(
    where: StoreLike,
    log: VersionLog,
    history: History,
    *,
    latest: int,
    oldest: int,
    num_buckets: int,
    policy: GcPolicy,
) -> GcPlan:
    """What GC would delete now under ``policy``, and why; changes nothing.

    Args:
        where: The table's store (a path: a local store on that directory).
        log: Its version log.
        history: Its history, followed up to ``latest``.
        latest: The newest committed version.
        oldest: The oldest readable version.
        num_buckets: Buckets of the newest schema.
        policy: What to retain.
    """
    scan = _Scan(as_store(where), log, history, latest, oldest, num_buckets)
    horizon = _horizon(scan, policy)
    keep_snap: dict[int, int] = {}
    snap_refs: dict[int, str | None] = {}
    for b in range(num_buckets):
        s = history.snapshot_at(b, horizon)
        keep_snap[b] = s[0] if s else -1
        snap_refs[b] = s[1] if s else None
    live = _live_files(scan, keep_snap, horizon)
    _doomed_bucket_files(scan, live, policy.orphan_grace_seconds)
    _doomed_rejects(scan, horizon, policy.orphan_grace_seconds)
    for v in range(oldest, horizon):
        scan.reasons[log.entry_path(v)] = f"log entry below the horizon {horizon}"
        scan.keys[log.entry_path(v)] = log.entry_key(v)
    return GcPlan(horizon, scan.reasons, keep_snap, snap_refs, scan.keys)


def _horizon(scan: _Scan, policy: GcPolicy) -> int:
    """The oldest version the policy retains."""
    horizon = max(scan.oldest, scan.latest - max(policy.retain_versions, 1) + 1)
    if policy.keep_from is not None and policy.keep_from < horizon:
        horizon = max(scan.oldest, policy.keep_from)
    if policy.retain_seconds > 0:
        cutoff = int(time.time() * 1000) - int(policy.retain_seconds * 1000)
        for e in scan.log.entries(from_version=scan.oldest, to_version=horizon):
            if e.commit_time_ms >= cutoff:
                horizon = min(horizon, e.version)
                break
    return horizon


def _live_files(scan: _Scan, keep_snap: dict[int, int], horizon: int) -> set[str]:
    """Every bucket file a retained version needs (relative paths)."""
    live: set[str] = set()
    for b in range(scan.num_buckets):
        live.update(rel for sv, rel in scan.history.snapshots.get(b, []) if sv >= keep_snap[b])
        live.update(rel for v, rel in scan.history.segments.get(b, []) if v > keep_snap[b])
        live.update(rel for v, rel in scan.history.images.get(b, {}).items() if v > horizon)
    for rel in [r for r in live if r.endswith(".manifest")]:
        live.update(read_manifest(scan.store, rel).files)
    return live


def _listed(scan: _Scan, prefix: str) -> list[ObjectInfo]:
    """The objects under ``prefix`` (a local store lists none through a symbolic link)."""
    return scan.store.list(prefix)


def _doomed_bucket_files(scan: _Scan, live: set[str], grace: float) -> None:
    """Segments, manifests, page files and pre-images no retained version needs."""
    for sub in BUCKET_DIRS:
        for info in _listed(scan, sub):
            parts = info.key.split("/")
            if len(parts) != 3 or not parts[1].isdigit():
                continue  # not a file of a bucket directory
            fv = file_version(parts[2])
            if info.key in live or fv is None:
                continue  # needed, or not ours
            _doom(scan, info, fv, grace, "no retained version needs it")


def _doomed_rejects(scan: _Scan, horizon: int, grace: float) -> None:
    """Rejects files of versions below the horizon, and orphans."""
    entries = scan.log.entries(from_version=horizon, to_version=scan.latest)
    named = {e.rejects for e in entries if e.rejects is not None}
    for info in _listed(scan, REJECTS_DIR):
        fv = file_version(info.key)
        if info.key in named or fv is None or not info.key.endswith(".arrow"):
            continue
        _doom(scan, info, fv, grace, f"rejects of a version below the horizon {horizon}")


def _doom(scan: _Scan, info: ObjectInfo, version: int, grace: float, reason: str) -> None:
    """Plans to delete ``info``'s object, a file of ``version`` that nothing retained
    names: for ``reason`` if the version is committed; as an orphan if the version is
    above the latest and, on a store that trusts its objects' mtimes (a local store),
    the file is older than ``grace`` seconds (else a commit may be in flight; on an
    object store it waits for its version to be committed without it)."""
    if kind_of(info.key) is None:
        return  # not a name this layout writes: not ours to delete
    where = scan.store.location(info.key)
    if version <= scan.latest:
        scan.reasons[where] = reason
    elif scan.store.trusts_mtime_for_orphans and time.time() - info.last_modified >= grace:
        scan.reasons[where] = f"orphan of a failed attempt at version {version}"
    else:
        return
    scan.keys[where] = info.key


def execute_gc(log: VersionLog, history: History, plan: GcPlan, *, oldest: int) -> None:
    """Carries ``plan`` out: checkpoint at the horizon, delete files, drop old entries.

    Args:
        log: The table's version log.
        history: Its history (for the checkpoint's per-bucket state).
        plan: What :func:`plan_gc` decided.
        oldest: The oldest readable version when the plan was made.

    Raises:
        WalCorruption: The plan holds a path that is no file of the table's layout
            (nothing is deleted then).
    """
    store = log.store
    log_dir = os.path.join(log.log_dir, "")
    doomed: list[tuple[str, str]] = []  # (path, key), the log's entries left out
    for p in plan:
        key = plan.keys.get(p)
        if key is None:
            key = _key_at(store, log.root, p)
        if key is None or kind_of(key) is None:
            raise WalCorruption(
                "GC plan names a path that is no file of the table; deleting nothing",
                path=p,
                offset=0,
            )
        if not p.startswith(log_dir):  # entries go last, oldest first, through the log
            doomed.append((p, key))
    log_oldest = log.oldest()
    prune = log_oldest is not None and plan.horizon > log_oldest
    if plan.horizon > oldest:
        log.write_checkpoint(
            plan.horizon,
            None,
            plan.snapshot_refs,
            history.schema_id_at(plan.horizon),
            history.checkpoint_extra(plan.horizon, plan.keep_snapshots),
        )
    store.delete_many((key for _, key in doomed), before_each=_deleting)
    if prune:
        log.delete_entries_below(plan.horizon)


def _deleting(key: str) -> None:
    fault_point("gc.deleting")


def _key_at(store: ObjectStore, root: str, path: str) -> str | None:
    """The key whose object the store keeps at ``path``, a path under the table's
    ``root``; None when ``path`` is no such place."""
    key = os.path.relpath(os.path.abspath(path), os.path.abspath(root)).replace(os.sep, "/")
    try:
        check_key(key)
    except ValueError:
        return None
    here = os.path.abspath(store.location(key))
    return key if here == os.path.abspath(path) else None
