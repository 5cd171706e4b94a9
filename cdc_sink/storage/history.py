"""What each bucket's versions are made of, derived from the version log.

In memory only (rebuilt from ``_log/`` on open, extended as entries are read)::

    snapshots[bucket] = [(snapshot version, manifest path), ...]   ascending
    segments[bucket]  = [(version, segment path), ...]             ascending
    schemas           = [(version, schema id), ...]                every schema change
    bulk[bucket]      = [version, ...]                             ascending
    images[bucket]    = {version: pre-images path}                 the change feed's

A *bulk* version of a bucket is a data version whose entry names a snapshot of the bucket
at that same version and no segment (a large load into a bucket without rows): the
snapshot holds the bucket's rows, so a tablet at an older version cannot reach it by
replaying segments and must be loaded again.

Bucket b at version v = newest snapshot s <= v, then the segments in (s, v]. A
checkpoint (written by GC before it deletes old entries) carries the same lists as of
its version in ``extra``, so deleting log entries loses nothing a retained version needs
(the pre-images of a version are read only for its changes, which need the version before
it: a checkpoint's own versions never need theirs, so it does not carry them).
Every path of a checkpoint is checked to be a file of its kind inside the table
(:func:`cdc_sink.storage.layout.checked`) before it joins the history; the log checks
those of the entries it reads.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from cdc_sink.errors import WalCorruption
from cdc_sink.storage.layout import PathKind, checked
from cdc_sink.storage.segments import file_version
from cdc_sink.storage.version_log import Checkpoint, LogEntry, VersionLog

__all__ = ["History"]


@dataclass
class History:
    """Snapshots, segments and schema ids per version (see the module docstring)."""

    snapshots: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    segments: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    schemas: list[tuple[int, int]] = field(default_factory=list)
    bulk: dict[int, list[int]] = field(default_factory=dict)
    images: dict[int, dict[int, str]] = field(default_factory=dict)
    upto: int = -1

    @classmethod
    def from_log(cls, log: VersionLog) -> History:
        """Builds the history from the newest valid checkpoint and the entries after it.

        Raises:
            WalCorruption: The checkpoint and the retained entries do not cover every
                version from the checkpoint (or version 0) to the latest: entries are
                missing, or the checkpoint that replaced deleted entries is damaged.
        """
        h = cls()
        opened = log.take_opened_checkpoint()
        if opened is not None:  # the log started from the last-checkpoint pointer
            ptr, latest, horizon = opened
            h._add_checkpoint(ptr, log.last_checkpoint_path)
            if horizon is not None:  # GC deleted the pre-images at or below its horizon
                for images in h.images.values():
                    for v in [v for v in images if v <= horizon]:
                        del images[v]
            for e in log.entries(ptr.version + 1, latest):  # cached: no request
                h.add(e)
            return h
        cp = log.read_checkpoint()
        if cp is not None:
            h._add_checkpoint(cp, log.checkpoint_path(cp.version))
        start = cp.version if cp is not None else 0
        oldest = log.oldest()
        if oldest is not None and oldest > start:
            newest_cp = log.newest_checkpoint_version()
            if newest_cp is not None and (cp is None or newest_cp > cp.version):
                raise WalCorruption(
                    f"the checkpoint that replaced log entries {start}..{oldest - 1} is damaged",
                    path=log.checkpoint_path(newest_cp),
                    offset=0,
                )
            raise WalCorruption(
                f"log entries {start}..{oldest - 1} are missing and no checkpoint covers them",
                path=log.entry_path(start),
                offset=0,
            )
        h.extend(log)
        return h

    def _add_checkpoint(self, cp: Checkpoint, source: str) -> None:
        """Starts the history with checkpoint ``cp`` (read from the file ``source``).

        Raises:
            WalCorruption: The checkpoint's ``extra`` is malformed or names a segment
                that is no segment file of the table.
        """
        extra = cp.extra or {}
        if "snapshots" not in extra:
            for b, rel in cp.bucket_snapshots.items():
                if rel:
                    checked("snapshot", rel, source=source, ref=f"bucket {b} snapshot")
                    self.snapshots.setdefault(int(b), []).append((_snap_version(rel), rel))
        else:
            self._add_whole(extra, source)
        try:
            segments = _bucket_pairs(extra.get("segments", {}))
            schemas = [(int(v), int(s)) for v, s in extra.get("schemas", [])]
        except (TypeError, ValueError, AttributeError):
            raise WalCorruption(
                "checkpoint holds malformed segment or schema lists", path=source, offset=0
            ) from None
        for b, pairs in segments.items():
            _check_paths("segment", b, pairs, source)
            self.segments.setdefault(b, []).extend(pairs)
        self.schemas.extend(schemas)
        if not self.schemas:
            self.schemas.append((cp.version, cp.schema_id))
        self.upto = cp.version

    def _add_whole(self, extra: dict[str, Any], source: str) -> None:
        """The snapshots, bulk versions and pre-images of a last-checkpoint pointer's
        ``extra`` (:meth:`pointer_extra`), every path checked.

        Raises:
            WalCorruption: They are malformed or name a path that is no file of its kind.
        """
        try:
            snaps = _bucket_pairs(extra["snapshots"])
            bulk = {int(b): [int(v) for v in vs] for b, vs in extra.get("bulk", {}).items()}
            images = {
                int(b): {int(v): r for v, r in pairs}
                for b, pairs in extra.get("images", {}).items()
            }
        except (TypeError, ValueError, AttributeError):
            raise WalCorruption(
                "checkpoint holds malformed snapshot, bulk or image lists", path=source, offset=0
            ) from None
        for b, pairs in snaps.items():
            _check_paths("snapshot", b, pairs, source)
            self.snapshots[b] = sorted(pairs)
        for b, by_version in images.items():
            for v, r in by_version.items():
                checked("images", r, source=source, ref=f"bucket {b} images of version {v}")
            self.images[b] = by_version
        self.bulk.update(bulk)

    def pointer_extra(self) -> dict[str, Any]:
        """``extra`` for the last-checkpoint pointer at :attr:`upto`: the whole history
        (every segment, snapshot, bulk version and pre-images file it holds, and the
        schema changes), so that a history started from it equals one built from the
        log."""
        extra = self.checkpoint_extra(self.upto, {})
        extra["snapshots"] = {str(b): [[v, r] for v, r in s] for b, s in self.snapshots.items()}
        extra["bulk"] = {str(b): list(vs) for b, vs in self.bulk.items()}
        extra["images"] = {
            str(b): [[v, r] for v, r in sorted(m.items())] for b, m in self.images.items()
        }
        return extra

    def extend(self, log: VersionLog) -> None:
        """Adds the log entries newer than what the history holds."""
        latest = log.latest()
        if latest is None or latest <= self.upto:
            return
        oldest = log.oldest()
        start = self.upto + 1 if oldest is None else max(self.upto + 1, oldest)
        for e in log.entries(from_version=start, to_version=latest):
            self.add(e)

    def add(self, e: LogEntry) -> None:
        """Adds one entry (versions must come in order)."""
        if e.version <= self.upto:
            return
        for b, ref in e.buckets.items():
            if ref.segment:
                self.segments.setdefault(int(b), []).append((e.version, ref.segment))
            if ref.images:
                self.images.setdefault(int(b), {})[e.version] = ref.images
            if ref.snapshot:
                sv = _snap_version(ref.snapshot)
                self.snapshots.setdefault(int(b), []).append((sv, ref.snapshot))
                self.snapshots[int(b)].sort()
                if not ref.segment and sv == e.version and e.kind == "data":
                    self.bulk.setdefault(int(b), []).append(e.version)
        if not self.schemas or self.schemas[-1][1] != e.schema_id:
            self.schemas.append((e.version, e.schema_id))
        self.upto = e.version

    def schema_id_at(self, version: int) -> int:
        """The schema id in force at ``version``."""
        i = bisect.bisect_right([v for v, _ in self.schemas], version) - 1
        return self.schemas[max(i, 0)][1]

    def snapshot_at(self, bucket: int, version: int) -> tuple[int, str] | None:
        """Newest snapshot of ``bucket`` at or below ``version``."""
        snaps = self.snapshots.get(bucket, [])
        i = bisect.bisect_right(snaps, (version, "\uffff")) - 1
        return snaps[i] if i >= 0 else None

    def segments_between(self, bucket: int, lo: int, hi: int) -> list[tuple[int, str]]:
        """Segments of ``bucket`` with versions in (lo, hi]."""
        segs = self.segments.get(bucket, [])
        a = bisect.bisect_right(segs, (lo, "\uffff"))
        b = bisect.bisect_right(segs, (hi, "\uffff"))
        return segs[a:b]

    def bulk_between(self, bucket: int, lo: int, hi: int) -> bool:
        """Whether ``bucket`` has a bulk version in (lo, hi]."""
        vs = self.bulk.get(bucket, [])
        return bisect.bisect_right(vs, hi) > bisect.bisect_right(vs, lo)

    def schema_changes_between(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """Schema changes with versions in (lo, hi]."""
        return [(v, s) for v, s in self.schemas if lo < v <= hi]

    def checkpoint_extra(self, version: int, keep: dict[int, int]) -> dict[str, Any]:
        """``extra`` for a checkpoint at ``version``: per bucket, the segments in
        (kept snapshot version, version], and the schema changes."""
        segs = {
            str(b): [[v, r] for v, r in self.segments_between(b, keep.get(b, -1), version)]
            for b in self.segments
        }
        return {
            "segments": {b: s for b, s in segs.items() if s},
            "schemas": [[v, s] for v, s in self.schemas if v <= version],
        }


def _snap_version(rel: str) -> int:
    v = file_version(rel)
    if v is None:
        raise ValueError(f"not a snapshot manifest name: {rel}")
    return v


def _bucket_pairs(raw: Any) -> dict[int, list[tuple[int, str]]]:
    """``{bucket: [[version, path], ...]}`` of a checkpoint's ``extra``, typed (a
    malformed one raises TypeError, ValueError or AttributeError)."""
    return {int(b): [(int(v), r) for v, r in pairs] for b, pairs in raw.items()}


def _check_paths(kind: PathKind, bucket: int, pairs: list[tuple[int, str]], source: str) -> None:
    """Every path of ``pairs`` (bucket ``bucket``'s) is a ``kind`` path of the table.

    Raises:
        WalCorruption: One is not.
    """
    for v, r in pairs:
        checked(kind, r, source=source, ref=f"bucket {bucket} {kind} of version {v}")
