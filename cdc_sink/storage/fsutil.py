"""Durable file-system primitives: every byte cdc_sink commits goes through here.

Three ways to put a file on disk, each ending with the file *and* its directory fsynced::

    write_file_durable(p, data, exclusive=True)      atomic_replace(p, data)
        open(p, O_CREAT|O_EXCL) ── write ── fsync        open(.p.<pid>.<rand>.tmp, O_EXCL)
        fsync(dir)                                       write ── fsync ── rename(tmp, p)
        (a reader may see p half written)                fsync(dir)   (replaces p: never
                                                                       for commit files)
    publish_exclusive(p, data)
        open(.p.<pid>.<rand>.tmp, O_EXCL) ── write ── fsync
        link(tmp, p)          <- fails with EEXIST if p exists: the atomic "create if absent"
        unlink(tmp) ── fsync(dir)
        (p appears complete and already fsynced, or not at all)

``exclusive`` writers never rename over an existing name, so two writers racing for one
name get exactly one winner; the loser sees :class:`FileExistsError`. Temporary files
are named ``.<final name>.<pid>.<random>.tmp`` in the same directory as their target;
one left behind by a crash is an orphan that the owner of the directory removes
(:func:`list_temp_files`).

This is the local backend's (:mod:`cdc_sink.storage.objectstore.local`), and no other
module imports it: the rest of the storage layer writes through the object-store
interface, which asks the backend by name for what only a file system has. The local
backend makes *every* durable file operation through this module: creating
files (:func:`create_file`) and directories (:func:`makedirs`), fsyncing them
(:func:`fsync_file`, :func:`fsync_dir`), linking, renaming, truncating and removing
(:func:`remove`). That makes this the one place where a test can watch what is durable:
:func:`set_recorder` installs a :class:`Recorder` that is told about each operation once
it succeeded (a power-loss simulation keeps, per file, the bytes as of its last fsync
and, per directory, the entries as of its last fsync). With no recorder installed, which
is always the case outside tests, an operation costs one global lookup more.

Nothing here knows about tables: these are the POSIX durability rules (fsync the file,
then fsync the directory that names it) written down once.

Every file and directory created here gets the permission bits it is given (``mode``:
by default :data:`DEFAULT_FILE_MODE`, ``0o640``, for files and :data:`DEFAULT_DIR_MODE`,
``0o750``, for directories; :func:`dir_mode` derives a directory's bits from its
files'), passed to ``open(2)``/``mkdir(2)``, so a file is never readable by others even
for a moment. The process umask may clear more bits. Existing files and directories are
never ``chmod``-ed: only what this module creates gets the mode.

A failed fsync is final for the file ("fsyncgate"): Linux may drop the dirty pages it
could not write and mark them clean, so a later fsync of the same file succeeds without
making that data durable. Nothing here retries an fsync; a writer whose fsync failed
abandons the file (the writers of this module unlink it) and never commits it, and a
later attempt writes a new file from its own copy of the data. Every fsync error raised
here names the file (``OSError.filename``).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import secrets
from collections.abc import Callable
from typing import BinaryIO, Protocol

from cdc_sink.errors import InvalidOption
from cdc_sink.storage.hookslot import HookSlot
from cdc_sink.utils.cpu_gate import blocking

__all__ = [
    "DEFAULT_DIR_MODE",
    "DEFAULT_FILE_MODE",
    "TEMP_SUFFIX",
    "Recorder",
    "atomic_replace",
    "check_file_mode",
    "create_file",
    "dir_mode",
    "fsync_dir",
    "fsync_file",
    "list_files",
    "list_temp_files",
    "makedirs",
    "publish_exclusive",
    "remove",
    "set_recorder",
    "start_writeback",
    "truncate_durable",
    "write_file_durable",
]

TEMP_SUFFIX = ".tmp"
"""Suffix of the in-flight temporary files written by this module."""

DEFAULT_FILE_MODE = 0o640
"""Permission bits of the files created here unless told otherwise: the owner reads and
writes, its group reads, others nothing."""


def dir_mode(file_mode: int) -> int:
    """The permission bits of a directory holding files of ``file_mode``: whoever may
    read the files may also enter the directory, and the owner may do anything
    (``0o640`` gives ``0o750``, ``0o600`` gives ``0o700``, ``0o644`` gives ``0o755``)."""
    return file_mode | ((file_mode & 0o444) >> 2) | 0o700


DEFAULT_DIR_MODE = dir_mode(DEFAULT_FILE_MODE)
"""Permission bits of the directories created here unless told otherwise (``0o750``)."""


def check_file_mode(mode: object, *, option: str = "file_mode") -> int:
    """``mode``, once known to be permission bits (an int in ``0o600``..``0o777``, no
    setuid, setgid or sticky bit) that let the owner read and write.

    Raises:
        InvalidOption: It is not (the error names ``option``).
    """
    if type(mode) is not int or not 0 <= mode <= 0o777 or mode & 0o600 != 0o600:
        shown = oct(mode) if type(mode) is int else repr(mode)
        raise InvalidOption(
            f"{option} must be an int of permission bits in 0o600..0o777 that lets the "
            f"owner read and write (e.g. 0o640), got {shown}",
            option=option,
        )
    return mode


# link(2) errors that mean "this file system has no hard links", not "the name exists".
_NO_LINK_ERRNOS = frozenset(
    code
    for code in (
        getattr(errno, "EPERM", None),
        getattr(errno, "ENOTSUP", None),
        getattr(errno, "EOPNOTSUPP", None),
        getattr(errno, "ENOSYS", None),
        getattr(errno, "EMLINK", None),
    )
    if code is not None
)


class Recorder(Protocol):
    """Watches the file operations of this module (tests only: see :func:`set_recorder`).

    ``observe`` is called after each operation succeeded, with ``kind`` one of:

    ========== ============================================ ==============================
    kind       what happened                                 ``fd``
    ========== ============================================ ==============================
    create     a new file ``path`` (``O_CREAT|O_EXCL``)       open on the new file
    open       an existing file ``path`` opened to rewrite    open on it
    fsync      the file open on ``fd`` was fsynced            the fd (``path``: its name)
    mkdir      the directory ``path`` was created             None
    fsync_dir  the directory ``path`` was fsynced             None
    link       ``path`` was hard-linked from ``source``       None
    rename     ``source`` was renamed to ``path``             None
    unlink     ``path`` was removed                           None
    truncate   ``path`` was truncated (and rewritten)         None
    ========== ============================================ ==============================
    """

    def observe(
        self, kind: str, path: str, *, fd: int | None = None, source: str | None = None
    ) -> None:
        """Called after each operation (see the class docstring)."""


_recorder: HookSlot[Recorder] = HookSlot()


def set_recorder(recorder: Recorder | None) -> Recorder | None:
    """Install (or, with ``None``, remove) the recorder told about every operation.

    A test hook: production code never installs one.

    Args:
        recorder: The recorder, or ``None``.

    Returns:
        The recorder installed before.
    """
    return _recorder.install(recorder)


def _note(kind: str, path: str, *, fd: int | None = None, source: str | None = None) -> None:
    rec = _recorder.current
    if rec is not None:
        rec.observe(
            kind,
            os.path.abspath(path),
            fd=fd,
            source=None if source is None else os.path.abspath(source),
        )


def _fsync(fd: int, path: str) -> None:
    """``os.fsync`` whose error names the file (the one-line reason an operator sees).
    A storage wait: the thread's CPU gate slot is free meanwhile (:func:`blocking`)."""
    try:
        with blocking():
            os.fsync(fd)
    except OSError as exc:
        if exc.filename is not None or not path:
            raise
        raise OSError(exc.errno, exc.strerror, path) from exc


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Fsync a directory so that names created, renamed or removed in it are durable.

    Args:
        path: The directory.

    Raises:
        OSError: The directory cannot be opened or synced.
    """
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        _fsync(fd, os.fspath(path))
    finally:
        os.close(fd)
    if _recorder.current is not None:
        _note("fsync_dir", os.fspath(path))


def fsync_file(file: BinaryIO | int, *, path: str | os.PathLike[str] = "") -> None:
    """Fsync an open file (a file object is flushed first).

    Args:
        file: A binary file object or a file descriptor.
        path: The file's name (only told to a recorder).

    Raises:
        OSError: The sync failed. The file's unsynced data may then be lost even if a
            later fsync succeeds: abandon the file, never commit it.
    """
    if isinstance(file, int):
        fd = file
    else:
        file.flush()
        fd = file.fileno()
    _fsync(fd, os.fspath(path) or str(getattr(file, "name", "")))
    if _recorder.current is not None:
        _note("fsync", os.fspath(path) or getattr(file, "name", ""), fd=fd)


_SYNC_FILE_RANGE_WRITE = 2  # <fcntl.h>: start writing the range's dirty pages, no wait


@functools.cache
def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """Linux's ``sync_file_range(2)`` from the C library, or None where there is none."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def start_writeback(file: BinaryIO, offset: int, length: int) -> None:
    """Asks the kernel to start writing ``length`` bytes of ``file`` at ``offset`` to
    disk now, without waiting (Linux's ``sync_file_range`` with
    ``SYNC_FILE_RANGE_WRITE``; a no-op elsewhere, or where the call fails).

    Only a hint, for a large file written in one go: the disk writes then overlap the
    rest of the writing instead of all waiting for the final :func:`fsync_file` (what
    RocksDB's ``bytes_per_sync`` does). Nothing becomes durable by it; only
    :func:`fsync_file` makes the file durable.
    """
    fn = _sync_file_range()
    if fn is not None and length > 0:
        file.flush()
        fn(file.fileno(), offset, length, _SYNC_FILE_RANGE_WRITE)


_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


def create_file(
    path: str | os.PathLike[str], *, buffering: int = -1, mode: int = DEFAULT_FILE_MODE
) -> BinaryIO:
    """Create a new file with ``O_CREAT|O_EXCL`` and open it for binary writing.

    Nothing is durable until :func:`fsync_file` and then :func:`fsync_dir` of its parent.

    Args:
        path: The file name; its directory must exist.
        buffering: As for :func:`open`.
        mode: The new file's permission bits (the umask may clear more).

    Returns:
        The open file.

    Raises:
        FileExistsError: The name exists.
        OSError: Any other I/O failure.
    """
    path = os.fspath(path)
    f = open(  # noqa: SIM115 - the caller closes it
        path, "xb", buffering=buffering, opener=lambda p, flags: os.open(p, flags, mode)
    )
    if _recorder.current is not None:
        _note("create", path, fd=f.fileno())
    return f


_durable_dirs: set[str] = set()


def makedirs(path: str | os.PathLike[str], *, mode: int = DEFAULT_DIR_MODE) -> None:
    """Create a directory and its missing parents, each one durably.

    Every directory this call creates is followed by an fsync of its parent, so its name
    survives a power loss. The first time a process meets an existing ``path`` it also
    fsyncs its parent and grandparent: another process (or a crashed one) may have
    created it without getting to that fsync, and table directories are at most two
    levels below the table root.

    Args:
        path: The directory.
        mode: The permission bits of every directory created (the umask may clear more;
            existing directories keep theirs).

    Raises:
        OSError: A directory cannot be created or synced.
    """
    path = os.path.abspath(os.fspath(path))
    if path in _durable_dirs and os.path.isdir(path):
        return
    missing: list[str] = []
    d = path
    while not os.path.isdir(d):
        missing.append(d)
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    if not missing:
        parent = os.path.dirname(path)
        fsync_dir(parent)
        if os.path.dirname(parent) != parent:
            fsync_dir(os.path.dirname(parent))
    for d in reversed(missing):
        try:
            os.mkdir(d, mode)
        except FileExistsError:
            if not os.path.isdir(d):
                raise
        else:
            if _recorder.current is not None:
                _note("mkdir", d)
        fsync_dir(os.path.dirname(d))
    _durable_dirs.add(path)


def remove(path: str | os.PathLike[str], *, missing_ok: bool = False) -> bool:
    """Remove a file (durable once its directory is fsynced).

    Args:
        path: The file.
        missing_ok: A missing file is not an error.

    Returns:
        Whether a file was removed.

    Raises:
        FileNotFoundError: The file is missing and ``missing_ok`` is false.
        OSError: Any other I/O failure.
    """
    path = os.fspath(path)
    try:
        os.unlink(path)
    except FileNotFoundError:
        if missing_ok:
            return False
        raise
    if _recorder.current is not None:
        _note("unlink", path)
    return True


def truncate_durable(path: str | os.PathLike[str], keep: int, *, tail: bytes = b"") -> None:
    """Cut a file to its first ``keep`` bytes, append ``tail``, and fsync it.

    Args:
        path: The file.
        keep: Bytes to keep.
        tail: Bytes to write after them.

    Raises:
        OSError: Any I/O failure.
    """
    path = os.fspath(path)
    fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    try:
        os.ftruncate(fd, keep)
        if tail:
            os.pwrite(fd, tail, keep)
        _fsync(fd, path)
        if _recorder.current is not None:
            _note("truncate", path)
            _note("fsync", path, fd=fd)
    finally:
        os.close(fd)


def _parent(path: str) -> str:
    return os.path.dirname(os.path.abspath(path))


def _write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    view = memoryview(data).cast("B")
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _write_new_file(path: str, data: bytes | bytearray | memoryview, mode: int) -> None:
    """Create ``path`` with O_EXCL and ``mode``, write and fsync it; remove it again on
    any failure. Creating the file is a storage wait too (the file system's journal)."""
    with blocking():
        fd = os.open(path, _CREATE_FLAGS, mode)
    try:
        if _recorder.current is not None:
            _note("create", path, fd=fd)
        _write_all(fd, data)
        _fsync(fd, path)
        if _recorder.current is not None:
            _note("fsync", path, fd=fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            remove(path)  # O_EXCL made it ours: nobody else can hold this name
        raise
    os.close(fd)


def _temp_name(path: str) -> str:
    head, tail = os.path.split(path)
    return os.path.join(head, f".{tail}.{os.getpid()}.{secrets.token_hex(6)}{TEMP_SUFFIX}")


def write_file_durable(
    path: str | os.PathLike[str],
    data: bytes | bytearray | memoryview,
    *,
    exclusive: bool,
    sync_dir: bool = True,
    mode: int = DEFAULT_FILE_MODE,
) -> None:
    """Write a file under its final name, fsync it, then fsync its directory.

    With ``exclusive`` the file is created with ``O_CREAT|O_EXCL`` and never replaces
    anything; if writing or syncing fails, the partial file is removed again. A
    concurrent reader may see the file empty or half written until this returns; use
    :func:`publish_exclusive` when readers must never see that.

    Args:
        path: The final file name.
        data: The complete content.
        exclusive: Fail if the name exists (else truncate and overwrite in place).
        sync_dir: Fsync the parent directory (callers that create many files in one
            directory may pass ``False`` and call :func:`fsync_dir` once).
        mode: The permission bits of a file this creates (an overwritten file keeps
            its own).

    Raises:
        FileExistsError: ``exclusive`` and the name exists.
        OSError: Any other I/O failure.
    """
    path = os.fspath(path)
    if exclusive:
        _write_new_file(path, data, mode)
    else:
        existed = _recorder.current is not None and os.path.exists(path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(path, flags, mode)
        try:
            if _recorder.current is not None:
                _note("open" if existed else "create", path, fd=fd)
            _write_all(fd, data)
            _fsync(fd, path)
            if _recorder.current is not None:
                _note("fsync", path, fd=fd)
        finally:
            os.close(fd)
    if sync_dir:
        fsync_dir(_parent(path))


def publish_exclusive(
    path: str | os.PathLike[str],
    data: bytes | bytearray | memoryview,
    *,
    sync_dir: bool = True,
    mode: int = DEFAULT_FILE_MODE,
) -> None:
    """Create a file that appears complete and fsynced, or not at all; never replace one.

    The content goes to a temporary file in the same directory, which is fsynced and
    then hard-linked to ``path``: ``link(2)`` fails if ``path`` exists, so among racing
    writers exactly one wins, and readers never see a partial file. On a file system
    without hard links this falls back to :func:`write_file_durable` with
    ``exclusive=True`` (still a single winner, but readers may see the file half
    written while it is being written).

    Args:
        path: The final file name.
        data: The complete content.
        sync_dir: Fsync the parent directory once the name exists.
        mode: The new file's permission bits.

    Raises:
        FileExistsError: The name exists (another writer won).
        OSError: Any other I/O failure.
    """
    path = os.fspath(path)
    tmp = _temp_name(path)
    _write_new_file(tmp, data, mode)
    try:
        os.link(tmp, path)
        if _recorder.current is not None:
            _note("link", path, source=tmp)
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in _NO_LINK_ERRNOS:
            raise
        _write_new_file(path, data, mode)
    finally:
        remove(tmp, missing_ok=True)
    if sync_dir:
        fsync_dir(_parent(path))


def atomic_replace(
    path: str | os.PathLike[str],
    data: bytes | bytearray | memoryview,
    *,
    mode: int = DEFAULT_FILE_MODE,
) -> None:
    """Replace a file atomically: temporary file, fsync, rename over ``path``, fsync dir.

    Readers see the old content or the new, never a mix. Because it replaces, this is
    for derived files (checkpoints, caches), never for a commit point.

    Args:
        path: The final file name.
        data: The complete content.
        mode: The permission bits of the new file (the one replaced may have had
            others).

    Raises:
        OSError: Any I/O failure (the temporary file is removed again).
    """
    path = os.fspath(path)
    tmp = _temp_name(path)
    _write_new_file(tmp, data, mode)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            remove(tmp)
        raise
    if _recorder.current is not None:
        _note("rename", path, source=tmp)
    fsync_dir(_parent(path))


def list_files(directory: str | os.PathLike[str], suffix: str) -> list[str]:
    """Names (not paths) of the regular files in ``directory`` ending with ``suffix``.

    Temporary files of this module (``.<name>.<pid>.<random>.tmp``) are never listed
    unless ``suffix`` asks for them.

    Args:
        directory: The directory to list; a missing directory lists as empty.
        suffix: Required ending of the name (``""`` for all files).

    Returns:
        The names, sorted.
    """
    try:
        with os.scandir(directory) as it:
            names = [e.name for e in it if e.name.endswith(suffix) and e.is_file()]
    except FileNotFoundError:
        return []
    return sorted(names)


def list_temp_files(directory: str | os.PathLike[str]) -> list[str]:
    """Names of temporary files left in ``directory`` by this module's writers.

    A name listed here may belong to a writer that is still running; remove only those
    old enough to be orphans.

    Args:
        directory: The directory to list.

    Returns:
        The names, sorted.
    """
    return [n for n in list_files(directory, TEMP_SUFFIX) if n.startswith(".")]
