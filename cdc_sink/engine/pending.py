"""What one process prepared for one bucket and has not yet seen committed or aborted.

The prepare step of the commit protocol (:mod:`cdc_sink.engine._commit`) leaves, per bucket, one
:class:`PendingBucket`: the WAL segment it wrote (the bucket's tablet holds the batch as
its pending version), or, for a bulk write, the snapshot it wrote and the new tablet that
replaces the bucket's once the version commits; plus the page locations of a snapshot
written with it, which become the tablet's only when the version commits.

When the version is decided -- by this process's own commit, or, in executors mode, by
the driver -- the log entry of the version says which attempt won: the pending state is
kept if the entry names this attempt's file, and dropped (the tablet rolled back)
otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cdc_sink.storage.snapshot import LocationUpdate
from cdc_sink.storage.version_log import BucketRef
from cdc_sink.tablet import MemTablet

__all__ = ["PendingBucket"]


@dataclass
class PendingBucket:
    """A bucket's prepared, undecided write.

    Attributes:
        version: The version it was prepared for.
        segment: The WAL segment written (relative path); ``None`` for a bulk write.
        snapshot: For a bulk write, the snapshot of the bucket at ``version``.
        tablet: For a bulk write, the tablet that becomes the bucket's on commit.
        locations: Page locations of a snapshot written with the prepare, recorded in the
            tablet when the version commits.
    """

    version: int
    segment: str | None
    snapshot: str | None = None
    tablet: MemTablet | None = None
    locations: list[LocationUpdate] = field(default_factory=list)

    @property
    def bulk(self) -> bool:
        """Whether this is a bulk write (a snapshot instead of a WAL segment)."""
        return self.segment is None

    def won(self, ref: BucketRef | None) -> bool:
        """Whether ``ref`` (the bucket's reference in the log entry of ``version``, or
        ``None``) names this attempt's file, i.e. this attempt was committed."""
        if ref is None:
            return False
        if self.bulk:
            return ref.segment is None and ref.snapshot == self.snapshot
        return ref.segment == self.segment
