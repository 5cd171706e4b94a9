"""The per-worker table cache shared by the sink's executors mode and the source."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from cdc_sink.errors import TableNotFound
from cdc_sink.spark import _tables
from cdc_sink.spark._tables import TableCache
from cdc_sink.table import TableOptions, create_table

SCHEMA = {
    "columns": [{"name": "id", "type": "int64", "nullable": False}],
    "primary_key": ["id"],
    "num_buckets": 1,
}


def test_a_table_is_opened_once_and_kept(tmp_path: Path) -> None:
    create_table(tmp_path / "t", SCHEMA)
    cache = TableCache()
    t = cache.get(str(tmp_path / "t"))
    assert cache.get(str(tmp_path / "t")) is t
    assert len(cache) == 1


def test_options_open_a_separate_table(tmp_path: Path) -> None:
    create_table(tmp_path / "t", SCHEMA)
    cache = TableCache()
    plain = cache.get(str(tmp_path / "t"))
    tuned = cache.get(str(tmp_path / "t"), options=TableOptions.for_tests())
    assert tuned is not plain
    assert tuned.options.memory_versions == TableOptions.for_tests().memory_versions
    assert cache.get(str(tmp_path / "t"), options=TableOptions.for_tests()) is tuned


def test_a_recreated_table_is_reopened(tmp_path: Path) -> None:
    create_table(tmp_path / "t", SCHEMA)
    cache = TableCache()
    old = cache.get(str(tmp_path / "t"))
    # Held open, the old identity file keeps its inode: the new one cannot reuse it.
    with open(tmp_path / "t" / "_table.json", "rb"):
        shutil.rmtree(tmp_path / "t")
        create_table(tmp_path / "t", SCHEMA)
    new = cache.get(str(tmp_path / "t"))
    assert new is not old
    assert cache.get(str(tmp_path / "t")) is new


def test_a_forked_process_does_not_use_its_parents_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_table(tmp_path / "t", SCHEMA)
    cache = TableCache()
    parent = cache.get(str(tmp_path / "t"))
    child_pid = os.getpid() + 1
    monkeypatch.setattr(_tables.os, "getpid", lambda: child_pid)
    child = cache.get(str(tmp_path / "t"))
    assert child is not parent
    assert cache.get(str(tmp_path / "t")) is child


def test_the_least_recently_used_table_is_dropped(tmp_path: Path) -> None:
    paths = [str(tmp_path / f"t{i}") for i in range(3)]
    for p in paths:
        create_table(p, SCHEMA)
    cache = TableCache(capacity=2)
    first = cache.get(paths[0])
    cache.get(paths[1])
    assert cache.get(paths[0]) is first  # now the most recently used
    cache.get(paths[2])  # drops paths[1]
    assert len(cache) == 2
    assert cache.get(paths[0]) is first
    cache.clear()
    assert len(cache) == 0
    assert cache.get(paths[0]) is not first


def test_no_table_raises_table_not_found(tmp_path: Path) -> None:
    with pytest.raises(TableNotFound):
        TableCache().get(str(tmp_path / "missing"))
