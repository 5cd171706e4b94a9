"""When the writer snapshots a bucket: after ``snapshot_every`` versions changed it, or
once its WAL segments since the last snapshot hold ``snapshot_events`` events, counting
what a reopened writer replayed, so that loading a bucket replays a bounded amount."""

from __future__ import annotations

from pathlib import Path

from cdc_sink.engine import core_of
from cdc_sink.schema import TableSchema
from cdc_sink.storage.segments import read_change_segment
from cdc_sink.table import Table, TableOptions, create_table, open_table
from tests.fixtures import ID_A_B, KEEP_VERSIONS

SCHEMA = {**ID_A_B, "num_buckets": 1}


def _events(n: int, tag: int) -> list[dict[str, object]]:
    return [
        {"op": "upsert", "key": {"id": k}, "set": {"a": k + tag, "b": f"row {k} {tag}"}}
        for k in range(n)
    ]


def _replayed_events(t: Table, version: int) -> int:
    """Events a cold load of bucket 0 at ``version`` replays."""
    snap = core_of(t).history.snapshot_at(0, version)
    start = snap[0] if snap else -1
    schema = TableSchema.from_dict(SCHEMA)
    return sum(
        len(read_change_segment(t.root, rel, schema)[1])
        for _, rel in core_of(t).history.segments_between(0, start, version)
    )


def _snapshot_versions(t: Table) -> list[int]:
    return [
        v
        for v in range(1, t.version + 1)
        if (ref := t.log.read(v).buckets.get(0)) is not None and ref.snapshot
    ]


def test_events_since_the_last_snapshot_stay_bounded(tmp_path: Path) -> None:
    opts = TableOptions(
        page_rows=64,
        snapshot_every=1000,
        snapshot_events=500,
        **KEEP_VERSIONS,
    )
    t = create_table(tmp_path / "t", SCHEMA, options=opts)
    sizes = [150, 40, 700, 90, 90, 90, 90, 90, 300, 10, 10, 500, 60]
    for i, n in enumerate(sizes):
        t.apply(_events(n, i))
    assert len(_snapshot_versions(t)) >= 3  # the policy had to act several times
    for v in range(1, t.version + 1):  # never more than the threshold plus one batch
        assert _replayed_events(t, v) < opts.snapshot_events + max(sizes)
    want = t.read().sort_by("id")
    assert open_table(tmp_path / "t").read().sort_by("id").equals(want)


def test_a_reopened_writer_counts_what_it_replayed(tmp_path: Path) -> None:
    opts = TableOptions(
        page_rows=64,
        snapshot_every=5,
        snapshot_events=10**12,
        **KEEP_VERSIONS,
    )
    t = create_table(tmp_path / "t", SCHEMA, options=opts)
    for i in range(3):
        t.apply(_events(10, i))
    assert _snapshot_versions(t) == []
    t = open_table(tmp_path / "t", options=opts)  # 3 segments since no snapshot
    t.apply(_events(10, 3))
    assert _snapshot_versions(t) == []
    t.apply(_events(10, 4))  # the 5th segment since the last snapshot: snapshot now
    assert _snapshot_versions(t) == [t.version]
    assert t.read().sort_by("id").equals(open_table(tmp_path / "t").read().sort_by("id"))


def test_a_reopened_writer_counts_the_events_it_replayed(tmp_path: Path) -> None:
    opts = TableOptions(
        page_rows=64,
        snapshot_every=1000,
        snapshot_events=100,
        **KEEP_VERSIONS,
    )
    t = create_table(tmp_path / "t", SCHEMA, options=opts)
    t.apply(_events(40, 0))
    t.apply(_events(40, 1))
    t = open_table(tmp_path / "t", options=opts)  # 80 events since no snapshot
    t.apply(_events(30, 2))  # 110 >= 100: snapshot the previous version now
    assert _snapshot_versions(t) == [t.version]
