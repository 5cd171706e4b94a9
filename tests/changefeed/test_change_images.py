"""The pre-images a commit stores for the change feed (``TableOptions.change_images``):
a cold reader of a version that has them reads the version's two objects and neither
the bucket's pages nor its key index; a version without them (option off, a truncate) is
read from pages; they are named by the log entry, written where the bucket is prepared
(an executor's process), removed by GC with their version or as orphans, and damage is
reported, never read around."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any

import pytest

import cdc_sink
from cdc_sink.batch import ChangeBatch
from cdc_sink.engine import TableCore, core_of
from cdc_sink.errors import WalCorruption
from cdc_sink.storage.layout import CHANGE_DATA_DIR, images_file
from cdc_sink.storage.pages import PageReader
from cdc_sink.table import Table, TableOptions

SCHEMA = {
    "columns": [
        {"name": "id", "type": "int64", "nullable": False},
        {"name": "a", "type": "string"},
        {"name": "b", "type": "int64"},
    ],
    "primary_key": ["id"],
    "num_buckets": 1,
}
ROWS = 80  # a bulk load: a snapshot of ROWS / page_rows pages per column


def _options(images: bool) -> TableOptions:
    return dataclasses.replace(TableOptions.for_tests(), change_images=images)


def _table(root: Path | str, images: bool, storage: dict[str, str] | None = None) -> Table:
    t = cdc_sink.create_table(root, SCHEMA, options=_options(images), storage_options=storage)
    t.apply(
        [{"op": "insert", "key": {"id": i}, "set": {"a": f"x{i}", "b": i}} for i in range(ROWS)]
    )
    return t


# Updates of rows in different pages, a delete, an insert, and a refused update.
BATCH = [
    {"op": "update", "key": {"id": 3}, "set": {"b": -3}},
    {"op": "update", "key": {"id": 50}, "set": {"a": None}},
    {"op": "delete", "key": {"id": 77}},
    {"op": "insert", "key": {"id": 500}, "set": {"a": "new"}},
    {"op": "update", "key": {"id": 999}, "set": {"b": 1}},
]


class _Reads:
    """Counts the page reads and bucket loads of every table in this process."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.pages = 0
        self.loads = 0
        blob, load = PageReader.blob, TableCore.load_bucket

        def counting_blob(reader: PageReader, loc: Any) -> Any:
            self.pages += 1
            return blob(reader, loc)

        def counting_load(state: TableCore, bucket: int, version: int) -> Any:
            self.loads += 1
            return load(state, bucket, version)

        monkeypatch.setattr(PageReader, "blob", counting_blob)
        monkeypatch.setattr(TableCore, "load_bucket", counting_load)


def _sorted(feed: Any) -> list[dict[str, Any]]:
    rows = feed.drop_columns(["_commit_timestamp"]).to_pylist()
    return sorted(rows, key=lambda r: (r["_commit_version"], r["id"], r["_change_type"]))


@pytest.mark.parametrize("only", [False, True], ids=["full-images", "set-columns-only"])
def test_a_cold_reader_of_stored_images_reads_no_page_and_opens_no_bucket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, only: bool
) -> None:
    want = {}
    for images in (False, True):
        t = _table(tmp_path / str(images), images)
        v = t.apply(BATCH).version
        want[images] = _sorted(t.changes(v - 1, v, set_columns_only=only))
    reads = _Reads(monkeypatch)
    off = cdc_sink.open_table(tmp_path / "False", options=TableOptions.for_tests())
    assert _sorted(off.changes(v - 1, v, set_columns_only=only)) == want[False]
    assert reads.loads == 1 and reads.pages > 0  # without images: the bucket and its pages
    reads.pages = reads.loads = 0
    on = cdc_sink.open_table(tmp_path / "True", options=TableOptions.for_tests())
    assert on.log.read(v).buckets[0].images is not None
    assert _sorted(on.changes(v - 1, v, set_columns_only=only)) == want[True] == want[False]
    assert (reads.pages, reads.loads) == (0, 0)


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_on_each_backend_a_cold_reader_gets_the_changes_from_two_objects(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the object-store interface: a table on the S3 server reads the same."""
    url, storage = str(tmp_path / "t"), None
    if backend == "s3":
        server = request.getfixturevalue("s3_server")
        url, storage = server.url(f"t-{uuid.uuid4().hex}"), server.storage_options()
    t = _table(url, True, storage)
    v = t.apply(BATCH).version
    want = _sorted(t.changes(v - 1, v))
    reads = _Reads(monkeypatch)
    cold = cdc_sink.open_table(url, options=TableOptions.for_tests(), storage_options=storage)
    store, keys = core_of(cold).store, []
    for name in ("get", "get_range"):
        call = getattr(store, name)
        monkeypatch.setattr(store, name, lambda k, *a, _c=call: keys.append(k) or _c(k, *a))
    assert _sorted(cold.changes(v - 1, v)) == want
    assert (reads.pages, reads.loads) == (0, 0)
    ref = cold.log.read(v).buckets[0]
    assert sorted(k for k in keys if not k.startswith(("_log/", "_schema/"))) == sorted(
        [ref.segment, ref.images]
    )


def test_a_batch_with_a_truncate_stores_no_images_and_is_read_from_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = _table(tmp_path / "t", True)
    v = t.apply([{"op": "truncate"}, {"op": "insert", "key": {"id": 1}, "set": {"b": 0}}]).version
    assert t.log.read(v).buckets[0].images is None
    want = _sorted(t.changes(v - 1, v))
    reads = _Reads(monkeypatch)
    cold = cdc_sink.open_table(tmp_path / "t", options=TableOptions.for_tests())
    got = _sorted(cold.changes(v - 1, v))
    assert got == want and reads.loads == 1
    assert [r["_change_type"] for r in got].count("delete") == ROWS - 1


def test_images_are_written_where_the_bucket_is_prepared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Executors mode: a worker's table (its own options) prepares, the driver commits."""
    driver = _table(tmp_path / "t", False)
    worker = cdc_sink.open_table(tmp_path / "t", options=_options(True))
    batch, rejects = ChangeBatch.from_events(BATCH, driver.schema)
    assert not len(rejects)
    txn = driver.transaction(app_id="job", batch_id=0)
    prepared = core_of(worker).prepare_bucket(0, txn.version, batch)
    assert prepared.images is not None
    txn.add_prepared([prepared])
    v = txn.commit(events=len(batch)).version
    assert driver.log.read(v).buckets[0].images == prepared.images
    want = _sorted(driver.changes(v - 1, v))
    reads = _Reads(monkeypatch)
    cold = cdc_sink.open_table(tmp_path / "t", options=TableOptions.for_tests())
    assert _sorted(cold.changes(v - 1, v)) == want and reads.loads == 0


def _image_files(root: Path) -> set[str]:
    top = root / CHANGE_DATA_DIR
    return {p.relative_to(root).as_posix() for p in top.rglob("*.arrow")}


def test_gc_removes_images_with_their_version_and_as_orphans(tmp_path: Path) -> None:
    t = _table(tmp_path / "t", True)
    for i in range(6):
        t.apply([{"op": "update", "key": {"id": i}, "set": {"b": 100 + i}}])
    named = {v: t.log.read(v).buckets[0].images for v in range(2, t.version + 1)}
    assert all(named.values()) and set(named.values()) == _image_files(tmp_path / "t")
    # An attempt at the latest version that lost (its version committed without it).
    orphan = images_file(0, f"{t.version:020d}-deadbeef0000")
    (tmp_path / "t" / orphan).write_bytes(b"not read")
    t.gc(dry_run=False, retain_versions=3, retain_seconds=0.0, orphan_grace_seconds=3600.0)
    horizon = t.oldest_version
    assert _image_files(tmp_path / "t") == {r for v, r in named.items() if v > horizon}
    # The oldest readable range still reads, from the images kept.
    cold = cdc_sink.open_table(tmp_path / "t", options=TableOptions.for_tests())
    assert _sorted(cold.changes(horizon, t.version)) == _sorted(t.changes(horizon, t.version))


def test_damaged_images_are_reported_not_read_around(tmp_path: Path) -> None:
    t = _table(tmp_path / "t", True)
    v = t.apply(BATCH).version
    path = tmp_path / "t" / t.log.read(v).buckets[0].images
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    cold = cdc_sink.open_table(tmp_path / "t", options=TableOptions.for_tests())
    with pytest.raises(WalCorruption, match="fails its CRC32C") as err:
        cold.changes(v - 1, v)
    assert err.value.path == str(path)
