"""One table version being written: the commit object every writer goes through.

:meth:`Table.apply <cdc_sink.table.Table.apply>`, the Spark sink's apply modes (driver and
executors) and dead-letter forwarding all write through a :class:`Transaction`, which
walks the commit protocol of docs/architecture.md §4 step by step::

    txn = table.transaction(app_id="job", batch_id=7)   # 1. decide: skip a replay, fix v
    if not txn.skipped:
        with txn:                                        #    any error below: abort
            txn.prepare(parts)                           # 2. prepare buckets here, or
            txn.add_prepared(messages)                   #    take what executors prepared
            res = txn.commit(rejects=..., source_offsets=...)   # 3-4. rejects, log entry
    txn.forward_dead_letters(sink)                       # 5. forward, exactly once

Preconditions are data, as pyiceberg's table requirements are: a transaction carries the
:class:`~cdc_sink.engine.requirements.Requirement` values its commit depends on (the log
still at ``version - 1``, the batch not committed by this ``app_id``), and the table's
engine checks each before it writes anything (:mod:`cdc_sink.engine.requirements`).

An executor task prepares its bucket with ``core_of(table).prepare_bucket(bucket,
version, events)`` in the worker's own table (:func:`cdc_sink.engine.core_of`), at the
transaction's :attr:`Transaction.version`, and sends the
:class:`~cdc_sink.engine.results.PreparedBucket` back to the driver, which hands it to
:meth:`Transaction.add_prepared`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Literal

import pyarrow as pa

from cdc_sink.batch import ChangeBatch, Rejects
from cdc_sink.engine import CommitResult, PreparedBucket, TableCore
from cdc_sink.engine.requirements import (
    AssertBatchNotCommitted,
    AssertLogAt,
    Requirement,
)
from cdc_sink.errors import InvalidOption
from cdc_sink.schema import TableSchema

__all__ = [
    "AssertBatchNotCommitted",
    "AssertLogAt",
    "Requirement",
    "Transaction",
    "TransactionState",
]

TransactionState = Literal["open", "committed", "aborted", "skipped"]
"""Where a :class:`Transaction` stands."""


class Transaction:
    """The next version of a table, from decide to commit or abort (see the module
    docstring). Made by :meth:`Table.transaction <cdc_sink.table.Table.transaction>`
    (its argument is the table's engine, :func:`cdc_sink.engine.core_of`).

    Attributes:
        version: The version this transaction commits (the newest this process knew at
            decide time + 1; another writer's commit since makes the commit lose its
            race).
        schema: The schema the events are validated and written with.
        app_id: The writing application (``None``: no exactly-once bookkeeping).
        batch_id: Its micro-batch id.
        requirements: What :meth:`commit` checks before writing.
        state: ``open``, ``committed``, ``aborted``, or ``skipped`` (the batch was
            committed before: a replay; nothing may be prepared or committed).
    """

    def __init__(self, core: TableCore, *, app_id: str | None, batch_id: int | None) -> None:
        if (app_id is None) != (batch_id is None):
            raise InvalidOption("app_id and batch_id go together", option="app_id/batch_id")
        self._core = core
        self.app_id = app_id
        self.batch_id = batch_id
        opened = core.begin(app_id, batch_id)
        self.version = opened.version
        self.schema: TableSchema = opened.schema
        self.state: TransactionState = "skipped" if opened.skipped else "open"
        reqs: list[Requirement] = [AssertLogAt(self.version - 1)]
        if app_id is not None and batch_id is not None:
            reqs.append(AssertBatchNotCommitted(app_id, batch_id))
        self.requirements: tuple[Requirement, ...] = tuple(reqs)
        self._prepared: list[PreparedBucket] = []

    # ------------------------------------------------------------------ decide
    @property
    def skipped(self) -> bool:
        """The batch was committed before (a replay): there is nothing to write."""
        return self.state == "skipped"

    @property
    def latest(self) -> int:
        """The newest version this process had committed or followed when this
        transaction was made (it decides without reading the log)."""
        return self.version - 1

    # ------------------------------------------------------------------ prepare
    def prepare(self, parts: Sequence[tuple[int, ChangeBatch]]) -> list[PreparedBucket]:
        """Prepares each ``(bucket, events)`` pair in this process as pending
        :attr:`version`, in the table's prepare threads.

        Returns:
            The prepared buckets, in the order of ``parts`` (also kept for :meth:`commit`).

        Raises:
            CommitConflict: The log is no longer at ``version - 1``. On any error, what
                this call prepared is rolled back before the error is raised.
        """
        self._check_open("prepare")
        got = self._core.prepare(self.version, parts)
        self._prepared.extend(got)
        return got

    def add_prepared(self, prepared: Sequence[PreparedBucket]) -> None:
        """Takes buckets prepared in other processes (executor tasks) at :attr:`version`.

        Raises:
            InvalidOption: A bucket was prepared for another version.
        """
        self._check_open("add prepared buckets to")
        for p in prepared:
            if p.version != self.version:
                raise InvalidOption(
                    f"bucket {p.bucket} was prepared for version {p.version}, "
                    f"this transaction commits {self.version}",
                    option="prepared",
                )
        self._prepared.extend(prepared)

    @property
    def prepared(self) -> list[PreparedBucket]:
        """Every bucket prepared so far."""
        return list(self._prepared)

    def refused(self) -> Rejects:
        """The events the prepared buckets' tablets refused (positions of their input)."""
        out = Rejects()
        for p in self._prepared:
            out.extend(p.rejects())
        return out

    def rollback(self) -> None:
        """Rolls back and removes everything prepared so far; the transaction stays open
        for another prepare of the same version (the sink's fallback from a
        bucket-partitioned attempt to a shuffle)."""
        self._check_open("roll back")
        done, self._prepared = self._prepared, []
        self._core.abort(self.version, done)

    # ------------------------------------------------------------------ commit
    def commit(
        self,
        *,
        events: int | None = None,
        rejects: pa.Table | None = None,
        source_offsets: Mapping[str, Mapping[str, int]] | None = None,
    ) -> CommitResult:
        """Makes :attr:`version` visible with every prepared bucket, atomically.

        ``rejects`` (columns of :data:`~cdc_sink.storage.rejects.REJECTS_SCHEMA`) are
        written durably first and named by the log entry, so they exist exactly when the
        version does.

        Args:
            events: How many events the batch held (recorded in the version's stats).
            rejects: The batch's rejected events, stored with the version.
            source_offsets: Per topic and partition, the offset after the batch's last
                record (recorded in the log entry).

        Returns:
            The committed version, its counts and the tablets' rejects.

        Raises:
            CommitConflict: A requirement failed, or another writer committed
                :attr:`version` first. Nothing of the attempt is visible: call
                :meth:`abort` (a ``with`` block does).
        """
        self._check_open("commit")
        res = self._core.commit(
            self.version,
            self._prepared,
            self.requirements,
            app_id=self.app_id,
            batch_id=self.batch_id,
            events=events,
            rejects=rejects,
            source_offsets=source_offsets,
        )
        self.state = "committed"
        return res

    def abort(self) -> None:
        """Rolls back what was prepared and removes its files, unless the log says the
        version was committed with them after all. Nothing is done once committed."""
        if self.state != "open":
            return
        self.state = "aborted"
        self._core.abort(self.version, self._prepared)

    def __enter__(self) -> Transaction:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self.abort()

    # ------------------------------------------------------------------ forward
    def forward_dead_letters(self, sink: Any, *, checked: int | None = None) -> int:
        """Step 5: copies this writer's committed rejects that ``sink`` does not hold yet
        to it, in version order, exactly once (:func:`cdc_sink.dead_letters.forward`).

        Works whether this transaction committed or was skipped (a replay forwards what
        an earlier run still owed).

        Args:
            sink: A dead-letter sink (:class:`~cdc_sink.dead_letters.DeadLetterSink`).
            checked: Every version up to this one is known forwarded already.

        Returns:
            The records written.

        Raises:
            InvalidOption: The transaction has no ``app_id`` (forwarding is per writer).
        """
        if self.app_id is None:
            raise InvalidOption("forwarding dead letters needs an app_id", option="app_id")
        from cdc_sink.dead_letters import forward_from

        return forward_from(self._core, sink, self.app_id, checked=checked)

    # ------------------------------------------------------------------ internals
    def _check_open(self, what: str) -> None:
        if self.state != "open":
            raise InvalidOption(
                f"cannot {what} a transaction that is {self.state} (version {self.version})",
                option="transaction",
            )
