"""A bounded cache of immutable objects in front of an object store.

A table on an object store reads the same immutable objects again and again: a bucket's
pages at every cold load, its WAL segments at every replay, its manifests. None of them
ever changes under its name (every write of one is a ``put_new`` of a name unique to its
attempt, and GC deletes but never rewrites), so a copy needs no invalidation: a
:class:`CachingStore` keeps the bytes of every read of a *cacheable* key (the caller's
predicate: the table passes the names of segments, manifests, pages and rejects files),
keyed by key and byte range, and evicts the least recently used once they hold more than
``max_bytes``. A warm read makes no request. Everything else (writes, lists, deletes,
reads of other keys: log entries, checkpoints, cursors) goes straight to the inner store.

Only requests that reach the inner store are counted in :attr:`CachingStore.counters`
(and in the inner store's): a cache hit costs nothing.

The store's capabilities are the inner store's (a file to map, how orphans age, its
temporary files, ordered deletes), except :attr:`CachingStore.wants_object_cache`: it is
that cache.
"""

from __future__ import annotations

import builtins
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence

from cdc_sink.storage.objectstore import (
    ByteRange,
    ObjectInfo,
    ObjectStore,
    check_key,
    check_prefix,
)

__all__ = ["DEFAULT_CACHE_BYTES", "CachingStore", "ObjectCache"]

DEFAULT_CACHE_BYTES = 256 << 20
"""The default bound of a table's cache of immutable objects, in bytes."""

_Key = tuple[str, int, int]  # key, start, length (-1: the whole object)


class ObjectCache:
    """A thread-safe LRU of byte strings, bounded by their total size.

    Args:
        max_bytes: The bound (0 keeps nothing). An entry larger than it is not kept.
    """

    def __init__(self, max_bytes: int) -> None:
        if type(max_bytes) is not int or max_bytes < 0:
            raise ValueError(f"a cache bound must be an int >= 0, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self._items: OrderedDict[_Key, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        """Lookups answered from the cache."""
        self.misses = 0
        """Lookups that were not."""

    @property
    def nbytes(self) -> int:
        """Bytes held now."""
        return self._bytes

    def get(self, key: _Key) -> bytes | None:
        """The bytes kept under ``key`` (now the most recently used), or None."""
        with self._lock:
            data = self._items.get(key)
            if data is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return data

    def put(self, key: _Key, data: bytes) -> None:
        """Keeps ``data`` under ``key``, evicting the least recently used beyond the bound."""
        if len(data) > self.max_bytes:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= len(old)
            self._items[key] = data
            self._bytes += len(data)
            while self._bytes > self.max_bytes:
                _, evicted = self._items.popitem(last=False)
                self._bytes -= len(evicted)

    def clear(self) -> None:
        """Drops everything."""
        with self._lock:
            self._items.clear()
            self._bytes = 0


class CachingStore(ObjectStore):
    """``inner`` with the reads of cacheable keys served from an :class:`ObjectCache`.

    Args:
        inner: The store.
        max_bytes: The cache's bound.
        cacheable: Whether a key names an immutable object (its reads are kept).
    """

    def __init__(
        self, inner: ObjectStore, max_bytes: int, cacheable: Callable[[str], bool]
    ) -> None:
        super().__init__(inner.url)
        self.inner = inner
        self.cache = ObjectCache(max_bytes)
        self.cacheable = cacheable
        self._sizes: dict[str, ObjectInfo] = {}

    def location(self, key: str) -> str:
        """Where the inner store keeps ``key``."""
        return self.inner.location(key)

    def check_conditional_writes(self) -> None:
        """The inner store's probe (once per inner store)."""
        self.inner.ensure_conditional_writes()

    wants_object_cache = False
    """It is that cache."""

    @property
    def trusts_mtime_for_orphans(self) -> bool:  # type: ignore[override]
        """The inner store's."""
        return self.inner.trusts_mtime_for_orphans

    def local_path(self, key: str) -> str | None:
        """The inner store's file of ``key`` (a mapped file needs no cache), if any."""
        return self.inner.local_path(key)

    def abandoned_temporaries(self, prefix: str, *, min_age: float) -> builtins.list[str]:
        """The inner store's."""
        return self.inner.abandoned_temporaries(check_prefix(prefix), min_age=min_age)

    def get(self, key: str) -> bytes:
        """As :meth:`ObjectStore.get`, from the cache when it holds the object."""
        if not self.cacheable(check_key(key)):
            return super().get(key)
        data = self.cache.get((key, 0, -1))
        if data is None:
            data = super().get(key)
            self.cache.put((key, 0, -1), data)
        return data

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """As :meth:`ObjectStore.get_range`, from the cache when it holds the range."""
        if not self.cacheable(check_key(key)) or length == 0:
            return super().get_range(key, start, length)
        data = self.cache.get((key, start, length))
        if data is None:
            data = super().get_range(key, start, length)
            self.cache.put((key, start, length), data)
        return data

    @property
    def range_read_threads(self) -> int:  # type: ignore[override]
        """The inner store's."""
        return self.inner.range_read_threads

    @property
    def range_hole_bytes(self) -> int:  # type: ignore[override]
        """The inner store's."""
        return self.inner.range_hole_bytes

    @property
    def range_max_bytes(self) -> int:  # type: ignore[override]
        """The inner store's."""
        return self.inner.range_max_bytes

    def get_ranges_of(
        self, wanted: Mapping[str, Sequence[ByteRange]]
    ) -> dict[str, builtins.list[bytes]]:
        """As :meth:`ObjectStore.get_ranges_of`: the ranges of cacheable keys the cache
        holds from it, the others read together (coalesced, concurrently) and those of
        cacheable keys kept, each range by itself."""
        out: dict[str, builtins.list[bytes | None]] = {}
        todo: dict[str, builtins.list[ByteRange]] = {}
        for key, ranges in wanted.items():
            keep = self.cacheable(check_key(key))
            got = [
                self.cache.get((key, start, length)) if keep and length else None
                for start, length in ranges
            ]
            out[key] = got
            missing = [r for r, data in zip(ranges, got, strict=True) if data is None]
            if missing:
                todo[key] = missing
        fetched = super().get_ranges_of(todo) if todo else {}
        for key, datas in fetched.items():
            keep = self.cacheable(key)
            it = iter(datas)
            got = out[key]
            for i, ((start, length), data) in enumerate(zip(wanted[key], got, strict=True)):
                if data is None:
                    got[i] = data = next(it)
                    if keep and length:
                        self.cache.put((key, start, length), data)
        return {key: [b"" if d is None else d for d in got] for key, got in out.items()}

    def head(self, key: str) -> ObjectInfo:
        """As :meth:`ObjectStore.head`; an immutable object's answer is kept."""
        info = self._sizes.get(key)
        if info is None:
            info = super().head(key)
            if self.cacheable(key):
                self._sizes[key] = info
        return info

    def _get(self, key: str) -> bytes:
        return self.inner.get(key)

    def _get_range(self, key: str, start: int, length: int) -> bytes:
        return self.inner.get_range(key, start, length)

    def _put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        self.inner.put(key, data)

    def _put_if_absent(self, key: str, data: bytes | bytearray | memoryview) -> None:
        self.inner.put_if_absent(key, data)

    def _put_new(self, key: str, data: bytes | bytearray | memoryview) -> None:
        self.inner.put_new(key, data)

    def _list(self, prefix: str) -> tuple[builtins.list[ObjectInfo], int]:
        return self.inner.list(prefix), 1

    def _list_keys(self, prefix: str) -> tuple[builtins.list[str], int]:
        return self.inner.list_keys(prefix), 1

    def _list_keys_after(self, prefix: str, start_after: str) -> tuple[builtins.list[str], int]:
        return self.inner.list_keys(prefix, start_after=start_after), 1

    def _delete(self, key: str) -> None:
        self._sizes.pop(key, None)
        self.inner.delete(key)

    def _delete_many(self, keys: builtins.list[str]) -> int:
        for key in keys:
            self._sizes.pop(key, None)
        self.inner.delete_many(keys)
        return 1

    def _delete_each(
        self, keys: builtins.list[str], ordered: bool, before_each: Callable[[str], None]
    ) -> int:
        for key in keys:
            self._sizes.pop(key, None)
        self.inner.delete_many(keys, ordered=ordered, before_each=before_each)
        return 1

    def _head(self, key: str) -> ObjectInfo:
        return self.inner.head(key)
