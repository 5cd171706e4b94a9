"""Preconditions of a commit, as data (pyiceberg's table requirements are the model).

A :class:`~cdc_sink.transaction.Transaction` carries the :class:`Requirement` values its
commit depends on (the log still at ``version - 1``, the batch not committed by this
``app_id``), and :meth:`TableCore.commit <cdc_sink.engine.core.TableCore.commit>` checks
each, under the table's lock, before it writes anything; a failed one raises
:class:`~cdc_sink.errors.CommitConflict` and nothing of the attempt becomes visible. The
log entry's exclusive create stays the one arbiter between processes; the requirements
make a conflict that this process can already see fail before any write.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from cdc_sink.errors import CommitConflict

__all__ = ["AssertBatchNotCommitted", "AssertLogAt", "LogView", "Requirement"]


class LogView(Protocol):
    """What a requirement reads of a table: the newest version this process followed and
    the batches the log records."""

    version: int

    def last_batch_id(self, app_id: str) -> int | None:
        """The last batch id the log records for ``app_id``."""


class Requirement:
    """A precondition of a commit, checked against this process's view of the log."""

    def validate(self, view: LogView) -> None:
        """Raises :class:`~cdc_sink.errors.CommitConflict` when the precondition fails."""
        raise NotImplementedError


@dataclass(frozen=True)
class AssertLogAt(Requirement):
    """The newest committed version is still ``version`` (the one the commit follows)."""

    version: int

    def validate(self, view: LogView) -> None:
        """Raises CommitConflict when another version was committed meanwhile."""
        if view.version != self.version:
            raise CommitConflict(
                f"the table moved from version {self.version} to {view.version} "
                "while this transaction was open"
            )


@dataclass(frozen=True)
class AssertBatchNotCommitted(Requirement):
    """``(app_id, batch_id)`` is not committed yet (exactly once per micro-batch)."""

    app_id: str
    batch_id: int

    def validate(self, view: LogView) -> None:
        """Raises CommitConflict when the batch was committed meanwhile."""
        last = view.last_batch_id(self.app_id)
        if last is not None and self.batch_id <= last:
            raise CommitConflict(
                f"batch {self.batch_id} of {self.app_id!r} was committed meanwhile "
                f"(its last committed batch is {last})"
            )
