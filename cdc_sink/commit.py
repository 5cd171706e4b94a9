"""The two-phase commit protocol of a table (internal: the executors apply mode uses it).

A commit of version ``v`` happens in two steps, which may run in different processes:

1. *prepare*, once per bucket the batch touches (on the driver, or on the executor that
   owns the bucket): the bucket's tablet applies the batch in memory as pending version
   ``v`` and its change is written durably (a WAL segment, or snapshot pages for a bulk
   batch) without being visible;
2. *commit*, once per version on the driver: one log entry names every prepared bucket's
   file and makes version ``v`` visible atomically; or *abort*, which rolls the pending
   tablets back and removes their files.

These functions are not part of the public :class:`~cdc_sink.table.Table` API: a user
applies batches with :meth:`Table.apply <cdc_sink.table.Table.apply>` (or the Spark sink),
which runs both steps itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from cdc_sink.changes import ChangeBatch
from cdc_sink.table import CommitResult, PreparedBucket

if TYPE_CHECKING:
    from cdc_sink.table import Table

__all__ = ["CommitResult", "PreparedBucket", "abort_prepared", "commit_prepared",
           "prepare_bucket"]


def prepare_bucket(table: Table, bucket: int, version: int,
                   batch: ChangeBatch) -> PreparedBucket:
    """Prepares ``batch`` (events of one bucket) as pending version ``version``.

    Args:
        table: The table, opened in the process that owns the bucket.
        bucket: The bucket every event of ``batch`` routes to.
        version: The version being committed (the table's newest version + 1).
        batch: The bucket's events, decoded and validated.

    Returns:
        What the driver needs to commit the bucket: the file written and its statistics.
    """
    return table.prepare_bucket(bucket, version, batch)


def commit_prepared(table: Table, version: int, prepared: Sequence[PreparedBucket], *,
                    app_id: str | None = None, batch_id: int | None = None,
                    events: int | None = None, rejects: pa.Table | None = None,
                    source_offsets: Mapping[str, Mapping[str, int]] | None = None
                    ) -> CommitResult:
    """Makes version ``version`` visible with every bucket of ``prepared``, atomically.

    Args:
        table: The table, opened on the driver.
        version: The version being committed.
        prepared: Every prepared bucket of the version.
        app_id: The writing application, for idempotent replays (with ``batch_id``).
        batch_id: The micro-batch id; a (``app_id``, ``batch_id``) already committed is
            not committed twice.
        events: How many events the batch held (recorded in the version's metadata).
        rejects: The batch's rejected events, stored with the version.
        source_offsets: Kafka offsets the version covers, per topic and partition.

    Returns:
        The committed version and what it recorded.
    """
    return table.commit_prepared(version, prepared, app_id=app_id, batch_id=batch_id,
                                 events=events, rejects=rejects,
                                 source_offsets=source_offsets)


def abort_prepared(table: Table, version: int, prepared: Sequence[PreparedBucket]) -> None:
    """Rolls back the prepared buckets of a failed commit and removes their files.

    Files the log names after all (the commit landed before the failure was seen) are
    kept.
    """
    table.abort_prepared(version, prepared)
