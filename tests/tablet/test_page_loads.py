"""A scan's stored pages are read in parallel before it starts (cdc_sink.tablet.page_loads):
the loads really overlap, each page is read once however many readers want it, a page
that fails stays unread and fails again where it is read, only the pages asked for are
read, and a cold read of compressed pages returns exactly what was written."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from cdc_sink.errors import WalCorruption
from cdc_sink.schema import TableSchema
from cdc_sink.table import TableOptions, create_table, open_table
from cdc_sink.tablet import page_loads
from cdc_sink.tablet.column import Base, ColumnStore, LazyPage, PageList
from tests.fixtures import ID_A_B_C, KEEP_VERSIONS


@pytest.fixture(autouse=True)
def two_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """Threads whatever this machine's cores: the tests are about the threads."""
    monkeypatch.setattr(page_loads, "usable_cores", lambda: 2)


def test_pages_load_in_overlapping_threads_each_once() -> None:
    both_in = threading.Barrier(2, timeout=10)  # passes only if two loads run at once
    calls: list[str] = []

    def loader(i: int) -> pa.Array:
        calls.append(threading.current_thread().name)
        if i < 2:
            both_in.wait()
        return pa.array([i])

    pages = [LazyPage(1, lambda i=i: loader(i)) for i in range(6)]
    page_loads.load_pages(pages)
    assert all(p.loaded for p in pages) and len(calls) == 6
    assert all(name.startswith("cdc_sink-pages") for name in calls)
    assert [p.get().to_pylist() for p in pages] == [[i] for i in range(6)]
    assert len(calls) == 6  # already read: not read again


def test_readers_of_one_page_share_one_read() -> None:
    calls = []

    def slow() -> pa.Array:
        calls.append(1)
        time.sleep(0.05)
        return pa.array([1])

    page = LazyPage(1, slow)
    got: list[pa.Array] = []
    threads = [threading.Thread(target=lambda: got.append(page.get())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(got) == 8 and all(g is got[0] for g in got)


def test_a_page_that_fails_stays_unread_and_fails_where_it_is_read() -> None:
    def bad() -> pa.Array:
        raise WalCorruption("damaged", path="p", offset=3)

    pages = [LazyPage(1, lambda i=i: pa.array([i])) for i in range(4)]
    broken = LazyPage(1, bad)
    page_loads.load_pages([*pages, broken])  # does not raise
    assert all(p.loaded for p in pages) and not broken.loaded
    with pytest.raises(WalCorruption, match="damaged"):
        broken.get()


def test_a_few_pages_are_left_to_load_on_access() -> None:
    calls = []
    pages = [
        LazyPage(1, lambda: calls.append(1) or pa.array([1]))
        for _ in range(page_loads.MIN_PARALLEL - 1)
    ]
    page_loads.load_pages(pages)
    assert not calls and not any(p.loaded for p in pages)


def test_unloaded_pages_are_the_wanted_stored_ones_not_read_yet() -> None:
    lazy = [LazyPage(4, lambda i=i: pa.array([i] * 4)) for i in range(3)]
    lazy[1].get()
    store = ColumnStore(TableSchema.from_dict(ID_A_B_C).column("a"), page_rows=4)
    store.set_base(Base(version=1, num_rows=16, pages=PageList([*lazy, pa.array([9] * 4)])))
    wanted = np.array([True, True, False, True])
    assert page_loads.unloaded_pages(store, 1, wanted) == [lazy[0]]
    assert page_loads.unloaded_pages(store, 1, np.ones(6, bool)) == [lazy[0], lazy[2]]
    assert page_loads.unloaded_pages(store, 0, np.ones(4, bool)) == []  # the empty base


@pytest.mark.parametrize("codec", [None, "lz4", "zstd"])
def test_a_cold_read_of_compressed_pages_reads_what_was_written(tmp_path: Path, codec: str) -> None:
    opts = TableOptions(page_rows=8, page_compression=codec, **KEEP_VERSIONS)  # type: ignore[arg-type]
    t = create_table(tmp_path / "t", ID_A_B_C, options=opts)
    rows = [
        {"op": "upsert", "key": {"id": k}, "set": {"a": k, "b": f"s{k}", "c": k / 2}}
        for k in range(200)
    ]
    t.apply(rows)
    t.compact()
    t.apply([{"op": "delete", "key": {"id": k}} for k in range(0, 200, 7)])
    t.apply([{"op": "update", "key": {"id": 5}, "set": {"b": "five"}}])
    expected = {v: t.read(version=v) for v in range(1, t.version + 1)}
    for v, want in expected.items():
        cold = open_table(tmp_path / "t", options=opts)
        got = cold.read(version=v)
        assert got.sort_by("id").equals(want.sort_by("id")), f"version {v}"
