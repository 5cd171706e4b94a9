"""The commit object every writer goes through (cdc_sink/transaction.py): decide (a
replayed batch is skipped), prepare here or take what another process prepared, the
requirements checked before anything is written, commit, abort on any error, roll back
for another attempt at the same version; and a closed transaction refuses more work."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from cdc_sink import create_table, open_table
from cdc_sink.batch import ChangeBatch
from cdc_sink.engine import core_of
from cdc_sink.errors import CommitConflict, InvalidOption
from cdc_sink.table import Table, TableOptions
from cdc_sink.transaction import AssertBatchNotCommitted, AssertLogAt
from tests.fixtures import ID_A_B
from tests.model import table_to_rows


def _parts(table: Table, events: list[dict[str, Any]]) -> list[tuple[int, ChangeBatch]]:
    batch, rejects = ChangeBatch.from_events(events, table.schema)
    assert not len(rejects)
    return sorted(batch.split_by_bucket().items())


def _upserts(lo: int, hi: int, a: int) -> list[dict[str, Any]]:
    return [{"op": "upsert", "key": {"id": i}, "set": {"a": a}} for i in range(lo, hi)]


def _files(root: str) -> set[str]:
    return {os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs}


@pytest.fixture
def table(tmp_path: Path) -> Table:
    return create_table(tmp_path / "t", ID_A_B, options=TableOptions.for_tests())


def test_a_committed_batch_makes_the_next_transaction_of_it_skipped(table: Table) -> None:
    txn = table.transaction(app_id="job", batch_id=3)
    assert txn.state == "open" and txn.version == 1
    assert txn.requirements == (AssertLogAt(0), AssertBatchNotCommitted("job", 3))
    txn.prepare(_parts(table, _upserts(0, 5, 1)))
    assert txn.commit(events=5).version == 1
    for batch_id in (2, 3):  # an older or the same batch of the writer: a replay
        again = table.transaction(app_id="job", batch_id=batch_id)
        assert again.skipped and again.latest == 1
        with pytest.raises(InvalidOption, match="skipped"):
            again.prepare(_parts(table, _upserts(0, 1, 9)))
    assert not table.transaction(app_id="job", batch_id=4).skipped
    assert not table.transaction(app_id="other", batch_id=0).skipped


def test_an_error_inside_the_block_aborts_and_leaves_nothing(table: Table) -> None:
    before = _files(table.root)
    with pytest.raises(RuntimeError, match="boom"), table.transaction() as txn:
        txn.prepare(_parts(table, _upserts(0, 20, 1)))
        assert _files(table.root) != before  # the segments are written...
        raise RuntimeError("boom")
    assert txn.state == "aborted"
    assert _files(table.root) == before  # ...and removed again
    assert table.version == 0
    assert all(core_of(table).tablet(b).pending_version is None for b in range(2))
    assert table.read().num_rows == 0


def test_a_requirement_that_fails_raises_before_the_commit_writes(
    table: Table, tmp_path: Path
) -> None:
    txn = table.transaction(app_id="job", batch_id=0)
    txn.prepare(_parts(table, _upserts(0, 4, 1)))
    other = open_table(tmp_path / "t")
    other.apply(_upserts(10, 12, 2), app_id="other", batch_id=0)  # takes version 1
    table.version  # noqa: B018  (this process now sees version 1)
    entries = sorted(os.listdir(os.path.join(table.root, "_log")))
    with pytest.raises(CommitConflict, match="moved from version 0 to 1"):
        txn.commit(events=4)
    assert sorted(os.listdir(os.path.join(table.root, "_log"))) == entries
    txn.abort()
    assert table_to_rows(table.read(), ["id"]) == table_to_rows(other.read(), ["id"])
    assert sorted(r["id"] for r in table.read().to_pylist()) == [10, 11]


def test_the_same_batch_committed_by_another_process_is_a_conflict(
    table: Table, tmp_path: Path
) -> None:
    txn = table.transaction(app_id="job", batch_id=0)
    txn.prepare(_parts(table, _upserts(0, 4, 1)))
    twin = open_table(tmp_path / "t")
    twin.apply(_upserts(0, 4, 1), app_id="job", batch_id=0)  # a zombie's twin won
    with pytest.raises(CommitConflict):
        txn.commit(events=4)
    txn.abort()
    assert table.version == 1 and len(table.versions()) == 2


def test_buckets_prepared_elsewhere_commit_with_the_transaction(
    table: Table, tmp_path: Path
) -> None:
    worker = open_table(tmp_path / "t", options=TableOptions.for_tests())
    txn = table.transaction(app_id="job", batch_id=0)
    prepared = [
        core_of(worker).prepare_bucket(b, txn.version, p)
        for b, p in _parts(table, _upserts(0, 9, 7))
    ]
    txn.add_prepared(prepared)
    assert txn.prepared == prepared
    res = txn.commit(events=9)
    assert res.version == 1 and res.buckets == sorted(p.bucket for p in prepared)
    assert sorted(r["a"] for r in open_table(tmp_path / "t").read().to_pylist()) == [7] * 9


def test_a_bucket_prepared_for_another_version_is_refused(table: Table, tmp_path: Path) -> None:
    worker = open_table(tmp_path / "t")
    txn = table.transaction()
    (b, part), *_ = _parts(table, _upserts(0, 3, 1))
    wrong = core_of(worker).prepare_bucket(b, txn.version, part)
    wrong.version = txn.version + 1
    with pytest.raises(InvalidOption, match="prepared for version 2"):
        txn.add_prepared([wrong])


def test_rollback_keeps_the_transaction_open_for_another_attempt(table: Table) -> None:
    before = _files(table.root)
    txn = table.transaction(app_id="job", batch_id=0)
    txn.prepare(_parts(table, _upserts(0, 6, 1)))
    txn.rollback()
    assert txn.state == "open" and txn.prepared == [] and _files(table.root) == before
    txn.prepare(_parts(table, _upserts(0, 6, 2)))
    assert txn.commit(events=6).version == 1
    assert sorted(r["a"] for r in table.read().to_pylist()) == [2] * 6


def test_a_committed_transaction_takes_no_more_work(table: Table) -> None:
    txn = table.transaction()
    txn.prepare(_parts(table, _upserts(0, 2, 1)))
    txn.commit()
    txn.abort()  # nothing to do once committed
    assert table.version == 1
    with pytest.raises(InvalidOption, match="committed"):
        txn.commit()
    with pytest.raises(InvalidOption, match="committed"):
        txn.prepare(_parts(table, _upserts(0, 2, 1)))


def test_app_id_and_batch_id_go_together(table: Table) -> None:
    with pytest.raises(InvalidOption, match="go together"):
        table.transaction(app_id="job")
    with pytest.raises(InvalidOption, match="go together"):
        table.transaction(batch_id=1)
