"""Crash injection: a child process dies by SIGKILL at the named point, leaving that state."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdc_sink.storage import faults
from cdc_sink.storage.fsutil import list_temp_files
from cdc_sink.storage.version_log import LogEntry, VersionLog
from cdc_sink.storage.wal import read_segment

KILLED = -signal.SIGKILL

# The child commits versions 0..2 of the log at argv[1], each after writing a segment.
CHILD = textwrap.dedent(
    """
    import os, sys
    from cdc_sink.storage.version_log import BucketRef, LogEntry, VersionLog
    from cdc_sink.storage.wal import SegmentWriter

    root = sys.argv[1]
    log = VersionLog(root)
    os.makedirs(os.path.join(root, "_wal", "0"), exist_ok=True)
    for v in range(3):
        seg = f"_wal/0/{v:020d}-a.wal"
        w = SegmentWriter(os.path.join(root, seg))
        w.append(b"payload %d" % v)
        w.finish()
        log.commit(LogEntry(v, "job", v, 1000 + v, 0, {0: BucketRef(seg, None)}, {}))
    if len(sys.argv) > 2:
        log.write_checkpoint(2, None, {0: None}, 0)
        log.delete_entries_below(2)
    """
)


def _run(root: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("CDC_SINK_CRASH")}
    full.update(env)
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(root), *extra],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    monkeypatch.delenv(faults.CRASH_AT_ENV, raising=False)
    monkeypatch.delenv(faults.CRASH_RANDOM_ENV, raising=False)
    yield monkeypatch
    monkeypatch.undo()
    faults.reload_from_env()


def test_known_points_are_registered() -> None:
    for name in (
        "wal.written",
        "wal.fsynced",
        "log.before_create",
        "log.created",
        "log.dir_fsynced",
        "log.checkpoint_written",
        "log.gc_deleting",
        "log.repair_removing",
    ):
        assert name in faults.KNOWN_POINTS


def test_unset_env_makes_fault_points_no_ops(clean_env: pytest.MonkeyPatch) -> None:
    faults.reload_from_env()
    faults.fault_point("log.created")
    clean_env.setenv(faults.CRASH_AT_ENV, "some.other.point")
    faults.reload_from_env()
    faults.fault_point("log.created")
    clean_env.setenv(faults.CRASH_RANDOM_ENV, "7:0")
    faults.reload_from_env()
    faults.fault_point("log.created")


@pytest.mark.parametrize(
    ("var", "value"),
    [
        (faults.CRASH_AT_ENV, "log.created:0"),
        (faults.CRASH_RANDOM_ENV, "7"),
        (faults.CRASH_RANDOM_ENV, "x:0.5"),
        (faults.CRASH_RANDOM_ENV, "7:1.5"),
    ],
)
def test_malformed_env_is_rejected(clean_env: pytest.MonkeyPatch, var: str, value: str) -> None:
    clean_env.setenv(var, value)
    with pytest.raises(ValueError):
        faults.reload_from_env()


def test_no_crash_point_runs_to_completion(tmp_path: Path) -> None:
    proc = _run(tmp_path, {})
    assert proc.returncode == 0, proc.stderr
    assert VersionLog(tmp_path).latest() == 2


def test_crash_before_create_leaves_no_entry(tmp_path: Path) -> None:
    proc = _run(tmp_path, {faults.CRASH_AT_ENV: "log.before_create"})
    assert proc.returncode == KILLED
    assert "fault point log.before_create" in proc.stderr
    assert not os.path.exists(VersionLog(tmp_path).entry_path(0))
    assert VersionLog(tmp_path).latest() is None
    assert read_segment(tmp_path / "_wal" / "0" / f"{0:020d}-a.wal", repair=False) == [b"payload 0"]
    assert list_temp_files(tmp_path / "_log") == []


@pytest.mark.parametrize("point", ["log.created", "log.dir_fsynced"])
def test_crash_after_create_leaves_a_committed_entry(tmp_path: Path, point: str) -> None:
    proc = _run(tmp_path, {faults.CRASH_AT_ENV: f"{point}:2"})
    assert proc.returncode == KILLED
    assert "(hit 2)" in proc.stderr
    log = VersionLog(tmp_path)
    assert log.latest() == 1
    assert log.read(1) == LogEntry.from_json(log.read(1).to_json())
    assert log.last_batch_id("job") == 1
    assert list_temp_files(tmp_path / "_log") == []
    assert log.repair() == []


@pytest.mark.parametrize("point", ["wal.written", "wal.fsynced"])
def test_crash_in_segment_finish_leaves_segment_but_no_commit(tmp_path: Path, point: str) -> None:
    proc = _run(tmp_path, {faults.CRASH_AT_ENV: f"{point}:3"})
    assert proc.returncode == KILLED
    log = VersionLog(tmp_path)
    assert log.latest() == 1  # the third segment was written but never committed
    # The kill spares the page cache: the uncommitted segment is complete, an orphan.
    assert read_segment(tmp_path / "_wal" / "0" / f"{2:020d}-a.wal", repair=False) == [b"payload 2"]


def test_crash_midway_through_gc_leaves_a_consistent_log(tmp_path: Path) -> None:
    proc = _run(tmp_path, {faults.CRASH_AT_ENV: "log.gc_deleting:2"}, "gc")
    assert proc.returncode == KILLED
    log = VersionLog(tmp_path)
    assert not os.path.exists(log.entry_path(0))
    assert os.path.exists(log.entry_path(1))
    assert (log.oldest(), log.latest()) == (1, 2)
    assert log.last_batch_id("job") == 2
    assert log.delete_entries_below(2) == [log.entry_path(1)]


def test_crash_after_checkpoint_keeps_it(tmp_path: Path) -> None:
    proc = _run(tmp_path, {faults.CRASH_AT_ENV: "log.checkpoint_written"}, "gc")
    assert proc.returncode == KILLED
    ckpt = VersionLog(tmp_path).read_checkpoint()
    assert ckpt is not None and ckpt.version == 2 and ckpt.app_ids == {"job": 2}


def test_random_crash_mode(tmp_path: Path) -> None:
    proc = _run(tmp_path / "a", {faults.CRASH_RANDOM_ENV: "1:1.0"})
    assert proc.returncode == KILLED
    assert "fault point wal.written (hit 1)" in proc.stderr  # the first point reached
    proc = _run(tmp_path / "b", {faults.CRASH_RANDOM_ENV: "1:0.0"})
    assert proc.returncode == 0, proc.stderr
    first = _run(tmp_path / "c", {faults.CRASH_RANDOM_ENV: "3:0.3"})
    again = _run(tmp_path / "d", {faults.CRASH_RANDOM_ENV: "3:0.3"})
    assert (first.returncode, first.stderr) == (again.returncode, again.stderr)  # replayable
