"""WAL segments (and the fsutil primitives they stand on)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import google_crc32c
import pytest

from cdc_sink.errors import WalCorruption
from cdc_sink.storage import fsutil
from cdc_sink.storage.framing import encode_record
from cdc_sink.storage.wal import WAL_MAGIC, SegmentInfo, SegmentWriter, read_segment


def _write_segment(path: Path, payloads: list[bytes]) -> SegmentInfo:
    with SegmentWriter(path) as w:
        for p in payloads:
            w.append(p)
        return w.finish()


def test_writer_and_reader_round_trip(tmp_path: Path) -> None:
    payloads = [b"", b"one", os.urandom(5000), b"three"]
    path = tmp_path / "0-a.wal"
    info = _write_segment(path, payloads)
    data = path.read_bytes()
    assert data.startswith(WAL_MAGIC)
    assert info == SegmentInfo(str(path), len(data), 4, google_crc32c.value(data))
    assert read_segment(path, repair=False) == payloads
    assert read_segment(path, repair=True) == payloads
    assert path.read_bytes() == data


def test_segment_is_created_exclusively(tmp_path: Path) -> None:
    path = tmp_path / "seg.wal"
    path.write_bytes(b"someone else's")
    with pytest.raises(FileExistsError):
        SegmentWriter(path)
    assert path.read_bytes() == b"someone else's"


def test_unfinished_writer_deletes_its_file(tmp_path: Path) -> None:
    path = tmp_path / "seg.wal"
    with pytest.raises(RuntimeError), SegmentWriter(path) as w:
        w.append(b"x")
        raise RuntimeError("apply failed")
    assert not path.exists()
    with SegmentWriter(path) as w:
        w.append(b"x")  # leaving without finish() also aborts
    assert not path.exists()


def test_closed_writer_refuses_appends(tmp_path: Path) -> None:
    w = SegmentWriter(tmp_path / "seg.wal")
    w.append(b"a")
    assert (w.records, w.length) == (1, len(WAL_MAGIC) + 9)
    w.finish()
    with pytest.raises(ValueError):
        w.append(b"b")
    with pytest.raises(ValueError):
        w.finish()
    w.abort()  # no-op once finished
    assert read_segment(tmp_path / "seg.wal", repair=False) == [b"a"]


def test_repair_truncates_torn_tail_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "seg.wal"
    payloads = [b"a" * 100, b"b" * 100]
    _write_segment(path, payloads)
    good = path.stat().st_size
    with path.open("ab") as f:
        f.write(encode_record(b"c" * 100)[:50])  # a crashed append
    with pytest.raises(WalCorruption) as err:
        read_segment(path, repair=False)
    assert err.value.offset == good
    assert path.stat().st_size == good + 50  # reading without repair changes nothing
    assert read_segment(path, repair=True) == payloads
    assert path.stat().st_size == good
    assert read_segment(path, repair=False) == payloads


def test_repair_rewrites_a_torn_header(tmp_path: Path) -> None:
    path = tmp_path / "seg.wal"
    path.write_bytes(WAL_MAGIC[:3])
    assert read_segment(path, repair=True) == []
    assert path.read_bytes() == WAL_MAGIC
    assert read_segment(path, repair=False) == []


def test_repair_refuses_corruption_in_the_middle(tmp_path: Path) -> None:
    path = tmp_path / "seg.wal"
    _write_segment(path, [b"a" * 100, b"b" * 100, b"c" * 100])
    data = bytearray(path.read_bytes())
    data[len(WAL_MAGIC) + 20] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(WalCorruption) as err:
        read_segment(path, repair=True)
    assert err.value.offset == len(WAL_MAGIC)
    assert path.read_bytes() == bytes(data)


# ---------------------------------------------------------------- fsutil


def test_write_file_durable_exclusive_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "f"
    fsutil.write_file_durable(path, b"one", exclusive=True)
    with pytest.raises(FileExistsError):
        fsutil.write_file_durable(path, b"two", exclusive=True)
    assert path.read_bytes() == b"one"
    fsutil.write_file_durable(path, b"2", exclusive=False)
    assert path.read_bytes() == b"2"


def test_atomic_replace_and_list_files(tmp_path: Path) -> None:
    fsutil.atomic_replace(tmp_path / "a.json", b"1")
    fsutil.atomic_replace(tmp_path / "a.json", b"22")
    (tmp_path / "b.json").write_bytes(b"")
    (tmp_path / ".c.json.1.ab.tmp").write_bytes(b"")
    (tmp_path / "d.json").mkdir()
    assert (tmp_path / "a.json").read_bytes() == b"22"
    assert fsutil.list_files(tmp_path, ".json") == ["a.json", "b.json"]
    assert fsutil.list_temp_files(tmp_path) == [".c.json.1.ab.tmp"]
    assert fsutil.list_files(tmp_path / "missing", ".json") == []


def test_publish_exclusive_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "entry"
    fsutil.publish_exclusive(path, b"first")
    with pytest.raises(FileExistsError):
        fsutil.publish_exclusive(path, b"second")
    assert path.read_bytes() == b"first"
    assert fsutil.list_temp_files(tmp_path) == []


def test_publish_exclusive_without_hard_links_falls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_link(src: str, dst: str) -> None:
        raise OSError(errno.EPERM, "no hard links here")

    monkeypatch.setattr(os, "link", no_link)
    path = tmp_path / "entry"
    fsutil.publish_exclusive(path, b"first")
    with pytest.raises(FileExistsError):
        fsutil.publish_exclusive(path, b"second")
    assert path.read_bytes() == b"first"
    assert fsutil.list_temp_files(tmp_path) == []
