"""The batch change feed's contract beyond the model test: full images of a partial
update, the written cells and their masks (``set_columns_only``), the error for a range
GC collected, column and range checks, and the pages a read of one version touches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import cdc_sink
from cdc_sink.changefeed import ChangesNotRetained
from cdc_sink.errors import CdcSinkError, InvalidOption
from cdc_sink.table import Table, TableOptions
from cdc_sink.tablet.lazy_pages import LazyPage

SCHEMA = {
    "columns": [
        {"name": "id", "type": "int64", "nullable": False},
        {"name": "a", "type": "string"},
        {"name": "b", "type": "int64"},
    ],
    "primary_key": ["id"],
    "num_buckets": 1,
}


def _table(root: Path, rows: int) -> Table:
    t = cdc_sink.create_table(root, SCHEMA, options=TableOptions.for_tests())
    t.apply(
        [{"op": "insert", "key": {"id": i}, "set": {"a": f"x{i}", "b": i}} for i in range(rows)]
    )
    return t


def _by_type(feed: Any) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in feed.to_pylist():
        out.setdefault(r["_change_type"], []).append(r)
    return out


def test_partial_update_gives_full_pre_and_post_images(tmp_path: Path) -> None:
    t = _table(tmp_path / "t", 5)
    before = t.get([2]).to_pylist()[0]
    v = t.apply([{"op": "update", "key": {"id": 2}, "set": {"b": -1}}]).version
    after = t.get([2]).to_pylist()[0]
    feed = t.changes(v - 1, v)
    assert feed.column("_change_type").to_pylist() == ["update_preimage", "update_postimage"]
    pre, post = feed.select(["id", "a", "b"]).to_pylist()
    assert (pre, post) == (before, after)


def test_set_columns_only_gives_the_written_cells_and_their_masks(tmp_path: Path) -> None:
    t = _table(tmp_path / "t", 5)
    v = t.apply(
        [
            {"op": "update", "key": {"id": 1}, "set": {"b": 10}},
            {"op": "delete", "key": {"id": 3}},
            {"op": "insert", "key": {"id": 9}, "set": {"a": "new"}},
        ]
    ).version
    rows = _by_type(t.changes(v - 1, v, set_columns_only=True))
    (upd,) = rows["update_postimage"]
    assert (upd["id"], upd["b"], upd["_set_b"], upd["a"], upd["_set_a"]) == (
        1,
        10,
        True,
        None,
        False,
    )
    (dele,) = rows["delete"]
    assert (dele["id"], dele["_set_a"], dele["_set_b"], dele["a"], dele["b"]) == (
        3,
        False,
        False,
        None,
        None,
    )
    (ins,) = rows["insert"]
    assert (ins["id"], ins["a"], ins["_set_a"]) == (9, "new", True)
    assert "update_preimage" not in rows


def test_set_columns_only_of_a_bulk_load_gives_every_cell(tmp_path: Path) -> None:
    t = _table(tmp_path / "t", 6)  # at least bulk_events into an empty bucket
    want = {r["id"]: r for r in t.read(version=1).to_pylist()}
    rows = t.changes(0, 1, set_columns_only=True).to_pylist()
    assert {r["_change_type"] for r in rows} == {"insert"}
    assert all(r["_set_a"] and r["_set_b"] for r in rows)
    assert {r["id"]: {"id": r["id"], "a": r["a"], "b": r["b"]} for r in rows} == want


def test_several_events_on_a_key_collapse_to_what_the_version_committed(tmp_path: Path) -> None:
    t = _table(tmp_path / "t", 3)
    v = t.apply(
        [
            {"op": "update", "key": {"id": 0}, "set": {"b": 5}},
            {"op": "update", "key": {"id": 0}, "set": {"b": 6}},
            {"op": "insert", "key": {"id": 7}, "set": {"a": "t"}},
            {"op": "delete", "key": {"id": 7}},
        ]
    ).version
    feed = t.changes(v - 1, v)
    assert feed.select(["id", "b", "_change_type"]).to_pylist() == [
        {"id": 0, "b": 0, "_change_type": "update_preimage"},
        {"id": 0, "b": 6, "_change_type": "update_postimage"},
    ]


def test_a_range_gc_collected_raises_naming_the_oldest_readable_version(tmp_path: Path) -> None:
    t = _table(tmp_path / "t", 4)
    for i in range(6):
        t.apply([{"op": "update", "key": {"id": i % 4}, "set": {"b": 100 + i}}])
    t.compact()
    t.gc(dry_run=False, retain_versions=2, retain_seconds=0.0, orphan_grace_seconds=0.0)
    oldest = t.oldest_version
    assert oldest > 1
    for reader in (t, cdc_sink.open_table(tmp_path / "t")):
        with pytest.raises(ChangesNotRetained, match=f"oldest readable version is {oldest}") as e:
            reader.changes(oldest - 1, reader.version)
        assert isinstance(e.value, CdcSinkError) and e.value.oldest == oldest
        assert reader.changes(oldest, reader.version).num_rows >= 0


def test_a_range_past_the_latest_version_or_backwards_is_refused(tmp_path: Path) -> None:
    t = _table(tmp_path / "t", 2)
    with pytest.raises(ChangesNotRetained):
        t.changes(0, t.version + 1)
    with pytest.raises(InvalidOption):
        t.changes(1, 0)


def test_a_column_dropped_before_the_end_is_refused_by_name(tmp_path: Path) -> None:
    t = _table(tmp_path / "t", 2)
    v = t.drop_column("a")
    assert "a" not in t.changes(0, v).column_names
    with pytest.raises(InvalidOption, match=f"version {v}"):
        t.changes(0, v, columns=["a"])


def test_an_update_of_no_column_read_yields_no_record(tmp_path: Path) -> None:
    t = _table(tmp_path / "t", 4)
    v = t.apply(
        [
            {"op": "update", "key": {"id": 1}, "set": {"b": 7}},
            {"op": "update", "key": {"id": 2}, "set": {"a": "z"}},
        ]
    ).version
    feed = t.changes(v - 1, v, columns=["a"])
    assert feed.column_names[:2] == ["id", "a"] and "b" not in feed.column_names
    assert feed.select(["id", "a", "_change_type"]).to_pylist() == [
        {"id": 2, "a": "x2", "_change_type": "update_preimage"},
        {"id": 2, "a": "z", "_change_type": "update_postimage"},
    ]


def test_filter_applies_to_the_records(tmp_path: Path) -> None:
    t = _table(tmp_path / "t", 6)
    feed = t.changes(0, 1, filter=[("b", ">=", 4)])
    assert sorted(feed.column("id").to_pylist()) == [4, 5]


def test_one_version_reads_only_the_pages_holding_its_changed_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = _table(tmp_path / "t", 80)  # a bulk load: a snapshot of 10 pages per column
    v = t.apply([{"op": "update", "key": {"id": k}, "set": {"b": -k}} for k in (3, 50)]).version
    loaded: set[int] = set()
    get = LazyPage.get

    def counting_get(self: LazyPage) -> Any:
        if not self.loaded:
            loaded.add(id(self))
        return get(self)

    monkeypatch.setattr(LazyPage, "get", counting_get)
    reader = cdc_sink.open_table(tmp_path / "t", options=TableOptions.for_tests())
    assert reader.changes(v - 1, v).num_rows == 4
    changed_pages = len({k // t.options.page_rows for k in (3, 50)})
    assert 0 < len(loaded) <= changed_pages * 2  # two value columns
    loaded.clear()
    reader.read(version=v - 1)
    assert len(loaded) == 2 * 80 // t.options.page_rows  # a scan reads every page
