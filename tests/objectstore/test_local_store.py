"""What only the local backend has to show: its writes keep fsutil's durability (the
object is fsynced, then named by link or rename, then its directory fsynced), in-flight
temporary files and directories are never objects, and created files get the mode."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdc_sink.storage import fsutil
from cdc_sink.storage.objectstore import ObjectExists, ObjectNotFound, StoreIOError, local
from cdc_sink.storage.objectstore.local import LocalStore


class _Log:
    def __init__(self) -> None:
        self.ops: list[tuple[str, str]] = []

    def observe(
        self, kind: str, path: str, *, fd: int | None = None, source: str | None = None
    ) -> None:
        self.ops.append((kind, path))


@pytest.fixture
def recorded() -> Iterator[_Log]:
    log = _Log()
    previous = fsutil.set_recorder(log)
    yield log
    fsutil.set_recorder(previous)


def _kinds(log: _Log, root: Path) -> list[tuple[str, str]]:
    """The operations, each path shown relative to ``root`` (temporary names as 'tmp')."""
    out = []
    for kind, path in log.ops:
        rel = os.path.relpath(path, root)
        name = os.path.basename(rel)
        shown = "tmp" if name.startswith(".") and name.endswith(fsutil.TEMP_SUFFIX) else rel
        out.append((kind, shown))
    return out


def test_put_if_absent_fsyncs_the_object_before_linking_it_then_fsyncs_its_directory(
    tmp_path: Path, recorded: _Log
) -> None:
    store = LocalStore(tmp_path)
    os.makedirs(tmp_path / "_log")
    store.put_if_absent("_log/1.json", b"entry")
    ops = [op for op in _kinds(recorded, tmp_path) if op[0] != "fsync_dir" or op[1] == "_log"]
    assert ops == [
        ("create", "tmp"),
        ("fsync", "tmp"),
        ("link", "_log/1.json"),
        ("unlink", "tmp"),
        ("fsync_dir", "_log"),
    ]


def test_put_fsyncs_a_temporary_file_then_renames_it_over_the_key(
    tmp_path: Path, recorded: _Log
) -> None:
    store = LocalStore(tmp_path)
    os.makedirs(tmp_path / "d")
    store.put("d/k", b"1")
    ops = [op for op in _kinds(recorded, tmp_path) if op[0] != "fsync_dir" or op[1] == "d"]
    assert ops == [("create", "tmp"), ("fsync", "tmp"), ("rename", "d/k"), ("fsync_dir", "d")]


def test_put_new_creates_the_name_itself_fsyncs_it_then_its_directory(
    tmp_path: Path, recorded: _Log
) -> None:
    store = LocalStore(tmp_path)
    os.makedirs(tmp_path / "_wal" / "0")
    store.put_new("_wal/0/seg.wal", b"segment")
    ops = [op for op in _kinds(recorded, tmp_path) if op[0] != "fsync_dir" or op[1] == "_wal/0"]
    assert ops == [
        ("create", "_wal/0/seg.wal"),
        ("fsync", "_wal/0/seg.wal"),
        ("fsync_dir", "_wal/0"),
    ]
    assert store.get("_wal/0/seg.wal") == b"segment"


def test_put_new_of_a_taken_name_is_object_exists_and_keeps_the_file(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.put_new("a/b", b"first")
    with pytest.raises(ObjectExists):
        store.put_new("a/b", b"second")
    assert store.get("a/b") == b"first"


@pytest.mark.parametrize("call", ["put", "put_if_absent", "put_new"])
def test_a_file_where_a_directory_must_be_is_an_io_error_not_object_exists(
    tmp_path: Path, call: str
) -> None:
    """A path component that is a file (a damaged table) is a StoreIOError naming it: an
    ObjectExists would tell a writer that another attempt took the name."""
    store = LocalStore(tmp_path)
    (tmp_path / "_wal").write_text("not a directory")
    with pytest.raises(StoreIOError, match="is not a directory") as err:
        getattr(store, call)("_wal/0/00000000000000000001-a.wal", b"x")
    assert not isinstance(err.value, ObjectExists)


def test_put_new_of_a_large_object_starts_its_writeback_piece_by_piece(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[tuple[int, int]] = []
    monkeypatch.setattr(local, "WRITEBACK_BYTES", 1000)
    monkeypatch.setattr(local, "start_writeback", lambda f, o, n: started.append((o, n)))
    data = os.urandom(2500)
    LocalStore(tmp_path).put_new("big", data)
    assert started == [(0, 1000), (1000, 1000), (2000, 500)]
    assert (tmp_path / "big").read_bytes() == data


def test_temporary_files_and_directories_are_not_objects(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.put("d/k", b"1")
    (tmp_path / "d" / ".k.123.abcdef.tmp").write_bytes(b"in flight")
    (tmp_path / "d" / "empty").mkdir()
    assert store.list_keys("") == ["d/k"]
    assert [i.key for i in store.list("")] == ["d/k"]
    with pytest.raises(ObjectNotFound):
        store.get("d/empty")
    with pytest.raises(ObjectNotFound):
        store.head("d")
    store.delete("d/empty")  # a directory is no object: nothing to delete
    assert (tmp_path / "d" / "empty").is_dir()


def test_created_files_and_directories_get_the_store_mode(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        LocalStore(tmp_path / "t", file_mode=0o600).put_if_absent("a/b", b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "t" / "a" / "b").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "t" / "a").st_mode) == fsutil.dir_mode(0o600)
