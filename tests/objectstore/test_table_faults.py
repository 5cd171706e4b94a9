"""A table writing through the test kit's ``FaultStore`` on each backend (a directory and
the S3 server), the same assertions on both: a failed or torn write of an attempt's own
file leaves nothing visible and nothing behind, and the batch commits when retried; a
commit whose answer is lost (the entry was created, the writer heard an error) is
committed, is seen by a fresh reader, and its retry is skipped."""

from __future__ import annotations

import pytest

from cdc_sink.storage.layout import kind_of
from cdc_sink.storage.objectstore import StoreIOError
from cdc_sink.table import Table, TableOptions, create_table, open_table
from cdc_sink_testkit.faults import FaultStore
from tests.durability import checks, workload
from tests.objectstore.conftest import Target

SEED = 5
OPTS = TableOptions.for_tests()


def _faulty(target: Target, committed: int) -> tuple[Table, FaultStore]:
    """A table on ``target`` with ``committed`` batches, reopened over a FaultStore."""
    table = create_table(
        target.url, workload.schema(), options=OPTS, storage_options=target.options or None
    )
    for i in range(committed):
        table.apply(workload.batch(SEED, i), app_id=workload.APP_ID, batch_id=i)
    store = FaultStore(target.open())
    return Table(table.root, options=OPTS, store=store), store


def _apply(table: Table, i: int) -> int:
    return table.apply(workload.batch(SEED, i), app_id=workload.APP_ID, batch_id=i).version


def _attempt_files(target: Target) -> set[str]:
    kinds = ("segment", "rejects", "snapshot", "pages")
    return {k for k in target.open().list_keys() if kind_of(k) in kinds}


def _check(target: Target, batches: int) -> None:
    """A fresh reader sees ``batches`` batches, each version as the model."""
    reader = open_table(target.url, options=OPTS, storage_options=target.options or None)
    expected = checks.model_after([workload.batch(SEED, i) for i in range(batches)])
    assert reader.version == batches
    for v in range(reader.oldest_version, batches + 1):
        assert checks.rows_of(reader.read(version=v)) == expected[v], v


@pytest.mark.parametrize(
    "prefix",
    ["_wal/", "_rejects/"],
)
def test_a_failed_write_of_an_attempts_file_leaves_nothing_and_the_retry_commits(
    target: Target, prefix: str
) -> None:
    table, store = _faulty(target, 2)
    before = _attempt_files(target)
    store.fail("put_new", key=lambda k: k.startswith(prefix))
    with pytest.raises(StoreIOError):
        _apply(table, 2)
    assert table.version == 2
    assert _attempt_files(target) == before
    assert _apply(table, 2) == 3
    _check(target, 3)


def test_a_torn_page_file_leaves_nothing_visible_and_the_retry_commits(target: Target) -> None:
    table, store = _faulty(target, 2)  # a snapshot is due at the third version of a bucket
    before = set(target.open().list_keys("_pages"))
    store.tear("put_new", keep=0.5, key=lambda k: k.startswith("_pages/"))
    with pytest.raises(StoreIOError):
        _apply(table, 2)
    assert table.version == 2
    assert set(target.open().list_keys("_pages")) == before
    assert _apply(table, 2) == 3
    _check(target, 3)


def test_a_commit_whose_answer_is_lost_is_committed_and_its_retry_skipped(
    target: Target,
) -> None:
    table, store = _faulty(target, 2)
    store.fail("put_if_absent", key=lambda k: k.startswith("_log/"), after=True)
    with pytest.raises(StoreIOError):
        _apply(table, 2)
    assert table.version == 3  # the writer read the log back and found its entry
    retry = table.apply(workload.batch(SEED, 2), app_id=workload.APP_ID, batch_id=2)
    assert (retry.skipped, retry.version) == (True, 3)
    assert _apply(table, 3) == 4
    _check(target, 4)
