"""The version log: the table's single commit point, its history and its idempotency table.

On disk, under the table root::

    <table>/_log/
        00000000000000000000.json              entry of version 0
        00000000000000000001.json              entry of version 1
        ...
        00000000000000000042.json              entry of version 42 (the latest)
        _checkpoint.00000000000000000040.json  checkpoint as of version 40
        .00000000000000000043.json.<pid>.<rand>.tmp   a commit of 43 in flight (or orphaned)

Every file is framed (framing.py): an 8-byte magic, then exactly one record whose
payload is UTF-8 JSON. Despite the ``.json`` name the file is *not* plain JSON::

    entry       b"CDCLOG\\x00\\x01" | u32 len | u32 crc32c | {"version": 42, "app_id": "job",
                "batch_id": 17, "commit_time_ms": ..., "schema_id": 0, "kind": "data",
                "buckets": {"3": {"segment": "_wal/3/...", "snapshot": null}}, "stats": {...}}
    checkpoint  b"CDCCKP\\x00\\x01" | u32 len | u32 crc32c | {"version": 40, "app_ids": {...},
                "bucket_snapshots": {"0": "_snapshots/0/...", ...}, "schema_id": 0, "extra": {...}}

Committing version 43 (:meth:`VersionLog.commit`), after the WAL segments it names are
durable, is one create-if-absent of the key ``_log/00000000000000000043.json`` in the
table's store (:meth:`~cdc_sink.storage.objectstore.ObjectStore.put_if_absent`)::

    entry 42 exists and is valid?           no -> ValueError (gap) / CommitConflict (unfinished)
    [log.before_create]
    put_if_absent(_log/00000000000000000043.json)   taken -> CommitConflict: another writer won
      local store: write .00000000000000000043.json.<pid>.<rand>.tmp, fsync it,
                   link(tmp, 00000000000000000043.json) (EEXIST: taken), unlink(tmp),
                   fsync(_log/)
      object store: PUT with If-None-Match: * (412: taken)
    [log.created]                           -- version 43 is visible, complete and durable
    [log.dir_fsynced]

The create-if-absent never replaces anything, and exactly one of several racing writers
wins; the entry appears complete and durable or not at all. (On a file system without
hard links, fsutil falls back to writing the final name with ``O_CREAT|O_EXCL``; readers
may then briefly see an unfinished newest entry, which they treat as not committed.)

An entry file that holds no complete record (empty, torn, zeros) can only be a commit
attempt that never finished. If it is the newest entry it is not committed: readers
ignore it and :meth:`VersionLog.repair` removes it so that the version can be committed
again. A damaged entry below the newest, or one with a valid CRC but bad content, is
:class:`~cdc_sink.errors.WalCorruption`; so is an entry or checkpoint that names a path
which is no file of its kind inside the table (absolute, climbing out with ``..``, of
another kind: :func:`~cdc_sink.storage.layout.checked`), and that path is never opened.

``_log/_last_checkpoint`` (magic ``CDCLCP\x00\x01``) is an optional hint, replaced by the
writer every few versions (:meth:`VersionLog.write_last_checkpoint`): the checkpoint as of
a recent version ``c``, with the table layer's whole history in ``extra`` and the entry of
``c``. A first :meth:`VersionLog.latest` reads it, lists only the keys after entry ``c``
(entries above it, and every checkpoint: they sort after entries) and reads those
entries, so an open makes the same few requests however many versions are retained.
Missing, damaged, or older than a checkpoint GC wrote since, it is ignored and the whole
directory is listed, with the same answers (docs/format.md, §8.8).

Checkpoints are derived data (the idempotency table and the per-bucket snapshot refs as
of a version), written with a replacing atomic rename. Entries below the newest
checkpoint may be deleted (:meth:`VersionLog.delete_entries_below`), oldest first, so
the retained entries are always one contiguous run ending at the latest version.

In memory, a :class:`VersionLog` caches the entries it has validated (they are
immutable) and the latest version; finding newer versions costs one ``stat`` (a ``HEAD``
or ``GET`` on an object store) per version. A commit it makes is its latest version and
a cached entry, so a writer that asks only about versions up to its own commits (the
idempotency table as of its version: :meth:`VersionLog.app_transactions`) makes no
request for them. The log reads, lists, creates and deletes
its objects through its store; deleting old entries and repairing after a crash delete
in order (a local store unlinks the files and fsyncs the directory once for the whole
batch; an object store deletes them one by one), and repair asks the store for commits'
temporary files.
Returned :class:`LogEntry` objects are shared with the cache: do not mutate.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from typing import Any

from cdc_sink.errors import CommitConflict, VersionNotFound, WalCorruption
from cdc_sink.storage import faults
from cdc_sink.storage.framing import encode_file
from cdc_sink.storage.layout import LAST_CHECKPOINT_KEY, LOG_DIR
from cdc_sink.storage.log_entry import BucketRef, Checkpoint, LogEntry
from cdc_sink.storage.log_files import (
    CHECKPOINT_MAGIC,
    LAST_CHECKPOINT_MAGIC,
    LOG_MAGIC,
    LogFiles,
)
from cdc_sink.storage.objectstore import ObjectExists, ObjectStore
from cdc_sink.storage.objectstore.local import DEFAULT_FILE_MODE, LocalStore

__all__ = [
    "CHECKPOINT_MAGIC",
    "LAST_CHECKPOINT_MAGIC",
    "LOG_DIR",
    "LOG_MAGIC",
    "BucketRef",
    "Checkpoint",
    "LogEntry",
    "VersionLog",
]

faults.register(
    "log.before_create",
    "log.created",
    "log.dir_fsynced",
    "log.checkpoint_written",
    "log.pointer_written",
    "log.gc_deleting",
    "log.repair_removing",
)

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------- the log


def _gc_deleting(key: str) -> None:
    faults.fault_point("log.gc_deleting")


class VersionLog(LogFiles):
    """The version log of one table (``<root>/_log``).

    Construction does no I/O; the directory is created by the first :meth:`commit`.
    Any number of processes may read and commit concurrently: a commit either creates
    its version's entry or raises :class:`CommitConflict`.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        file_mode: int = DEFAULT_FILE_MODE,
        store: ObjectStore | None = None,
    ) -> None:
        """Open the log of the table at ``root``.

        Args:
            root: The table's root directory (or, with ``store``, its URL: for messages).
            file_mode: Permission bits of the entries and checkpoints it writes (and
                :func:`~cdc_sink.storage.objectstore.local.dir_mode` of them for ``_log``) in the
                default store.
            store: The store holding the table (default: a
                :class:`~cdc_sink.storage.objectstore.local.LocalStore` on ``root``
                creating files with ``file_mode``).
        """
        if store is None:
            store = LocalStore(root, file_mode=file_mode)
        super().__init__(root, store=store)
        self.file_mode = file_mode
        self._latest: int | None = None
        self._txn: tuple[int, dict[str, int]] | None = None
        self._opened: Checkpoint | None = None  # the pointer's, until the history takes it
        self._opened_gc: int | None = None  # GC's newest checkpoint listed with it
        self._pointer: int | None = None  # the newest pointer version read or written

    # ------------------------------------------------------------ names

    # ------------------------------------------------------------ loading

    # ------------------------------------------------------------ queries

    def latest(self) -> int | None:
        """The newest committed version, or ``None`` when nothing is committed.

        The first call starts from the last-checkpoint pointer and lists only the
        entries after it (:meth:`_open_from_pointer`), or, without a usable pointer,
        lists the directory; later calls only probe for the next versions' files. An
        unfinished newest entry is not committed and is skipped.

        Raises:
            WalCorruption: The log is damaged below its newest entry.
        """
        v = self._latest
        if v is None:
            v = self._open_from_pointer()
            if v is not None:
                self._latest = v  # the listing just made is as fresh as a probe
                return v
            v = self._latest_listed()
            if v is None:
                return None
        while True:  # probe for versions committed since
            nxt = v + 1
            try:
                got = self._load(nxt)
            except FileNotFoundError:
                break
            if isinstance(got, int):
                if self._entry_exists(nxt + 1):
                    self._load_committed(nxt)  # raises: damaged below the newest
                break
            v = nxt
        if self._latest is not None and v == self._latest and not self._entry_exists(v):
            # GC (of another process) deleted entries up to and past the newest one this
            # log had seen, so probing from it finds nothing: list the directory again.
            self._latest = None
            return self.latest()
        self._latest = v
        return v

    def _latest_listed(self) -> int | None:
        """:meth:`latest` from a listing of the whole directory (no probe after it)."""
        versions = self._entry_versions()
        if not versions:
            return None
        top = versions[-1]
        try:
            got: LogEntry | int = self._load(top)
        except FileNotFoundError:  # an unfinished entry removed by repair()
            got = 0
        if isinstance(got, LogEntry):
            return top
        if len(versions) >= 2 and versions[-2] == top - 1:
            self._load_committed(top - 1)
            return top - 1
        if top == 0:
            return None
        raise WalCorruption(
            f"log entry of version {top - 1} is missing below version {top}",
            path=self.entry_path(top - 1),
            offset=0,
        )

    def _open_from_pointer(self) -> int | None:
        """The newest committed version, found from the last-checkpoint pointer: its
        checkpoint, then one listing that starts after its version and the entries it
        lists (read and cached). ``None`` when the pointer cannot be used (missing,
        damaged, or older than a checkpoint GC wrote since, whose entries below may be
        gone) or the entries after it are not one contiguous run: the caller then lists
        the whole directory, which also names any damage."""
        found = self._load_last_checkpoint()
        if found is None:
            return None
        ckpt, entry = found
        c = ckpt.version
        tail, checkpoints = self._listed_after(c)
        if (checkpoints and checkpoints[-1] > c) or tail != list(range(c + 1, c + 1 + len(tail))):
            return None
        v = c
        for nxt in tail:
            try:
                got = self._load_committed(nxt) if nxt != tail[-1] else self._load(nxt)
            except FileNotFoundError:  # removed by repair() since the listing
                break
            if isinstance(got, int):  # an unfinished newest entry: not committed
                break
            v = nxt
        self._entries.setdefault(c, entry)
        self._opened = ckpt
        self._opened_gc = checkpoints[-1] if checkpoints else None
        self._pointer = c if self._pointer is None else max(self._pointer, c)
        if self._txn is None:
            self._txn = (c, dict(ckpt.app_ids))
        return v

    def take_opened_checkpoint(self) -> tuple[Checkpoint, int, int | None] | None:
        """The checkpoint of the last-checkpoint pointer this log's first :meth:`latest`
        started from, with that newest version and the version of GC's newest checkpoint
        (``None``: none), listed with it; once (the history built on open starts from it;
        a later rebuild lists the log). The entries after it are cached, so reading them
        costs no request. ``None`` when the log did not start from a pointer, or it was
        taken."""
        ckpt, self._opened = self._opened, None
        if ckpt is None or self._latest is None:
            return None
        return ckpt, self._latest, self._opened_gc

    @property
    def last_checkpoint_version(self) -> int | None:
        """The version of the newest last-checkpoint pointer this log read or wrote
        (``None``: none)."""
        return self._pointer

    def checkpoint_due(self, version: int, every: int, tail_bytes: int) -> bool:
        """Whether the writer should write the last-checkpoint pointer at ``version``:
        this log knows of no pointer, or ``every`` versions or more, or entries of
        ``tail_bytes`` bytes or more (of those whose size it knows), were committed
        after the newest one it knows."""
        if self._pointer is None:
            return True
        if version - self._pointer >= every:
            return True
        held = sum(self._sizes.get(v, 0) for v in range(self._pointer + 1, version + 1))
        return held >= tail_bytes

    def write_last_checkpoint(
        self,
        version: int,
        bucket_snapshots: dict[int, str | None],
        schema_id: int,
        extra: dict[str, Any],
    ) -> None:
        """Replace the last-checkpoint pointer (``_log/_last_checkpoint``) with the
        checkpoint as of the committed ``version`` and that version's entry.

        The pointer is a hint for opening (:meth:`latest`): it deletes nothing and moves
        no oldest readable version, and a reader that finds it missing, damaged or older
        than GC's newest checkpoint lists the log instead. Writing it costs one ``PUT``
        (the idempotency table and the entry come from what a writer holds).

        Args:
            version: A committed version.
            bucket_snapshots: Per bucket, the newest snapshot at or below ``version``.
            schema_id: The schema id at ``version``.
            extra: The table layer's state as of ``version`` (the whole history of the
                retained versions: a history started from the pointer holds what one
                built from the log holds).

        Raises:
            VersionNotFound: ``version`` is not committed.
        """
        entry = self.read(version)
        ckpt = Checkpoint(
            version, self.app_transactions(version), dict(bucket_snapshots), schema_id, extra
        )
        payload = {"checkpoint": json.loads(ckpt.to_json()), "entry": json.loads(entry.to_json())}
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)
        data = encode_file([text.encode("utf-8")], magic=LAST_CHECKPOINT_MAGIC)
        self.store.put(LAST_CHECKPOINT_KEY, data)  # locally: temp, fsync, rename
        faults.fault_point("log.pointer_written")
        self._pointer = version if self._pointer is None else max(self._pointer, version)

    def oldest(self) -> int | None:
        """The oldest version whose entry is retained, or ``None`` when empty.

        That is the start of the contiguous run of entries that ends at
        :meth:`latest`.

        Raises:
            WalCorruption: The log is damaged below its newest entry.
        """
        return self._run_start(self._entry_versions())

    def oldest_readable(self) -> int | None:
        """The oldest version a read may ask for, or ``None`` when nothing is committed:
        :meth:`oldest`, raised to the newest checkpoint (once GC has written a checkpoint
        at its horizon, the versions below it are gone even if a crash left some of their
        entries behind). One listing of ``_log``.

        Raises:
            WalCorruption: The log is damaged below its newest entry.
        """
        entries, checkpoints = self._listed_versions()
        oldest = self._run_start(entries)
        if oldest is None or not checkpoints:
            return oldest
        return max(oldest, checkpoints[-1])

    def _run_start(self, listed: list[int]) -> int | None:
        """The oldest version of the contiguous run of ``listed`` entry versions (a
        listing of ``_log``) that ends at the latest version. Walks down from the newest
        version this log has seen, without a probe, while the listing holds it; else
        (a first look, GC deleted past it, or newer versions since) from :meth:`latest`,
        on a fresh listing."""
        present = set(listed)
        if self._latest is None or self._latest not in present:
            if self.latest() is None:
                return None
            if self._latest not in present:
                present = set(self._entry_versions())
        v = self._latest
        assert v is not None
        while v - 1 in present:
            v -= 1
        return v

    def read(self, version: int) -> LogEntry:
        """The entry of a committed version.

        Args:
            version: The version.

        Returns:
            Its entry (shared with the cache: do not mutate).

        Raises:
            VersionNotFound: No entry for it (never committed, or deleted by GC), or
                its entry is the unfinished newest one.
            WalCorruption: The entry is damaged.
        """
        cached = self._entries.get(version)
        if cached is not None:
            return cached
        try:
            got = self._load(version) if version >= 0 else None
        except FileNotFoundError:
            got = None
        if isinstance(got, LogEntry):
            return got
        if got is None:
            why = f"version {version} has no log entry"
        elif self._entry_exists(version + 1):
            return self._load_committed(version)  # raises: damaged below the newest
        else:
            why = f"version {version} is not committed (its log entry is unfinished)"
        latest = self.latest()
        oldest = self.oldest()
        raise VersionNotFound(
            f"{why}; retained versions: {oldest}..{latest}"
            if latest is not None
            else f"{why}; the table has no committed version",
            version=version,
            oldest=oldest,
            latest=latest,
        )

    def entries(
        self, from_version: int | None = None, to_version: int | None = None
    ) -> list[LogEntry]:
        """The entries of a range of committed versions, both ends included.

        Args:
            from_version: First version (default: :meth:`oldest`).
            to_version: Last version (default: :meth:`latest`).

        Returns:
            The entries in version order (empty if the range is).

        Raises:
            VersionNotFound: A version in the range is not retained or not committed.
            WalCorruption: An entry is damaged.
        """
        if from_version is not None and to_version is not None:  # no probe for the newest
            return [self.read(v) for v in range(from_version, to_version + 1)]
        latest = self.latest()
        if latest is None:
            if from_version is None and to_version is None:
                return []
            raise VersionNotFound(
                "the table has no committed version",
                version=from_version if from_version is not None else to_version,
            )
        lo = self.oldest() if from_version is None else from_version
        hi = latest if to_version is None else to_version
        assert lo is not None
        return [self.read(v) for v in range(lo, hi + 1)]

    def version_at(self, timestamp_ms: int) -> int:
        """The newest version committed at or before ``timestamp_ms``.

        Args:
            timestamp_ms: Milliseconds since the epoch.

        Returns:
            The version.

        Raises:
            VersionNotFound: The table is empty, or every retained version is newer
                (the error names the oldest retained version).
        """
        latest = self.latest()
        oldest = self.oldest()
        if latest is None or oldest is None:
            raise VersionNotFound(
                f"no version at timestamp {timestamp_ms}: the table has no committed version"
            )
        for v in range(latest, oldest - 1, -1):
            if self.read(v).commit_time_ms <= timestamp_ms:
                return v
        first = self.read(oldest).commit_time_ms
        raise VersionNotFound(
            f"no retained version was committed at or before timestamp {timestamp_ms}; "
            f"the oldest readable version is {oldest}, committed at {first}",
            oldest=oldest,
            latest=latest,
        )

    # ------------------------------------------------------------ idempotency

    def app_transactions(self, version: int | None = None) -> dict[str, int]:
        """The idempotency table: the last ``batch_id`` of every ``app_id``.

        Built from the newest checkpoint at or below ``version`` plus the entries after
        it; computed incrementally across calls. As of a given ``version`` at or after the
        one computed last, with the entries in between cached (a writer's own commits
        are), it costs no request.

        Args:
            version: As of this committed version (default: the latest).

        Returns:
            A fresh dict ``{app_id: batch_id}``.

        Raises:
            VersionNotFound: ``version`` is not committed.
            WalCorruption: Entries the table needs are missing or damaged.
        """
        held = None if version is None else self._held_transactions(version)
        return held if held is not None else self._read_transactions(version)

    def _read_transactions(self, version: int | None) -> dict[str, int]:
        """:meth:`app_transactions` from the log: the checkpoint and the entries after it
        (or the table computed last and the entries after it, while they are retained)."""
        latest = self.latest()
        target = latest if version is None else version
        if target is None:
            return {}
        if latest is None or target > latest:
            raise VersionNotFound(
                f"version {target} is not committed", version=target, latest=latest
            )
        for attempt in range(2):  # a concurrent GC may delete entries under our feet
            oldest = self.oldest()
            assert oldest is not None
            if target < oldest:
                raise VersionNotFound(
                    f"version {target} is no longer retained (oldest: {oldest})",
                    version=target,
                    oldest=oldest,
                    latest=latest,
                )
            if self._txn is not None and oldest - 1 <= self._txn[0] <= target:
                done, table = self._txn[0], dict(self._txn[1])
            else:
                ckpt = self.read_checkpoint(max_version=target)
                done, table = (ckpt.version, dict(ckpt.app_ids)) if ckpt else (-1, {})
                if done + 1 < oldest:
                    raise WalCorruption(
                        f"log entries from version {done + 1} are needed for the idempotency "
                        f"table but the oldest retained one is {oldest}",
                        path=self.entry_path(done + 1),
                        offset=0,
                    )
            try:
                for v in range(done + 1, target + 1):
                    entry = self.read(v)
                    if entry.app_id is not None and entry.batch_id is not None:
                        table[entry.app_id] = entry.batch_id
            except VersionNotFound:
                self._txn = None
                if attempt:
                    raise
                continue
            self._txn = (target, table)
            return dict(table)
        raise AssertionError("unreachable")

    def _held_transactions(self, version: int) -> dict[str, int] | None:
        """The idempotency table as of ``version`` from what this log holds, without a
        request: the table it computed last, folded forward over the cached entries up to
        ``version`` (a writer's own commits are cached). ``None`` when it holds no table
        at or below ``version`` or lacks an entry in between."""
        if self._txn is None or self._txn[0] > version:
            return None
        done, table = self._txn
        newer = [self._entries.get(v) for v in range(done + 1, version + 1)]
        if any(e is None for e in newer):
            return None
        table = dict(table)
        for e in newer:
            assert e is not None
            if e.app_id is not None and e.batch_id is not None:
                table[e.app_id] = e.batch_id
        self._txn = (version, table)
        return dict(table)

    def last_batch_id(self, app_id: str) -> int | None:
        """The last committed ``batch_id`` of ``app_id`` (``None``: never committed).

        A micro-batch whose ``batch_id`` is at most this is already committed.

        Raises:
            WalCorruption: Entries the table needs are missing or damaged.
        """
        return self.app_transactions().get(app_id)

    # ------------------------------------------------------------ commit

    def commit(self, entry: LogEntry) -> None:
        """Commit ``entry.version``: create its entry file, exclusively and durably.

        On return the version is visible and durable (also when the store reports the
        entry taken but it holds exactly this entry: a retried create whose first attempt
        landed). On :class:`CommitConflict` nothing of this attempt is visible. On any
        other error the outcome is unknown (the entry may exist): re-read the log before
        deciding.

        Args:
            entry: The entry; its version must be the latest committed version + 1.

        Raises:
            CommitConflict: Another writer committed this version (or is committing the
                one before it, or left it unfinished: see :meth:`repair`).
            ValueError: The previous version has no entry (a version gap).
            OSError: An I/O failure (a local store's
                :class:`~cdc_sink.storage.objectstore.StoreIOError` keeps its errno and
                file name).
            cdc_sink.storage.objectstore.ObjectStoreError: The store failed otherwise.
        """
        v = entry.version
        if v > 0:
            try:
                prev = self._load(v - 1)
            except FileNotFoundError:
                raise ValueError(
                    f"cannot commit version {v}: version {v - 1} has no log entry"
                ) from None
            if isinstance(prev, int):
                raise CommitConflict(
                    f"cannot commit version {v}: the entry of version {v - 1} is unfinished "
                    "(a commit in flight, or a crashed one that repair() removes)"
                )
        elif self._entry_versions() or self._checkpoint_versions():
            raise CommitConflict("cannot commit version 0: the log is not empty")
        data = encode_file([entry.to_json().encode("utf-8")], magic=LOG_MAGIC)
        faults.fault_point("log.before_create")
        try:
            # The commit point. A local store creates _log durably first, and fsyncs it
            # once the entry is linked: the entry is durable before the points below.
            self.store.put_if_absent(self.entry_key(v), data)
        except ObjectExists:
            if not self._is_ours(v, data):
                raise CommitConflict(f"version {v} was committed by another writer") from None
        faults.fault_point("log.created")
        faults.fault_point("log.dir_fsynced")
        self._entries[v] = entry
        self._sizes[v] = len(data)
        if self._latest is None or v > self._latest:
            self._latest = v  # the next probe for newer versions starts after it

    def _is_ours(self, version: int, data: bytes) -> bool:
        """Whether the entry found at ``version`` is byte for byte the one this commit
        wrote: an object store's client retries a create whose answer was lost, and the
        retry finds the first attempt's object. (The entry names this attempt's files,
        unique to it, so no other writer writes the same bytes.) Another writer's entry
        is kept in the cache, for the loser's look at the versions it lost to."""
        try:
            found = self.store.get(self.entry_key(version))
        except FileNotFoundError:
            return False
        if found == data:
            return True
        with contextlib.suppress(WalCorruption):
            self._parse(version, found)
        return False

    # ------------------------------------------------------------ checkpoints

    def write_checkpoint(
        self,
        version: int,
        app_ids: dict[str, int] | None,
        bucket_snapshots: dict[int, str | None],
        schema_id: int,
        extra: dict[str, Any] | None = None,
    ) -> str:
        """Write the checkpoint as of a committed version (replacing one at that version).

        Args:
            version: A committed version.
            app_ids: The idempotency table as of ``version``; ``None`` computes it.
                When given it must equal :meth:`app_transactions` at ``version``.
            bucket_snapshots: Per bucket, the snapshot readers start from.
            schema_id: The schema id at ``version``.
            extra: More JSON-serializable state for the table layer.

        Returns:
            The checkpoint's path.

        Raises:
            VersionNotFound: ``version`` is not committed.
            ValueError: ``app_ids`` disagrees with the log.
        """
        self.read(version)
        expected = self.app_transactions(version)
        if app_ids is not None and dict(app_ids) != expected:
            raise ValueError(
                f"app_ids {app_ids!r} disagree with the log as of version {version}: {expected!r}"
            )
        ckpt = Checkpoint(version, expected, dict(bucket_snapshots), schema_id, extra or {})
        data = encode_file([ckpt.to_json().encode("utf-8")], magic=CHECKPOINT_MAGIC)
        self.store.put(self.checkpoint_key(version), data)  # locally: temp, fsync, rename
        faults.fault_point("log.checkpoint_written")
        return self.checkpoint_path(version)

    def newest_checkpoint_version(self) -> int | None:
        """Version of the newest checkpoint file (valid or not), None if there is none."""
        versions = self._checkpoint_versions()
        return versions[-1] if versions else None

    def read_checkpoint(self, *, max_version: int | None = None) -> Checkpoint | None:
        """The newest valid checkpoint (damaged checkpoint files are skipped).

        Args:
            max_version: Only consider checkpoints at or below this version.

        Returns:
            The checkpoint, or ``None`` if there is none.
        """
        found = None
        for v in reversed(self._checkpoint_versions()):
            if max_version is not None and v > max_version:
                continue
            found = self._load_checkpoint(v)
            if found is not None:
                break
        if max_version is None and self._txn is None:
            # The idempotency table as of the checkpoint (or, without one, as of before
            # version 0): folded over the entries read after it, it answers the writer's
            # first exactly-once check without another request.
            self._txn = (found.version, dict(found.app_ids)) if found else (-1, {})
        return found

    # ------------------------------------------------------------ maintenance

    def delete_entries_below(self, version: int, *, dry_run: bool = False) -> list[str]:
        """Delete the entries of versions below ``version``, and older checkpoints.

        Entries go oldest first, so a crash midway leaves a contiguous run.

        Args:
            version: Keep this version's entry and everything newer. Must not exceed the
                newest valid checkpoint's version.
            dry_run: Only list what would be deleted.

        Returns:
            The paths deleted (or that would be).

        Raises:
            ValueError: No valid checkpoint at or above ``version``.
        """
        ckpt = self.read_checkpoint()
        if ckpt is None or version > ckpt.version:
            newest = None if ckpt is None else ckpt.version
            raise ValueError(
                f"cannot delete log entries below {version}: the newest checkpoint is {newest}"
            )
        keys = [self.entry_key(v) for v in self._entry_versions() if v < version]
        keys += [self.checkpoint_key(v) for v in self._checkpoint_versions() if v < version]
        doomed = [os.path.join(self.root, *key.split("/")) for key in keys]
        if dry_run or not doomed:
            return doomed
        self.store.delete_many(keys, ordered=True, before_each=_gc_deleting)
        for v in [v for v in self._entries if v < version]:
            del self._entries[v]
        return doomed
