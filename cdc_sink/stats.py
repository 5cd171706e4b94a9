"""Table statistics: what :meth:`cdc_sink.table.Table.stats` and ``cdc-sink stats`` show.

Two sources, both cheap:

- **memory**: the tablets the :class:`~cdc_sink.table.Table` object holds (a writer holds
  every bucket it has written since it opened; ``load=True`` loads the others): live
  rows, bytes held, outstanding delta versions (the most deltas any column of the bucket
  holds; compaction folds them into a new base);
- **disk**: one ``os.scandir`` walk of ``_wal/``, ``_snapshots/``, ``_pages/`` and
  ``_log/`` summing file sizes, cached per table for ``disk_max_age`` seconds (a job that
  refreshes its gauges after every micro-batch walks the directory at most that often).

Figures over buckets a process does not hold (``loaded=False`` in
:class:`BucketStats`) are not counted in the totals: ``TableStats.loaded_buckets`` says
how many were.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cdc_sink.engine import TableCore
    from cdc_sink.tablet import MemTablet

__all__ = [
    "BucketFigures",
    "BucketStats",
    "DiskUsage",
    "TableStats",
    "disk_usage",
    "table_stats",
    "tablet_figures",
    "with_remote_buckets",
]


@dataclass(frozen=True)
class BucketStats:
    """One bucket (each attribute's docstring follows it)."""

    bucket: int
    """The bucket."""
    loaded: bool
    """Whether this process holds its tablet (else the memory figures are 0)."""
    live_rows: int = 0
    """Live rows at the latest version."""
    memory_bytes: int = 0
    """Bytes held by the tablet (index, columns, dense state)."""
    delta_versions: int = 0
    """Most delta versions held by one of its columns."""
    wal_files: int = 0
    """WAL segments on disk."""
    wal_bytes: int = 0
    """Bytes of the WAL segments."""
    snapshot_files: int = 0
    """Snapshot manifests and page files on disk."""
    snapshot_bytes: int = 0
    """Bytes of the snapshot files."""


@dataclass(frozen=True)
class DiskUsage:
    """Files and bytes under a table directory, by kind and bucket (each attribute's
    docstring follows it)."""

    wal: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Bucket -> (files, bytes) of ``_wal/<bucket>/``."""
    snapshots: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Bucket -> (files, bytes) of ``_snapshots/<bucket>/`` and ``_pages/<bucket>/``."""
    log_files: int = 0
    """Files in ``_log/`` (entries and checkpoints)."""
    log_bytes: int = 0
    """Bytes of the log files."""
    measured_at: float = 0.0
    """``time.monotonic()`` of the walk."""


@dataclass(frozen=True)
class TableStats:
    """Figures of a table at its latest version (each attribute's docstring follows it)."""

    path: str
    """The table directory."""
    version: int
    """Latest committed version."""
    oldest_version: int
    """Oldest readable version."""
    num_buckets: int
    """Buckets of the latest schema."""
    loaded_buckets: int
    """Buckets held in memory (the memory figures sum over these)."""
    live_rows: int
    """Live rows (over the loaded buckets)."""
    memory_bytes: int
    """Bytes held by the loaded tablets."""
    outstanding_delta_versions: int
    """Most delta versions held by a column, over buckets."""
    wal_files: int
    """WAL segments on disk."""
    wal_bytes: int
    """Bytes of the WAL segments."""
    snapshot_files: int
    """Snapshot manifests and page files on disk."""
    snapshot_bytes: int
    """Bytes of the snapshot files."""
    log_files: int
    """Version log files on disk."""
    log_bytes: int
    """Bytes of the log files."""
    buckets: tuple[BucketStats, ...] = ()
    """Per-bucket detail."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``buckets`` as a list of dicts)."""
        return asdict(self)


_DISK_CACHE: dict[str, DiskUsage] = {}
_DISK_VERSION: dict[str, int | None] = {}  # the table version of each cached walk
_DISK_LOCK = threading.Lock()


def _walk(d: str) -> list[tuple[str, int]]:
    """(name, size) of the regular files directly in ``d`` (nothing if it is missing)."""
    out: list[tuple[str, int]] = []
    try:
        with os.scandir(d) as it:
            for e in it:
                try:
                    if e.is_file(follow_symlinks=False):
                        out.append((e.name, e.stat(follow_symlinks=False).st_size))
                except FileNotFoundError:  # removed by GC meanwhile
                    continue
    except (FileNotFoundError, NotADirectoryError):
        pass
    return out


def _per_bucket(root: str, sub: str, into: dict[int, tuple[int, int]]) -> None:
    top = os.path.join(root, sub)
    for name, _ in _walk_dirs(top):
        if not name.isdigit():
            continue
        files = _walk(os.path.join(top, name))
        n, size = into.get(int(name), (0, 0))
        into[int(name)] = (n + len(files), size + sum(s for _, s in files))


def _walk_dirs(d: str) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    try:
        with os.scandir(d) as it:
            out = [(e.name, 0) for e in it if e.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        pass
    return out


def disk_usage(
    root: str | os.PathLike[str], *, max_age: float = 0.0, version: int | None = None
) -> DiskUsage:
    """Files and bytes of a table directory (one walk; cached for ``max_age`` seconds).

    Args:
        root: The table directory.
        max_age: A walk younger than this is returned as it is (0: always walk).
        version: The table's version now: a walk made at another version is not reused
            (a commit or compaction writes files). GC deletes files without a new version:
            call :func:`forget_disk_usage` after it.
    """
    key = os.path.abspath(os.fspath(root))
    now = time.monotonic()
    if max_age > 0:
        with _DISK_LOCK:
            hit = _DISK_CACHE.get(key)
        if (
            hit is not None
            and now - hit.measured_at < max_age
            and _DISK_VERSION.get(key) == version
        ):
            return hit
    wal: dict[int, tuple[int, int]] = {}
    snaps: dict[int, tuple[int, int]] = {}
    _per_bucket(key, "_wal", wal)
    _per_bucket(key, "_snapshots", snaps)
    _per_bucket(key, "_pages", snaps)
    log = _walk(os.path.join(key, "_log"))
    usage = DiskUsage(
        wal=wal,
        snapshots=snaps,
        log_files=len(log),
        log_bytes=sum(s for _, s in log),
        measured_at=now,
    )
    with _DISK_LOCK:
        _DISK_CACHE[key] = usage
        _DISK_VERSION[key] = version
    return usage


def forget_disk_usage(root: str | os.PathLike[str]) -> None:
    """Drops the cached walk of ``root`` (after GC deleted files)."""
    key = os.path.abspath(os.fspath(root))
    with _DISK_LOCK:
        _DISK_CACHE.pop(key, None)
        _DISK_VERSION.pop(key, None)


def table_stats(
    core: TableCore, tablets: Mapping[int, MemTablet], *, disk_max_age: float = 0.0
) -> TableStats:
    """Statistics of the table from its in-memory ``tablets`` and its directory.

    Use :meth:`cdc_sink.table.Table.stats`, which passes the tablets it holds.

    Args:
        core: The table's engine (:func:`cdc_sink.engine.core_of`).
        tablets: Bucket -> the tablet this process holds at the latest version.
        disk_max_age: Reuse a directory walk younger than this many seconds.
    """
    version = core.version
    num_buckets = core.schema_at(version).num_buckets
    disk = disk_usage(core.root, max_age=disk_max_age, version=version)
    buckets: list[BucketStats] = []
    for b in sorted(set(range(num_buckets)) | set(tablets) | set(disk.wal) | set(disk.snapshots)):
        t = tablets.get(b)
        wf, wb = disk.wal.get(b, (0, 0))
        sf, sb = disk.snapshots.get(b, (0, 0))
        if t is None:
            buckets.append(
                BucketStats(
                    b, False, wal_files=wf, wal_bytes=wb, snapshot_files=sf, snapshot_bytes=sb
                )
            )
        else:
            buckets.append(
                BucketStats(
                    b,
                    True,
                    live_rows=t.num_rows(),
                    memory_bytes=t.memory_bytes(),
                    delta_versions=t.delta_versions(),
                    wal_files=wf,
                    wal_bytes=wb,
                    snapshot_files=sf,
                    snapshot_bytes=sb,
                )
            )
    loaded = [s for s in buckets if s.loaded]
    return TableStats(
        path=core.root,
        version=version,
        oldest_version=core.oldest_version(),
        num_buckets=num_buckets,
        loaded_buckets=len(loaded),
        live_rows=sum(s.live_rows for s in loaded),
        memory_bytes=sum(s.memory_bytes for s in loaded),
        outstanding_delta_versions=max((s.delta_versions for s in loaded), default=0),
        wal_files=sum(s.wal_files for s in buckets),
        wal_bytes=sum(s.wal_bytes for s in buckets),
        snapshot_files=sum(s.snapshot_files for s in buckets),
        snapshot_bytes=sum(s.snapshot_bytes for s in buckets),
        log_files=disk.log_files,
        log_bytes=disk.log_bytes,
        buckets=tuple(buckets),
    )


@dataclass(frozen=True)
class BucketFigures:
    """The memory figures of a bucket held by another process (an executor's Python
    worker in executors mode), as its task reported them with its result.

    Attributes:
        live_rows: Live rows after the batch.
        memory_bytes: Bytes held by the worker's tablet.
        delta_versions: Most delta versions held by one of its columns.
    """

    live_rows: int
    memory_bytes: int
    delta_versions: int


def tablet_figures(t: MemTablet) -> dict[str, int]:
    """A tablet's :class:`BucketFigures` fields: live rows as of its last committed
    version (a pending one is not readable yet), bytes held, most delta versions."""
    return {
        "live_rows": int(t.num_rows()),
        "memory_bytes": int(t.memory_bytes()),
        "delta_versions": int(t.delta_versions()),
    }


def with_remote_buckets(stats: TableStats, remote: Mapping[int, BucketFigures]) -> TableStats:
    """``stats`` with the buckets this process does not hold filled in from ``remote``
    (figures other processes reported; a bucket held here keeps its own).

    Args:
        stats: Statistics from :meth:`cdc_sink.table.Table.stats`.
        remote: Bucket -> figures reported by the process that holds it.
    """
    if not remote:
        return stats
    buckets = []
    for b in stats.buckets:
        f = remote.get(b.bucket)
        if b.loaded or f is None:
            buckets.append(b)
        else:
            buckets.append(
                replace(
                    b,
                    loaded=True,
                    live_rows=f.live_rows,
                    memory_bytes=f.memory_bytes,
                    delta_versions=f.delta_versions,
                )
            )
    loaded = [b for b in buckets if b.loaded]
    return replace(
        stats,
        buckets=tuple(buckets),
        loaded_buckets=len(loaded),
        live_rows=sum(b.live_rows for b in loaded),
        memory_bytes=sum(b.memory_bytes for b in loaded),
        outstanding_delta_versions=max((b.delta_versions for b in loaded), default=0),
    )
