"""The messages of the commit protocol: what a prepared bucket tells its committer
(:class:`PreparedBucket`, picklable, sent from an executor to the driver) and what a
commit did (:class:`CommitResult`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from cdc_sink.batch import Rejects

__all__ = ["CommitResult", "PreparedBucket"]


@dataclass
class PreparedBucket:
    """A bucket's prepared transaction: the picklable message from applier to committer.

    Attributes:
        bucket: The bucket.
        version: The version it was prepared for.
        segment: Its WAL segment (relative path); ``None`` for a bulk write, whose
            snapshot (at ``version``) is the durable record.
        snapshot: A snapshot written with it, if any (of ``version - 1``, or of
            ``version`` for a bulk write).
        counts: Apply counts.
        reject_positions: Input positions of events the tablet refused.
        reject_reasons: Their reasons.
        files: Other files written by this attempt (snapshot page files).
        images: The change feed's pre-images written with the segment
            (``TableOptions.change_images``), if any.
    """

    bucket: int
    version: int
    segment: str | None
    snapshot: str | None
    counts: dict[str, int]
    reject_positions: np.ndarray
    reject_reasons: list[str]
    files: list[str] = field(default_factory=list)
    images: str | None = None

    def rejects(self) -> Rejects:
        """The events the bucket's tablet refused."""
        positions = np.asarray(self.reject_positions, dtype=np.int64)
        return Rejects(positions, list(self.reject_reasons))


@dataclass
class CommitResult:
    """What ``Table.apply`` did.

    Attributes:
        version: The version created (or, when skipped, the latest version).
        skipped: The ``(app_id, batch_id)`` was committed before; nothing was done.
        counts: Inserted/updated/deleted/ignored/stale/rejected event counts.
        rejects: Positions (input index) and reasons of the refused events.
        buckets: Buckets the version touched.
    """

    version: int
    skipped: bool = False
    counts: dict[str, int] = field(default_factory=dict)
    rejects: Rejects = field(default_factory=Rejects)
    buckets: list[int] = field(default_factory=list)
