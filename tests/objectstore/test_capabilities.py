"""What differs between backends, asked of a store by name (issue 47): a new object
written in pieces, a file to map, whether it wants an object cache, whether its mtimes
date orphans, its abandoned temporary files, ordered deletes with a callback between
them; and how the cache and the fault wrapper forward each."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from cdc_sink.storage.objectstore import ObjectExists, ObjectNotFound, ObjectStore
from cdc_sink.storage.objectstore.cache import CachingStore
from cdc_sink.storage.objectstore.local import LocalStore
from cdc_sink_testkit.faults import FaultStore

# ---------------------------------------------------------------- every backend


def test_a_new_object_written_in_pieces_reads_back_once_finished(store: ObjectStore) -> None:
    new = store.open_new("n/obj")
    for piece in (b"ab", bytearray(b"cd"), memoryview(b"ef")):
        new.write(piece)
    assert new.finish() == 6
    assert store.get("n/obj") == b"abcdef"


def test_a_new_object_left_empty_is_not_created(store: ObjectStore) -> None:
    assert store.open_new("n/empty").finish() == 0
    with pytest.raises(ObjectNotFound):
        store.head("n/empty")


def test_an_aborted_new_object_is_gone(store: ObjectStore) -> None:
    new = store.open_new("n/aborted")
    new.write(b"x" * 100)
    new.abort()
    assert store.list_keys("n") == []


@pytest.mark.parametrize("ordered", [True, False])
def test_delete_many_calls_before_each_for_every_key_and_deletes_them(
    store: ObjectStore, ordered: bool
) -> None:
    keys = [f"d/{i}" for i in range(5)]
    for k in keys:
        store.put(k, b"x")
    seen: list[str] = []
    store.delete_many(keys, ordered=ordered, before_each=seen.append)
    assert seen == keys
    assert store.list_keys("d") == []


def test_an_ordered_delete_stopped_midway_leaves_only_a_first_part_deleted(
    store: ObjectStore,
) -> None:
    keys = [f"o/{i}" for i in range(5)]
    for k in keys:
        store.put(k, b"x")

    def crash_at_the_third(key: str) -> None:
        if key == keys[2]:
            raise KeyboardInterrupt  # stands for the process dying here

    with pytest.raises(KeyboardInterrupt):
        store.delete_many(keys, ordered=True, before_each=crash_at_the_third)
    assert store.list_keys("o") == keys[2:]


def test_only_a_local_store_maps_files_dates_orphans_and_skips_the_cache(
    store: ObjectStore,
) -> None:
    store.put("m/a", b"abc")
    local = isinstance(store, LocalStore)
    path = store.local_path("m/a")
    assert (path is not None) == local
    if path is not None:
        assert Path(path).read_bytes() == b"abc"
    assert store.wants_object_cache is not local
    assert store.trusts_mtime_for_orphans is local


# ---------------------------------------------------------------- the local backend


def test_a_local_new_object_exists_under_its_name_while_written_and_refuses_a_taken_one(
    tmp_path: Path,
) -> None:
    store = LocalStore(tmp_path, file_mode=0o600)
    new = store.open_new("p/f")
    new.write(b"abc")
    assert (tmp_path / "p" / "f").read_bytes() == b"abc"  # streamed, not assembled
    assert os.stat(tmp_path / "p" / "f").st_mode & 0o777 == 0o600
    with pytest.raises(ObjectExists):
        store.open_new("p/f")
    new.finish()


def test_abandoned_temporaries_are_the_old_temporary_files_directly_under_a_prefix(
    tmp_path: Path,
) -> None:
    store = LocalStore(tmp_path)
    store.put("_log/x", b"1")
    old = tmp_path / "_log" / ".x.1.ab.tmp"
    young = tmp_path / "_log" / ".y.1.cd.tmp"
    for p in (old, young):
        p.write_bytes(b"")
    os.utime(old, (time.time() - 100, time.time() - 100))
    assert store.abandoned_temporaries("_log", min_age=50) == ["_log/.x.1.ab.tmp"]
    assert store.list_keys("_log") == ["_log/x"]  # never listed as objects


def test_a_local_store_lists_nothing_through_a_symbolic_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "0").mkdir(parents=True)
    (outside / "0" / "f").write_bytes(b"x")
    root = tmp_path / "table"
    root.mkdir()
    (root / "_wal").symlink_to(outside)
    store = LocalStore(root)
    assert store.list("_wal") == [] and store.list_keys("_wal/0") == []
    assert store.list_keys("") == []


# ---------------------------------------------------------------- wrappers


def test_the_cache_forwards_the_inner_stores_capabilities_but_is_the_cache(
    tmp_path: Path,
) -> None:
    inner = LocalStore(tmp_path)
    cached = CachingStore(inner, 1 << 20, cacheable=lambda k: True)
    assert cached.local_path("a") == inner.local_path("a")
    assert cached.trusts_mtime_for_orphans and not cached.wants_object_cache


def test_the_fault_wrapper_forwards_what_cannot_bypass_it_and_nothing_else(
    tmp_path: Path,
) -> None:
    inner = LocalStore(tmp_path)
    faulty = FaultStore(inner)
    assert faulty.local_path("a") is None  # a mapped file would read past every fault
    assert faulty.wants_object_cache == inner.wants_object_cache
    assert faulty.trusts_mtime_for_orphans == inner.trusts_mtime_for_orphans
    faulty.fail("put_new")
    new = faulty.open_new("f/x")
    new.write(b"abc")
    with pytest.raises(OSError, match="injected"):
        new.finish()  # the object went through put_new, where the fault acts
    seen: list[str] = []
    faulty.put("g/1", b"x")
    faulty.delete_many(["g/1"], ordered=True, before_each=seen.append)
    assert seen == ["g/1"] and inner.list_keys("g") == []
