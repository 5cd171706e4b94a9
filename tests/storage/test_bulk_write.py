"""The bulk path: a large batch for a bucket without rows is written as a snapshot of the
bucket at its version (the durable record the log entry names), not as a WAL segment.

Every check compares with the reference model. The durability suite runs the same path
too: ``TableOptions.for_tests()`` writes each bucket's first batch this way, so the crash
points, power-loss images, GC and concurrent-writer tests all cross a bulk version.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from cdc_sink.engine import core_of
from cdc_sink.errors import CommitConflict
from cdc_sink.schema import TableSchema
from cdc_sink.table import Table, TableOptions, create_table, open_table
from tests.fixtures import ID_A_B_SEQ, KEEP_VERSIONS
from tests.model import RefModel, model_rows, table_to_rows

SCHEMA = TableSchema.from_dict({**ID_A_B_SEQ, "num_buckets": 2})
OPTS = TableOptions(page_rows=16, bulk_events=50, **KEEP_VERSIONS)


def _load(n: int, tag: int = 0) -> list[dict[str, Any]]:
    """Inserts and upserts of ``n`` keys, a key written twice, a stale event, a delete
    and an update of a missing key (refused): a load is not always clean."""
    evs: list[dict[str, Any]] = [
        {
            "op": "insert" if k % 2 else "upsert",
            "key": {"id": k},
            "set": {"a": k + tag, "b": f"r{k}"},
            "seq": 10,
        }
        for k in range(n)
    ]
    evs += [
        {"op": "upsert", "key": {"id": 3}, "set": {"a": -3}, "seq": 11},
        {"op": "upsert", "key": {"id": 4}, "set": {"a": -4}, "seq": 5},  # stale
        {"op": "delete", "key": {"id": 5}, "seq": 12},
        {"op": "update", "key": {"id": n + 7}, "set": {"a": 1}, "seq": 12},
    ]
    return evs


def _small(i: int) -> list[dict[str, Any]]:
    return [
        {"op": "upsert", "key": {"id": k}, "set": {"b": f"s{i}"}, "seq": 20 + i}
        for k in range(i, 400, 37)
    ]


def _rows(t: Table, version: int | None = None) -> dict[Any, Any]:
    return table_to_rows(t.read(version=version), ["id"])


class _Model:
    def __init__(self) -> None:
        self.m = RefModel(SCHEMA)
        self.states: list[dict[Any, Any]] = [{}]

    def apply(self, events: list[dict[str, Any]]) -> None:
        self.m.apply(events)
        self.m.commit(len(self.states))
        self.states.append(model_rows(self.m.rows, SCHEMA))


def _bulk_buckets(t: Table, version: int) -> list[int]:
    e = t.log.read(version)
    return sorted(b for b, r in e.buckets.items() if r.segment is None and r.snapshot)


def _wal_files(root: Path) -> list[str]:
    return [f for _, _, fs in os.walk(root / "_wal") for f in fs]


def test_a_load_is_a_snapshot_and_reads_back_without_replay(tmp_path: Path) -> None:
    t = create_table(tmp_path / "t", SCHEMA, options=OPTS)
    model = _Model()
    res = t.apply(_load(300))
    model.apply(_load(300))
    assert res.version == 1 and _bulk_buckets(t, 1) == [0, 1]
    assert _wal_files(tmp_path / "t") == []  # the data went to pages only
    assert res.counts["rejected"] == 1 and t.rejects(1).num_rows == 1
    assert _rows(t) == model.states[1]
    for i in range(1, 4):  # later batches take the WAL path
        t.apply(_small(i))
        model.apply(_small(i))
        assert _bulk_buckets(t, t.version) == []
    fresh = open_table(tmp_path / "t")
    for v in range(fresh.oldest_version, fresh.version + 1):
        assert _rows(fresh, v) == model.states[v], v
    # Loading version 1 reads its snapshot and replays nothing.
    core_of(fresh).load_bucket(0, 1)
    assert core_of(fresh).loaded_events == 0


def test_small_batches_and_buckets_with_rows_take_the_wal_path(tmp_path: Path) -> None:
    t = create_table(tmp_path / "t", SCHEMA, options=OPTS)
    model = _Model()
    for evs in (_load(10), _load(300, tag=1)):  # under bulk_events, then non-empty buckets
        t.apply(evs)
        model.apply(evs)
        assert _bulk_buckets(t, t.version) == []
    assert _rows(open_table(tmp_path / "t")) == model.states[-1]


def test_a_writer_that_loaded_the_bucket_before_another_writers_load(tmp_path: Path) -> None:
    a = create_table(tmp_path / "t", SCHEMA, options=OPTS)
    a.compact()  # a loads both (empty) buckets into memory
    b = open_table(tmp_path / "t", options=OPTS)
    model = _Model()
    model.apply([])
    b.apply(_load(300))  # a bulk version a has not seen
    model.apply(_load(300))
    assert _bulk_buckets(b, 2) == [0, 1]
    with pytest.raises(CommitConflict):  # a decided from its own (stale) view ...
        a.apply(_small(1))
    a.apply(_small(1))  # ... and followed the lost race: its empty tablets must not stay empty
    model.apply(_small(1))
    assert _rows(a) == model.states[-1]
    assert _rows(open_table(tmp_path / "t")) == model.states[-1]


def test_a_lost_commit_race_leaves_no_files_and_a_retry_commits(tmp_path: Path) -> None:
    t = create_table(tmp_path / "t", SCHEMA, options=OPTS)
    before = sorted(p for p in (tmp_path / "t").rglob("*") if p.is_file())
    real = t.log.commit

    def conflict(entry: Any) -> None:
        raise CommitConflict("another writer committed first")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(t.log, "commit", conflict)
        with pytest.raises(CommitConflict):
            t.apply(_load(300))
    assert sorted(p for p in (tmp_path / "t").rglob("*") if p.is_file()) == before
    assert t.log.commit == real
    model = _Model()
    model.apply(_load(300))
    t.apply(_load(300))
    assert _bulk_buckets(t, 1) == [0, 1]
    assert _rows(t) == model.states[1] == _rows(open_table(tmp_path / "t"))


def test_prepared_in_one_process_committed_in_another(tmp_path: Path) -> None:
    """Executors mode: a worker's table prepares, the driver's table commits, and the
    worker's table goes on from its own bulk tablet."""
    from cdc_sink.batch import ChangeBatch

    driver = create_table(tmp_path / "t", SCHEMA, options=OPTS)
    worker = open_table(tmp_path / "t", options=OPTS)
    model = _Model()
    for i, evs in enumerate((_load(300), _small(1), _small(2))):
        batch, _ = ChangeBatch.from_events(evs, SCHEMA)
        txn = driver.transaction()
        prepared = [
            core_of(worker).prepare_bucket(b, txn.version, part)
            for b, part in sorted(batch.split_by_bucket().items())
        ]
        assert all((p.segment is None) == (i == 0) for p in prepared)
        txn.add_prepared(prepared)
        txn.commit()
        model.apply(evs)
        assert _rows(driver) == model.states[-1]
        assert _rows(worker) == model.states[-1]
    assert _rows(open_table(tmp_path / "t")) == model.states[-1]
