"""A table's data on each backend (a directory and the S3 server), the same assertions on
both: the durability workload's batches applied (WAL segments, snapshots of tiny pages,
bulk writes and rejects files written to the store), every version read back equal to
the model (time travel), a fresh reader opened by URL seeing the same rows and rejects,
compaction, a replayed batch skipped, the dead-letter cursor kept in the store, and (on
an object store) a warm read served by the cache of immutable objects."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from cdc_sink.dead_letters import forward
from cdc_sink.engine import core_of
from cdc_sink.storage.layout import kind_of
from cdc_sink.storage.objectstore.cache import CachingStore
from cdc_sink.storage.snapshot import read_manifest
from cdc_sink.table import Table, TableOptions, create_table, open_table
from cdc_sink_testkit.faults import FaultStore
from tests.durability import checks, workload
from tests.objectstore.conftest import Target

SEED = 7
BATCHES = 8

OPTS = TableOptions.for_tests()
"""Tiny pages, a snapshot every 3 versions of a bucket, bulk writes of 4 events or more."""

IMMUTABLE = ("segment", "snapshot", "pages", "rejects")
"""The kinds of objects written once under a name of their own."""


def _open(target: Target) -> Table:
    return open_table(target.url, options=OPTS, storage_options=target.options or None)


@pytest.fixture
def written(target: Target) -> tuple[Table, list[Any]]:
    """The workload's batches committed to a new table on ``target``; the results."""
    table = create_table(
        target.url, workload.schema(), options=OPTS, storage_options=target.options or None
    )
    results = [
        table.apply(workload.batch(SEED, i), app_id=workload.APP_ID, batch_id=i)
        for i in range(BATCHES)
    ]
    return table, results


def test_every_version_reads_as_the_model(written: tuple[Table, list[Any]]) -> None:
    table, results = written
    assert [r.version for r in results] == list(range(1, BATCHES + 1))
    expected = checks.model_after([workload.batch(SEED, i) for i in range(BATCHES)])
    for v in range(BATCHES + 1):
        assert checks.rows_of(table.read(version=v)) == expected[v], v


def test_a_reader_opened_by_url_sees_the_same_versions_and_rejects(
    written: tuple[Table, list[Any]], target: Target
) -> None:
    table, results = written
    reader = _open(target)
    assert reader.version == BATCHES
    for v in range(BATCHES + 1):
        assert checks.content_digest(reader.read(version=v)) == checks.content_digest(
            table.read(version=v)
        )
    for r in results:
        rejects = reader.rejects(r.version)
        assert rejects.column("position").to_pylist() == r.rejects.positions.tolist()
        assert rejects.column("reason").to_pylist() == list(r.rejects.reasons)


def test_every_file_a_version_names_is_in_the_store(
    written: tuple[Table, list[Any]], target: Target
) -> None:
    table, _ = written
    named: set[str] = set()
    for entry in table.log.entries():
        for ref in entry.buckets.values():
            named.update(f for f in (ref.segment, ref.snapshot) if f)
            if ref.snapshot:
                named.update(read_manifest(table.store, ref.snapshot).files)
        if entry.rejects:
            named.add(entry.rejects)
    stored = {k for k in target.open().list_keys() if kind_of(k) in IMMUTABLE}
    assert named == stored
    assert {kind_of(k) for k in named} == set(IMMUTABLE)


def test_compaction_keeps_every_version(written: tuple[Table, list[Any]], target: Target) -> None:
    table, _ = written
    before = [checks.content_digest(table.read(version=v)) for v in range(BATCHES + 1)]
    v = table.compact()
    reader = _open(target)
    assert reader.version == v
    after = [checks.content_digest(reader.read(version=u)) for u in range(v + 1)]
    assert after == [*before, before[-1]]


def test_a_replayed_batch_is_skipped(written: tuple[Table, list[Any]], target: Target) -> None:
    res = _open(target).apply(workload.batch(SEED, 3), app_id=workload.APP_ID, batch_id=3)
    assert (res.skipped, res.version) == (True, BATCHES)


class _PlainSink:
    """A dead-letter sink keeping no cursor of its own (forward keeps one in the table)."""

    def __init__(self) -> None:
        self.records: list[pa.Table] = []

    def write(self, records: pa.Table) -> None:
        self.records.append(records)

    def __repr__(self) -> str:
        return "_PlainSink()"


def test_the_dead_letter_cursor_lives_in_the_store(
    written: tuple[Table, list[Any]], target: Target
) -> None:
    table, results = written
    sink = _PlainSink()
    sent = forward(table, sink, workload.APP_ID)
    assert sent == sum(len(r.rejects.reasons) for r in results) > 0
    assert [k for k in target.open().list_keys("_dead_letters") if k.endswith(".cursor")]
    again = _PlainSink()
    assert forward(_open(target), again, workload.APP_ID) == 0
    assert again.records == []


def test_a_warm_read_fetches_no_immutable_object_again(
    written: tuple[Table, list[Any]], target: Target
) -> None:
    if target.backend == "local":  # files: read through the page cache and memory maps
        assert not isinstance(_open(target).store, CachingStore)
        return
    spy = FaultStore(target.open())  # no faults: it logs every call
    reader = Table(target.url, options=OPTS, store=spy)
    assert isinstance(reader.store, CachingStore)
    versions = range(BATCHES + 1)
    first = [checks.content_digest(reader.read(version=v)) for v in versions]
    fetched = [c for c in spy.calls if kind_of(c.key) in IMMUTABLE and c.op != "list"]
    assert {kind_of(c.key) for c in fetched} >= {"segment", "snapshot", "pages"}
    core_of(reader).forget_read_tablets()  # the tablets loaded for that read: load them again
    spy.calls.clear()
    again = [checks.content_digest(reader.read(version=v)) for v in versions]
    assert again == first
    assert [c for c in spy.calls if kind_of(c.key) in IMMUTABLE and c.op != "list"] == []
