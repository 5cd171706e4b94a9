"""The job's periodic maintenance: compaction and GC every N committed micro-batches."""

from __future__ import annotations

import argparse
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cdc_sink.metrics import SinkMetrics
    from cdc_sink.table import Table

__all__ = ["Maintenance", "maintenance_settings"]

logger = logging.getLogger("cdc_to_tablets")


def maintenance_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The job's maintenance flags as :class:`Maintenance`'s keyword arguments."""
    return {
        "compact_every": args.compact_every,
        "gc_every": args.gc_every,
        "retain_versions": args.retain_versions,
        "retain_seconds": args.retain_seconds,
    }


class Maintenance:
    """Compaction and GC every N committed batches, timed, counted and logged; a failure
    is logged and counted, never raised (the stream goes on)."""

    def __init__(
        self,
        table: Table,
        metrics: SinkMetrics | None,
        *,
        compact_every: int,
        gc_every: int,
        retain_versions: int | None,
        retain_seconds: float | None,
        gc_floor: Callable[[], int | None] = lambda: None,
    ) -> None:
        self.table = table
        self.metrics = metrics
        self.gc_floor = gc_floor  # versions whose dead letters are not forwarded stay
        self.compact_every = compact_every
        self.gc_every = gc_every
        self.retain_versions = retain_versions
        self.retain_seconds = retain_seconds
        self.committed = 0

    def after_batch(self, committed: bool) -> bool:
        """Runs what is due after a micro-batch; returns whether anything ran."""
        if not committed:
            return False
        self.committed += 1
        ran = False
        if self.compact_every > 0 and self.committed % self.compact_every == 0:
            self.compact()
            ran = True
        if self.gc_every > 0 and self.committed % self.gc_every == 0:
            self.gc()
            ran = True
        return ran

    def compact(self) -> None:
        """Compacts the table (a maintenance version snapshotting every bucket)."""
        t0 = time.perf_counter()
        try:
            version = self.table.compact()
        except Exception as exc:
            logger.error(
                "compaction failed after %.3fs: %s: %s",
                time.perf_counter() - t0,
                type(exc).__name__,
                exc,
            )
            return
        seconds = time.perf_counter() - t0
        if self.metrics is not None:
            self.metrics.observe_compaction(seconds)
        logger.info("compaction version=%d duration_s=%.3f", version, seconds)

    def gc(self) -> None:
        """Deletes what no retained version needs (sizes read before deleting)."""
        t0 = time.perf_counter()
        try:
            floor = self.gc_floor()
            if floor is not None and floor < self.table.version - 1:
                logger.warning(
                    "gc keeps versions from %d on: their dead letters are not forwarded yet", floor
                )
            planned = self._gc(dry_run=True, keep_from=floor)
            sizes = {}
            for path in planned:
                try:
                    sizes[path] = os.stat(path).st_size
                except OSError:
                    continue
            removed = self._gc(dry_run=False, keep_from=floor)
            from cdc_sink.stats import forget_disk_usage

            forget_disk_usage(self.table.root)  # the table gauges must not show deleted files
        except Exception as exc:
            seconds = time.perf_counter() - t0
            if self.metrics is not None:
                self.metrics.observe_gc(seconds, ok=False)
            logger.error("gc failed after %.3fs: %s: %s", seconds, type(exc).__name__, exc)
            return
        seconds = time.perf_counter() - t0
        nbytes = sum(sizes.get(p, 0) for p in removed)
        oldest = self.table.oldest_version  # its requests count as the GC's
        if self.metrics is not None:
            self.metrics.observe_gc(
                seconds, ok=True, removed_files=len(removed), removed_bytes=nbytes
            )
        logger.info(
            "gc removed_files=%d removed_bytes=%d oldest_version=%d duration_s=%.3f",
            len(removed),
            nbytes,
            oldest,
            seconds,
        )

    def _gc(self, *, dry_run: bool, keep_from: int | None) -> list[str]:
        return self.table.gc(
            dry_run=dry_run,
            keep_from=keep_from,
            retain_versions=self.retain_versions,
            retain_seconds=self.retain_seconds,
        )
