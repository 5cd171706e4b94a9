"""The object-store interface over a directory of a POSIX file system.

A key is a file under the root (``_log/00000000000000000042.json`` is
``<root>/_log/00000000000000000042.json``); directories are created as objects need them
and never reported. Every write has the durability of :mod:`cdc_sink.storage.fsutil`::

    put(key, data)            temporary file, fsync, rename over the name, fsync the dir
    put_new(key, data)        exclusive create of the name itself, write, fsync, fsync
                              the dir (an attempt's own file: no reader reads it before
                              the log names it, so no temporary file is needed); the
                              kernel starts writing a large one back as it goes
    put_if_absent(key, data)  temporary file, fsync, link(2) to the name (EEXIST: the key
                              is taken), fsync the dir: the object appears complete and
                              durable, or not at all, and exactly one racing writer wins
    open_new(key)             exclusive create of the name itself; each write goes to
                              the kernel, its writeback started every WRITEBACK_BYTES;
                              finish: fsync, fsync the dir (empty: the file is removed)
    delete(key)               unlink, fsync the dir
    delete_many(keys)         unlink each in order, then fsync each directory once

What only a file system has, the store answers for when asked by name (the interface's
capabilities): :meth:`LocalStore.local_path` gives the file to memory-map;
``wants_object_cache`` is false (the kernel's page cache holds the files);
``trusts_mtime_for_orphans`` is true (one machine, one clock);
:meth:`LocalStore.abandoned_temporaries` finds what crashed writes left. File modes are
this backend's option (:data:`DEFAULT_FILE_MODE`, :func:`check_file_mode`,
:func:`dir_mode`, re-exported from fsutil, which no module but this one imports).

Temporary files (``.<name>.<pid>.<random>.tmp``, fsutil's) are never listed, and neither
is anything under a directory that is a symbolic link (a table's objects are its own
files: listing, and so GC, never reaches outside it). Errors keep their ``errno`` and
file name: a missing file is :class:`ObjectNotFound`, a taken name
:class:`ObjectExists`, any other failure :class:`StoreIOError` (an ``OSError``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from collections.abc import Callable, Iterator
from typing import BinaryIO, TypeVar

from cdc_sink.storage.fsutil import (
    DEFAULT_FILE_MODE,
    TEMP_SUFFIX,
    atomic_replace,
    check_file_mode,
    create_file,
    dir_mode,
    fsync_dir,
    fsync_file,
    list_temp_files,
    makedirs,
    publish_exclusive,
    remove,
    start_writeback,
    write_file_durable,
)
from cdc_sink.storage.objectstore import (
    NewObject,
    ObjectExists,
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    StoreIOError,
    check_key,
    check_prefix,
)

__all__ = [
    "DEFAULT_FILE_MODE",
    "WRITEBACK_BYTES",
    "LocalStore",
    "check_file_mode",
    "dir_mode",
]

WRITEBACK_BYTES = 32 << 20
"""``put_new`` writes a larger object in pieces of this many bytes and starts the disk
writes of each as it goes (:func:`cdc_sink.storage.fsutil.start_writeback`), so the
final fsync finds little left to write."""

_T = TypeVar("_T")

_NOT_AN_OBJECT = (errno.ENOENT, errno.EISDIR, errno.ENOTDIR)
"""errnos that mean "no object there" (a directory is no object)."""


class LocalStore(ObjectStore):
    """Files under one directory (see the module docstring)."""

    def __init__(self, root: str | os.PathLike[str], *, file_mode: int = DEFAULT_FILE_MODE):
        """Args:
        root: The directory (created, durably, by the first write under it).
        file_mode: Permission bits of the files it creates (directories get
            :func:`~cdc_sink.storage.fsutil.dir_mode` of them).
        """
        self.root = os.path.abspath(os.fspath(root))
        super().__init__(f"file://{self.root}")
        self.file_mode = file_mode

    def path(self, key: str) -> str:
        """The file of ``key`` (checked by the public methods, not here)."""
        return os.path.join(self.root, *key.split("/"))

    def location(self, key: str) -> str:
        """The file of ``key``, for messages."""
        return self.path(key)

    wants_object_cache = False
    """The kernel's page cache already holds the files."""

    trusts_mtime_for_orphans = True
    """One machine, one clock: a file's mtime dates its writer."""

    def local_path(self, key: str) -> str:
        """The file of ``key`` (to memory-map)."""
        return self.path(key)

    def open_new(self, key: str) -> NewObject:
        """A new file under ``key``, created exclusively now and streamed to as it is
        written (see the module docstring).

        Raises:
            ObjectExists: The file exists.
            StoreIOError: It cannot be created.
        """
        check_key(key)
        return self._call(key, lambda: _NewFile(self, key))

    def abandoned_temporaries(self, prefix: str, *, min_age: float) -> list[str]:
        """The keys of fsutil's temporary files directly under ``prefix`` whose mtime is
        at least ``min_age`` seconds old (younger ones may belong to a write in flight)."""
        prefix = check_prefix(prefix)
        directory = self.path(prefix) if prefix else self.root
        now = time.time()
        keys = []
        for name in list_temp_files(directory):
            with contextlib.suppress(FileNotFoundError):
                if now - os.stat(os.path.join(directory, name)).st_mtime >= min_age:
                    keys.append(f"{prefix}/{name}" if prefix else name)
        return keys

    def _call(self, key: str, fn: Callable[[], _T]) -> _T:
        """``fn()``, its OSError turned into this interface's errors."""
        try:
            return fn()
        except FileExistsError as exc:
            name = exc.filename2 or exc.filename  # link(2) names the temporary file first
            raise ObjectExists(exc.errno, f"{key} exists in {self.url}", name) from exc
        except OSError as exc:
            if isinstance(exc, (ObjectNotFound, StoreIOError)):
                raise
            if exc.errno in _NOT_AN_OBJECT:
                raise ObjectNotFound(
                    errno.ENOENT, f"no object {key} in {self.url}", exc.filename
                ) from exc
            raise StoreIOError(exc.errno, exc.strerror, exc.filename) from exc

    def _read(self, path: str, start: int, length: int | None) -> bytes:
        with open(path, "rb") as f:
            if length is None:
                return f.read()
            f.seek(start)
            return f.read(length)

    def _get(self, key: str) -> bytes:
        return self._call(key, lambda: self._read(self.path(key), 0, None))

    def _get_range(self, key: str, start: int, length: int) -> bytes:
        return self._call(key, lambda: self._read(self.path(key), start, length))

    def _ensure_parent(self, path: str) -> None:
        parent = os.path.dirname(path)
        try:
            makedirs(parent, mode=dir_mode(self.file_mode))
        except FileExistsError as exc:  # a file stands where a directory must: no ObjectExists
            raise StoreIOError(
                errno.ENOTDIR, f"{exc.filename or parent} is not a directory", exc.filename
            ) from exc

    def _put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        def write() -> None:
            path = self.path(key)
            self._ensure_parent(path)
            atomic_replace(path, data, mode=self.file_mode)

        self._call(key, write)

    def _put_if_absent(self, key: str, data: bytes | bytearray | memoryview) -> None:
        def write() -> None:
            path = self.path(key)
            self._ensure_parent(path)
            publish_exclusive(path, data, mode=self.file_mode)

        self._call(key, write)

    def _put_new(self, key: str, data: bytes | bytearray | memoryview) -> None:
        def write() -> None:
            path = self.path(key)
            self._ensure_parent(path)
            if memoryview(data).nbytes <= WRITEBACK_BYTES:
                write_file_durable(path, data, exclusive=True, mode=self.file_mode)
            else:
                _write_large(path, memoryview(data).cast("B"), self.file_mode)

        self._call(key, write)

    def _walk(self, directory: str, rel: str) -> Iterator[ObjectInfo]:
        try:
            it = os.scandir(directory)
        except (FileNotFoundError, NotADirectoryError):
            return
        with it:
            entries = list(it)
        for e in entries:
            key = f"{rel}/{e.name}" if rel else e.name
            if e.is_dir(follow_symlinks=False):
                yield from self._walk(e.path, key)
            elif e.is_file(follow_symlinks=False):
                if e.name.startswith(".") and e.name.endswith(TEMP_SUFFIX):
                    continue  # a write in flight, or an orphan of a crashed one
                with contextlib.suppress(FileNotFoundError):  # deleted while listing
                    st = e.stat(follow_symlinks=False)
                    yield ObjectInfo(key, st.st_size, st.st_mtime)

    def _walk_keys(self, directory: str, rel: str, out: list[str]) -> None:
        """Like :meth:`_walk`, without a ``stat`` per file (``d_type`` tells files)."""
        try:
            it = os.scandir(directory)
        except (FileNotFoundError, NotADirectoryError):
            return
        base = f"{rel}/" if rel else ""
        subdirs = []
        with it:
            for e in it:
                name = e.name
                if e.is_file(follow_symlinks=False):
                    if not (name.startswith(".") and name.endswith(TEMP_SUFFIX)):
                        out.append(base + name)
                elif e.is_dir(follow_symlinks=False):
                    subdirs.append(e)
        for d in subdirs:
            self._walk_keys(d.path, base + d.name, out)

    def _listable(self, prefix: str) -> str | None:
        """The directory to list for ``prefix``, or None when a directory on the way
        from the root to it is a symbolic link (never followed: see the module)."""
        at = self.root
        for part in prefix.split("/") if prefix else []:
            at = os.path.join(at, part)
            if os.path.islink(at):
                return None
        return at

    def _list_keys(self, prefix: str) -> tuple[list[str], int]:
        start = self._listable(prefix)
        keys: list[str] = []
        if start is not None:
            self._call(prefix or ".", lambda: self._walk_keys(start, prefix, keys))
        return keys, 1

    def _list(self, prefix: str) -> tuple[list[ObjectInfo], int]:
        start = self._listable(prefix)
        if start is None:
            return [], 1
        return self._call(prefix or ".", lambda: list(self._walk(start, prefix))), 1

    def _delete(self, key: str) -> None:
        self._delete_many([key])

    def _delete_many(self, keys: list[str]) -> int:
        return self._delete_each(keys, True, lambda key: None)

    def _delete_each(
        self, keys: list[str], ordered: bool, before_each: Callable[[str], None]
    ) -> int:
        """Unlinks each file in order (``before_each`` first), then fsyncs each
        directory touched once (ordered or not); counts a request per file."""

        def unlink_all() -> None:
            touched: set[str] = set()
            for key in keys:
                before_each(key)
                path = self.path(key)
                try:
                    if remove(path, missing_ok=True):
                        touched.add(os.path.dirname(path))
                except (IsADirectoryError, NotADirectoryError):
                    continue  # no object there
            for directory in sorted(touched):
                fsync_dir(directory)

        self._call(keys[0], unlink_all)
        return len(keys)

    def _head(self, key: str) -> ObjectInfo:
        def lookup() -> ObjectInfo:
            st = os.stat(self.path(key))
            if not stat.S_ISREG(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, "not a file", self.path(key))
            return ObjectInfo(key, st.st_size, st.st_mtime)

        return self._call(key, lookup)


def _write_large(path: str, view: memoryview, mode: int) -> None:
    """Creates ``path`` exclusively with ``view``'s bytes, starting the writeback of every
    :data:`WRITEBACK_BYTES` as it goes, then fsyncs it and its directory; removes it again
    on any failure."""
    f = create_file(path, buffering=0, mode=mode)
    try:
        for start in range(0, len(view), WRITEBACK_BYTES):
            piece = view[start : start + WRITEBACK_BYTES]
            while piece:
                piece = piece[f.write(piece) or 0 :]
            start_writeback(f, start, min(WRITEBACK_BYTES, len(view) - start))
        fsync_file(f, path=path)
    except BaseException:
        f.close()
        remove(path, missing_ok=True)  # created with O_EXCL: the name is ours
        raise
    f.close()
    fsync_dir(os.path.dirname(path))


class _NewFile(NewObject):
    """The file of a :meth:`LocalStore.open_new` (see the module docstring)."""

    def __init__(self, store: LocalStore, key: str) -> None:
        super().__init__(key)
        self._store = store
        self.path = store.path(key)
        store._ensure_parent(self.path)
        self._f: BinaryIO | None = create_file(self.path, buffering=0, mode=store.file_mode)
        self._written_back = 0  # bytes whose writeback was started

    def _file(self) -> BinaryIO:
        if self._f is None:
            raise ValueError(f"{self.path} is finished or aborted")
        return self._f

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Appends ``data``, starting the writeback of every :data:`WRITEBACK_BYTES`."""
        f = self._file()
        view = memoryview(data).cast("B")

        def write_all() -> None:
            piece = view
            while piece:
                piece = piece[f.write(piece) or 0 :]

        self._store._call(self.key, write_all)
        self.size += len(view)
        if self.size - self._written_back >= WRITEBACK_BYTES:
            start_writeback(f, self._written_back, self.size - self._written_back)
            self._written_back = self.size

    def finish(self) -> int:
        """Fsyncs the file and its directory and closes it (an empty one is removed)."""
        f = self._file()

        def sync() -> None:
            fsync_file(f, path=self.path)
            f.close()
            fsync_dir(os.path.dirname(self.path))
            if not self.size:
                remove(self.path)

        try:
            self._store._call(self.key, sync)
        finally:
            self._store.counters.add("PUT", self.size)
        self._f = None
        return self.size

    def abort(self) -> None:
        """Closes and removes the file. Abandoned whatever happened (a failed write or
        fsync: its data may be lost even if a later fsync succeeded); created with
        ``O_EXCL``, so the name is ours."""
        f, self._f = self._f, None
        if f is not None:
            with contextlib.suppress(OSError):
                f.close()
        with contextlib.suppress(OSError):
            remove(self.path, missing_ok=True)
