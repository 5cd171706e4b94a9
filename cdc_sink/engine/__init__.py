"""The table engine: the one owner of an open table's state, and the door to it.

Layout::

    engine/
      core.py          TableCore: the state of one open table in one process (log,
                       history, schemas, bucket tablets, what it prepared) and the commit
                       protocol as its methods: begin, prepare, commit, abort, compact,
                       change_schema, collect_garbage, and the tablet loads and reads
      _commit.py       its private helpers: prepare (WAL segment or bulk snapshot, then
                       the tablet's pending version), commit (rejects, log entry),
                       abort, publish
      _maintenance.py  its private helpers: create, snapshots, compaction, schema
                       changes, GC
      requirements.py  a commit's preconditions as data (AssertLogAt, ...)
      results.py       the protocol's messages: PreparedBucket, CommitResult
      pending.py       what a process prepared and has not seen decided
      options.py       TableOptions
      location.py      a table's root and store from a path or URL
      inputs.py        the forms the Table API accepts (events, keys, timestamps)

:class:`~cdc_sink.table.Table` (the facade) owns one :class:`TableCore`; everything else
above the engine -- the :class:`~cdc_sink.transaction.Transaction`, the change feed, the
statistics, the dead-letter forwarder, the executors of the Spark sink -- reaches a
table's core through one named door, :func:`core_of` (as LevelDB's
``WriteBatchInternal`` and pyiceberg's ``Table._do_commit`` are the one way in), and
never through an attribute of the facade.
"""

from __future__ import annotations

from typing import Protocol

from cdc_sink.engine._maintenance import create as create_files
from cdc_sink.engine.core import Opened, TableCore
from cdc_sink.engine.options import TableOptions
from cdc_sink.engine.results import CommitResult, PreparedBucket

__all__ = [
    "CommitResult",
    "HasCore",
    "Opened",
    "PreparedBucket",
    "TableCore",
    "TableOptions",
    "core_of",
    "create_files",
]


class HasCore(Protocol):
    """An object that owns a table's core (:class:`~cdc_sink.table.Table`)."""

    @property
    def _core(self) -> TableCore: ...


def core_of(table: HasCore) -> TableCore:
    """The one private door to a table's engine: the :class:`TableCore` that
    :class:`~cdc_sink.table.Table` ``table`` owns.

    For the layers above the engine (transactions, change feed, statistics, dead-letter
    forwarding, executor tasks, tests); users call the :class:`~cdc_sink.table.Table`
    methods instead.
    """
    return table._core
