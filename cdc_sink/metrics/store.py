"""Object-store requests and bytes attributed to what the sink was doing.

Every :class:`~cdc_sink.storage.objectstore.ObjectStore` counts its requests and bytes per
call kind (:mod:`cdc_sink.storage.objectstore.counters`), since it was opened, whatever
made them. A :class:`StoreMeter` turns those running totals into figures per
*operation*: it keeps a mark (a snapshot of the counters), and :meth:`StoreMeter.settle`
hands everything counted since the mark to one operation and moves the mark. The
operations (:data:`STORE_OPERATIONS`):

* ``open``: what the store did before it was metered (opening or creating the table);
* ``commit``: a micro-batch, from the end of the one before (its reads of the log, its
  WAL segments, snapshots, rejects file, log entry, dead letters kept in the table);
* ``compaction``: a compaction (the snapshot of every bucket);
* ``gc``: a GC run (its listings, reads of the log, deletes);
* ``cold_read``: a read of a version by a process that did not hold it;
* ``stats``: the refresh of the table gauges (the log's newest and oldest versions);
* ``other``: anything else, measured by a :meth:`StoreMeter.measure` block's start.

The attribution is by time: requests another thread makes on the same store while an
operation runs are counted with it (the job's wait loop refreshing the gauges while a
batch runs, for one). The figures are the store's own counts: only requests that reach
the store (a table's cache of immutable objects answers warm reads without one), and
retries inside a client unseen.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Literal, get_args

from cdc_sink.storage.objectstore.counters import Counts, StoreCounters

__all__ = ["STORE_OPERATIONS", "StoreMeter", "StoreOperation"]

StoreOperation = Literal["open", "commit", "compaction", "gc", "cold_read", "stats", "other"]
"""What a store's requests are attributed to (see the module docstring)."""

STORE_OPERATIONS: tuple[StoreOperation, ...] = get_args(StoreOperation)
"""Every :data:`StoreOperation`, in a fixed order."""


class StoreMeter:
    """Attributes the requests and bytes of one store to operations (module docstring).

    Args:
        counters: The store's counters (``table.store.counters``).
        record: Called with each operation and what it cost (requests and bytes since
            the previous settlement); not called when nothing was counted.
        opened_as: The operation the counts already there are settled as, at once
            (``None``: they are left out).
    """

    def __init__(
        self,
        counters: StoreCounters,
        record: Callable[[StoreOperation, Counts], None],
        *,
        opened_as: StoreOperation | None = "open",
    ) -> None:
        self.counters = counters
        self._record = record
        self._lock = threading.Lock()
        zero = StoreCounters().snapshot()
        self._mark = zero
        if opened_as is None:
            self._mark = counters.snapshot()
        else:
            self.settle(opened_as)

    def settle(self, operation: StoreOperation) -> Counts:
        """Hands what was counted since the last settlement to ``operation``; returns it.

        Raises:
            ValueError: ``operation`` is not one of :data:`STORE_OPERATIONS`.
        """
        if operation not in STORE_OPERATIONS:
            raise ValueError(f"unknown store operation {operation!r}; expected {STORE_OPERATIONS}")
        with self._lock:
            now = self.counters.snapshot()
            spent = now.minus(self._mark)
            self._mark = now
        if spent.total_requests or any(spent.bytes.values()):
            self._record(operation, spent)
        return spent

    @contextlib.contextmanager
    def measure(self, operation: StoreOperation) -> Iterator[None]:
        """Attributes what the block costs to ``operation`` (what came before it, since
        the last settlement, to ``other``), also when the block raises."""
        self.settle("other")
        try:
            yield
        finally:
            self.settle(operation)
