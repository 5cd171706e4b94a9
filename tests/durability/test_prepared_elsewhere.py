"""Versions prepared in another process (executors mode) and committed by this one.

In executors mode the driver's Table commits log entries naming segments that Spark
tasks prepared in their own processes. The driver's own copy of those buckets is then
stale; it must never be treated as the state of the new version (a compaction would
snapshot the stale copy as the newest state of the bucket and lose rows).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cdc_sink.batch import ChangeBatch
from cdc_sink.engine import core_of
from cdc_sink.table import Table, TableOptions, create_table, open_table
from tests.model import RefModel, model_rows, table_to_rows

SCHEMA = {
    "columns": [{"name": "id", "type": "int64", "nullable": False}, {"name": "a", "type": "int64"}],
    "primary_key": ["id"],
    "num_buckets": 3,
}


def _commit_from_worker(
    driver: Table, worker: Table, events: list[dict[str, Any]], batch_id: int
) -> None:
    """What executors mode does: the worker prepares every bucket, the driver commits."""
    batch, rejects = ChangeBatch.from_events(events, driver.schema)
    assert not len(rejects)
    txn = driver.transaction(app_id="job", batch_id=batch_id)
    prepared = [
        core_of(worker).prepare_bucket(b, txn.version, part)
        for b, part in sorted(batch.split_by_bucket().items())
    ]
    txn.add_prepared(prepared)
    txn.commit(events=len(batch))


def _events(lo: int, hi: int, a: int) -> list[dict[str, Any]]:
    return [{"op": "upsert", "key": {"id": i}, "set": {"a": a}} for i in range(lo, hi)]


def test_compaction_by_the_committer_snapshots_the_committed_state(tmp_path: Path) -> None:
    driver = create_table(tmp_path / "t", SCHEMA, options=TableOptions.for_tests())
    worker = open_table(tmp_path / "t", options=TableOptions.for_tests())
    model = RefModel(driver.schema)
    batches = [_events(0, 30, 1), _events(20, 60, 2), _events(0, 10, 3), _events(50, 90, 4)]
    for i, events in enumerate(batches):
        _commit_from_worker(driver, worker, events, i)
        model.apply(events)
        driver.compact()  # the driver's copies were loaded (or advanced) before this
        want = model_rows(model.rows, driver.schema)
        assert table_to_rows(driver.read(), ["id"]) == want, f"after batch {i}"
        fresh = open_table(tmp_path / "t")
        assert table_to_rows(fresh.read(), ["id"]) == want, f"reopened after batch {i}"


def test_the_committer_reads_what_the_worker_prepared(tmp_path: Path) -> None:
    driver = create_table(tmp_path / "t", SCHEMA, options=TableOptions.for_tests())
    worker = open_table(tmp_path / "t", options=TableOptions.for_tests())
    driver.apply(_events(0, 20, 1), app_id="job", batch_id=0)  # driver loads every bucket
    _commit_from_worker(driver, worker, _events(0, 20, 2), 1)
    assert set(driver.read().column("a").to_pylist()) == {2}
    assert set(driver.get(list(range(20))).column("a").to_pylist()) == {2}
    # and the driver can go on preparing locally on top of the worker's version
    driver.apply(_events(10, 20, 3), app_id="job", batch_id=2)
    assert sorted(driver.read().column("a").to_pylist()) == [2] * 10 + [3] * 10


def test_a_copy_older_than_the_gc_horizon_reloads_instead_of_replaying(tmp_path: Path) -> None:
    """A worker's cached bucket that fell behind while the committer compacted and GC'd
    (deleting the segments it would replay) reloads from the newest snapshot."""
    driver = create_table(tmp_path / "t", SCHEMA, options=TableOptions.for_tests())
    worker = open_table(tmp_path / "t", options=TableOptions.for_tests())
    idle = open_table(tmp_path / "t", options=TableOptions.for_tests())
    model = RefModel(driver.schema)
    _commit_from_worker(driver, worker, _events(0, 40, 1), 0)
    model.apply(_events(0, 40, 1))
    idle.read()  # loads every bucket at this version, then falls behind
    for i in range(1, 6):
        events = _events(i * 5, i * 5 + 30, i + 1)
        _commit_from_worker(driver, worker, events, i)
        model.apply(events)
        driver.compact()
        driver.gc(dry_run=False, retain_versions=2, retain_seconds=0, orphan_grace_seconds=0)
    want = model_rows(model.rows, driver.schema)
    assert table_to_rows(idle.read(), ["id"]) == want
    _commit_from_worker(driver, idle, _events(0, 5, 99), 6)  # the stale one prepares next
    model.apply(_events(0, 5, 99))
    assert table_to_rows(driver.read(), ["id"]) == model_rows(model.rows, driver.schema)


def test_a_worker_whose_prepared_version_gc_collected_goes_on(tmp_path: Path) -> None:
    """A worker prepared version v (a WAL segment: its bucket had rows), the driver
    committed it, then committed more versions and collected v before the worker saw the
    log again (a Spark task for the bucket ran elsewhere meanwhile). The worker cannot
    ask the log whether v was its commit any more; it reloads the bucket and goes on
    (seen in CI: `VersionNotFound` from the worker's refresh)."""
    driver = create_table(tmp_path / "t", SCHEMA, options=TableOptions.for_tests())
    worker = open_table(tmp_path / "t", options=TableOptions.for_tests())
    model = RefModel(driver.schema)
    for i, events in enumerate([_events(0, 30, 1), _events(0, 30, 2)]):
        _commit_from_worker(driver, worker, events, i)  # the second is a WAL prepare
        model.apply(events)
    for i in range(2, 6):  # the driver goes on alone and collects everything old
        driver.apply(_events(i, i + 5, 10 + i), app_id="job", batch_id=i)
        model.apply(_events(i, i + 5, 10 + i))
    driver.gc(dry_run=False, retain_versions=1)
    assert driver.oldest_version > 2
    _commit_from_worker(driver, worker, _events(25, 40, 7), 6)
    model.apply(_events(25, 40, 7))
    want = model_rows(model.rows, driver.schema)
    assert table_to_rows(worker.read(), ["id"]) == want
    assert table_to_rows(open_table(tmp_path / "t").read(), ["id"]) == want
