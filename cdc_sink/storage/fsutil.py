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

Nothing here knows about tables: these are the POSIX durability rules (fsync the file,
then fsync the directory that names it) written down once.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets

__all__ = [
    "TEMP_SUFFIX",
    "atomic_replace",
    "fsync_dir",
    "list_files",
    "list_temp_files",
    "publish_exclusive",
    "write_file_durable",
]

TEMP_SUFFIX = ".tmp"
"""Suffix of the in-flight temporary files written by this module."""

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
        os.fsync(fd)
    finally:
        os.close(fd)


def _parent(path: str) -> str:
    return os.path.dirname(os.path.abspath(path))


def _write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    view = memoryview(data).cast("B")
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _write_new_file(path: str, data: bytes | bytearray | memoryview) -> None:
    """Create ``path`` with O_EXCL, write and fsync it; remove it again on any failure."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o644)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)  # O_EXCL made it ours: nobody else can hold this name
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

    Raises:
        FileExistsError: ``exclusive`` and the name exists.
        OSError: Any other I/O failure.
    """
    path = os.fspath(path)
    if exclusive:
        _write_new_file(path, data)
    else:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(path, flags, 0o644)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
    if sync_dir:
        fsync_dir(_parent(path))


def publish_exclusive(
    path: str | os.PathLike[str],
    data: bytes | bytearray | memoryview,
    *,
    sync_dir: bool = True,
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

    Raises:
        FileExistsError: The name exists (another writer won).
        OSError: Any other I/O failure.
    """
    path = os.fspath(path)
    tmp = _temp_name(path)
    _write_new_file(tmp, data)
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in _NO_LINK_ERRNOS:
            raise
        _write_new_file(path, data)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    if sync_dir:
        fsync_dir(_parent(path))


def atomic_replace(path: str | os.PathLike[str], data: bytes | bytearray | memoryview) -> None:
    """Replace a file atomically: temporary file, fsync, rename over ``path``, fsync dir.

    Readers see the old content or the new, never a mix. Because it replaces, this is
    for derived files (checkpoints, caches), never for a commit point.

    Args:
        path: The final file name.
        data: The complete content.

    Raises:
        OSError: Any I/O failure (the temporary file is removed again).
    """
    path = os.fspath(path)
    tmp = _temp_name(path)
    _write_new_file(tmp, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
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
