"""A failed fsync is final for the file ("fsyncgate"): the storage layer abandons the file
being written, never commits it, and a retry writes a new one.

Linux may drop the dirty pages of a failed writeback and mark them clean, so a later
fsync of the same file succeeds without those bytes. The fake ``os.fsync`` here models
that worst case: the N-th fsync of a commit fails with EIO and the file (every storage
file is written once before its first fsync) loses all its data. For every N, the table
must then hold exactly the versions it held before the commit, or that commit whole;
the failed file must be gone; and the batch, retried, must give the model's rows.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cdc_sink.storage import fsutil
from cdc_sink.storage.snapshot import read_manifest
from cdc_sink.table import Table, TableOptions, create_table, open_table
from tests.fixtures import ID_A

SCHEMA = ID_A


def _batch(b: int) -> list[dict[str, Any]]:
    """Batch ``b``: inserts 10 keys, updates the previous batch's, deletes one, and
    refuses one (an update of a key that never existed)."""
    events: list[dict[str, Any]] = [
        {"op": "insert", "key": {"id": b * 10 + i}, "set": {"a": f"b{b}-{i}"}} for i in range(10)
    ]
    if b:
        events += [
            {"op": "update", "key": {"id": (b - 1) * 10 + i}, "set": {"a": f"u{b}"}}
            for i in range(1, 10)
        ]
        events.append({"op": "delete", "key": {"id": (b - 1) * 10}})
    events.append({"op": "update", "key": {"id": -1 - b}, "set": {"a": "never"}})
    return events


def _model(batches: int) -> list[tuple[int, str]]:
    """The rows after ``batches`` batches, by a plain reading of :func:`_batch`."""
    rows: dict[int, str] = {}
    for b in range(batches):
        for i in range(10):
            rows[b * 10 + i] = f"b{b}-{i}"
        if b:
            for i in range(1, 10):
                rows[(b - 1) * 10 + i] = f"u{b}"
            del rows[(b - 1) * 10]
    return sorted(rows.items())


def _rows(table: Table, version: int | None = None) -> list[tuple[int, str]]:
    data = table.read(version=version).to_pylist()
    return sorted((r["id"], r["a"]) for r in data)


class _FailingFsync:
    """Replaces ``os.fsync``: the ``at``-th call under ``root`` fails with EIO and, for a
    regular file, drops its data (as a writeback error may); ``at=0`` only counts."""

    def __init__(self, root: Path, at: int, real: Callable[[int], None]) -> None:
        self.root, self.at, self.real = os.path.realpath(root), at, real
        self.calls = 0
        self.failed: str | None = None
        self.failed_regular = False

    def __call__(self, fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path == self.root or path.startswith(self.root + os.sep):
            self.calls += 1
            if self.calls == self.at:
                self.failed = path
                self.failed_regular = stat.S_ISREG(os.fstat(fd).st_mode)
                if self.failed_regular:
                    os.ftruncate(fd, 0)  # the unsynced pages are gone
                raise OSError(errno.EIO, os.strerror(errno.EIO))
        self.real(fd)


def _committed_files(table: Table) -> set[str]:
    """Every file the retained versions name (segments, snapshots, their pages,
    rejects), as real paths."""
    out: set[str] = set()
    for e in table.log.entries(from_version=table.oldest_version):
        rels = [r for ref in e.buckets.values() for r in (ref.segment, ref.snapshot) if r]
        rels += [e.rejects] if e.rejects else []
        for ref in e.buckets.values():
            if ref.snapshot:
                rels += list(read_manifest(table.root, ref.snapshot).files)
        out |= {os.path.realpath(os.path.join(table.root, r)) for r in rels}
    return out


BEFORE = 2  # batches committed before the one that meets the fsync error


def _fresh(path: Path) -> Table:
    table = create_table(path, SCHEMA, options=TableOptions.for_tests())
    for b in range(BEFORE):
        table.apply(_batch(b), app_id="job", batch_id=b)
    return table


@dataclass
class _Failed:
    """One operation run with its ``n``-th fsync failing, and the table reopened after."""

    table: Table  # the writer that met the error
    reopened: Table
    version: int  # the table's version before the operation
    fake: _FailingFsync
    error: OSError
    committed: bool


def _fail_nth_fsync(
    monkeypatch: pytest.MonkeyPatch, path: Path, n: int, operation: Callable[[Table], object]
) -> _Failed:
    """Runs ``operation`` on a fresh table at ``path`` with its ``n``-th fsync failing
    with EIO; checks what holds for any operation: the error is EIO, the reopened table
    is at the version before or one after, and a regular file whose fsync failed is
    neither committed nor left on disk."""
    table = _fresh(path)
    version = table.version
    fake = _FailingFsync(path, n, os.fsync)
    monkeypatch.setattr(os, "fsync", fake)
    with pytest.raises(OSError) as info:
        operation(table)
    monkeypatch.undo()
    assert info.value.errno == errno.EIO and fake.failed is not None
    reopened = open_table(path)
    # All or nothing (a failed directory fsync after the entry was linked leaves a
    # committed version whose files were all fsynced).
    assert reopened.version in (version, version + 1), n
    committed = reopened.version == version + 1
    if fake.failed_regular:
        assert not committed, (n, fake.failed)
        assert not os.path.exists(fake.failed), (n, fake.failed)  # abandoned
    return _Failed(table, reopened, version, fake, info.value, committed)


def _fsyncs_of_one_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    table = _fresh(tmp_path / "count")
    counter = _FailingFsync(tmp_path / "count", 0, os.fsync)
    monkeypatch.setattr(os, "fsync", counter)
    table.apply(_batch(BEFORE), app_id="job", batch_id=BEFORE)
    monkeypatch.undo()
    return counter.calls


def test_every_failed_fsync_of_a_commit_abandons_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    total = _fsyncs_of_one_commit(tmp_path, monkeypatch)
    # The commit writes WAL segments, a snapshot (pages, manifest), rejects and a log
    # entry, each fsynced with its directory: every one of them gets its turn to fail.
    assert total >= 8, total
    outcomes: dict[str, int] = {}
    for n in range(1, total + 1):
        path = tmp_path / f"t{n}"
        f = _fail_nth_fsync(
            monkeypatch, path, n, lambda t: t.apply(_batch(BEFORE), app_id="job", batch_id=BEFORE)
        )
        table, reopened, version, fake = f.table, f.reopened, f.version, f.fake
        assert f.error.filename == fake.failed, (n, f.error)  # the reason names it
        key = "committed" if f.committed else "abandoned"
        outcomes[key] = outcomes.get(key, 0) + 1
        if fake.failed_regular:
            assert fake.failed not in _committed_files(reopened), (n, fake.failed)
        for v in range(reopened.oldest_version + 1, reopened.version + 1):
            assert _rows(reopened, v) == _model(v), (n, v)
        # The batch again, as a restarted job would (skipped if it did commit); in the
        # same process, and then in a new one.
        table.apply(_batch(BEFORE), app_id="job", batch_id=BEFORE)
        assert _rows(table) == _model(BEFORE + 1), n
        table.apply(_batch(BEFORE + 1), app_id="job", batch_id=BEFORE + 1)
        again = open_table(path)
        assert again.version == version + 2, n
        assert _rows(again) == _model(BEFORE + 2), n
        assert _rows(again, version + 1) == _model(BEFORE + 1), n
        assert again.rejects(version + 1).num_rows == 1, n
    assert outcomes.get("abandoned", 0) >= total - 2, outcomes


def test_a_failed_fsync_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "f"
    monkeypatch.setattr(os, "fsync", _FailingFsync(tmp_path, 1, os.fsync))
    with pytest.raises(OSError) as info:
        fsutil.write_file_durable(target, b"data", exclusive=True)
    assert info.value.errno == errno.EIO
    assert info.value.filename == str(target)
    assert "Input/output error" in str(info.value) and str(target) in str(info.value)
    assert not target.exists()  # the exclusive writer abandons its file


def test_every_failed_fsync_of_a_compaction_keeps_the_table_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Compaction writes a snapshot per bucket and commits a "snapshot" version naming
    # them. When the log directory's fsync fails after the entry was linked, the
    # version is committed: its snapshots must not be removed as an abandoned attempt's.
    table = _fresh(tmp_path / "count")
    counter = _FailingFsync(tmp_path / "count", 0, os.fsync)
    monkeypatch.setattr(os, "fsync", counter)
    table.compact()
    monkeypatch.undo()
    total = counter.calls
    assert total >= 6, total
    committed_runs = 0
    for n in range(1, total + 1):
        path = tmp_path / f"c{n}"
        f = _fail_nth_fsync(monkeypatch, path, n, lambda t: t.compact())
        table, reopened = f.table, f.reopened
        committed_runs += f.committed
        files = _committed_files(reopened)
        assert all(os.path.exists(f) for f in files), (
            n,
            sorted(f for f in files if not os.path.exists(f)),
        )
        for v in range(1, reopened.version + 1):
            assert _rows(reopened, v) == _model(min(v, BEFORE)), (n, v)
        reopened.gc(dry_run=False, retain_versions=1, orphan_grace_seconds=0)
        # The writer that met the error goes on, and a new process reads it all.
        table.apply(_batch(BEFORE), app_id="job", batch_id=BEFORE)
        table.compact()
        again = open_table(path)
        assert _rows(again) == _model(BEFORE + 1), n
    assert committed_runs >= 1  # the log directory's fsync had its turn
