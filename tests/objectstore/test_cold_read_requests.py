"""Cold reads fetch what they need concurrently and coalesced (issue 50), on each
backend (a directory and the S3 server), counted by the store's own counters.

:meth:`ObjectStore.get_ranges` returns exactly what a :meth:`~ObjectStore.get_range` of
each range returns, in as many GETs as :func:`coalesce_ranges` makes of the ranges (near
ones merged, merged ones bounded in size), at most ``range_read_threads`` of them in
flight at once; the cache in front of an object store keeps each range it read. A cold
read of a table on S3 reads the pages of the columns it returns with one GET per
coalesced run of a page file, not one per page, and the result is the table's.
"""

from __future__ import annotations

import math
import os
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_sink.schema import TableSchema
from cdc_sink.storage.objectstore import (
    ObjectNotFound,
    ObjectStore,
    ShortRead,
    coalesce_ranges,
)
from cdc_sink.storage.objectstore.cache import CachingStore
from cdc_sink.storage.objectstore.local import LocalStore
from cdc_sink.table import Table, TableOptions, create_table, open_table
from tests.objectstore.conftest import Target

SIZE = 200_000
DATA = os.urandom(SIZE)

ranges_st = st.lists(
    st.integers(0, SIZE - 1).flatmap(
        lambda start: st.tuples(st.just(start), st.integers(0, min(SIZE - start, 40_000)))
    ),
    max_size=24,
)


def _gets(store: ObjectStore, step: object) -> tuple[int, int]:
    """Runs ``step()``; the GETs and the bytes they read meanwhile."""
    before = store.counters.snapshot()
    step()  # type: ignore[operator]
    spent = store.counters.snapshot().minus(before)
    return spent.requests["GET"], spent.bytes["GET"]


def test_coalesce_merges_near_ranges_up_to_the_bound() -> None:
    got = coalesce_ranges(
        [(100, 10), (0, 10), (15, 5), (2000, 50), (30, 0), (5, 3)], hole_bytes=10, max_bytes=1000
    )
    assert got == [(0, 20), (100, 10), (2000, 50)]
    assert coalesce_ranges([(0, 600), (600, 600), (1200, 10)], max_bytes=1000) == [
        (0, 600),
        (600, 610),
    ]
    assert coalesce_ranges([(0, 5000)], max_bytes=1000) == [(0, 5000)]  # never split
    assert coalesce_ranges([(0, 10), (2, 3)], hole_bytes=0) == [(0, 10)]  # overlapping


def test_get_ranges_equals_get_range_of_each_range(target: Target) -> None:
    store = target.open()
    store.put("obj", DATA)
    store.range_hole_bytes = 3_000  # small bounds: holes and long runs both occur
    store.range_max_bytes = 50_000

    @settings(
        max_examples=40 if target.backend == "s3" else 120,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(ranges=ranges_st)
    def check(ranges: list[tuple[int, int]]) -> None:
        merged = coalesce_ranges(ranges, hole_bytes=3_000, max_bytes=50_000)
        out: list[bytes] = []
        gets, nbytes = _gets(store, lambda: out.extend(store.get_ranges("obj", ranges)))
        assert out == [store.get_range("obj", s, n) for s, n in ranges]
        assert out == [DATA[s : s + n] for s, n in ranges]
        assert gets == len(merged)
        assert nbytes == sum(n for _, n in merged)

    check()


def test_get_ranges_of_several_objects(target: Target) -> None:
    store = target.open()
    store.put("a", DATA[:1000])
    store.put("b", DATA[1000:3000])
    wanted = {"a": [(10, 5), (0, 3)], "b": [(1999, 1), (0, 0)]}
    got = store.get_ranges_of(wanted)
    assert got == {"a": [DATA[10:15], DATA[0:3]], "b": [DATA[2999:3000], b""]}
    with pytest.raises(ShortRead):
        store.get_ranges("a", [(0, 10), (995, 10)])
    with pytest.raises(ObjectNotFound):
        store.get_ranges_of({"a": [(0, 1)], "missing": [(0, 1)]})


def test_a_missing_object_is_not_taken_for_a_range_past_its_end(
    target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """obstore's message of a missing object may hold "416" (in a request id or a time):
    it is still ObjectNotFound, not a short read."""
    store = target.open()
    if target.backend == "s3":
        import obstore

        def missing(*args: object, **kwargs: object) -> bytes:
            raise FileNotFoundError("NoSuchKey, RequestId 18EE416B, elapsed 416.2us")

        monkeypatch.setattr(obstore, "get_range", missing)
    with pytest.raises(ObjectNotFound):
        store.get_range("missing", 0, 1)
    with pytest.raises(ObjectNotFound):
        store.get_ranges("missing", [(0, 1), (5, 1)])


class _SlowStore(LocalStore):
    """A directory whose ranged reads take a while, counting how many run at once."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.running = self.most = 0
        self._lock = threading.Lock()

    def _get_range(self, key: str, start: int, length: int) -> bytes:
        with self._lock:
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(0.02)
        with self._lock:
            self.running -= 1
        return super()._get_range(key, start, length)


def test_get_ranges_issues_its_gets_concurrently_within_the_bound(tmp_path: object) -> None:
    store = _SlowStore(str(tmp_path))
    store.put("obj", DATA)
    store.range_hole_bytes = 0
    store.range_read_threads = 4
    ranges = [(i * 10_000, 100) for i in range(12)]
    gets, _ = _gets(store, lambda: store.get_ranges("obj", ranges))
    assert gets == 12
    assert store.most == 4


def test_the_cache_keeps_each_range_get_ranges_read(target: Target) -> None:
    store = target.open()
    store.put("imm/x", DATA)
    cached = CachingStore(store, 1 << 20, cacheable=lambda k: k.startswith("imm/"))
    ranges = [(0, 100), (150, 50), (100_000, 10)]
    first = cached.get_ranges("imm/x", ranges)
    assert _gets(store, lambda: None) == (0, 0)
    again: list[bytes] = []
    assert _gets(store, lambda: again.extend(cached.get_ranges("imm/x", ranges))) == (0, 0)
    assert _gets(store, lambda: cached.get_range("imm/x", 150, 50)) == (0, 0)
    assert first == again == [DATA[s : s + n] for s, n in ranges]
    gets, _ = _gets(store, lambda: cached.get_ranges("imm/x", [(0, 100), (120, 10)]))
    assert gets == 1  # only the range it did not hold
    assert cached.counters.snapshot().requests["GET"] == 2


# ---------------------------------------------------------------- cold reads

COLUMNS = 6
ROWS = 3_000
PAGE_ROWS = 256  # 12 pages per column


def _schema() -> TableSchema:
    return TableSchema.from_dict(
        {
            "columns": [
                {"name": "id", "type": "int64", "nullable": False},
                *({"name": f"c{i}", "type": "int64"} for i in range(COLUMNS)),
            ],
            "primary_key": ["id"],
            "num_buckets": 1,
        }
    )


def _table(target: Target) -> Table:
    """A table of one bucket: its rows in a snapshot, then two micro-batches in WAL."""
    table = create_table(
        target.url,
        _schema(),
        options=TableOptions(page_rows=PAGE_ROWS),
        storage_options=target.options or None,
    )
    rows = [
        {"op": "upsert", "key": {"id": k}, "set": {f"c{i}": k * 10 + i for i in range(COLUMNS)}}
        for k in range(ROWS)
    ]
    table.apply(rows, app_id="load", batch_id=0)
    table.compact()
    for b in (1, 2):
        upd = [{"op": "upsert", "key": {"id": k}, "set": {"c0": -k - b}} for k in range(0, ROWS, 7)]
        table.apply(upd, app_id="job", batch_id=b)
    return table


def test_a_cold_read_makes_one_get_per_coalesced_run_of_pages(target: Target) -> None:
    if target.backend == "local":
        pytest.skip("a directory memory-maps its page files: no GET per page")
    writer = _table(target)
    expected = writer.read(columns=["id", "c0", "c3"])
    reader = open_table(target.url, storage_options=target.options or None)
    inner = reader.store.inner  # type: ignore[attr-defined]  # behind the object cache
    gets: list[tuple[str, int]] = []
    get, get_range = inner._get, inner._get_range
    inner._get = lambda key: gets.append((key, -1)) or get(key)
    inner._get_range = lambda key, start, n: gets.append((key, n)) or get_range(key, start, n)
    before = reader.store.counters.snapshot()
    got = reader.read(columns=["id", "c0", "c3"])
    spent = reader.store.counters.snapshot().minus(before)
    assert got.sort_by("id").equals(expected.sort_by("id"))
    assert spent.requests["GET"] == len(gets)
    page_gets = [n for key, n in gets if key.startswith("_pages/")]
    pages = math.ceil(ROWS / PAGE_ROWS)
    # The snapshot's one page file: the blobs read at load (keys, row hashes, index
    # slots) and the two value columns' pages, in one GET per coalesced run (here the
    # load's and the columns'), not one per page (3 x 12 + 2 x 12 + 1).
    assert len(page_gets) <= 1 + math.ceil(sum(page_gets) / inner.range_max_bytes)
    assert len(page_gets) < pages
    assert sorted(k.split("/")[0] for k, _ in gets).count("_wal") == 2  # each segment once
    assert spent.requests["HEAD"] <= 2 and spent.requests["LIST"] <= 1  # the log followed


def test_a_cold_read_of_every_column_equals_the_writers(target: Target) -> None:
    writer = _table(target)
    reader = open_table(target.url, storage_options=target.options or None)
    assert reader.read().sort_by("id").equals(writer.read().sort_by("id"))
