"""Repeatable reads: a retained version reads the same bytes while the table moves on.

A reader process opens the table again and again and reads version ``v`` (by version
and by its commit timestamp), hashing the Arrow IPC bytes of each read, while the test
process applies batches, compacts, and garbage-collects with a retention that keeps
exactly ``v`` (the GC horizon is ``v`` itself). Every hash equals the one read before
the writes. Below the horizon a read raises ``VersionNotFound`` naming the oldest
readable version.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
from pathlib import Path
from typing import Any

import pytest

from cdc_sink.errors import VersionNotFound
from cdc_sink.table import Table, create_table, open_table
from tests.durability import checks, workload
from tests.durability.workers import repeat_reader

SEED = 31
BEFORE = 7  # batches committed before version v is pinned by the reader
AFTER = 24  # batches (at least) the writer commits while the reader reads


def _apply(t: Table, i: int) -> int:
    return t.apply(workload.batch(SEED, i), app_id=workload.APP_ID, batch_id=i).version


def _commit_time(t: Table, v: int) -> int:
    return next(e["commit_time_ms"] for e in t.versions() if e["version"] == v)


def _version_at(t: Table, ts: int) -> int:
    return max(e["version"] for e in t.versions() if e["commit_time_ms"] <= ts)


def test_version_reads_the_same_bytes_during_writes_compaction_and_gc(durable_dir: Path) -> None:
    t = create_table(durable_dir, workload.schema(), options=workload.options())
    for i in range(BEFORE):
        _apply(t, i)
    t.compact()
    v = _apply(t, BEFORE)
    time.sleep(0.005)  # the next commit gets a later timestamp than v
    ts = _commit_time(t, v)
    baseline = checks.digest(open_table(durable_dir).read(version=v))
    assert checks.digest(t.read(version=v)) == baseline
    assert checks.digest(open_table(durable_dir).read(timestamp=ts)) == baseline
    assert checks.rows_of(t.read(version=v)) == checks.expected_rows(SEED, BEFORE + 1)

    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    results = ctx.Queue()
    reader = ctx.Process(target=repeat_reader, args=(str(durable_dir), v, ts, stop, results, 30))
    reader.start()
    got: list[Any] = []
    try:
        first = results.get(timeout=120)  # the reader is up before the writes begin
        got.append(first)
        i = BEFORE + 1
        # Write at least AFTER batches, and go on until the reader has read 20 times
        # while the table was changing (a slow machine gets more batches).
        while i < BEFORE + 1 + AFTER or (len(got) < 60 and i < BEFORE + 400):
            _apply(t, i)
            if i % 3 == 0:
                t.compact()
            if i % 2 == 0:
                t.gc(dry_run=False, retain_versions=t.version - v + 1)
                assert t.oldest_version == v
            i += 1
            time.sleep(0.01)
            checks.drain(results, got)  # what the reader read while the table was changing
        during = len(got)
        stop.set()
        while True:
            item = results.get(timeout=120)
            if item[0] == "done":
                break
            got.append(item)
    except queue.Empty:
        pytest.fail(f"the reader stalled after {len(got)} reads")
    finally:
        code = checks.stop_child(reader, stop)
    assert code == 0
    assert during >= 20, f"only {during} reads overlapped the writes"
    errors = [g[2] for g in got if g[0] == "error"]
    assert not errors, f"{len(errors)} of {len(got)} reads failed: {errors[:5]}"
    by_version = [g[1] for g in got if g[0] == "version"]
    by_time = [g[1] for g in got if g[0] == "timestamp"]
    by_persistent = [g[1] for g in got if g[0] == "persistent"]
    assert len(by_version) >= 30 and len(by_time) >= 30 and len(by_persistent) >= 30
    assert set(by_version) == {baseline}, "a read of the same version returned other bytes"
    assert set(by_time) == {baseline}, "a read by timestamp returned other bytes"
    assert set(by_persistent) == {baseline}, "a long-lived reader read other bytes"

    fresh = open_table(durable_dir, options=workload.options())
    assert fresh.oldest_version == v
    assert checks.digest(fresh.read(version=v)) == baseline
    checks.check_table(fresh, SEED)
    for u in range(v, fresh.version + 1):  # by timestamp == by version, everywhere
        at = _commit_time(fresh, u)
        assert checks.digest(fresh.read(timestamp=at)) == checks.digest(
            fresh.read(version=_version_at(fresh, at))
        )


def test_reading_below_the_gc_horizon_names_the_oldest_readable_version(durable_dir: Path) -> None:
    t = create_table(durable_dir, workload.schema(), options=workload.options())
    for i in range(12):
        _apply(t, i)
        if i % 4 == 3:
            t.compact()
    ts_old = _commit_time(t, 2)
    t.gc(dry_run=False)
    for table in (t, open_table(durable_dir, options=workload.options())):
        oldest = table.oldest_version
        assert oldest == table.version - workload.options().retain_versions + 1
        for below in (0, 2, oldest - 1):
            with pytest.raises(VersionNotFound) as info:
                table.read(version=below)
            assert f"oldest readable version is {oldest}" in str(info.value)
            assert info.value.oldest == oldest
        with pytest.raises(VersionNotFound) as info:
            table.read(timestamp=ts_old)
        assert f"oldest readable version is {oldest}" in str(info.value)
        with pytest.raises(VersionNotFound):
            table.get([1], version=oldest - 1)
        assert checks.rows_of(table.read(version=oldest)) == checks.expected_rows(
            SEED, _batches_at(table, oldest)
        )


def _batches_at(t: Table, v: int) -> int:
    job = checks.job_batches_by_version(t)
    below = [b for ver, b in job if ver <= v]
    return below[-1] + 1 if below else next(b for ver, b in job if ver > v)
