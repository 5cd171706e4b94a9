"""A model of what survives a power cut, fed by the storage layer's file operations.

:class:`PowerLossRecorder` is a :class:`cdc_sink.storage.fsutil.Recorder`: installed with
``fsutil.set_recorder``, it is told about every file operation of the storage layer and
keeps, for the files and directories under one root:

* per file (identified by the inode it was created with), its bytes as of its last
  ``fsync`` -- nothing for a file never fsynced;
* per directory, its entries (name -> file or directory) as of its last directory
  ``fsync`` -- for a directory created since recording began and never fsynced, none.

Everything under the root when recording starts counts as durable.

:meth:`PowerLossRecorder.image` writes the tree a power cut *now* would leave: starting
from the root, each directory with its durable entries only (entries created, linked or
renamed in since its last fsync are gone; entries removed or renamed away since then are
back), each file with its durable bytes only (every byte written since its last fsync
is gone). That is the strictest state POSIX allows after a crash; with an ``rng``,
:meth:`image` instead picks, independently per directory, its durable or its current
entries, and per file its durable bytes, its current bytes or (when the durable bytes
are a prefix of the current ones) a torn prefix in between: states a real file system
may also leave, which need not include the strict one.

The table prepares the buckets of a batch in several threads: :meth:`observe` and
:meth:`image` take one lock, so each operation updates the model whole and an image is
written from a model no other thread is changing (while their files may be, as a power
cut would find them).

Files created other than through ``fsutil`` cannot be told apart from a reused inode;
the recorder lists them in :attr:`PowerLossRecorder.stragglers` so that a test can insist
there are none.
"""

from __future__ import annotations

import os
import random
import stat
import threading
from collections.abc import Callable

__all__ = ["PowerLossRecorder"]

Entry = tuple[int, bool]
"""A directory entry in the model: (node id, is a directory)."""


class PowerLossRecorder:
    """Tracks what is durable under ``root`` (see the module docstring).

    Attributes:
        root: The watched directory (absolute).
        ops: Operations observed under ``root`` so far.
        on_op: Called as ``on_op(kind, path)`` after each observed operation (a cut
            point for tests), or ``None``.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        """Start recording ``root``: everything under it now counts as durable.

        Args:
            root: An existing directory.
        """
        self.root = os.path.abspath(os.fspath(root))
        self.ops = 0
        self.on_op: Callable[[str, str], None] | None = None
        self._unclaimed: dict[tuple[int, int], str] = {}  # inodes met before their "create"
        self._next_id = 0
        self._node_of_inode: dict[tuple[int, int], int] = {}
        self._content: dict[int, bytes] = {}
        self._listing: dict[str, dict[str, Entry]] = {}
        self._lock = threading.RLock()  # on_op may write an image
        for dirpath, dirnames, filenames in os.walk(self.root):
            listing: dict[str, Entry] = {}
            for name in dirnames:
                listing[name] = (self._new_node(os.lstat(os.path.join(dirpath, name))), True)
            for name in filenames:
                path = os.path.join(dirpath, name)
                node = self._new_node(os.lstat(path))
                with open(path, "rb") as f:
                    self._content[node] = f.read()
                listing[name] = (node, False)
            self._listing[dirpath] = listing

    # ------------------------------------------------------------------ model upkeep
    def _new_node(self, st: os.stat_result) -> int:
        self._next_id += 1
        self._node_of_inode[(st.st_dev, st.st_ino)] = self._next_id
        return self._next_id

    def _node(self, st: os.stat_result, path: str) -> int:
        node = self._node_of_inode.get((st.st_dev, st.st_ino))
        if node is None:
            self._unclaimed[(st.st_dev, st.st_ino)] = path
            node = self._new_node(st)
        return node

    @property
    def stragglers(self) -> list[str]:
        """Paths of files met under ``root`` that were not created through ``fsutil``
        while recording (a file another thread listed between its creation and the
        report of it is claimed by that report)."""
        return list(self._unclaimed.values())

    def _inside(self, path: str) -> bool:
        return path == self.root or path.startswith(self.root + os.sep)

    def observe(
        self, kind: str, path: str, *, fd: int | None = None, source: str | None = None
    ) -> None:
        """Update the model after one file operation (``fsutil.Recorder``)."""
        if not self._inside(path):
            return
        with self._lock:
            self._observe(kind, path, fd)

    def _observe(self, kind: str, path: str, fd: int | None) -> None:
        if kind == "create":
            assert fd is not None
            st = os.fstat(fd)
            if self._unclaimed.pop((st.st_dev, st.st_ino), None) is None:
                self._new_node(st)
        elif kind == "mkdir":
            # like "create": another thread's fsync of the parent may have listed the
            # directory between its mkdir and this report
            st = os.lstat(path)
            if self._unclaimed.pop((st.st_dev, st.st_ino), None) is None:
                self._new_node(st)
            self._listing[path] = {}
        elif kind == "fsync":
            assert fd is not None
            st = os.fstat(fd)
            node = self._node(st, path)
            with open(f"/proc/self/fd/{fd}", "rb") as f:  # the fd may be write-only
                self._content[node] = f.read()
        elif kind == "fsync_dir":
            self._listing[path] = self._current_listing(path) or {}
        self.ops += 1
        if self.on_op is not None:
            self.on_op(kind, path)

    def _current_listing(self, path: str) -> dict[str, Entry] | None:
        try:
            with os.scandir(path) as it:
                entries = list(it)
        except FileNotFoundError:
            return None
        out: dict[str, Entry] = {}
        for e in entries:
            st = e.stat(follow_symlinks=False)
            out[e.name] = (self._node(st, e.path), stat.S_ISDIR(st.st_mode))
        return out

    # ------------------------------------------------------------------ images
    def image(self, out: str | os.PathLike[str], rng: random.Random | None = None) -> None:
        """Write the tree a power cut now would leave under ``root`` to ``out``.

        Args:
            out: A directory that does not exist yet (outside ``root``).
            rng: ``None`` for the strict state (only what was fsynced); a generator for
                a random state between what was fsynced and what is there now.
        """
        with self._lock:
            saved, self.on_op = self.on_op, None
            try:
                self._write_dir(self.root, os.fspath(out), rng)
            finally:
                self.on_op = saved

    def _write_dir(self, real: str, out: str, rng: random.Random | None) -> None:
        os.mkdir(out)
        listing = self._listing.get(real, {})
        if rng is not None and rng.random() < 0.5:
            current = self._current_listing(real)
            if current is not None:
                listing = current
        for name, (node, is_dir) in sorted(listing.items()):
            if is_dir:
                self._write_dir(os.path.join(real, name), os.path.join(out, name), rng)
                continue
            data = self._content.get(node, b"")
            if rng is not None:
                data = self._maybe_newer(os.path.join(real, name), node, data, rng)
            with open(os.path.join(out, name), "wb") as f:
                f.write(data)

    def _maybe_newer(self, path: str, node: int, durable: bytes, rng: random.Random) -> bytes:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return durable
        if self._node_of_inode.get((st.st_dev, st.st_ino)) != node:
            return durable  # the name now holds another file
        with open(path, "rb") as f:
            current = f.read()
        pick = rng.random()
        if pick < 1 / 3 or current == durable:
            return durable
        if pick < 2 / 3 or not current.startswith(durable):
            return current
        return current[: rng.randint(len(durable), len(current))]
