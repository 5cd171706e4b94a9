"""Rejects are durable with the version that refused them, and reach dead-letter sinks
exactly once (storage/rejects.py, Table.rejects, dead_letters.forward)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from cdc_sink.batch import Rejects
from cdc_sink.dead_letters import forward
from cdc_sink.errors import CommitConflict, VersionNotFound
from cdc_sink.kafka.deadletter import ParquetDeadLetter
from cdc_sink.storage.rejects import REJECTS_DIR, REJECTS_SCHEMA, batch_reject_records
from cdc_sink.table import Table, TableOptions, create_table, open_table
from tests.fixtures import ID_A

SCHEMA = ID_A

BAD = [
    {"op": "insert", "key": {"id": 1}, "set": {"a": "x"}},
    {"op": "update", "key": {"id": 2}, "set": {"a": "y"}},  # tablet: missing key
    {"op": "insert", "key": {"id": 3}, "set": {"zz": 1}},  # schema: unknown column
]


def _source(n: int) -> pa.Table:
    return pa.table(
        {
            "topic": ["t"] * n,
            "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(100, 100 + n), pa.int64()),
            "key": [f"k{i}".encode() for i in range(n)],
            "value": [f"v{i}".encode() for i in range(n)],
        }
    )


@pytest.fixture
def table(tmp_path: Path) -> Table:
    return create_table(tmp_path / "t", SCHEMA, options=TableOptions.for_tests())


def test_a_version_records_every_reject_with_its_source_and_reason(table: Table) -> None:
    res = table.apply(
        BAD, app_id="job", batch_id=0, source=_source(3), source_offsets={"t": {"0": 103}}
    )
    rej = table.rejects(res.version)
    assert rej.column("position").to_pylist() == [1, 2]
    assert rej.column("offset").to_pylist() == [101, 102]
    assert rej.column("value").to_pylist() == [b"v1", b"v2"]
    assert rej.column("reason").to_pylist() == ["update of missing key", "unknown column 'zz'"]
    assert set(rej.column("app_id").to_pylist()) == {"job"}
    assert set(rej.column("batch_id").to_pylist()) == {0}
    assert table.log.read(res.version).source_offsets == {"t": {"0": 103}}


def test_rejects_survive_reopen_and_clean_versions_have_none(table: Table) -> None:
    res = table.apply(BAD, app_id="job", batch_id=0)
    clean = table.apply(BAD[:1], app_id="job", batch_id=1)
    again = open_table(table.root)
    assert again.rejects(res.version).num_rows == 2
    assert again.rejects(clean.version).num_rows == 0
    assert again.rejects(clean.version).schema.names[: len(REJECTS_SCHEMA)] == REJECTS_SCHEMA.names
    with pytest.raises(VersionNotFound):
        again.rejects(clean.version + 1)


def test_a_replayed_batch_keeps_the_first_commits_rejects(table: Table) -> None:
    res = table.apply(BAD, app_id="job", batch_id=0)
    replay = table.apply(BAD, app_id="job", batch_id=0)
    assert replay.skipped
    assert table.rejects(res.version).num_rows == 2
    assert len(os.listdir(os.path.join(table.root, REJECTS_DIR))) == 1


def test_a_lost_commit_race_leaves_no_rejects_file(table: Table) -> None:
    other = open_table(table.root)
    txn = table.transaction(app_id="job", batch_id=0)
    txn.prepare([(0, _one_event_batch(table))])
    other.apply(BAD[:1], app_id="other", batch_id=0)  # wins version txn.version
    with pytest.raises(CommitConflict):
        txn.commit(rejects=pa.table({"reason": ["r"]}))
    txn.abort()
    assert os.listdir(os.path.join(table.root, REJECTS_DIR)) == []


def _one_event_batch(table: Table) -> Any:
    from cdc_sink.batch import ChangeBatch

    batch, _ = ChangeBatch.from_events(
        [{"op": "insert", "key": {"id": 9}, "set": {}}], table.schema
    )
    return batch.split_by_bucket()[next(iter(batch.split_by_bucket()))]


def test_gc_deletes_rejects_below_the_horizon_and_orphans_only(table: Table) -> None:
    first = table.apply(BAD, app_id="job", batch_id=0)
    for i in range(1, 4):
        table.apply(BAD, app_id="job", batch_id=i)
    orphan = Path(table.root, REJECTS_DIR, f"{first.version:020d}-deadbeef0000.arrow")
    orphan.write_bytes(b"left by a crashed attempt")
    planned = table.gc(dry_run=True, retain_versions=2)
    assert str(orphan) in planned
    deleted = table.gc(dry_run=False, retain_versions=2)
    assert set(planned) == set(deleted)
    left = sorted(os.listdir(os.path.join(table.root, REJECTS_DIR)))
    assert len(left) == 2  # the two retained versions
    assert table.rejects(table.version).num_rows == 2
    with pytest.raises(VersionNotFound):
        table.rejects(first.version)


def test_parquet_forwarding_is_exactly_once_across_repeats(table: Table, tmp_path: Path) -> None:
    for i in range(3):
        table.apply(BAD, app_id="job", batch_id=i, source=_source(3))
    table.apply(BAD, app_id="someone-else", batch_id=0)
    sink = ParquetDeadLetter(tmp_path / "dlq")
    assert forward(table, sink, "job") == 6
    assert forward(table, sink, "job") == 0  # a replay after a crash: nothing twice
    table.apply(BAD, app_id="job", batch_id=3, source=_source(3))
    assert forward(table, sink, "job") == 2
    got = sink.read(deduplicate=False)
    assert got.num_rows == 8
    assert set(got.column("app_id").to_pylist()) == {"job"}
    assert sorted(got.column("batch_id").to_pylist()) == [0, 0, 1, 1, 2, 2, 3, 3]


def test_forwarding_resumes_after_a_crash_between_versions(table: Table, tmp_path: Path) -> None:
    for i in range(3):
        table.apply(BAD, app_id="job", batch_id=i)

    class Crashy(ParquetDeadLetter):
        calls = 0

        def write_version(self, records: pa.Table, *, app_id: str, version: int) -> None:
            Crashy.calls += 1
            if Crashy.calls == 2:
                raise OSError("disk gone")
            super().write_version(records, app_id=app_id, version=version)

    with pytest.raises(OSError):
        forward(table, Crashy(tmp_path / "dlq"), "job")
    assert forward(table, ParquetDeadLetter(tmp_path / "dlq"), "job") == 4
    assert ParquetDeadLetter(tmp_path / "dlq").read(deduplicate=False).num_rows == 6


def test_a_sink_with_only_write_gets_a_cursor(table: Table) -> None:
    class ListSink:
        def __init__(self) -> None:
            self.rows: list[dict[str, Any]] = []

        def write(self, records: pa.Table) -> None:
            self.rows += records.to_pylist()

    s = ListSink()
    table.apply(BAD, app_id="job", batch_id=0)
    assert forward(table, s, "job") == 2
    assert forward(table, s, "job") == 0
    assert [r["reason"] for r in s.rows] == ["update of missing key", "unknown column 'zz'"]


def test_forwarding_starts_after_what_this_process_checked(table: Table, tmp_path: Path) -> None:
    table.apply(BAD, app_id="job", batch_id=0)
    sink = ParquetDeadLetter(tmp_path / "dlq")
    assert forward(table, sink, "job") == 2
    for i in range(1, 4):
        table.apply(BAD[:1], app_id="job", batch_id=i)  # clean: the sink's cursor stays
    checked = table.version
    table.apply(BAD, app_id="job", batch_id=4)
    seen: list[int] = []
    real = table.log.entries

    def spy(from_version: int | None = None, to_version: int | None = None) -> Any:
        seen.append(from_version or 0)
        return real(from_version=from_version, to_version=to_version)

    table.log.entries = spy  # type: ignore[method-assign]
    assert forward(table, sink, "job", checked=checked) == 2
    assert seen == [checked + 1]


def test_gc_keeps_versions_whose_rejects_are_not_forwarded(table: Table, tmp_path: Path) -> None:
    """A dead-letter sink that is down holds GC back (keep_from) instead of losing the
    rejects of the versions it has not received; once it is back, all of them arrive."""
    sink = ParquetDeadLetter(tmp_path / "dlq")
    table.apply(BAD, app_id="job", batch_id=0, source=_source(3))
    assert forward(table, sink, "job") == 2
    floor = table.version + 1  # the sink goes down: nothing after this is forwarded
    for i in range(1, 6):
        table.apply(BAD, app_id="job", batch_id=i, source=_source(3))
    table.gc(dry_run=False, retain_versions=1, keep_from=floor)
    assert table.oldest_version <= floor
    assert forward(table, sink, "job") == 10  # every version the outage held back
    got = sink.read(deduplicate=False)
    assert sorted(got.column("batch_id").to_pylist()) == sorted([0, 1, 2, 3, 4, 5] * 2)
    table.gc(dry_run=False, retain_versions=1, keep_from=table.version + 1)
    assert table.oldest_version == table.version  # forwarded: retention applies again


def test_the_sinks_gc_floor_follows_what_it_forwarded(table: Table, tmp_path: Path) -> None:
    from cdc_sink.spark.writer import SinkFunction, SinkOptions

    class Down(ParquetDeadLetter):
        up = False

        def write_version(self, records: pa.Table, *, app_id: str, version: int) -> None:
            if not Down.up:
                raise OSError("dead-letter sink down")
            super().write_version(records, app_id=app_id, version=version)

    table.apply(BAD, app_id="job", batch_id=0, source=_source(3))
    fn = SinkFunction(
        table.root, options=SinkOptions(app_id="job"), dead_letter=Down(tmp_path / "dlq")
    )
    assert fn.gc_floor() == fn.table.oldest_version  # nothing known forwarded yet
    fn.writer._forward()  # fails, logged: the rejects stay in the table
    assert fn.gc_floor() == fn.table.oldest_version
    Down.up = True
    fn.writer._forward()
    assert fn.gc_floor() == fn.table.version + 1
    no_sink = SinkFunction(table.root, options=SinkOptions(app_id="job"))
    assert no_sink.gc_floor() is None


def test_batch_reject_records_merges_the_stages_in_position_order_with_their_source() -> None:
    decoder = Rejects(np.array([4, 1], np.int64), ["not JSON", "no key"])
    tablets = Rejects(np.array([2, 4], np.int64), ["update of missing key", "stale seq"])
    records, merged = batch_reject_records(decoder, tablets, source=_source(5))
    assert merged.positions.tolist() == [1, 2, 4, 4]
    # stable: at one position, the earlier stage's reason first
    assert merged.reasons == ["no key", "update of missing key", "not JSON", "stale seq"]
    assert records.schema.equals(REJECTS_SCHEMA)
    assert records.column("position").to_pylist() == [1, 2, 4, 4]
    assert records.column("reason").to_pylist() == merged.reasons
    assert records.column("offset").to_pylist() == [101, 102, 104, 104]
    assert records.column("key").to_pylist() == [b"k1", b"k2", b"k4", b"k4"]
    # the stages' own rejects are left as they were
    assert decoder.positions.tolist() == [4, 1] and tablets.reasons[0] == "update of missing key"


def test_batch_reject_records_without_a_source_or_rejects() -> None:
    records, merged = batch_reject_records(Rejects(), Rejects(np.array([3], np.int64), ["x"]))
    assert records.column("topic").to_pylist() == [None]
    assert merged.as_dict() == {3: "x"}
    empty, none = batch_reject_records()
    assert empty.num_rows == 0 and len(none) == 0
