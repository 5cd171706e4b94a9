"""The files of the version log: names, validated loading, and repair after a crash.

:class:`LogFiles` is the file layer under :class:`~cdc_sink.storage.version_log.VersionLog`
(which draws the format and adds the commit, the queries and the caches): it knows which
files of ``<root>/_log`` are entries and checkpoints, loads and validates one, tells an
unfinished commit (the newest entry holds no complete record) from damage, and removes
what a crashed commit left.

Entries and checkpoints are objects of the table's store
(:class:`~cdc_sink.storage.objectstore.ObjectStore`, keys ``_log/<name>``): a
:class:`~cdc_sink.storage.objectstore.local.LocalStore` on the table's directory unless
another store is given. Listing, loading, existence checks and removal go through it,
and so does the search for what only a file system has - the temporary files of commits
that crashed (:meth:`~cdc_sink.storage.objectstore.ObjectStore.abandoned_temporaries`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re

from cdc_sink.errors import WalCorruption
from cdc_sink.storage import faults
from cdc_sink.storage.framing import read_records
from cdc_sink.storage.layout import LAST_CHECKPOINT_KEY, LOG_DIR, checkpoint_name, entry_name
from cdc_sink.storage.log_entry import Checkpoint, LogEntry
from cdc_sink.storage.objectstore import ObjectNotFound, ObjectStore, ObjectStoreError
from cdc_sink.storage.objectstore.local import LocalStore

__all__ = ["CHECKPOINT_MAGIC", "LAST_CHECKPOINT_MAGIC", "LOG_MAGIC", "LogFiles"]

LOG_MAGIC = b"CDCLOG\x00\x01"
"""Header of a log entry file: ``CDCLOG`` + format version 1."""

CHECKPOINT_MAGIC = b"CDCCKP\x00\x01"
"""Header of a checkpoint file: ``CDCCKP`` + format version 1."""

LAST_CHECKPOINT_MAGIC = b"CDCLCP\x00\x01"
"""Header of the last-checkpoint pointer (``_log/_last_checkpoint``): ``CDCLCP`` + 1."""

_ENTRY_RE = re.compile(rf"^{LOG_DIR}/(\d{{20}})\.json$")
_CHECKPOINT_RE = re.compile(rf"^{LOG_DIR}/_checkpoint\.(\d{{20}})\.json$")

logger = logging.getLogger(__name__)


def _complete_record(data: bytes) -> bool:
    """Whether ``data`` holds a whole framed record (whatever its CRC says)."""
    head = len(LOG_MAGIC)
    if len(data) < head + 8 or not any(data):
        return False
    length = int.from_bytes(data[head : head + 4], "little")
    return len(data) >= head + 8 + length


def _repair_removing(key: str) -> None:
    faults.fault_point("log.repair_removing")


class LogFiles:
    """The entry and checkpoint files of one table's log (``<root>/_log``).

    Construction does no I/O. Validated entries are cached (they are immutable).
    """

    def __init__(self, root: str | os.PathLike[str], *, store: ObjectStore | None = None) -> None:
        """Open the log files of the table at ``root``.

        Args:
            root: The table's root directory (or URL, for messages, when ``store`` is
                given).
            store: The store holding the table (default: a
                :class:`~cdc_sink.storage.objectstore.local.LocalStore` on ``root``).
        """
        self.root = os.fspath(root)
        self.log_dir = os.path.join(self.root, LOG_DIR)
        self.store: ObjectStore = LocalStore(self.root) if store is None else store
        self._entries: dict[int, LogEntry] = {}
        self._sizes: dict[int, int] = {}  # bytes of the entries read or written

    def entry_path(self, version: int) -> str:
        """The file of version ``version``'s entry."""
        return os.path.join(self.log_dir, entry_name(version))

    def checkpoint_path(self, version: int) -> str:
        """The file of the checkpoint at ``version``."""
        return os.path.join(self.log_dir, checkpoint_name(version))

    @property
    def last_checkpoint_path(self) -> str:
        """The file of the last-checkpoint pointer."""
        return os.path.join(self.root, *LAST_CHECKPOINT_KEY.split("/"))

    @staticmethod
    def entry_key(version: int) -> str:
        """The store key of version ``version``'s entry."""
        return f"{LOG_DIR}/{entry_name(version)}"

    @staticmethod
    def checkpoint_key(version: int) -> str:
        """The store key of the checkpoint at ``version``."""
        return f"{LOG_DIR}/{checkpoint_name(version)}"

    def _listed_versions(self) -> tuple[list[int], list[int]]:
        """The versions of the entries and of the checkpoints in ``_log``, sorted (one
        listing)."""
        keys = self.store.list_keys(LOG_DIR)
        entries = sorted(int(m.group(1)) for k in keys if (m := _ENTRY_RE.match(k)))
        checkpoints = sorted(int(m.group(1)) for k in keys if (m := _CHECKPOINT_RE.match(k)))
        return entries, checkpoints

    def _listed_after(self, version: int) -> tuple[list[int], list[int]]:
        """:meth:`_listed_versions` of the keys after version ``version``'s entry: the
        entries above it and every checkpoint (checkpoints sort after entries); one
        listing that starts after that key."""
        keys = self.store.list_keys(LOG_DIR, start_after=self.entry_key(version))
        entries = sorted(int(m.group(1)) for k in keys if (m := _ENTRY_RE.match(k)))
        checkpoints = sorted(int(m.group(1)) for k in keys if (m := _CHECKPOINT_RE.match(k)))
        return entries, checkpoints

    def _load_last_checkpoint(self) -> tuple[Checkpoint, LogEntry] | None:
        """The last-checkpoint pointer: the checkpoint it holds and the entry of that
        checkpoint's version, or None when it is missing or damaged (it is a hint).

        Raises:
            WalCorruption: An intact pointer (its CRC holds) names a path that is no file
                of the table: tampering, never skipped (as a checkpoint's).
        """
        path = self.last_checkpoint_path
        try:
            data = self.store.get(LAST_CHECKPOINT_KEY)
            res = read_records(data, path=path, magic=LAST_CHECKPOINT_MAGIC, allow_torn_tail=False)
            if len(res.records) != 1:
                return None
            obj = json.loads(res.records[0])
            ckpt = Checkpoint.from_json(json.dumps(obj["checkpoint"]))
            entry = LogEntry.from_json(json.dumps(obj["entry"]))
        except (OSError, ObjectStoreError, ValueError, WalCorruption, TypeError, KeyError):
            return None
        if ckpt.version != entry.version:
            return None
        ckpt.check_paths(path)
        entry.check_paths(path)
        return ckpt, entry

    def _entry_versions(self) -> list[int]:
        return self._listed_versions()[0]

    def _checkpoint_versions(self) -> list[int]:
        return self._listed_versions()[1]

    def _entry_exists(self, version: int) -> bool:
        """Whether an entry object (finished or not) exists for ``version``."""
        try:
            self.store.head(self.entry_key(version))
        except ObjectNotFound:
            return False
        return True

    def _load(self, version: int) -> LogEntry | int:
        """The validated entry, or the offset where an unfinished entry file ends.

        Raises:
            FileNotFoundError: No entry file (:class:`ObjectNotFound`).
            WalCorruption: The file is damaged in a way no unfinished commit leaves.
        """
        cached = self._entries.get(version)
        if cached is not None:
            return cached
        return self._parse(version, self.store.get(self.entry_key(version)))

    def _parse(self, version: int, data: bytes) -> LogEntry | int:
        """:meth:`_load` of the bytes ``data`` read from version ``version``'s entry."""
        path = self.entry_path(version)
        res = read_records(data, path=path, magic=LOG_MAGIC, allow_torn_tail=True)
        if not res.records:
            if _complete_record(data):
                # Entries appear whole (link after fsync): a full-length record that fails
                # its CRC is damage, not a commit that never finished.
                raise WalCorruption("log entry fails its CRC", path=path, offset=len(LOG_MAGIC))
            return res.valid_length
        if res.torn or len(res.records) != 1:
            raise WalCorruption(
                "log entry holds more than its one record", path=path, offset=len(LOG_MAGIC)
            )
        try:
            entry = LogEntry.from_json(res.records[0])
        except ValueError as exc:
            raise WalCorruption(f"invalid log entry: {exc}", path=path, offset=0) from None
        entry.check_paths(path)
        if entry.version != version:
            raise WalCorruption(
                f"log entry file of version {version} holds version {entry.version}",
                path=path,
                offset=0,
            )
        self._entries[version] = entry
        self._sizes[version] = len(data)
        return entry

    def _load_committed(self, version: int) -> LogEntry:
        """Load an entry that is not the newest: unfinished means damaged."""
        got = self._load(version)
        if isinstance(got, int):
            raise WalCorruption(
                f"log entry of version {version} is damaged and is not the newest",
                path=self.entry_path(version),
                offset=got,
            )
        return got

    def _load_checkpoint(self, version: int) -> Checkpoint | None:
        """The checkpoint at ``version``, or None when its file is missing or damaged.

        Raises:
            WalCorruption: A checkpoint that is intact (its CRC holds) names a path that
                is no file of the table (:meth:`Checkpoint.check_paths`): tampering, not
                damage, and never skipped.
        """
        path = self.checkpoint_path(version)
        try:
            data = self.store.get(self.checkpoint_key(version))
            res = read_records(data, path=path, magic=CHECKPOINT_MAGIC, allow_torn_tail=False)
            if len(res.records) != 1:
                return None
            ckpt = Checkpoint.from_json(res.records[0])
        except (OSError, ObjectStoreError, ValueError, WalCorruption):
            return None
        if ckpt.version != version:
            return None
        ckpt.check_paths(path)
        return ckpt

    def repair(self, *, dry_run: bool = False, temp_grace_s: float = 3600.0) -> list[str]:
        """Remove what crashed commits left: an unfinished newest entry, old temp files.

        Call it from the writer before committing after a crash. An unfinished newest
        entry cannot belong to a live writer when hard links are available (the entry
        appears complete); without them (see fsutil) call it only when no other writer
        runs. Temporary files (a local store's only: an object store's ``put`` is atomic)
        younger than ``temp_grace_s`` may belong to a commit in flight and are kept.

        Args:
            dry_run: Only list what would be removed.
            temp_grace_s: Minimum age of a temporary file to count as an orphan.

        Returns:
            The paths removed (or that would be).

        Raises:
            WalCorruption: The newest entry is damaged in a way no crash leaves.
        """
        names: list[str] = []  # in _log
        versions = self._entry_versions()
        if versions:
            with contextlib.suppress(FileNotFoundError):
                if isinstance(self._load(versions[-1]), int):
                    names.append(entry_name(versions[-1]))
        for key in self.store.abandoned_temporaries(LOG_DIR, min_age=temp_grace_s):
            names.append(key.rsplit("/", 1)[-1])
        doomed = [os.path.join(self.log_dir, name) for name in names]
        if dry_run or not doomed:
            return doomed
        logger.warning(
            "repairing the log of %s: removing what a crashed commit left: %s",
            self.log_dir,
            ", ".join(names),
        )
        self.store.delete_many(
            [f"{LOG_DIR}/{name}" for name in names], ordered=True, before_each=_repair_removing
        )
        return doomed
