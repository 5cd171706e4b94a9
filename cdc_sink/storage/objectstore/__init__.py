"""One small object-store interface under the storage layer, with typed errors.

A table lives under one *store*: a local directory or a prefix of an object-store bucket
(S3, GCS, Azure Blob, any S3-compatible endpoint). Every object is named by a *key*
relative to the store's root, ``/``-separated (``_log/00000000000000000042.json``).
The interface is what every one of those can do, and nothing more::

    get(key) -> bytes                    the whole object
    get_range(key, start, length)        exactly ``length`` bytes at ``start``
    get_ranges(key, ranges)              several (start, length) ranges of one object,
                                         near ones coalesced into one GET, the GETs
                                         issued concurrently (a bounded number at once)
    put(key, data)                       create or replace (atomic: readers see the old
                                         object or the new one, never a part)
    put_if_absent(key, data)             create, or raise ObjectExists: the commit point
    list(prefix) -> [ObjectInfo]         every object under a prefix, sorted by key
    put_new(key, data)                   create an object under a name unique to its writer
                                         and read by no one before this returns (an
                                         attempt's own file: a local store writes it in
                                         place, without a temporary file)
    list_keys(prefix) -> [str]           the same keys, without sizes
    delete(key), delete_many(keys)       a missing key is no error
    head(key) -> ObjectInfo              size and modification time

What differs between backends is asked for by name, never by the store's type (as
pyiceberg's ``FileIO`` and LevelDB's ``Env`` are asked)::

    open_new(key) -> NewObject           a new object written in pieces (a local store
                                         streams it to its file; others assemble it and
                                         put_new it once finished)
    local_path(key) -> str | None        a file holding the object, to memory-map (a
                                         local store's), or None: read with get
    wants_object_cache                   whether reads are requests worth an in-memory
                                         cache of immutable objects in front (not a
                                         local store's: the kernel caches its files)
    trusts_mtime_for_orphans             whether an object's last_modified dates its
                                         writer on the reader's own clock, so an old
                                         enough uncommitted object is a crashed
                                         attempt's (a local store's only)
    abandoned_temporaries(prefix, ...)   temporary files of writes that never finished
                                         (only a local store writes them)
    delete_many(keys, ordered=...,       one by one in order, or in batches; with a
                before_each=...)         callback before each key (a test's crash point)

File modes, fsync and directories are the local backend's own business
(:mod:`~cdc_sink.storage.objectstore.local`); nothing above it asks for them.

``put_if_absent`` is the one primitive a commit needs: among writers racing for one key,
exactly one succeeds and every other gets :class:`ObjectExists` (on a POSIX file system
``link(2)`` of a fsynced temporary file, on an object store a conditional ``PUT`` with
``If-None-Match: *``). A prefix is matched by whole path segments, as object stores list:
``_wal/1`` lists ``_wal/1/x`` but not ``_wal/10/x``. There is no rename, no directory and
no fsync in the interface: what ``put`` returns from is durable.

Backends, beside this module: :class:`~cdc_sink.storage.objectstore.local.LocalStore`
(files under a directory, today's durability: file and directory fsynced) and
:class:`~cdc_sink.storage.objectstore.cloud.ObstoreStore` (the ``obstore`` package, the
``s3`` extra). :func:`store_for` opens the right one for a URL (``s3://bucket/prefix``,
``gs://``, ``az://``, ``file:///path`` or a plain path).

Every store counts its requests and bytes per call kind in :attr:`ObjectStore.counters`
(:mod:`~cdc_sink.storage.objectstore.counters`), because object-store requests cost money.

Errors (all :class:`~cdc_sink.errors.CdcSinkError`, defined in :mod:`cdc_sink.errors` and
re-exported here)::

    ObjectStoreError
      ObjectNotFound       (also a FileNotFoundError)  get/get_range/head of a missing key
      ObjectExists         (also a FileExistsError)    put_if_absent lost
      ShortRead                                        a range past the object's end
      StoreIOError         (also an OSError)           transport or file-system failure:
                                                       a write's outcome is then unknown
      StoreConfigError                                 unknown scheme, bad URL or option
        BucketNotFound                                 the bucket does not exist
        StoreAccessDenied                              wrong or missing credentials
        ConditionalWritesUnsupported                   the endpoint would let two writers
                                                       both "create" one key
"""

from __future__ import annotations

import abc
import bisect
import builtins
import contextlib
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeAlias

from cdc_sink.errors import (
    BucketNotFound,
    ConditionalWritesUnsupported,
    ObjectExists,
    ObjectNotFound,
    ObjectStoreError,
    ShortRead,
    StoreAccessDenied,
    StoreConfigError,
    StoreIOError,
)
from cdc_sink.storage.objectstore.counters import CallKind, StoreCounters

__all__ = [
    "RANGE_HOLE_BYTES",
    "RANGE_MAX_BYTES",
    "RANGE_READ_THREADS",
    "BucketNotFound",
    "ByteRange",
    "CallKind",
    "ConditionalWritesUnsupported",
    "NewObject",
    "ObjectExists",
    "ObjectInfo",
    "ObjectNotFound",
    "ObjectStore",
    "ObjectStoreError",
    "ShortRead",
    "StoreAccessDenied",
    "StoreConfigError",
    "StoreCounters",
    "StoreIOError",
    "StoreLike",
    "as_store",
    "check_key",
    "check_prefix",
    "coalesce_ranges",
    "store_for",
]


# ---------------------------------------------------------------- keys


@dataclass(frozen=True)
class ObjectInfo:
    """What a store knows of one object."""

    key: str
    """The key, relative to the store's root."""
    size: int
    """Bytes."""
    last_modified: float
    """Seconds since the epoch (the store's clock)."""


_NOT_A_KEY = re.compile(r"[\x00-\x1f\x7f\\]|//|^/|/$|(?:^|/)\.\.?(?:/|$)")
"""A control character, a backslash, an empty segment, a ``.`` or ``..`` segment."""


def check_key(key: object) -> str:
    """``key`` once it is known to be a key: a non-empty ``/``-separated relative path
    whose segments are neither empty, ``.`` nor ``..``, without control characters or
    backslashes.

    Raises:
        TypeError: ``key`` is not a str.
        ValueError: It is not a key.
    """
    if not isinstance(key, str):
        raise TypeError(f"an object key must be a str, not {type(key).__name__}")
    if not key or _NOT_A_KEY.search(key):
        raise ValueError(
            f"{key!r} is not an object key: a relative path of non-empty segments, "
            "none '.' or '..', without control characters or backslashes"
        )
    return key


def check_prefix(prefix: object) -> str:
    """``prefix`` once it is ``""`` (the whole store) or a key (see :func:`check_key`);
    a trailing ``/`` is dropped.

    Raises:
        TypeError: ``prefix`` is not a str.
        ValueError: It is not a prefix.
    """
    if not isinstance(prefix, str):
        raise TypeError(f"a prefix must be a str, not {type(prefix).__name__}")
    prefix = prefix[:-1] if prefix.endswith("/") else prefix
    return prefix if prefix == "" else check_key(prefix)


def _check_length(start: int, length: int) -> None:
    if type(start) is not int or type(length) is not int or start < 0 or length < 0:
        raise ValueError(f"a byte range needs ints start >= 0, length >= 0: {start!r}, {length!r}")


# ---------------------------------------------------------------- ranges

RANGE_HOLE_BYTES = 1 << 20
"""Two ranges of one object at most this many bytes apart are read with one GET (the
bytes between them read and dropped): object_store's ``get_ranges`` coalesces at this
distance, and an object store's round trip costs more than reading that much."""

RANGE_MAX_BYTES = 8 << 20
"""Ranges are not merged into a GET longer than this (as Arrow's
``range_size_limit``), so a large read is several GETs issued in parallel: the size of
the byte-range GETs S3's performance guidelines name. A single longer range is one GET."""

RANGE_READ_THREADS = 8
"""The most GETs one :meth:`ObjectStore.get_ranges` has in flight at once."""

ByteRange: TypeAlias = tuple[int, int]
"""A byte range of an object: (start, length)."""


def coalesce_ranges(
    ranges: Iterable[ByteRange],
    *,
    hole_bytes: int = RANGE_HOLE_BYTES,
    max_bytes: int = RANGE_MAX_BYTES,
) -> list[ByteRange]:
    """The GETs that read ``ranges`` ((start, length) pairs, in any order, overlapping
    or not): sorted, each a (start, length) covering whole ranges of ``ranges``, two
    ranges merged when the hole between them is at most ``hole_bytes`` and the merged
    range is at most ``max_bytes`` long. Empty ranges need no GET and are left out.
    """
    merged: list[ByteRange] = []
    lo = hi = -1
    for start, length in sorted(r for r in ranges if r[1] > 0):
        end = start + length
        if lo >= 0 and start <= hi + hole_bytes and max(hi, end) - lo <= max_bytes:
            hi = max(hi, end)
            continue
        if lo >= 0:
            merged.append((lo, hi - lo))
        lo, hi = start, end
    if lo >= 0:
        merged.append((lo, hi - lo))
    return merged


# ---------------------------------------------------------------- new objects


class NewObject(abc.ABC):
    """A new object written in pieces (:meth:`ObjectStore.open_new`): :meth:`write`
    appends, :meth:`finish` makes it durable under its key, :meth:`abort` drops it.

    Like :meth:`ObjectStore.put_new`, the key must be unique to its writer and read by
    no one before :meth:`finish` returns. An object left empty is not created.
    """

    def __init__(self, key: str) -> None:
        self.key = key
        """The object's key."""
        self.size = 0
        """Bytes written so far."""

    @abc.abstractmethod
    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Appends ``data``.

        Raises:
            StoreIOError: The store failed (abort the object: it must not be committed).
        """

    @abc.abstractmethod
    def finish(self) -> int:
        """Makes the object durable (or, left empty, creates nothing); returns its size.

        Raises:
            ObjectExists: A local store found the key taken.
            StoreIOError: The store failed (the object may or may not exist: abort it).
        """

    @abc.abstractmethod
    def abort(self) -> None:
        """Drops the object, whatever was written or finished (errors are swallowed)."""


class _BufferedNewObject(NewObject):
    """A new object assembled in memory and written with one ``put_new`` by
    :meth:`finish` (every store without a streaming write of its own)."""

    def __init__(self, store: ObjectStore, key: str) -> None:
        super().__init__(key)
        self._store = store
        self._chunks: list[bytes | bytearray | memoryview] = []
        self._tried = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Appends ``data`` (kept by reference: do not change it before :meth:`finish`)."""
        view = memoryview(data).cast("B")
        self._chunks.append(view)
        self.size += len(view)

    def finish(self) -> int:
        """One ``put_new`` of everything written (nothing when empty); returns the size."""
        if self.size:
            data = bytearray(self.size)
            at = 0
            for chunk in self._chunks:
                data[at : at + len(chunk)] = chunk
                at += len(chunk)
            self._chunks = []
            self._tried = True
            self._store.put_new(self.key, data)
        return self.size

    def abort(self) -> None:
        """Drops what was written; deletes the object if a ``put_new`` was tried (a
        failed one may have landed)."""
        self._chunks = []
        if self._tried:
            with contextlib.suppress(OSError):
                self._store.delete(self.key)


def _nothing(key: str) -> None:
    """A ``before_each`` that does nothing."""


# ---------------------------------------------------------------- the interface


class ObjectStore(abc.ABC):
    """The objects of one store (see the module docstring).

    Safe to use from several threads. Subclasses implement the ``_`` methods; the public
    ones check their arguments and count each call in :attr:`counters` (a request is
    counted whether it succeeds or not: a refused request costs as much).
    """

    def __init__(self, url: str) -> None:
        """Args:
        url: The store's URL (in messages: never holds a secret).
        """
        self.url = url
        """Where the store is, for messages."""
        self.counters = StoreCounters()
        """Requests and bytes per call kind, since the store was opened."""
        self.writes_checked = False
        """Whether :meth:`check_conditional_writes` passed on this store object."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    def check_conditional_writes(self) -> None:
        """Proves that :meth:`put_if_absent` has exactly one winner here. A local
        directory needs no proof (``link(2)``); an object store probes its endpoint
        (:meth:`~cdc_sink.storage.objectstore.cloud.ObstoreStore.check_conditional_writes`).

        Raises:
            ConditionalWritesUnsupported, BucketNotFound, StoreAccessDenied: The probe
                found so.
        """
        return  # a local directory, and any store that needs no probe

    def ensure_conditional_writes(self) -> None:
        """:meth:`check_conditional_writes` once per store object (call it before the
        first write: a reader that never writes never probes, and needs no right to).

        Raises:
            ConditionalWritesUnsupported, BucketNotFound, StoreAccessDenied: As
                :meth:`check_conditional_writes`.
        """
        if not self.writes_checked:
            self.check_conditional_writes()
            self.writes_checked = True

    def location(self, key: str) -> str:
        """Where the object of ``key`` is, for messages (a file path, or the URL)."""
        return f"{self.url}/{key}"

    # ------------------------------------------------------------ capabilities

    wants_object_cache: bool = True
    """Whether reads are requests worth a cache of immutable objects in front of the
    store (:class:`~cdc_sink.storage.objectstore.cache.CachingStore`): true of an object
    store; false of a local store (the kernel's page cache holds its files) and of a
    store that is such a cache."""

    trusts_mtime_for_orphans: bool = False
    """Whether an object's ``last_modified`` dates its writer on the reader's own clock,
    so that GC may take an object of an uncommitted version older than its grace period
    for a crashed attempt's (a local store: one machine, one clock). On an object store
    a paused writer's clock proves nothing: its attempt's objects go only once their
    version has been committed without them."""

    def local_path(self, key: str) -> str | None:
        """A file holding the object of ``key``, for a reader that memory-maps it, or
        None (the default): read it with :meth:`get` and :meth:`get_range`.

        The file may be missing (``FileNotFoundError`` when it is opened). ``key`` is not
        checked here.
        """
        return None

    def open_new(self, key: str) -> NewObject:
        """A new object under ``key``, written in pieces (see :class:`NewObject`): a name
        unique to this writer that no reader reads before :meth:`NewObject.finish`
        returns, as :meth:`put_new`'s. By default it is assembled in memory and written
        with one :meth:`put_new`; a local store streams it to its file.

        Raises:
            ObjectExists: A local store found the name taken.
            StoreIOError: The store failed.
        """
        return _BufferedNewObject(self, check_key(key))

    def abandoned_temporaries(self, prefix: str, *, min_age: float) -> builtins.list[str]:
        """The keys of temporary files under ``prefix`` (directly) that writes left
        unfinished at least ``min_age`` seconds ago: a crashed process's, to delete (with
        :meth:`delete_many`). Only a local store writes temporary files; others have
        none (the default).

        Raises:
            StoreIOError: The store failed.
        """
        check_prefix(prefix)
        return []

    def get(self, key: str) -> bytes:
        """The whole object at ``key``.

        Raises:
            ObjectNotFound: No object there.
            StoreIOError: The store failed.
        """
        check_key(key)
        data = b""
        try:
            data = self._get(key)
        finally:
            self.counters.add("GET", len(data))
        return data

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """Exactly ``length`` bytes of the object at ``key``, from byte ``start`` on.

        Raises:
            ObjectNotFound: No object there.
            ShortRead: The object ends before ``start + length``.
            StoreIOError: The store failed.
        """
        check_key(key)
        _check_length(start, length)
        if length == 0:
            return b""
        data = b""
        try:
            data = self._get_range(key, start, length)
        finally:
            self.counters.add("GET", len(data))
        if len(data) != length:
            raise ShortRead(
                f"{self.url}: {key} has {start + len(data)} bytes or fewer, "
                f"a read of {length} bytes at {start} needs {start + length}"
            )
        return data

    range_read_threads: int = RANGE_READ_THREADS
    """The most GETs :meth:`get_ranges` has in flight at once."""

    range_hole_bytes: int = RANGE_HOLE_BYTES
    """:meth:`get_ranges` reads two ranges this close with one GET."""

    range_max_bytes: int = RANGE_MAX_BYTES
    """:meth:`get_ranges` merges ranges into GETs of at most this many bytes."""

    def get_ranges(self, key: str, ranges: Sequence[ByteRange]) -> builtins.list[bytes]:
        """The bytes of each (start, length) of ``ranges`` in the object at ``key``, in
        the order given: exactly as :meth:`get_range` of each would return them, in
        fewer requests. Ranges near each other are read with one GET
        (:func:`coalesce_ranges` with :attr:`range_hole_bytes` and
        :attr:`range_max_bytes`), and the GETs are issued concurrently, at most
        :attr:`range_read_threads` at once. Each GET is counted, with the bytes it read
        (the holes between ranges too).

        Raises:
            ObjectNotFound: No object there.
            ShortRead: The object ends before the end of a range.
            StoreIOError: The store failed.
        """
        return self.get_ranges_of({key: ranges})[key]

    def get_ranges_of(
        self, wanted: Mapping[str, Sequence[ByteRange]]
    ) -> dict[str, builtins.list[bytes]]:
        """:meth:`get_ranges` of several objects at once (``wanted`` maps each key to its
        ranges), their GETs issued together, at most :attr:`range_read_threads` at once.

        Raises:
            ObjectNotFound: One of the objects does not exist.
            ShortRead: One ends before the end of one of its ranges.
            StoreIOError: The store failed.
        """
        gets: builtins.list[tuple[str, int, int]] = []
        for key, ranges in wanted.items():
            check_key(key)
            for start, length in ranges:
                _check_length(start, length)
            merged = coalesce_ranges(
                ranges, hole_bytes=self.range_hole_bytes, max_bytes=self.range_max_bytes
            )
            gets += [(key, start, length) for start, length in merged]
        pieces = dict(zip(gets, self._get_many(gets), strict=True))
        return {key: self._cut(key, ranges, pieces) for key, ranges in wanted.items()}

    def _cut(
        self,
        key: str,
        ranges: Sequence[ByteRange],
        pieces: Mapping[tuple[str, int, int], bytes],
    ) -> builtins.list[bytes]:
        """The bytes of each of ``ranges`` of ``key``, cut from the GETs' ``pieces``."""
        gets = sorted((start, length) for k, start, length in pieces if k == key)
        starts = [start for start, _ in gets]
        out: builtins.list[bytes] = []
        for start, length in ranges:
            if length == 0:
                out.append(b"")
                continue
            i = bisect.bisect_right(starts, start) - 1
            data, at = pieces[(key, *gets[i])], start - starts[i]
            piece = data if at == 0 and length == len(data) else data[at : at + length]
            if len(piece) != length:
                raise ShortRead(
                    f"{self.url}: {key} has {starts[i] + len(data)} bytes or fewer, "
                    f"a read of {length} bytes at {start} needs {start + length}"
                )
            out.append(piece)
        return out

    def _get_many(self, gets: builtins.list[tuple[str, int, int]]) -> builtins.list[bytes]:
        """The bytes of each (key, start, length) of ``gets`` (one counted GET each;
        fewer bytes only at the object's end), at most :attr:`range_read_threads` in
        flight."""

        def one(get: tuple[str, int, int]) -> bytes:
            data = b""
            try:
                data = self._get_range(*get)
            finally:
                self.counters.add("GET", len(data))
            return data

        threads = min(self.range_read_threads, len(gets))
        if threads <= 1:
            return [one(get) for get in gets]
        with ThreadPoolExecutor(threads, thread_name_prefix="cdc_sink-get") as pool:
            return list(pool.map(one, gets))

    def put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        """Create or replace the object at ``key`` (atomic, durable on return).

        Never use it for a commit point: it replaces whatever is there.

        Raises:
            StoreIOError: The store failed (the object may or may not be written).
        """
        check_key(key)
        try:
            self._put(key, data)
        finally:
            self.counters.add("PUT", memoryview(data).nbytes)

    def put_if_absent(self, key: str, data: bytes | bytearray | memoryview) -> None:
        """Create the object at ``key`` only if there is none (atomic, durable on return).

        Among writers racing for one key exactly one returns; every other raises
        :class:`ObjectExists`. Readers never see the object partly written.

        Raises:
            ObjectExists: The key is taken.
            StoreIOError: The store failed: the object may or may not have been created
                by this call (read it back to know).
        """
        check_key(key)
        try:
            self._put_if_absent(key, data)
        finally:
            self.counters.add("PUT", memoryview(data).nbytes)

    def put_new(self, key: str, data: bytes | bytearray | memoryview) -> None:
        """Create the object at ``key``, a name unique to this writer that no reader
        reads before this returns (an attempt's WAL segment, page file, manifest or
        rejects file: the log entry naming it comes later). Durable on return.

        An object store does a plain ``PUT``; a local store writes the file in place
        (exclusive create, write, fsync, directory fsync), without the temporary file
        and rename of :meth:`put`, since no reader can see it partly written.

        Raises:
            ObjectExists: A local store found the name taken (never on an object store,
                which would replace it: the name must be unique).
            StoreIOError: The store failed (the object may or may not be written).
        """
        check_key(key)
        try:
            self._put_new(key, data)
        finally:
            self.counters.add("PUT", memoryview(data).nbytes)

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        """Every object under ``prefix`` (whole segments: see the module), by key.

        An object store's listing may lag behind writes that just returned; use it to
        find candidates (GC, recovery), never to decide what is committed.

        Raises:
            StoreIOError: The store failed.
        """
        prefix = check_prefix(prefix)
        infos: list[ObjectInfo] = []
        requests = 1
        try:
            infos, requests = self._list(prefix)
        finally:
            self.counters.add("LIST", 0, requests=requests)
        return sorted(infos, key=lambda i: i.key)

    def list_keys(self, prefix: str = "", *, start_after: str | None = None) -> builtins.list[str]:
        """The keys of :meth:`list`, sorted, without sizes or times (a file system then
        reads only its directories; an object store makes the same requests).

        Args:
            prefix: As for :meth:`list`.
            start_after: Only the keys that sort after this one (an object store asks
                for them alone: S3's ``start-after``; a local store filters its listing).

        Raises:
            StoreIOError: The store failed.
        """
        prefix = check_prefix(prefix)
        keys: builtins.list[str] = []
        requests = 1
        try:
            if start_after is None:
                keys, requests = self._list_keys(prefix)
            else:
                keys, requests = self._list_keys_after(prefix, start_after)
        finally:
            self.counters.add("LIST", 0, requests=requests)
        return sorted(keys)

    def delete(self, key: str) -> None:
        """Remove the object at ``key`` (durable on return; a missing one is no error).

        Raises:
            StoreIOError: The store failed.
        """
        check_key(key)
        try:
            self._delete(key)
        finally:
            self.counters.add("DELETE", 0)

    def delete_many(
        self,
        keys: Iterable[str],
        *,
        ordered: bool = False,
        before_each: Callable[[str], None] | None = None,
    ) -> None:
        """Remove several objects (missing ones are no error; durable on return), in as
        few requests as the store allows, or (``ordered``) one after another in the
        order given, so that a crash midway leaves only a first part of them deleted.

        Args:
            keys: The keys.
            ordered: Delete in order, each before the next (an object store then makes
                one request per key).
            before_each: Called with each key before its deletion starts (on a store
                that deletes in batches, with every key of a batch before it): a test's
                crash point between deletions.

        Raises:
            StoreIOError: The store failed (some objects may be gone).
        """
        todo = [check_key(k) for k in keys]
        if not todo:
            return
        requests = 1
        try:
            requests = self._delete_each(todo, ordered, before_each or _nothing)
        finally:
            self.counters.add("DELETE", 0, requests=requests)

    def head(self, key: str) -> ObjectInfo:
        """Size and modification time of the object at ``key``.

        Raises:
            ObjectNotFound: No object there.
            StoreIOError: The store failed.
        """
        check_key(key)
        try:
            return self._head(key)
        finally:
            self.counters.add("HEAD", 0)

    # ------------------------------------------------------------ for backends

    @abc.abstractmethod
    def _get(self, key: str) -> bytes: ...

    @abc.abstractmethod
    def _get_range(self, key: str, start: int, length: int) -> bytes:
        """Up to ``length`` bytes at ``start`` (fewer only at the object's end)."""

    @abc.abstractmethod
    def _put(self, key: str, data: bytes | bytearray | memoryview) -> None: ...

    @abc.abstractmethod
    def _put_if_absent(self, key: str, data: bytes | bytearray | memoryview) -> None: ...

    def _put_new(self, key: str, data: bytes | bytearray | memoryview) -> None:
        """Writes an object no reader reads yet (default: :meth:`_put`)."""
        self._put(key, data)

    @abc.abstractmethod
    def _list(self, prefix: str) -> tuple[builtins.list[ObjectInfo], int]:
        """The objects under ``prefix`` (any order) and the requests it took."""

    def _list_keys(self, prefix: str) -> tuple[builtins.list[str], int]:
        """The keys under ``prefix`` (any order) and the requests it took."""
        infos, requests = self._list(prefix)
        return [i.key for i in infos], requests

    def _list_keys_after(self, prefix: str, start_after: str) -> tuple[builtins.list[str], int]:
        """The keys under ``prefix`` that sort after ``start_after`` (any order) and the
        requests it took (default: :meth:`_list_keys`, filtered)."""
        keys, requests = self._list_keys(prefix)
        return [k for k in keys if k > start_after], requests

    @abc.abstractmethod
    def _delete(self, key: str) -> None: ...

    @abc.abstractmethod
    def _delete_many(self, keys: builtins.list[str]) -> int:
        """Deletes ``keys``; returns the requests it took."""

    def _delete_each(
        self, keys: builtins.list[str], ordered: bool, before_each: Callable[[str], None]
    ) -> int:
        """Deletes ``keys`` as :meth:`delete_many` says (default: ``ordered``, one
        :meth:`_delete` per key; else :meth:`_delete_many`); returns the requests."""
        if ordered:
            for key in keys:
                before_each(key)
                self._delete(key)
            return len(keys)
        for key in keys:
            before_each(key)
        return self._delete_many(keys)

    @abc.abstractmethod
    def _head(self, key: str) -> ObjectInfo: ...


StoreLike: TypeAlias = ObjectStore | str | os.PathLike[str]
"""A table's store, or the directory of a local table (a :class:`LocalStore` on it)."""


def as_store(where: StoreLike) -> ObjectStore:
    """``where`` as a store: a store as it is, a path (never a URL) as a
    :class:`~cdc_sink.storage.objectstore.local.LocalStore` on that directory."""
    if isinstance(where, ObjectStore):
        return where
    from cdc_sink.storage.objectstore.local import LocalStore

    return LocalStore(where)


def store_for(
    url: str,
    storage_options: Mapping[str, str] | None = None,
    *,
    check_conditional_writes: bool = True,
    file_mode: int | None = None,
) -> ObjectStore:
    """The store a table URL names.

    ``s3://bucket/prefix`` (also ``s3a://``), ``gs://bucket/prefix``,
    ``az://container/prefix`` (also ``abfs[s]://``, ``azure://``) open an
    :class:`~cdc_sink.storage.objectstore.cloud.ObstoreStore` (needs the ``s3`` extra);
    ``file:///path`` and a plain path a
    :class:`~cdc_sink.storage.objectstore.local.LocalStore`.

    Args:
        url: The URL or path.
        storage_options: Options of an object store (endpoint, region, credentials...:
            obstore's configuration keys, e.g. ``endpoint``, ``access_key_id``,
            ``secret_access_key``, ``region``, ``allow_http``); what they leave unset
            comes from the usual environment variables (``AWS_ACCESS_KEY_ID``,
            ``AWS_ENDPOINT_URL``, ``GOOGLE_SERVICE_ACCOUNT``, ``AZURE_STORAGE_ACCOUNT_NAME``
            ...). Refused for a local path.
        check_conditional_writes: Probe once that the endpoint honours conditional
            creates (an object store only; see
            :meth:`~cdc_sink.storage.objectstore.cloud.ObstoreStore.check_conditional_writes`).
        file_mode: Permission bits of the files a local store creates (default
            ``0o640``); an object store has none.

    Raises:
        StoreConfigError: An unknown scheme, a malformed URL, options for a local path,
            an unknown option.
        BucketNotFound, StoreAccessDenied, ConditionalWritesUnsupported: Found by the
            probe.
        cdc_sink.utils.extras.MissingExtra: An object-store URL without ``obstore`` installed.
    """
    from cdc_sink.storage.objectstore.urls import open_store

    return open_store(
        url,
        storage_options,
        check_conditional_writes=check_conditional_writes,
        file_mode=file_mode,
    )
