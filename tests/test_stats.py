"""Table statistics: ``Table.stats()`` (memory and disk figures) and ``cdc-sink stats``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import cdc_sink
from cdc_sink.cli import main
from cdc_sink.stats import disk_usage
from tests.fixtures import ID_V

SCHEMA = {**ID_V, "num_buckets": 3}


def _files(root: Path, sub: str) -> tuple[int, int]:
    paths = [p for p in (root / sub).rglob("*") if p.is_file()]
    return len(paths), sum(p.stat().st_size for p in paths)


@pytest.fixture
def table_dir(tmp_path: Path) -> Path:
    t = cdc_sink.create_table(tmp_path / "t", SCHEMA, options=cdc_sink.TableOptions.for_tests())
    for i in range(6):
        t.apply(
            [
                {"op": "upsert", "key": {"id": j}, "set": {"v": f"{i}"}}
                for j in range(i * 10, i * 10 + 30)
            ]
        )
    t.apply([{"op": "delete", "key": {"id": j}} for j in range(5)])
    return tmp_path / "t"


def test_stats_of_a_writer_match_its_reads_and_its_directory(table_dir: Path) -> None:
    t = cdc_sink.open_table(table_dir, options=cdc_sink.TableOptions.for_tests())
    assert t.stats().loaded_buckets == 0  # a fresh reader holds no tablet
    st = t.stats(load=True)
    assert (st.version, st.oldest_version, st.num_buckets) == (t.version, t.oldest_version, 3)
    assert st.loaded_buckets == 3
    assert st.live_rows == t.read().num_rows == 80 - 5  # ids 0..79, 5 deleted
    assert st.memory_bytes > 0
    assert (st.wal_files, st.wal_bytes) == _files(table_dir, "_wal")
    snap = [_files(table_dir, d) for d in ("_snapshots", "_pages")]
    assert st.snapshot_files == snap[0][0] + snap[1][0] > 0
    assert st.snapshot_bytes == snap[0][1] + snap[1][1]
    assert (st.log_files, st.log_bytes) == _files(table_dir, "_log")
    assert sum(b.live_rows for b in st.buckets) == st.live_rows
    assert st.outstanding_delta_versions == max(b.delta_versions for b in st.buckets)


def test_disk_walk_is_cached_for_max_age(table_dir: Path) -> None:
    first = disk_usage(table_dir, max_age=3600)
    (table_dir / "_wal" / "0" / "extra.bin").write_bytes(b"x" * 100)
    assert disk_usage(table_dir, max_age=3600) is first
    fresh = disk_usage(table_dir, max_age=0)
    assert fresh.wal[0][1] == first.wal[0][1] + 100
    os.unlink(table_dir / "_wal" / "0" / "extra.bin")


def test_cdc_sink_stats_json(table_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stats", str(table_dir), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["live_rows"] == 75 and got["num_buckets"] == 3
    assert [b["bucket"] for b in got["buckets"]] == [0, 1, 2]


def test_cdc_sink_stats_table(table_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stats", str(table_dir)]) == 0
    out = capsys.readouterr().out
    assert "live rows" in out and "75" in out and "outstanding delta versions" in out


def test_cdc_sink_stats_of_no_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stats", str(tmp_path)]) == 1
    assert "no cdc_sink table" in capsys.readouterr().err


def test_remote_bucket_figures_fill_the_buckets_this_process_does_not_hold(table_dir: Path) -> None:
    from cdc_sink.stats import BucketFigures, with_remote_buckets

    t = cdc_sink.open_table(table_dir)
    t.read(version=t.version)  # a reader: still holds no writer tablet
    st = t.stats()
    assert st.loaded_buckets == 0 and st.live_rows == 0
    got = with_remote_buckets(st, {0: BucketFigures(10, 1000, 2), 2: BucketFigures(5, 500, 7)})
    assert (got.loaded_buckets, got.live_rows, got.memory_bytes) == (2, 15, 1500)
    assert got.outstanding_delta_versions == 7
    assert [b.loaded for b in got.buckets] == [True, False, True]
    assert got.wal_bytes == st.wal_bytes  # disk figures unchanged
    assert with_remote_buckets(st, {}) is st
