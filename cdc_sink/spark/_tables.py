"""The per-Python-worker cache of opened tables (internal).

Spark runs the sink's executors apply mode and the ``cdc_sink`` source's reads in Python
worker processes that live across tasks. Opening a table there for every task would
reload its buckets each time; each process instead keeps its opened tables, whose tablets
stay in memory across tasks (style: pyiceberg's fork-safe executor):

- a cache is emptied after a fork (``os.getpid()`` changed): a child never uses the
  parent's tables;
- an entry is reopened when the table's identity file (``_table.json``) is no longer the
  same file (device, inode and modification time; on an object store its size and
  modification time, one ``HEAD``), i.e. the table at the path was deleted and created
  again;
- at most ``capacity`` tables are kept, the least recently used is dropped first.

A table named by an object-store URL (``s3://bucket/prefix``...) is opened with the
:class:`~cdc_sink.spark.options.StorageOptions` its user passed (part of the cache's
key), so each process opens its store once per table; ``open_table`` writes nothing, and
a table proves the store's conditional creates only before its first write. Readers pass
their options as reader options prefixed ``storage.`` (:func:`storage_options_from`).

Each user keeps its own :class:`TableCache`: the sink's executors (whose tables hold
prepared, not yet committed versions) and the source's reads never share a
:class:`~cdc_sink.table.Table` object.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Mapping

from cdc_sink.spark.options import StorageOptions
from cdc_sink.storage.layout import TABLE_FILE, table_file
from cdc_sink.storage.objectstore import ObjectStoreError
from cdc_sink.storage.objectstore.urls import parse_store_url
from cdc_sink.table import Table, TableOptions, open_table

__all__ = ["STORAGE_PREFIX", "TableCache", "storage_options_from"]

STORAGE_PREFIX = "storage."
"""The prefix of the reader options that are storage options:
``.option("storage.endpoint", url)`` is ``storage_options={"endpoint": url}``."""

_Key = tuple[str, TableOptions | None, StorageOptions]
_Identity = tuple[float, float, float]


def storage_options_from(options: Mapping[str, str]) -> StorageOptions:
    """The storage options among a reader's ``options``: those named ``storage.<key>``,
    as ``<key>`` (lower case: Spark's options are case-insensitive, and so are obstore's
    keys)."""
    n = len(STORAGE_PREFIX)
    return StorageOptions(
        {
            str(k)[n:].lower(): str(v)
            for k, v in options.items()
            if str(k).lower().startswith(STORAGE_PREFIX) and len(str(k)) > n
        }
    )


class TableCache:
    """Opened tables of this process, by path and options.

    Args:
        capacity: How many tables to keep open (least recently used dropped first).
    """

    def __init__(self, *, capacity: int = 8) -> None:
        self._capacity = capacity
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._tables: OrderedDict[_Key, tuple[_Identity, Table]] = OrderedDict()

    def get(
        self,
        path: str,
        *,
        options: TableOptions | None = None,
        storage_options: Mapping[str, str] | None = None,
    ) -> Table:
        """This process's table at ``path`` (a directory or URL), opened with ``options``
        and ``storage_options`` on first use.

        Raises:
            TableNotFound: No table at ``path``.
            cdc_sink.storage.objectstore.StoreConfigError: A bad URL or store.
        """
        storage = (
            storage_options
            if isinstance(storage_options, StorageOptions)
            else StorageOptions(storage_options)
        )
        local = parse_store_url(path).kind == "local"
        key = (path, options, storage)
        with self._lock:
            if self._pid != os.getpid():  # forked: the parent's tables are not ours
                self._tables.clear()
                self._pid = os.getpid()
            hit = self._tables.get(key)
            if hit is not None and hit[0] == _identity(path, hit[1], local):
                self._tables.move_to_end(key)
                return hit[1]
            table = open_table(path, options=options, storage_options=storage or None)
            self._tables[key] = (_identity(path, table, local), table)
            while len(self._tables) > self._capacity:
                self._tables.popitem(last=False)
            return table

    def clear(self) -> None:
        """Forgets every table (the next :meth:`get` of each opens it again)."""
        with self._lock:
            self._tables.clear()

    def __len__(self) -> int:
        return len(self._tables)


def _identity(path: str, table: Table, local: bool) -> _Identity:
    """Which creation of the table at ``path`` its identity file, written once when the
    table is created, belongs to: a local file's (device, inode, modification time; the
    time tells a new file that happens to get a freed inode from the old one), an
    object's (0, size, modification time) by one ``HEAD`` through ``table``'s store."""
    try:
        if not local:
            info = table.store.head(TABLE_FILE)
            return (0, info.size, info.last_modified)
        stat = os.stat(table_file(path))
    except (OSError, ObjectStoreError):
        return (0, 0, 0)  # open_table says what is wrong
    return (stat.st_dev, stat.st_ino, stat.st_mtime_ns)
