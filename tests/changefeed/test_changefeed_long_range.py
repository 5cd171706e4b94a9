"""A change feed read over a long range by a reader that is not the writer: its own tablet
is compacted as it replays (so a gather walks few deltas and the cost stays linear in the
range), and the records are those of the range read version by version."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest

import cdc_sink
from cdc_sink import TableOptions
from cdc_sink.tablet import MemTablet
from tests.changefeed.stream_copy import SCHEMA, random_batch


def _sorted(t: pa.Table) -> pa.Table:
    return t.sort_by(
        [("_commit_version", "ascending"), ("id", "ascending"), ("_change_type", "ascending")]
    )


def test_long_range_read_compacts_the_readers_tablet_and_reads_every_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opts = TableOptions(page_rows=16, memory_versions=4, snapshot_every=50, compact_every=4)
    writer = cdc_sink.create_table(tmp_path / "t", SCHEMA, options=opts)
    rng, next_id = random.Random(11), 0
    for _ in range(40):
        events, next_id = random_batch(rng, next_id, rng.randrange(5, 30))
        writer.apply(events)
    compactions: list[int] = []
    compact = MemTablet.compact

    def counting(self: MemTablet, version: int | None = None) -> int:
        compactions.append(version if version is not None else self.committed)
        return compact(self, version)

    reader = cdc_sink.open_table(tmp_path / "t", options=opts)
    monkeypatch.setattr(MemTablet, "compact", counting)
    whole = reader.changes(0, 40, buckets=[0])
    monkeypatch.setattr(MemTablet, "compact", compact)
    assert len(compactions) >= 40 // opts.compact_every - 1
    one_by_one = pa.concat_tables(
        [cdc_sink.open_table(tmp_path / "t").changes(v - 1, v, buckets=[0]) for v in range(1, 41)]
    )
    assert _sorted(whole).equals(_sorted(one_by_one))
