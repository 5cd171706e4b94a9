"""GC of a table on each backend (a directory and the S3 server), the same assertions on
both: it lists the store by prefix, keeps every file a retained version needs, deletes
the rest (log entries below the horizon through the log, after its checkpoint), and
follows the orphan rule: an unreferenced file of a committed version goes at once; one of
a version above the newest goes, on a local store, once older than the grace period, and
on an object store only once its version is committed without it (a paused writer's
clock proves nothing)."""

from __future__ import annotations

import pytest

from cdc_sink.engine import core_of
from cdc_sink.errors import VersionNotFound
from cdc_sink.storage.layout import kind_of, segment_file
from cdc_sink.storage.snapshot import read_manifest
from cdc_sink.table import Table, TableOptions, create_table, open_table
from tests.durability import checks, workload
from tests.objectstore.conftest import Target

SEED = 11
BATCHES = 9
OPTS = TableOptions.for_tests()  # retains 3 versions; snapshots every 3 versions
IMMUTABLE = ("segment", "snapshot", "pages", "rejects")


def _written(target: Target) -> Table:
    table = create_table(
        target.url, workload.schema(), options=OPTS, storage_options=target.options or None
    )
    for i in range(BATCHES):
        table.apply(workload.batch(SEED, i), app_id=workload.APP_ID, batch_id=i)
    return table


def _needed(table: Table) -> set[str]:
    """Every file the retained versions name (segments, snapshots, their pages, rejects)."""
    s = core_of(table)
    needed: set[str] = set()
    for b in range(table.schema.num_buckets):
        snap = s.history.snapshot_at(b, table.oldest_version)
        start = snap[0] if snap else -1
        if snap:
            needed.add(snap[1])
        needed.update(r for _, r in s.history.segments_between(b, start, table.version))
        needed.update(r for v, r in s.history.snapshots.get(b, []) if v > start)
    for rel in [r for r in needed if kind_of(r) == "snapshot"]:
        needed.update(read_manifest(table.store, rel).files)
    for e in table.log.entries(from_version=table.oldest_version):
        if e.rejects:
            needed.add(e.rejects)
    return needed


def test_gc_keeps_exactly_what_retained_versions_need(target: Target) -> None:
    table = _written(target)
    expected = checks.model_after([workload.batch(SEED, i) for i in range(BATCHES)])
    dry = table.gc(dry_run=True)
    plan = table.gc(dry_run=False)
    assert list(plan) == list(dry) and plan
    assert table.oldest_version == plan.horizon == BATCHES - OPTS.retain_versions + 1
    store = target.open()
    stored = {k for k in store.list_keys() if kind_of(k) in IMMUTABLE}
    assert stored == _needed(table)
    entries = [k for k in store.list_keys("_log") if kind_of(k) == "entry"]
    assert entries == [table.log.entry_key(v) for v in range(plan.horizon, BATCHES + 1)]
    reader = open_table(target.url, options=OPTS, storage_options=target.options or None)
    for v in range(plan.horizon, BATCHES + 1):
        assert checks.rows_of(reader.read(version=v)) == expected[v], v
    with pytest.raises(VersionNotFound):
        reader.read(version=plan.horizon - 1)


def test_orphans_follow_the_rule_of_their_backend(target: Target) -> None:
    table = _written(target)
    store = target.open()
    stale = segment_file(0, f"{BATCHES - 1:020d}-0badc0ffee00")  # a lost attempt
    pending = segment_file(0, f"{BATCHES + 1:020d}-0badc0ffee01")  # one in flight
    store.put_new(stale, b"lost attempt")
    store.put_new(pending, b"attempt in flight")
    plan = table.gc(dry_run=False, orphan_grace_seconds=0.0)
    keys = set(store.list_keys("_wal"))
    assert stale not in keys
    assert plan.reasons[store.location(stale)] == "no retained version needs it"
    if target.backend == "local":  # one machine, one clock: old enough is a crash's
        assert pending not in keys
    else:  # its version is not committed: the attempt may still commit
        assert pending in keys
        assert store.location(pending) not in plan.reasons
    table.apply(workload.batch(SEED, BATCHES), app_id=workload.APP_ID, batch_id=BATCHES)
    table.apply(workload.batch(SEED, BATCHES + 1), app_id=workload.APP_ID, batch_id=BATCHES + 1)
    table.gc(dry_run=False, orphan_grace_seconds=3600.0)
    assert pending not in set(store.list_keys("_wal"))  # committed without it: garbage
