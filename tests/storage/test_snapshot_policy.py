"""When the writer snapshots a bucket: after ``snapshot_every`` versions changed it, or
once its WAL segments since the last snapshot pass ``snapshot_bytes``, counting what a
reopened writer replayed, so that loading a bucket replays a bounded amount."""

from __future__ import annotations

import os
from pathlib import Path

from cdc_sink.table import Table, TableOptions, create_table, open_table

SCHEMA = {
    "columns": [{"name": "id", "type": "int64", "nullable": False},
                {"name": "a", "type": "int64"}, {"name": "b", "type": "string"}],
    "primary_key": ["id"], "num_buckets": 1,
}


def _events(n: int, tag: int) -> list[dict[str, object]]:
    return [{"op": "upsert", "key": {"id": k}, "set": {"a": k + tag, "b": f"row {k} {tag}" * 4}}
            for k in range(n)]


def _replayed_bytes(t: Table, version: int) -> int:
    """WAL bytes a cold load of bucket 0 at ``version`` replays."""
    snap = t._history.snapshot_at(0, version)
    start = snap[0] if snap else -1
    return sum(os.path.getsize(os.path.join(t.root, rel))
               for _, rel in t._history.segments_between(0, start, version))


def _snapshot_versions(t: Table) -> list[int]:
    return [v for v in range(1, t.version + 1)
            if (ref := t.log.read(v).buckets.get(0)) is not None and ref.snapshot]


def test_wal_bytes_since_the_last_snapshot_stay_bounded(tmp_path: Path) -> None:
    opts = TableOptions(page_rows=64, snapshot_every=1000, snapshot_bytes=4_000,
                        retain_versions=1000, retain_seconds=0.0)
    t = create_table(tmp_path / "t", SCHEMA, options=opts)
    sizes = []
    for i in range(12):
        t.apply(_events(200, i))
        seg = t.log.read(t.version).buckets[0].segment
        assert seg is not None
        sizes.append(os.path.getsize(os.path.join(t.root, seg)))
    assert sum(sizes) > 3 * opts.snapshot_bytes  # the policy had to act several times
    assert len(_snapshot_versions(t)) >= 2
    for v in range(1, t.version + 1):  # never more than the threshold plus one segment
        assert _replayed_bytes(t, v) < opts.snapshot_bytes + max(sizes)
    want = t.read().sort_by("id")
    assert open_table(tmp_path / "t").read().sort_by("id").equals(want)


def test_a_reopened_writer_counts_the_segments_it_replayed(tmp_path: Path) -> None:
    opts = TableOptions(page_rows=64, snapshot_every=5, snapshot_bytes=1 << 40,
                        retain_versions=1000, retain_seconds=0.0)
    t = create_table(tmp_path / "t", SCHEMA, options=opts)
    for i in range(3):
        t.apply(_events(10, i))
    assert _snapshot_versions(t) == []
    t = open_table(tmp_path / "t", options=opts)  # 3 segments since no snapshot
    t.apply(_events(10, 3))
    assert _snapshot_versions(t) == []
    t.apply(_events(10, 4))  # the 5th segment since the last snapshot: snapshot now
    assert _snapshot_versions(t) == [t.version]
    assert t.read().sort_by("id").equals(
        open_table(tmp_path / "t").read().sort_by("id"))
