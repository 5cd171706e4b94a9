"""The version log: commits, races, idempotency, time travel, checkpoints and GC."""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import time
from pathlib import Path
from typing import Any

import pytest

from cdc_sink.errors import CommitConflict, VersionNotFound, WalCorruption
from cdc_sink.storage.framing import encode_file
from cdc_sink.storage.fsutil import list_temp_files
from cdc_sink.storage.version_log import (
    LOG_MAGIC,
    BucketRef,
    Checkpoint,
    LogEntry,
    VersionLog,
)


def _entry(
    version: int, app: str | None = "job", batch: int | None = None, t: int | None = None
) -> LogEntry:
    return LogEntry(
        version=version,
        app_id=app,
        batch_id=(version if batch is None else batch) if app is not None else None,
        commit_time_ms=1_000 * version if t is None else t,
        schema_id=0,
        buckets={version % 3: BucketRef(f"_wal/{version % 3}/{version:020d}-a.wal", None)},
        stats={"rows": version},
    )


def _commit_range(log: VersionLog, n: int, **kw: Any) -> None:
    for v in range(n):
        log.commit(_entry(v, **kw))


def test_entry_json_round_trip() -> None:
    entry = LogEntry(
        version=7,
        app_id="job",
        batch_id=3,
        commit_time_ms=1_700_000_000_000,
        schema_id=2,
        buckets={
            0: BucketRef(f"_wal/0/{7:020d}-a.wal", None),
            11: BucketRef(None, f"_snapshots/11/{7:020d}-a.manifest"),
        },
        stats={"inserted": 5, "rejected": 0},
        kind="data",
    )
    assert LogEntry.from_json(entry.to_json()) == entry
    assert LogEntry.from_json(entry.to_json().encode()) == entry
    ckpt = Checkpoint(
        7, {"job": 3}, {0: None, 1: f"_snapshots/1/{5:020d}-a.manifest"}, 2, {"k": [1, 2]}
    )
    assert Checkpoint.from_json(ckpt.to_json()) == ckpt
    with pytest.raises(ValueError):
        LogEntry.from_json('{"version": 1}')
    with pytest.raises(ValueError):
        LogEntry.from_json(entry.to_json().replace('"schema_id":2', '"schema_id":"2"'))
    with pytest.raises(ValueError):
        LogEntry(1, "job", None, 0, 0)  # app_id without batch_id


def test_commit_read_latest(tmp_path: Path) -> None:
    log = VersionLog(tmp_path)
    assert log.latest() is None and log.oldest() is None
    assert log.entries() == []
    _commit_range(log, 4)
    assert log.latest() == 3 and log.oldest() == 0
    names = sorted(os.listdir(tmp_path / "_log"))
    assert names == [f"{v:020d}.json" for v in range(4)]
    assert (tmp_path / "_log" / names[0]).read_bytes().startswith(LOG_MAGIC)
    other = VersionLog(tmp_path)  # a fresh reader sees the same history
    assert other.read(2) == _entry(2)
    assert [e.version for e in other.entries(1, 2)] == [1, 2]
    other.commit(_entry(4))
    assert log.latest() == 4  # the first instance picks up commits by others
    with pytest.raises(VersionNotFound) as err:
        log.read(9)
    assert (err.value.oldest, err.value.latest) == (0, 4)


def test_existing_version_raises_commit_conflict(tmp_path: Path) -> None:
    log = VersionLog(tmp_path)
    _commit_range(log, 2)
    with pytest.raises(CommitConflict):
        VersionLog(tmp_path).commit(_entry(1, app="other"))
    assert log.read(1).app_id == "job"
    with pytest.raises(CommitConflict):
        VersionLog(tmp_path).commit(_entry(0, app="other"))
    with pytest.raises(ValueError):
        log.commit(_entry(5))  # a gap
    assert list_temp_files(tmp_path / "_log") == []


def _race_worker(root: str, name: str, rounds: int, barrier: Any, results: Any) -> None:
    log = VersionLog(root)
    for version in range(1, rounds + 1):
        barrier.wait()
        try:
            log.commit(_entry(version, app=name))
            results.put((version, name, "won"))
        except CommitConflict:
            results.put((version, name, "conflict"))


def test_racing_processes_one_winner_per_version(tmp_path: Path) -> None:
    VersionLog(tmp_path).commit(_entry(0))
    ctx = mp.get_context("spawn")
    workers, rounds = 5, 4
    barrier = ctx.Barrier(workers)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_race_worker, args=(str(tmp_path), f"w{i}", rounds, barrier, results))
        for i in range(workers)
    ]
    for p in procs:
        p.start()
    got = []
    try:
        for _ in range(workers * rounds):
            got.append(results.get(timeout=120))
    except queue.Empty:
        pytest.fail(f"workers stalled after {got}")
    finally:
        for p in procs:
            p.join(timeout=60)
    assert all(p.exitcode == 0 for p in procs)
    log = VersionLog(tmp_path)
    for version in range(1, rounds + 1):
        outcome = {name: r for v, name, r in got if v == version}
        winners = [name for name, r in outcome.items() if r == "won"]
        assert len(outcome) == workers
        assert len(winners) == 1, outcome
        assert log.read(version).app_id == winners[0]
    assert log.latest() == rounds
    assert list_temp_files(tmp_path / "_log") == []


def test_last_batch_id_survives_checkpoint_and_gc(tmp_path: Path) -> None:
    log = VersionLog(tmp_path)
    log.commit(_entry(0, app=None))
    log.commit(_entry(1, app="a", batch=10))
    log.commit(_entry(2, app="b", batch=5))
    log.commit(_entry(3, app="a", batch=11))
    assert log.last_batch_id("a") == 11 and log.last_batch_id("b") == 5
    assert log.last_batch_id("zzz") is None
    assert log.app_transactions(1) == {"a": 10}
    with pytest.raises(ValueError):
        log.write_checkpoint(3, {"a": 10}, {0: None}, 0, {})  # disagrees with the log
    snap = f"_snapshots/0/{3:020d}-a.manifest"
    log.write_checkpoint(3, {"a": 11, "b": 5}, {0: snap}, 0, {"note": 1})
    log.delete_entries_below(3)
    log.commit(_entry(4, app="b", batch=6))
    fresh = VersionLog(tmp_path)
    assert fresh.oldest() == 3
    assert fresh.last_batch_id("a") == 11 and fresh.last_batch_id("b") == 6
    ckpt = fresh.read_checkpoint()
    assert ckpt is not None and ckpt.version == 3
    assert ckpt.bucket_snapshots == {0: snap} and ckpt.extra == {"note": 1}
    with pytest.raises(VersionNotFound):
        fresh.app_transactions(1)
    # A damaged newest checkpoint is skipped for an older valid one.
    log.write_checkpoint(4, None, {}, 0)
    Path(log.checkpoint_path(4)).write_bytes(b"CDCCKP\x00\x01junk")
    ckpt = VersionLog(tmp_path).read_checkpoint()
    assert ckpt is not None and ckpt.version == 3


def test_version_at(tmp_path: Path) -> None:
    log = VersionLog(tmp_path)
    with pytest.raises(VersionNotFound):
        log.version_at(5)
    for v, t in enumerate([100, 200, 200, 300]):
        log.commit(_entry(v, t=t))
    assert log.version_at(100) == 0
    assert log.version_at(250) == 2
    assert log.version_at(10**15) == 3
    with pytest.raises(VersionNotFound) as err:
        log.version_at(99)
    assert err.value.oldest == 0 and "oldest readable version is 0" in str(err.value)
    log.write_checkpoint(2, None, {}, 0)
    log.delete_entries_below(2)
    with pytest.raises(VersionNotFound) as err:
        VersionLog(tmp_path).version_at(150)
    assert err.value.oldest == 2


def test_delete_entries_below_dry_run_lists_paths(tmp_path: Path) -> None:
    log = VersionLog(tmp_path)
    _commit_range(log, 6)
    with pytest.raises(ValueError):
        log.delete_entries_below(2)  # no checkpoint yet
    log.write_checkpoint(2, None, {}, 0)
    log.write_checkpoint(4, None, {}, 0)
    with pytest.raises(ValueError):
        log.delete_entries_below(5)  # above the newest checkpoint
    expected = [log.entry_path(v) for v in range(4)] + [log.checkpoint_path(2)]
    before = sorted(os.listdir(tmp_path / "_log"))
    assert log.delete_entries_below(4, dry_run=True) == expected
    assert sorted(os.listdir(tmp_path / "_log")) == before
    assert log.delete_entries_below(4) == expected
    assert not any(os.path.exists(p) for p in expected)
    assert log.oldest() == 4 and log.latest() == 5
    with pytest.raises(VersionNotFound) as err:
        log.read(1)
    assert err.value.oldest == 4
    assert log.delete_entries_below(4) == []


def test_unfinished_newest_entry_is_not_committed_until_repaired(tmp_path: Path) -> None:
    log = VersionLog(tmp_path)
    _commit_range(log, 3)
    full = encode_file([_entry(3).to_json().encode()], magic=LOG_MAGIC)
    for torn in (b"", LOG_MAGIC[:5], full[:20], full[:-1], bytes(len(full))):
        Path(log.entry_path(3)).write_bytes(torn)
        fresh = VersionLog(tmp_path)
        assert fresh.latest() == 2
        with pytest.raises(VersionNotFound):
            fresh.read(3)
        with pytest.raises(CommitConflict):
            fresh.commit(_entry(3))
        with pytest.raises(CommitConflict):
            fresh.commit(_entry(4))
    assert log.repair(dry_run=True) == [log.entry_path(3)]
    assert log.repair() == [log.entry_path(3)]
    log.commit(_entry(3))
    assert VersionLog(tmp_path).latest() == 3


def test_newest_entry_failing_its_crc_at_full_length_is_corruption(tmp_path: Path) -> None:
    # Entries are published whole (link after fsync), so a full-length entry that fails
    # its CRC is damage, never a commit that did not finish: it must not be un-committed.
    log = VersionLog(tmp_path)
    _commit_range(log, 3)
    path = Path(log.entry_path(2))
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x10
    path.write_bytes(bytes(data))
    fresh = VersionLog(tmp_path)
    with pytest.raises(WalCorruption) as err:
        fresh.latest()
    assert err.value.path == str(path)


def test_newest_entry_cut_short_is_an_uncommitted_attempt(tmp_path: Path) -> None:
    log = VersionLog(tmp_path)
    _commit_range(log, 3)
    path = Path(log.entry_path(2))
    path.write_bytes(path.read_bytes()[:-5])
    fresh = VersionLog(tmp_path)
    assert fresh.latest() == 1
    assert fresh.repair() == [str(path)]


def test_damaged_entry_below_the_newest_is_corruption(tmp_path: Path) -> None:
    log = VersionLog(tmp_path)
    _commit_range(log, 4)
    path = Path(log.entry_path(1))
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x10
    path.write_bytes(bytes(data))
    fresh = VersionLog(tmp_path)
    assert fresh.latest() == 3
    with pytest.raises(WalCorruption) as err:
        fresh.read(1)
    assert err.value.path == str(path)
    with pytest.raises(WalCorruption):
        fresh.entries()
    # A valid record that holds the wrong version is corruption too.
    Path(log.entry_path(1)).write_bytes(
        encode_file([_entry(2).to_json().encode()], magic=LOG_MAGIC)
    )
    with pytest.raises(WalCorruption):
        VersionLog(tmp_path).read(1)


def test_repair_removes_only_old_temp_files(tmp_path: Path) -> None:
    log = VersionLog(tmp_path)
    _commit_range(log, 1)
    old = tmp_path / "_log" / f".{1:020d}.json.123.abcdef.tmp"
    young = tmp_path / "_log" / f".{1:020d}.json.456.abcdef.tmp"
    old.write_bytes(b"x")
    young.write_bytes(b"x")
    past = time.time() - 7200
    os.utime(old, (past, past))
    assert log.repair() == [str(old)]
    assert young.exists() and not old.exists()
    assert log.latest() == 0
