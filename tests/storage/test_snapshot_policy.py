"""When the writer snapshots a bucket: after ``snapshot_every`` versions changed it, or
once its WAL segments since the last snapshot hold ``snapshot_events`` events or
``snapshot_wal_bytes`` bytes (decompressed), counting what a reopened writer replayed,
so that loading a bucket, at the newest version or an older one, replays a bounded
amount."""

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


def _replayed(t: Table, version: int) -> list[tuple[int, int]]:
    """(events, bytes decompressed) of each segment a cold load of bucket 0 at
    ``version`` replays."""
    snap = core_of(t).history.snapshot_at(0, version)
    start = snap[0] if snap else -1
    schema = TableSchema.from_dict(SCHEMA)
    out = []
    for _, rel in core_of(t).history.segments_between(0, start, version):
        header, batch = read_change_segment(t.root, rel, schema)
        out.append((len(batch), header.bytes or 0))
    return out


def _replayed_events(t: Table, version: int) -> int:
    """Events a cold load of bucket 0 at ``version`` replays."""
    return sum(n for n, _ in _replayed(t, version))


def _byte_bound(wal_bytes: int) -> TableOptions:
    """Options under which only ``snapshot_wal_bytes`` makes the writer snapshot."""
    return TableOptions(
        page_rows=64,
        snapshot_every=1000,
        snapshot_events=10**12,
        snapshot_wal_bytes=wal_bytes,
        **KEEP_VERSIONS,
    )


def _wide(n: int, tag: int, width: int) -> list[dict[str, object]]:
    return [
        {"op": "upsert", "key": {"id": k}, "set": {"a": k, "b": f"{tag}:" + "x" * width}}
        for k in range(n)
    ]


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


def test_wide_events_snapshot_by_bytes_and_old_versions_replay_no_more(tmp_path: Path) -> None:
    """Few events of wide values: the byte bound acts where the event bound never
    would, and a cold read of any version (the newest, or one between two snapshots)
    replays less than the bound plus one batch."""
    opts = _byte_bound(200_000)
    t = create_table(tmp_path / "t", SCHEMA, options=opts)
    widths = [4_000, 500, 9_000, 2_000, 2_000, 12_000, 300, 3_000, 3_000, 7_000, 9_000, 6_000]
    for i, w in enumerate(widths):
        t.apply(_wide(10, i, w))
    assert len(_snapshot_versions(t)) >= 2
    batch_bytes = max(b for v in range(1, t.version + 1) for _, b in _replayed(t, v))
    for v in range(1, t.version + 1):
        assert sum(b for _, b in _replayed(t, v)) < opts.snapshot_wal_bytes + batch_bytes
    assert open_table(tmp_path / "t").read().sort_by("id").equals(t.read().sort_by("id"))


def test_a_reopened_writer_counts_the_bytes_it_replayed(tmp_path: Path) -> None:
    opts = _byte_bound(150_000)
    t = create_table(tmp_path / "t", SCHEMA, options=opts)
    t.apply(_wide(10, 0, 6_000))
    t.apply(_wide(10, 1, 6_000))
    assert _snapshot_versions(t) == []
    replayed = sum(b for _, b in _replayed(t, t.version))
    assert 100_000 < replayed < 150_000
    t = open_table(tmp_path / "t", options=opts)
    t.apply(_wide(10, 2, 6_000))  # past the bound only with what the reopen replayed
    assert _snapshot_versions(t) == [t.version]
