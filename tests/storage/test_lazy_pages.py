"""Snapshot value pages are read lazily: opening a table and reading some columns of a
cold version never reads the other columns' pages; a damaged page raises WalCorruption
from the first read that needs it, before any of its data is returned; a missing or
truncated page file is still found when the bucket loads; compaction and incremental
snapshots of a reopened table leave untouched pages unread. Writing a snapshot never
compacts, and a page it wrote from memory is stored (and reused) once committed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from cdc_sink.batch import ChangeBatch
from cdc_sink.engine import core_of
from cdc_sink.errors import TabletStateError, WalCorruption
from cdc_sink.schema import TableSchema
from cdc_sink.storage.pages import stored_location
from cdc_sink.storage.snapshot import (
    apply_locations,
    load_snapshot,
    read_manifest,
    write_snapshot,
)
from cdc_sink.table import Table, TableOptions, create_table, open_table
from cdc_sink.tablet import MemTablet, TabletOptions, reads
from cdc_sink.tablet.column import LazyPage, PageList
from tests.fixtures import ID_A_B_C, KEEP_VERSIONS

SCHEMA = ID_A_B_C
OPTS = TableOptions(
    page_rows=8,
    memory_versions=4,
    compact_every=3,
    snapshot_every=1000,
    **KEEP_VERSIONS,
)
ROWS = 100


def _events(keys: range, tag: int) -> list[dict[str, object]]:
    return [
        {
            "op": "upsert",
            "key": {"id": k},
            "set": {"a": k * 10 + tag, "b": f"s{k}-{tag}", "c": k / 4 + tag},
        }
        for k in keys
    ]


@pytest.fixture
def table_dir(tmp_path: Path) -> Path:
    """A table with a snapshot of both buckets at version 2 and one batch after it."""
    path = tmp_path / "t"
    t = create_table(path, SCHEMA, options=OPTS)
    t.apply(_events(range(ROWS), 0))
    t.compact()
    t.apply([{"op": "update", "key": {"id": 3}, "set": {"a": -1}}])
    return path


def _value_pages(t: Table, bucket: int, version: int) -> dict[str, PageList]:
    tablet = core_of(t).reader_tablet(bucket, version)
    schema = t.schema_at(version)
    out = {}
    for c in schema.value_columns:
        pages = tablet.columns[c.id].base_at(version).pages
        assert isinstance(pages, PageList)
        out[c.name] = pages
    return out


def _loaded(pages: PageList) -> list[bool]:
    return [pages.loaded(p) for p in range(len(pages))]


def test_reading_some_columns_of_a_cold_version_reads_only_their_pages(table_dir: Path) -> None:
    expected = open_table(table_dir, options=OPTS).read(columns=["id", "a"])
    t = open_table(table_dir, options=OPTS)
    v = t.version
    for b in range(2):
        pages = _value_pages(t, b, v)
        assert len(pages["a"]) > 1
        assert not any(any(_loaded(pl)) for pl in pages.values()), "opening read a page"
    got = t.read(version=v, columns=["id", "a"])
    assert got.equals(expected)
    for b in range(2):
        pages = _value_pages(t, b, v)
        assert all(_loaded(pages["a"])), "a page of the column read was not read"
        assert not any(_loaded(pages["b"])) and not any(_loaded(pages["c"]))


def _damage_page(path: Path, column_id: int) -> tuple[str, int]:
    """Flips one byte inside the middle page of ``column_id`` of bucket 0's snapshot."""
    t = open_table(path, options=OPTS)
    snap = core_of(t).history.snapshot_at(0, t.version)
    assert snap is not None
    loc_list = read_manifest(str(path), snap[1]).columns[column_id]
    loc = loc_list[len(loc_list) // 2]
    f = path / loc.file
    data = bytearray(f.read_bytes())
    data[loc.offset + loc.length // 2] ^= 0x40
    f.write_bytes(bytes(data))
    return str(f), loc.offset


@pytest.mark.parametrize("parallel", [False, True], ids=["one-thread scan", "parallel scan"])
def test_a_damaged_page_raises_on_first_read_and_other_columns_still_read(
    table_dir: Path, parallel: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if parallel:  # pages built in the scan's pool: the error still reaches the reader
        monkeypatch.setattr(reads, "MIN_PARALLEL_CELLS", 0)
        monkeypatch.setattr(reads, "usable_cores", lambda: 2)
    fresh = open_table(table_dir, options=OPTS)
    expected_a = fresh.read(columns=["id", "a"])
    b_id = fresh.schema.column("b").id
    path, offset = _damage_page(table_dir, b_id)
    t = open_table(table_dir, options=OPTS)
    assert t.read(columns=["id", "a"]).equals(expected_a)
    for _ in range(2):  # the damage stays detected; nothing of the page is ever returned
        with pytest.raises(WalCorruption) as info:
            t.read(columns=["b"])
        assert info.value.path == path and info.value.offset == offset
    with pytest.raises(WalCorruption):
        t.get(list(range(ROWS)), columns=["id", "b"])


def test_a_missing_or_truncated_page_file_is_found_when_the_bucket_loads(table_dir: Path) -> None:
    t = open_table(table_dir, options=OPTS)
    snap = core_of(t).history.snapshot_at(0, t.version)
    assert snap is not None
    rel = sorted(read_manifest(str(table_dir), snap[1]).files)[0]
    f = table_dir / rel
    data = f.read_bytes()
    f.write_bytes(data[: len(data) - 3])
    with pytest.raises(WalCorruption, match="truncated") as info:
        open_table(table_dir, options=OPTS).read(columns=["id"])
    assert info.value.path == str(f)
    f.unlink()
    with pytest.raises(WalCorruption, match="missing"):
        open_table(table_dir, options=OPTS).read(columns=["id"])


def test_compaction_and_an_incremental_snapshot_leave_untouched_pages_unread(
    table_dir: Path,
) -> None:
    t = open_table(table_dir, options=OPTS)
    t.apply([{"op": "update", "key": {"id": k}, "set": {"a": 7}} for k in (0, 1, 2)])
    t.compact()  # a snapshot of every bucket: only changed pages are read and written
    v = t.version
    for b in range(2):
        tablet = core_of(t).tablet(b)
        for name in ("b", "c"):
            pages = tablet.columns[t.schema.column(name).id].base_at(v).pages
            assert isinstance(pages, PageList)
            assert all(isinstance(pages.entry(p), LazyPage) for p in range(len(pages)))
            assert not any(_loaded(pages)), f"column {name} of bucket {b} was read"
    got = open_table(table_dir, options=OPTS).read()
    a = dict(zip(got.column("id").to_pylist(), got.column("a").to_pylist(), strict=True))
    assert [a[k] for k in (0, 1, 2, 3, 4)] == [7, 7, 7, -1, 40]
    assert np.array_equal(np.sort(got.column("id").to_numpy()), np.arange(ROWS))
    assert got.column("b").to_pylist() == [f"s{k}-0" for k in got.column("id").to_pylist()]


def test_a_lazy_page_reads_once_and_a_failed_read_fails_again() -> None:
    calls = []

    def load() -> pa.Array:
        calls.append(1)
        if len(calls) == 1:
            raise WalCorruption("damaged", path="p", offset=0)
        return pa.array([1, 2, 3])

    page = LazyPage(3, load)
    pl = PageList([page, pa.array([4])])
    assert pl.length(0) == 3 and not pl.loaded(0) and pl.loaded(1)
    with pytest.raises(WalCorruption):
        pl[0]
    assert not page.loaded
    first = pl[0]
    assert pl[0] is first and first.to_pylist() == [1, 2, 3] and len(calls) == 2
    assert [x.to_pylist() for x in pl] == [[1, 2, 3], [4]]


def _tablet(rows: int) -> MemTablet:
    schema = TableSchema.from_dict({k: v for k, v in SCHEMA.items() if k != "num_buckets"})
    t = MemTablet(schema, options=TabletOptions.for_tests())
    batch, rejects = ChangeBatch.from_events(_events(range(rows), 0), schema)
    assert not len(rejects)
    t.apply(batch, 1)
    t.commit(1)
    return t


def test_a_snapshot_never_compacts_the_tablet(tmp_path: Path) -> None:
    t = _tablet(20)
    assert not t.is_compacted(1)
    with pytest.raises(TabletStateError, match=r"bucket 0.*not compacted at version 1"):
        write_snapshot(str(tmp_path), t, 1, 0, previous=None)
    assert not t.is_compacted(1)  # no side effect, and nothing written
    assert not any(p.is_file() for p in tmp_path.rglob("*"))
    t.compact(1)
    assert t.is_compacted(1)
    rel, manifest, _ = write_snapshot(str(tmp_path), t, 1, 0, previous=None)
    assert read_manifest(str(tmp_path), rel).row_count == manifest.row_count == 20


def test_pages_written_from_memory_are_stored_once_committed_and_reused(tmp_path: Path) -> None:
    """A page a snapshot wrote becomes a stored page of the base when its locations are
    applied (not before); the next snapshot writes only the pages that changed."""
    root = str(tmp_path)
    t = _tablet(20)
    t.compact(1)
    _, first, updates = write_snapshot(root, t, 1, 0, previous=None)
    a_id, b_id = (t.schema.column(n).id for n in ("a", "b"))
    base_b = t.columns[b_id].base_at(1)
    assert all(stored_location(base_b.page_entry(p)) is None for p in range(len(base_b.pages)))
    apply_locations(updates)
    assert [
        stored_location(base_b.page_entry(p)) for p in range(len(base_b.pages))
    ] == first.columns[b_id]
    assert isinstance(base_b.pages, PageList)
    assert all(base_b.pages.loaded(p) for p in range(len(base_b.pages)))  # still in memory
    batch, _ = ChangeBatch.from_events(
        [{"op": "update", "key": {"id": 9}, "set": {"a": -9}}], t.schema
    )
    t.apply(batch, 2)
    t.commit(2)
    t.compact(2)
    _, second, _ = write_snapshot(root, t, 2, 0, previous=first)
    assert second.columns[b_id] == first.columns[b_id]  # column b: nothing written
    changed = [
        p
        for p, (x, y) in enumerate(zip(first.columns[a_id], second.columns[a_id], strict=True))
        if x != y
    ]
    assert changed == [9 // 8]  # the one page of column a the update touched
    again = load_snapshot(
        root,
        second,
        t.schema,
        lambda v: MemTablet(t.schema, options=TabletOptions.for_tests(), version=v),
    )
    assert again.read().equals(t.read())
