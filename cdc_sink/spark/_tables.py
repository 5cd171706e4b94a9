"""The per-Python-worker cache of opened tables (internal).

Spark runs the sink's executors apply mode and the ``cdc_sink`` source's reads in Python
worker processes that live across tasks. Opening a table there for every task would
reload its buckets each time; each process instead keeps its opened tables, whose tablets
stay in memory across tasks (style: pyiceberg's fork-safe executor):

- a cache is emptied after a fork (``os.getpid()`` changed): a child never uses the
  parent's tables;
- an entry is reopened when the table's identity file (``_table.json``) is no longer the
  same file (device, inode and modification time), i.e. the table at the path was deleted
  and created again;
- at most ``capacity`` tables are kept, the least recently used is dropped first.

Each user keeps its own :class:`TableCache`: the sink's executors (whose tables hold
prepared, not yet committed versions) and the source's reads never share a
:class:`~cdc_sink.table.Table` object.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

from cdc_sink.storage.layout import table_file
from cdc_sink.table import Table, TableOptions, open_table

__all__ = ["TableCache"]

_Key = tuple[str, TableOptions | None]


class TableCache:
    """Opened tables of this process, by path and options.

    Args:
        capacity: How many tables to keep open (least recently used dropped first).
    """

    def __init__(self, *, capacity: int = 8) -> None:
        self._capacity = capacity
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._tables: OrderedDict[_Key, tuple[tuple[int, int, int], Table]] = OrderedDict()

    def get(self, path: str, *, options: TableOptions | None = None) -> Table:
        """This process's table at ``path``, opened with ``options`` on first use.

        Raises:
            TableNotFound: No table at ``path``.
        """
        ident = _identity(path)
        key = (path, options)
        with self._lock:
            if self._pid != os.getpid():  # forked: the parent's tables are not ours
                self._tables.clear()
                self._pid = os.getpid()
            hit = self._tables.get(key)
            if hit is not None and hit[0] == ident:
                self._tables.move_to_end(key)
                return hit[1]
            table = open_table(path, options=options)
            self._tables[key] = (ident, table)
            while len(self._tables) > self._capacity:
                self._tables.popitem(last=False)
            return table

    def clear(self) -> None:
        """Forgets every table (the next :meth:`get` of each opens it again)."""
        with self._lock:
            self._tables.clear()

    def __len__(self) -> int:
        return len(self._tables)


def _identity(path: str) -> tuple[int, int, int]:
    """(device, inode, modification time) of the table's identity file, written once when
    the table is created: which creation of the table it is (the time tells a new file
    that happens to get a freed inode from the old one)."""
    try:
        stat = os.stat(table_file(path))
    except OSError:
        return (0, 0, 0)  # open_table says what is wrong
    return (stat.st_dev, stat.st_ino, stat.st_mtime_ns)
