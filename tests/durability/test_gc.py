"""Garbage collection: shows before it deletes, deletes exactly that, and nothing a
retained version needs.

* ``gc(dry_run=True)`` lists paths and deletes nothing; ``gc(dry_run=False)`` on the same
  state deletes exactly the listed paths;
* every retained version reads the same bytes before and after GC, and after reopening;
* afterwards, old snapshots, unreferenced page files, old segments and the log entries
  below the horizon are gone from disk, and so are the orphans of failed attempts
  (a lost commit race, a writer killed before its commit);
* the checkpoint carries what deleted entries said (a bucket no recent version touched
  still reads right).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cdc_sink.engine import core_of
from cdc_sink.errors import CommitConflict, VersionNotFound
from cdc_sink.storage import faults
from cdc_sink.table import Table, create_table, open_table
from tests.durability import checks, workload
from tests.durability.checks import DriverServer

SEED = 41
KILLED = -9


def _tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` with the hash of its content."""
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                out[p] = hashlib.sha256(f.read()).hexdigest()
    return out


def _digests(t: Table) -> dict[int, str]:
    return {v: checks.digest(t.read(version=v)) for v in range(t.oldest_version, t.version + 1)}


def _apply(t: Table, i: int) -> None:
    t.apply(workload.batch(SEED, i), app_id=workload.APP_ID, batch_id=i)


def _written_table(path: Path, batches: int = 14) -> Table:
    t = create_table(path, workload.schema(), options=workload.options())
    for i in range(batches):
        _apply(t, i)
        if i % 4 == 3:
            t.compact()
    return t


def test_dry_run_lists_and_deletes_nothing_then_gc_deletes_exactly_that(durable_dir: Path) -> None:
    t = _written_table(durable_dir)
    before_tree = _tree(durable_dir)
    retained = {
        v: d for v, d in _digests(t).items() if v > t.version - workload.options().retain_versions
    }
    listed = t.gc(dry_run=True)
    assert listed, "nothing to collect: the workload is too small"
    assert listed == sorted(listed) and len(set(listed)) == len(listed)
    assert all(os.path.isabs(p) and p.startswith(str(durable_dir)) for p in listed)
    assert _tree(durable_dir) == before_tree, "a dry run changed the table directory"
    assert t.gc(dry_run=True) == listed, "two dry runs disagree"

    deleted = t.gc(dry_run=False)
    assert deleted == listed
    after_tree = _tree(durable_dir)
    gone = set(before_tree) - set(after_tree)
    assert gone == set(listed), sorted(gone ^ set(listed))
    added = set(after_tree) - set(before_tree)
    assert all("/_log/_checkpoint." in p for p in added), added
    for p, h in after_tree.items():
        if p in before_tree:
            assert before_tree[p] == h, f"GC rewrote {p}"

    horizon = t.oldest_version
    assert horizon == t.version - workload.options().retain_versions + 1
    assert _digests(t) == retained
    reopened = open_table(durable_dir, options=workload.options())
    assert _digests(reopened) == retained
    checks.check_table(reopened, SEED)
    assert not [v for v in range(horizon) if os.path.exists(t.log.entry_path(v))]
    checks.assert_no_garbage(reopened)
    assert reopened.gc(dry_run=True) == []
    assert reopened.gc(dry_run=False) == []


def test_every_retained_version_reads_the_same_before_and_after_each_gc(durable_dir: Path) -> None:
    t = create_table(durable_dir, workload.schema(), options=workload.options())
    for i in range(20):
        _apply(t, i)
        if i % 3 == 1:
            t.compact()
        if i % 4 == 2:
            before = _digests(t)
            t.gc(dry_run=False)
            after = _digests(t)
            assert after == {v: d for v, d in before.items() if v >= t.oldest_version}
            assert _digests(open_table(durable_dir, options=workload.options())) == after
            checks.assert_no_garbage(t)
    checks.check_table(open_table(durable_dir, options=workload.options()), SEED)


def test_retention_window_by_count_and_by_time(durable_dir: Path) -> None:
    t = _written_table(durable_dir, 8)
    latest = t.version
    t.gc(dry_run=False, retain_versions=latest + 1, retain_seconds=0)
    assert t.oldest_version == 0  # all kept by count
    t.gc(dry_run=False, retain_versions=1, retain_seconds=3600)
    assert t.oldest_version == 0  # all committed within the hour
    t.gc(dry_run=False, retain_versions=2, retain_seconds=0)
    assert t.oldest_version == latest - 1
    checks.check_table(open_table(durable_dir, options=workload.options()), SEED)


def test_untouched_bucket_reads_right_after_gc_deleted_the_entries_naming_its_snapshot(
    durable_dir: Path,
) -> None:
    batches = workload.skewed_table(durable_dir)
    states = checks.model_after(batches)
    for t in (open_table(durable_dir, options=workload.options()),):
        assert t.oldest_version > 2  # the compact version naming the snapshots is gone
        assert checks.rows_of(t.read()) == states[-1]
        checks.assert_no_garbage(t)


def test_orphans_of_a_lost_commit_race_are_removed_by_the_loser(durable_dir: Path) -> None:
    winner = _written_table(durable_dir, 5)
    loser = open_table(durable_dir, options=workload.options())
    loser.read()
    real_commit = loser.log.commit
    rivals = iter(range(100, 104))

    def winner_commits_first(entry: object) -> None:
        _apply(winner, next(rivals))
        real_commit(entry)  # type: ignore[arg-type]

    loser.log.commit = winner_commits_first  # type: ignore[method-assign]
    for _ in range(4):  # several attempts, so some write a snapshot too
        before = set(_tree(durable_dir))
        with pytest.raises(CommitConflict):
            loser.apply(workload.batch(SEED, 5), app_id="loser", batch_id=0)
        after = set(_tree(durable_dir))
        new = {p for p in after - before if "/_log/" not in p}
        won = winner.log.read(winner.version)
        committed = {
            os.path.join(str(durable_dir), r)
            for ref in won.buckets.values()
            for r in (ref.segment, ref.snapshot, ref.images)
            if r
        }
        if won.rejects is not None:  # the winner's rejects are committed with its entry
            committed.add(os.path.join(str(durable_dir), won.rejects))
        pages = {
            os.path.join(str(durable_dir), f)
            for r in committed
            if r.endswith(".manifest")
            for f in _manifest_files(durable_dir, r)
        }
        assert new <= committed | pages, f"the loser left {sorted(new - committed - pages)}"
    loser.log.commit = real_commit  # type: ignore[method-assign]
    latest = winner.version
    res = loser.apply(workload.batch(SEED, 5), app_id="loser", batch_id=0)
    assert (res.version, res.skipped) == (latest + 1, False)
    for i in range(1, 7):  # the loser goes on writing (and snapshotting) ...
        loser.apply(workload.batch(SEED, 5 + i), app_id="loser", batch_id=i)
    order = [0, 1, 2, 3, 4, 100, 101, 102, 103, *range(5, 12)]
    want = checks.model_after([workload.batch(SEED, i) for i in order])[-1]
    assert checks.rows_of(loser.read()) == want
    fresh = open_table(durable_dir)  # ... and what it wrote reads back from disk
    assert checks.rows_of(fresh.read()) == want
    assert (
        checks.rows_of(fresh.read(version=fresh.version - 1))
        == checks.model_after([workload.batch(SEED, i) for i in order[:-1]])[-1]
    )


def _manifest_files(root: Path, rel_or_abs: str) -> list[str]:
    from cdc_sink.storage.snapshot import read_manifest

    return list(read_manifest(str(root), os.path.relpath(rel_or_abs, root)).files)


@pytest.mark.parametrize(
    "point",
    [
        "wal.fsynced",
        "snapshot.pages_written",
        "snapshot.written",
        "table.prepared",
        "log.before_create",
    ],
)
def test_orphans_of_a_killed_writer_are_removed_once_the_version_commits(
    point: str, durable_dir: Path, driver_server: DriverServer
) -> None:
    create_table(durable_dir, workload.schema(), options=workload.options())
    res = driver_server.run(durable_dir, SEED, 8)
    assert res.returncode == 0, res.stderr
    before = set(
        checks.data_files(durable_dir)["_wal"]
        + checks.data_files(durable_dir)["_snapshots"]
        + checks.data_files(durable_dir)["_pages"]
    )
    res = driver_server.run(durable_dir, SEED, 12, crash={faults.CRASH_AT_ENV: point})
    assert res.returncode == KILLED, res.stderr
    files = checks.data_files(durable_dir)
    orphans = set(files["_wal"] + files["_snapshots"] + files["_pages"]) - before
    t = open_table(durable_dir, options=workload.options())
    named = {
        r
        for v in range(t.oldest_version, t.version + 1)
        for ref in t.log.read(v).buckets.values()
        for r in (ref.segment, ref.snapshot)
        if r
    }
    orphans -= named
    assert orphans, f"the kill at {point} left no orphan: nothing tested"
    res = driver_server.run(durable_dir, SEED, 14)  # commits the version, runs GC
    assert res.returncode == 0, res.stderr
    t = open_table(durable_dir, options=workload.options())
    listed = t.gc(dry_run=True)
    left = [rel for rel in orphans if (durable_dir / rel).exists()]
    assert all(os.path.join(str(durable_dir), rel) in listed for rel in left), left
    t.gc(dry_run=False)
    assert not [rel for rel in orphans if (durable_dir / rel).exists()]
    checks.assert_no_garbage(t)
    checks.check_table(open_table(durable_dir, options=workload.options()), SEED)


GC_KILLED_CHILD = textwrap.dedent("""
    import sys
    from cdc_sink.table import open_table
    open_table(sys.argv[1]).gc(dry_run=False, retain_versions=3, retain_seconds=0)
""")


@pytest.mark.parametrize("point", ["log.checkpoint_written", "gc.deleting"])
def test_gc_killed_midway_leaves_every_offered_version_readable(
    point: str, durable_dir: Path
) -> None:
    """Minimal reproduction: 6 single-bucket-changing versions, a compact, a GC killed
    after its checkpoint; then every version ``versions()`` offers must read right (or
    raise VersionNotFound), never silently return other rows."""
    batches = [
        [
            {"op": "upsert", "key": {"id": k}, "set": {"qty": k}, "seq": 1}
            for k in range(3 * i, 3 * i + 3)
        ]
        for i in range(6)
    ]
    t = create_table(durable_dir, workload.schema(), options=workload.options())
    for b in batches:
        t.apply(b)
    t.compact()
    t.apply([{"op": "delete", "key": {"id": 0}, "seq": 2}])
    want = {v: checks.rows_of(t.read(version=v)) for v in range(t.version + 1)}
    env = checks.child_env(**{faults.CRASH_AT_ENV: point})
    res = subprocess.run(
        [sys.executable, "-c", GC_KILLED_CHILD, str(durable_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == KILLED, res.stderr
    t = open_table(durable_dir)
    for v in range(t.oldest_version, t.version + 1):
        assert checks.rows_of(t.read(version=v)) == want[v], f"version {v} reads other rows"


@pytest.mark.parametrize("how", ["read", "get"])
def test_a_read_that_gc_overtakes_raises_version_not_found(durable_dir: Path, how: str) -> None:
    """The chaos suite's reader resolved a retained version, then the job's GC collected
    it and deleted a segment the read needed: the read must say the version is gone
    (VersionNotFound), not that the table is damaged (WalCorruption)."""
    writer = create_table(durable_dir, workload.schema(), options=workload.options())
    for i in range(8):
        _apply(writer, i)
    reader = open_table(durable_dir, options=workload.options())
    v = reader.version - 2  # retained, and its buckets need segments and snapshots
    real_load = core_of(reader).load_bucket

    def gc_first(bucket: int, version: int) -> object:
        _apply(writer, 100)
        writer.compact()
        _apply(writer, 101)
        assert writer.gc(dry_run=False, retain_versions=1)
        return real_load(bucket, version)

    core_of(reader).load_bucket = gc_first  # type: ignore[method-assign,assignment]
    with pytest.raises(VersionNotFound) as info:
        if how == "read":
            reader.read(version=v)
        else:
            reader.get([1, 2, 3, 4, 5], version=v)
    assert info.value.oldest > v
    assert "garbage-collected during the read" in str(info.value)
    assert f"oldest readable version is {info.value.oldest}" in str(info.value)
